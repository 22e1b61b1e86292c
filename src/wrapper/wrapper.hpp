// The wrapper program: a megakernel a compiler generated (its own CUDA source, entry point
// `kernel_name`) plus the launch package of static arrays it reads, in the order executor.py's
// launch_wrapper passes them. schemas/wrapper.md is the contract; this is the loaded model, before
// any device is involved. Package arrays and tensor arguments are amk buffers, so they take the
// same init sources (inline values, zeros, constant, random, .npy, raw, safetensors) as VM
// programs and are materialized by the same code.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amk_wrapper.h"
#include "io/load.hpp"
#include "program/program.hpp"

namespace amk {

struct DeviceInfo;       // device/device.hpp
struct KernelResources;  // device/device.hpp

inline constexpr uint32_t kWrapperFormatVersion = 1;
inline constexpr std::string_view kWrapperFormat = "amk.wrapper";

// ---- limits (checked at load, before anything is allocated) ----
inline constexpr uint64_t kMaxWrapperSourceBytes = uint64_t{16} << 20;
inline constexpr uint64_t kMaxWrapperDefines = 64;
inline constexpr uint64_t kMaxTensorArgs = 1024;
inline constexpr uint64_t kMaxWrapperBlockThreads = 1024;  // the device's limit is checked later
inline constexpr uint64_t kMaxWrapperClusterSize = 32;     // the kernel's limit is checked later
inline constexpr uint64_t kMaxFingerprintLength = 256;

// ---- the launch package: the kernel's first 14 parameters, in this order ----
enum class PackageArray : uint8_t {
  instructions = 0,
  queue_offsets,
  queue_lengths,
  slots,
  comms,
  barrier_init_offsets,
  barrier_init_lengths,
  barrier_init_indices,
  args,
  tensor_args,  // written by amk from WrapperProgram::tensor_args, never given in the file
  input_slots,
  task_coords,
  global_staging,
  flags,
};
inline constexpr size_t kPackageArrays = AMK_WRAPPER_POINTER_PARAMS;
static_assert(static_cast<size_t>(PackageArray::flags) == AMK_WRAPPER_PARAM_FLAGS &&
              static_cast<size_t>(PackageArray::tensor_args) == AMK_WRAPPER_PARAM_TENSOR_ARGS);
[[nodiscard]] std::string_view package_array_name(PackageArray a) noexcept;
[[nodiscard]] std::optional<PackageArray> parse_package_array(std::string_view name) noexcept;

// ---- records amk reads or writes: kernels/amk_wrapper.h defines them for host and device ----

// One tensor argument as amk writes it into the tensor_args array at launch.
inline constexpr uint32_t kTensorArgMaxRank = AMK_WRAPPER_MAX_RANK;
using WrapperTensorArgRecord = amk_wrapper_tensor_arg_t;
static_assert(sizeof(WrapperTensorArgRecord) == 144, "tensor-arg record ABI (schemas/wrapper.md)");
static_assert(kTensorArgMaxRank == kMaxRank, "a tensor argument is an amk buffer");

// One comm record of the comms array, as the compiler writes it; amk reads `kind` only.
using WrapperCommRecord = amk_wrapper_comm_t;
static_assert(sizeof(WrapperCommRecord) == 32, "comm record ABI (schemas/wrapper.md)");
inline constexpr uint32_t kCommKindHbmSend = AMK_WRAPPER_COMM_HBM_SEND;
inline constexpr uint32_t kCommKindHbmRecv = AMK_WRAPPER_COMM_HBM_RECV;

// ---- the model ----

struct WrapperDefine {
  std::string name;                  // a C identifier
  std::optional<std::string> value;  // an integer or an identifier; none: `-D NAME`
  bool operator==(const WrapperDefine&) const = default;
};

struct WrapperSource {
  std::string kernel_name;  // extern "C" entry point
  std::string source;       // the CUDA text (read from source_path when that is given)
  std::string source_path;  // as written in the file; empty when the source is inline
  std::vector<WrapperDefine> defines;
  bool operator==(const WrapperSource&) const = default;
};

enum class SchedulingPolicy : uint8_t { load_balancing = 0 };

struct WrapperLaunch {
  uint32_t queues = 0;              // grid = one block per queue
  std::vector<uint32_t> block_dim;  // 1 to 3 dimensions, as written
  uint32_t dynamic_smem_bytes = 0;
  uint32_t cluster_size = 1;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::load_balancing;
  uint64_t timeout_ms = 10000;

