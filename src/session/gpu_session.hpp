// The GPU session the CLI calls: one function per GPU command, each taking a loaded, verified
// program through device check, config, compile, plan, upload, launch and its JSON result
// (src/cuda does the work; `amk run`, on either backend, is run_session.hpp), and `amk profile`
// and `amk bench` whole, from the file to report.json (gpu_session_commands.cpp). Built without
// the CUDA toolkit, every GPU call refuses with a device error (gpu_session_none.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/initial_data.hpp"
#include "config/vm_config.hpp"
#include "device/device.hpp"
#include "io/load.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"

namespace amk {

using ordered_json = nlohmann::ordered_json;

// Blocks the CPU backend and `inspect` schedule over when a program says grid auto and has no
// queues: the SM count of the H200 the project targets.
inline constexpr uint32_t kDefaultGridHint = 132;

struct GpuRequest {
  int device = 0;
  // The device check_gpu saw (the target is not checked twice).
  std::optional<DeviceInfo> checked_device;
  uint32_t iterations = 1;  // passes over the program in one launch (amk run --passes)
  std::optional<uint64_t> timeout_ms;
  bool trace = false;
  bool use_cache = true;
  std::optional<std::string> cache_dir;
  bool trust_custom_ops = false;
  VmOverrides vm;          // --vm FIELD=VALUE
  bool line_info = false;  // --lineinfo
  // --cubin FILE: an ahead-of-time cubin (amk compile -o FILE) loaded instead of compiling
  std::optional<std::string> cubin;
};

struct GpuOutcome {
  HostBuffers buffers;       // the outputs' final contents, others empty (status "ok")
  std::string status;        // ok | timeout | bad_operand
  std::string message;       // one line for a non-ok status
  uint32_t passes_run = 0;   // the launch's passes that ran (fewer after a generation's eos)
  ordered_json diagnostics;  // watchdog / fault record or null
  std::vector<std::pair<std::string, double>> timings_ms;
  ordered_json device;
  ordered_json versions;
  std::string target_fingerprint;
  std::string artifact_fingerprint;
  uint32_t grid = 0;
  uint32_t block = 0;  // threads per block
  std::vector<uint64_t> trace;
  ordered_json wrapper;  // a wrapper's launch (kernel, shape, fingerprints) or null
};

struct ProfileRequest {
  GpuRequest gpu;
  uint32_t warmup = 3;
  uint32_t iterations = 20;
  std::string scope = "kernel";
  bool cold = false;            // flush L2 (a 256 MiB write) before every launch, untimed
  std::vector<TuningArm> arms;  // --tuning-arms: one executable per arm, interleaved
  uint32_t rounds = 2;          // rounds of the interleaved arms
};

// `amk bench`: megakernel vs one launch per instruction vs a CUDA graph (src/cuda/bench.hpp).
struct BenchRequest {
  GpuRequest gpu;
  uint32_t warmup = 3;         // untimed samples per arm
  uint32_t min_samples = 10;   // per arm
  double min_time_s = 0.5;     // wall time of the sampling rounds
  double max_noise = 0.005;    // relative standard deviation that ends sampling early
  double time_limit_s = 10.0;  // ends sampling regardless
  bool cold = false;           // flush L2 before every sample
  double roofline_bytes_per_s = 4.47e12;
};

// True when a CUDA driver and device are usable; `why` says why not.
[[nodiscard]] bool gpu_present(std::string* why);

// The device, checked against the program's target: throws the device error a GPU run of
// `program` on `device` would end in (no driver, no such device, target not met; built without
// CUDA: device.unsupported) before any host data is made.
[[nodiscard]] DeviceInfo check_gpu(const Program& program, int device);

[[nodiscard]] GpuOutcome run_on_gpu(const Program& program, const InitialData& initial,
                                    const GpuRequest& request);
struct WrapperProgram;
// A wrapper program's device checked against its target snapshot (device.target listing every
// difference) and its arrays against the device's memory, before any host data is made.
[[nodiscard]] DeviceInfo check_wrapper_gpu(const WrapperProgram& w, int device);
// One launch of a checked wrapper program whose source is trusted; `initial` holds the contents
// of wrapper_buffers(w). The outputs come back as run_on_gpu's do; status ok or timeout.
[[nodiscard]] GpuOutcome run_wrapper_on_gpu(const WrapperProgram& w, const InitialData& initial,
                                            const GpuRequest& request);
// `amk profile --events` of a wrapper (kernel or launch scope, cold or warm L2).
[[nodiscard]] ordered_json profile_wrapper_on_gpu(const WrapperProgram& w,
                                                  const InitialData& initial,
                                                  const ProfileRequest& request,
                                                  std::ostringstream& text);
// `amk inspect --attributes` of a wrapper: its compiled kernel's resources at its launch shape
// (opened as for a run: target, compile, proof, upload).
[[nodiscard]] ordered_json wrapper_attributes(const WrapperProgram& w, const LoadOptions& load,
                                              const GpuRequest& request, std::ostringstream& text);
[[nodiscard]] ordered_json profile_on_gpu(const Program& program, const InitialData& initial,
                                          const ProfileRequest& request, std::ostringstream& text);
// `amk profile --events --tuning-arms`: one executable per VM tuning arm, all open at once (the
// host data materialized once), profiled in `rounds` interleaved rounds; per arm the median of
// all its samples and its ratio to the first arm.
[[nodiscard]] ordered_json profile_arms_on_gpu(const Program& program, const InitialData& initial,
                                               const ProfileRequest& request,
                                               std::ostringstream& text);
// One traced launch: writes the Chrome trace to `trace_path` and returns the per-op / per-block
// summary (report/trace.hpp).
[[nodiscard]] ordered_json trace_on_gpu(const Program& program, const InitialData& initial,
                                        const GpuRequest& request, const std::string& trace_path,
                                        std::ostringstream& text);
// Runs the three arms interleaved; returns the versioned JSON and writes the table to `text`.
// Throws Error(mismatch, bench.mismatch) when the arms disagree.
[[nodiscard]] ordered_json bench_on_gpu(const Program& program, const InitialData& initial,
                                        const BenchRequest& request, std::ostringstream& text);
[[nodiscard]] ordered_json kernel_attributes(const Program& program, const LoadOptions& load,
                                             const GpuRequest& request, std::ostringstream& text);
// Files `amk compile` writes besides the cache (empty: not written).
struct CompileOutputs {
  std::string cubin;   // -o: the cubin
  std::string source;  // --source-out: the generated translation unit (it includes kernels/)
  std::string ptx;     // --ptx-out: the VM's PTX for the virtual architecture of the target
};
// `explain`: every field of the VM's configuration in the text, its value and why.
[[nodiscard]] ordered_json compile_for_arch(const Program& program, const std::string& arch,
                                            const GpuRequest& request, const CompileOutputs& files,
                                            bool explain, std::ostringstream& text);
// `amk compile` of a wrapper program for `arch` (wrapper_compile_arch's: the trust flag and the
// arch are checked before): its source with its defines and amk's NVRTC options, into the kernel
// cache; `cubin_out` not empty: the cubin and its record, as for the VM. Throws Error(nvrtc) with
// the log as compile_vm does, Error(program, wrapper.kernel_missing) at /wrapper/kernel_name when
// the cubin has no entry point of that name.
[[nodiscard]] ordered_json compile_wrapper_for_arch(const WrapperProgram& w,
                                                    const std::string& arch,
                                                    const GpuRequest& request,
                                                    const std::string& cubin_out,
                                                    std::ostringstream& text);
// Every device the driver reports; without a driver, a device or a CUDA build, none and a
// "notice" saying why (an answer, not an error).
[[nodiscard]] ordered_json list_gpus(std::ostringstream& text);
// `amk devices`: list_gpus, and whether NCCL loads ("nccl": available, library, version or
// notice), with or without a CUDA build.
[[nodiscard]] ordered_json devices_report(std::ostringstream& text);

// What `amk profile` and `amk bench` read and write besides their GPU request.
struct GpuCommandFiles {
  std::string program_path;
  LoadOptions load;
  std::string out_dir;        // -o: report.json goes here (the folder is made if missing)
  std::string report_path;    // --report: report.json here instead; both empty: no report
  bool trust_source = false;  // a wrapper program's own CUDA source may be compiled
};

struct ProfileProgramRequest {
  GpuCommandFiles files;
  ProfileRequest profile;  // arms not empty: --tuning-arms
  bool events = false;     // CUDA-event timings of whole launches
  std::string trace_path;  // not empty: one traced launch, its Chrome trace written here
};

struct BenchProgramRequest {
  GpuCommandFiles files;
  BenchRequest bench;
};

struct CommandResult {
  ordered_json json;  // what --json prints (report.json's `extra`)
  std::string text;   // what the command prints
};

// Load, verify, device check (before the host data, which for a decode step takes minutes),
// host data, then the profile (events, tuning arms and/or trace) or the bench. report.json
// (schemas/outputs.md) is written whether they succeed or not when asked for: the result under
// `extra`, its device, versions, fingerprints, launch and setup times lifted out.
[[nodiscard]] CommandResult profile_program(const ProfileProgramRequest& request);
[[nodiscard]] CommandResult bench_program(const BenchProgramRequest& request);

}  // namespace amk
