// amk as a library: a megakernel program opened once on a GPU (loaded, verified, compiled with
// NVRTC, planned, its buffers uploaded), then launched as often as needed, its inputs updated in
// place and its outputs read back. A consumer needs this header, amk/error.hpp and libamk
// (CMake: find_package(amk), target amk::amk); no CUDA headers. The `amk` command line runs
// its GPU work through this class.
//
// Every failure throws amk::Error (amk/error.hpp): its kind decides the exit code the command
// line would give (device 5 for no usable GPU, usage 2 for a bad argument, program 3, io 4,
// compile 6, launch 7, timeout 8). An Executable is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "amk/error.hpp"

namespace amk {

struct OpenOptions {
  int device = 0;                      // CUDA device ordinal
  std::string cache_dir;               // kernel cache; empty: $AMK_CACHE_DIR, else ~/.cache/amk
  bool use_cache = true;               // false: compile every time (amk --no-cache)
  std::string vm;                      // FIELD=VALUE[,FIELD=VALUE...], as amk --vm takes
  std::optional<uint64_t> timeout_ms;  // the watchdog's deadline; default: the program's
  bool trust_custom_ops = false;       // compile the program's custom op sources
  bool allow_outside_paths = false;    // data files may live outside the program's folder
  bool trust_source = false;           // compile a wrapper program's own CUDA source
};

// A buffer of the opened program. dtype is one of f32 f16 bf16 i32 u32 i64 u8.
struct BufferInfo {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;  // row-major; empty: a scalar
  uint64_t bytes = 0;
  bool output = false;   // the program marks it an output
  bool written = false;  // some instruction may write it: a launch changes its contents
  bool bound = false;    // lives in the caller's device memory (bind)
};

struct ProfileOptions {
  uint32_t warmup = 3;           // untimed launches first
  uint32_t iterations = 20;      // timed launches, each of the program's launch.passes passes
  std::string scope = "kernel";  // kernel: events around the launch; launch: also the reset
  bool flush_l2 = false;         // write 256 MiB before every launch (untimed): a cold L2
};

// CUDA-event timings of launches (each runs the program's launch.passes passes).
struct ProfileResult {
  std::vector<double> samples_ms;
  double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0, stddev_ms = 0;
  double rel_spread = 0;  // stddev / mean
};

// The compiled VM kernel and the launch it runs with.
struct KernelAttributes {
  std::string kernel;  // entry point
  std::string arch;    // e.g. sm_90a
  std::string device;  // the device's name
  uint32_t registers_per_thread = 0;
  uint64_t static_smem_bytes = 0;
  uint64_t dynamic_smem_bytes = 0;  // as launched
  uint64_t local_bytes = 0;         // per thread (spills, local arrays)
  uint64_t const_bytes = 0;
  uint32_t max_threads_per_block = 0;
  uint32_t block = 0;
  uint32_t blocks_per_sm = 0;  // occupancy at (block, dynamic shared memory)
  uint32_t sms = 0;
  uint64_t max_coresident_grid = 0;  // blocks_per_sm * sms
  uint32_t grid = 0;                 // persistent blocks of this program
  uint32_t max_cluster_size = 0;     // cluster launch only
  uint32_t max_active_clusters = 0;  // cluster launch only
  bool cache_hit = false;            // the cubin came from the kernel cache
};

// What crossed between host and device since open (the upload of the initial contents at open
// is not counted).
struct ExecutableStats {
  uint64_t launches = 0;          // launch() calls
  uint64_t uploads = 0;           // set_input calls that copied to the device
  uint64_t skipped_uploads = 0;   // set_input calls whose bytes were already there
  uint64_t uploaded_bytes = 0;    // copied by set_input
  uint64_t downloaded_bytes = 0;  // copied by read_output
};

namespace detail {
struct ExecutableAccess;  // the command line's way in (not part of the API)
}

class Executable {
public:
  Executable() noexcept;  // closed

  // Loads and verifies the program file (.json or .amkb), checks the device against its target,
  // builds every buffer's initial contents (inits, data files), compiles the VM for the device
  // (or takes it from the cache), plans it for the grid that can be co-resident, uploads.
  //
  // A wrapper program (schemas/wrapper.md) opens with options.trust_source (otherwise program
  // wrapper.untrusted): its own kernel is compiled instead of the VM, proven to fit and
  // co-reside, and its buffers are the 14 package arrays in parameter order (named as in the
  // package) followed by its tensor arguments; `tensor_args` is amk's and cannot be set. Only
  // tensor arguments can be bound (their records and the tensor maps over them are rewritten),
  // and every launch may write every buffer, so set_input uploads after each launch. A launch
  // is one grid (passes must be 1); past its deadline the host sets the abort word, and a
  // wrapper that returns then gives timeout run.timeout.
  static Executable open(const std::string& program_path, const OpenOptions& options = {});

  Executable(Executable&&) noexcept;
  Executable& operator=(Executable&&) noexcept;
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  ~Executable();  // close()