  [[nodiscard]] std::array<uint32_t, 3> block3() const noexcept;  // missing dimensions are 1
  bool operator==(const WrapperLaunch&) const = default;
};

// One package array: `buffer` holds its dtype, shape {count} (empty shape with count 0) and init;
// `record_bytes` the size of one record (the dtype's size unless the file says otherwise).
struct PackageEntry {
  bool present = false;  // absent: an empty array (the kernel gets a valid 1-byte allocation)
  Buffer buffer;
  uint64_t record_bytes = 1;

  [[nodiscard]] uint64_t count() const noexcept;  // elements
  [[nodiscard]] uint64_t bytes() const noexcept;
  [[nodiscard]] uint64_t records() const noexcept { return bytes() / record_bytes; }
  bool operator==(const PackageEntry&) const = default;
};

// The device the compiler built for, as it recorded it; compared with the live device before
// module load (a later step). Limits are in bytes.
struct TargetSnapshot {
  uint32_t arch = 0;           // 90 for sm_90 / sm_90a
  bool arch_specific = false;  // the "a" suffix
  uint32_t sm_count = 0;
  uint32_t max_shared_memory_per_block = 0;
  uint32_t max_shared_memory_per_block_optin = 0;
  uint32_t max_shared_memory_per_sm = 0;
  bool cluster_launch = false;
  std::string compiler_version;
  std::string fingerprint;
  bool operator==(const TargetSnapshot&) const = default;
};

struct WrapperProgram {
  std::string name;
  std::string description;
  uint32_t version = kWrapperFormatVersion;
  WrapperSource wrapper;
  WrapperLaunch launch;
  std::array<PackageEntry, kPackageArrays> package;
  std::vector<Buffer> tensor_args;  // in tensor_args record order
  std::vector<TmaSpec> tma;         // in launch order; TmaSpec::buffer indexes tensor_args
  TargetSnapshot target;
  std::string artifact_fingerprint;  // optional
  std::string base_dir;              // folder the program was loaded from

  [[nodiscard]] const PackageEntry& entry(PackageArray a) const {
    return package[static_cast<size_t>(a)];
  }
  bool operator==(const WrapperProgram& o) const {
    return name == o.name && description == o.description && version == o.version &&
           wrapper == o.wrapper && launch == o.launch && package == o.package &&
           tensor_args == o.tensor_args && tma == o.tma && target == o.target &&
           artifact_fingerprint == o.artifact_fingerprint;
  }
};

// ---- loading (load.cpp) ----

// True when the JSON text's top-level "format" is "amk.wrapper". Reads only as far as that key;
// text that is not JSON is no wrapper (the VM loader then says what is wrong with it).
[[nodiscard]] bool is_wrapper_json(std::string_view text);
// The same for a file (read as a stream, so a VM program is not read twice over); false for a
// file that cannot be read.
[[nodiscard]] bool is_wrapper_file(const std::filesystem::path& path);
// Parses the JSON encoding. Errors are amk::Error with the JSON pointer of the offending value.
// base_dir (for source_path and data files) is `base_dir`; the source file is read here.
[[nodiscard]] WrapperProgram parse_json_wrapper(std::string_view text,
                                                const std::filesystem::path& base_dir,
                                                const LoadOptions& options = {});
// Reads a wrapper program file of either encoding, chosen by its first bytes (wrapper/amkb.hpp).
[[nodiscard]] WrapperProgram load_wrapper_file(const std::filesystem::path& path,
                                               const LoadOptions& options = {});
// Canonical JSON text (stable key order, inline arrays as base64).
[[nodiscard]] std::string wrapper_to_json(const WrapperProgram& w);

// ---- structural checks (check.cpp) ----

// What the checks learned, for inspect.
struct WrapperSummary {
  uint64_t instruction_count = 0;  // instructions records
  uint64_t slot_count = 0;         // slots records
  uint64_t comm_count = 0;
  bool flags_need_reset = false;   // some comm record is an HBM send or receive
  uint64_t tensor_args_bytes = 0;  // what amk writes: one record per tensor argument
};

// Reads the package arrays whose contents the loader can check (queue and barrier-init ranges,
// comm kinds) and checks every size, range and record against each other, the TMA specs against
// cuTensorMapEncodeTiled's rules, and the launch against the target snapshot. Throws amk::Error
// (program) with the JSON pointer of the offending value.
[[nodiscard]] WrapperSummary check_wrapper(const WrapperProgram& w,
                                           const LoadOptions& options = {});

// The package entry's bytes (materialized from its init; empty for an absent array).
[[nodiscard]] std::vector<std::byte> package_bytes(const WrapperProgram& w, PackageArray a,
                                                   const LoadOptions& options = {});

// ---- compiling (compile.cpp; NVRTC itself is src/cuda's) ----

// The flag that lets amk compile a wrapper's source: it is code from the program file.
inline constexpr std::string_view kTrustSourceFlag = "--trust-source";
// "sm_90a" for the snapshot's arch 90 with the "a" suffix.
[[nodiscard]] std::string wrapper_arch(const TargetSnapshot& t);
// The defines as NVRTC options, "-DNAME" or "-DNAME=VALUE", in the program's order.
[[nodiscard]] std::vector<std::string> wrapper_nvrtc_defines(const WrapperSource& s);
// The arch to compile `w` for: its target snapshot's. Throws Error(program, wrapper.untrusted)
// at the source, naming kTrustSourceFlag, unless `trust_source`; Error(device, device.target) at
// --arch when `requested` is not empty and not the snapshot's arch.
[[nodiscard]] std::string wrapper_compile_arch(const WrapperProgram& w,
                                               const std::string& requested, bool trust_source);

// What every command that launches a wrapper does first: load_wrapper_file, check_wrapper
// (its summary into *summary when given) and wrapper_compile_arch's trust check.
[[nodiscard]] WrapperProgram load_trusted_wrapper(const std::filesystem::path& path,
                                                  const LoadOptions& options, bool trust_source,
                                                  WrapperSummary* summary = nullptr);
// sha256 (hex) of the canonical JSON text: report.json's program fingerprint of a wrapper.
[[nodiscard]] std::string wrapper_fingerprint(const WrapperProgram& w);

// ---- the live device (target.cpp) ----

// Every way device `d` differs from the snapshot the compiler built for (arch, SM count, the
// three shared-memory limits, cluster launch), and every launch requirement it cannot meet
// (threads per block, dynamic shared memory over its opt-in limit, a cluster without cluster
// launch). Empty: the wrapper may run there.
[[nodiscard]] std::vector<std::string> wrapper_target_mismatches(const WrapperProgram& w,
                                                                 const DeviceInfo& d);
// Throws Error(device, device.target) at /target listing every mismatch, with the snapshot's and
// the device's fingerprints.
void check_wrapper_target(const WrapperProgram& w, const DeviceInfo& d);

// ---- the launch (launch.cpp; the driver's part is src/cuda/wrapper_exec) ----

// The wrapper's device arrays as amk buffers, in one list: the 14 package arrays in parameter
// order (absent ones empty u8 arrays; `tensor_args` as many zeroed bytes as the records take),
// then the tensor arguments. `global_staging` and the tensor arguments marked output are the
// outputs. Initial data, uploads, downloads and output files work on this list.
[[nodiscard]] Program wrapper_buffers(const WrapperProgram& w);
// Buffer index of tensor argument `i` in wrapper_buffers.
[[nodiscard]] constexpr uint32_t wrapper_tensor_buffer(size_t i) noexcept {
  return static_cast<uint32_t>(kPackageArrays + i);
}
// The tensor_args array as the kernel reads it: one record per tensor argument with its device
// address (addresses[i]), dtype, rank, row-major shape and contiguous strides.
[[nodiscard]] std::vector<std::byte> tensor_arg_records(const WrapperProgram& w,
                                                        std::span<const uint64_t> addresses);
// Proves the launch against the compiled kernel on device `d`: threads per block within the
// kernel's limit (device.block), static + dynamic shared memory within the opt-in limit
// (device.smem), and the whole grid co-resident: without a cluster, as one cooperative launch
// (device.coresidency); with one, cluster launch present, the queues a multiple of the cluster
// size and the size within cuOccupancyMaxPotentialClusterSize (device.cluster), and the clusters
// within cuOccupancyMaxActiveClusters (device.coresidency). Every refusal names its numbers.
void prove_wrapper_launch(const WrapperProgram& w, const DeviceInfo& d, const KernelResources& k);

// ---- base64 (RFC 4648, with padding) ----
[[nodiscard]] std::string base64_encode(const std::vector<std::byte>& bytes);
// nullopt for text that is not canonical base64.
[[nodiscard]] std::optional<std::vector<std::byte>> base64_decode(std::string_view text);

}  // namespace amk