  [[nodiscard]] const std::vector<BufferInfo>& buffers() const;

  // Copies `bytes` bytes of `dtype` elements into buffer `name` (its whole size). The upload is
  // skipped when the bytes are those this call last uploaded to the buffer: each upload keeps
  // the XXH64 hash of what it copied (hashing costs about one read of the bytes; no host copy is
  // kept), and a launch or profile forgets the hashes of the buffers it may write. The first
  // set_input of a buffer always uploads, and so does every one to a bound buffer (its owner may
  // have changed it). Throws usage api.buffer (no such buffer), api.size, api.dtype.
  void set_input(std::string_view name, const void* data, size_t bytes, std::string_view dtype);

  // Points buffer `name` at `bytes` bytes of device memory the caller owns (a CUdeviceptr) on
  // the executable's device, from now on: launches read and write it there, set_input and
  // read_output copy to and from it. Checked: size and dtype as for set_input, 16-byte alignment
  // (api.bind.alignment), and with the driver that the range lies inside one allocation on this
  // device and context (api.bind.pointer, api.bind.device, api.bind.context, api.bind.range).
  // The buffer table and any tensor map over the buffer are rewritten and uploaded. The
  // executable's own memory for the buffer stays allocated (all buffers share one allocation)
  // and holds the contents it had; binding again moves the buffer once more. The caller keeps
  // the memory alive while the executable may use it, and finishes its own work on it before a
  // launch (launch() returns once the device is done). The memory lives in the device's primary
  // context, which the executable retains until close(): a caller that frees its memory after
  // close() holds a retain of its own (cuDevicePrimaryCtxRetain), or the context may be gone.
  void bind(std::string_view name, uint64_t device_pointer, size_t bytes, std::string_view dtype);

  // Runs `passes` passes over the program in one persistent launch (0: the program's
  // launch.passes, 1 unless it says otherwise; a generation's decode steps) and waits. A pass
  // whose position runs past a cache stops the launch there (run.bad_operand, from kv_append).
  // A watchdog stop
  // throws timeout run.timeout (exit 8), an op that found invalid data launch run.bad_operand,
  // a device fault launch launch.fault (the context is then gone: close and exit).
  void launch(uint32_t passes = 0);

  // Starts the launch behind the work queued so far on `stream` (a CUstream in the device's
  // primary context, as torch's current stream is; 0: the legacy default stream), puts its later
  // work behind the launch, and returns at once: kernels the caller queues on that stream next
  // see its outputs without a host wait. One launch is in flight at a time: a second call waits
  // for the first. The device's watchdog bounds it as any launch. Its outcome is
  // taken by wait(), which every later call that launches or copies (set_input, bind, launch,
  // launch_async, read_output, profile) makes first, throwing there what launch() would; close()
  // waits for it too. A wrapper program's launch cannot start this way (usage api.wrapper.async).
  void launch_async(uint64_t stream, uint32_t passes = 0);
  void wait();

  // Passes the last launch ran: those asked for, or fewer in a generation that met its eos id
  // (feed_token's eos operand), which ends one pass after the one that produced it. 0 before
  // the first launch and after a failed one; after launch_async, once wait() has returned.
  [[nodiscard]] uint32_t passes_run() const;

  // Copies buffer `name` (any buffer; typically an output) into `data`: that buffer only.
  // Throws api.buffer, api.size, api.dtype.
  void read_output(std::string_view name, void* data, size_t bytes, std::string_view dtype) const;

  [[nodiscard]] ProfileResult profile(const ProfileOptions& options = {});
  [[nodiscard]] KernelAttributes attributes() const;
  [[nodiscard]] ExecutableStats stats() const;
  // What open took, phase by phase, in milliseconds and in order (context, device, config,
  // compile, module_load, configure, plan, upload, tma_encode for a VM program).
  [[nodiscard]] std::vector<std::pair<std::string, double>> setup_timings() const;
  // Buffer `name`'s device address now (the executable's memory, or the caller's after bind),
  // for zero-copy views of it (DLPack): valid until close() or the buffer's next bind. Throws
  // api.buffer.
  [[nodiscard]] uint64_t device_pointer(std::string_view name) const;

  // Frees the device memory, module and context retain; idempotent. Every other call on a
  // closed (or default-constructed, or moved-from) executable throws usage api.closed.
  void close() noexcept;
  [[nodiscard]] bool is_open() const noexcept { return impl_ != nullptr; }

private:
  struct Impl;
  friend struct detail::ExecutableAccess;
  explicit Executable(std::unique_ptr<Impl> impl) noexcept;
  Impl& impl(const char* call) const;
  std::unique_ptr<Impl> impl_;
};

// Asks the launch a thread of this process is waiting for (launch, profile) to stop: its wait
// raises the device abort flag at once instead of at the deadline, and the call throws
// Error(timeout, run.interrupted) once the blocks have returned. Async-signal-safe, for a SIGINT
// handler; a request made while no launch waits applies to the next one.
void interrupt_launch() noexcept;

}  // namespace amk
