// The persistent executable: one program configured, compiled, loaded, planned, uploaded and
// proven co-resident once, then launched (or profiled) as often as needed. Setup runs one way:
// device snapshot -> config -> compile -> occupancy and co-residency -> plan -> upload; its phases
// are timed in order, launches zero the counters, and profiles use CUDA events.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "amk_abi.h"
#include "backend/host_data.hpp"
#include "backend/initial_data.hpp"
#include "config/choose.hpp"
#include "cuda/compile.hpp"
#include "device/device.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"

namespace amk {

struct GpuOptions {
  int device = 0;
  // The device as check_device_target saw it, when the caller checked it already (the CLI does,
  // before it makes the host data): the target is not checked again.
  std::optional<DeviceInfo> checked_device;
  CompileOptions compile;              // arch is replaced by the device's arch
  VmOverrides vm;                      // --vm FIELD=VALUE
  bool trust_custom_ops = false;       // compile the program's custom op sources
  bool step_kernel = false;            // also compile amk_step (one instruction a launch: bench)
  std::optional<uint64_t> timeout_ms;  // default: program.launch.timeout_ms
  bool trace = false;                  // compile in and collect per-instruction timestamps
};

struct LaunchResult {
  std::string status;  // ok | timeout | bad_operand
  amk_diag_t diag{};   // what the watchdog or an op recorded (status AMK_STATUS_OK: nothing)
  double host_ms = 0;  // reset + launch + wait, host clock
  // The pass whose feed_token met its eos id (the launch ended after the next pass); 0: none.
  uint32_t stop_pass = 0;
};

struct ProfileStats {
  uint32_t warmup = 0, iterations = 0;
  std::string scope;  // kernel | launch
  std::vector<double> samples_ms;
  double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0, stddev_ms = 0;
  double rel_spread = 0;  // stddev / mean: the relative noise of the samples
};

// Trace layout (when GpuOptions::trace): kTraceWordsPerInstruction (report/trace.hpp) words per
// instruction, in instruction order, written by the VM (start and end %globaltimer of the last
// pass, then the op's two marks).

class GpuExecutable {
public:
  // Phases, timed in setup_timings_ms() in this order: context, device (snapshot + target check,
  // unless options.checked_device), config (the VM's configuration, config/choose.hpp), compile
  // (or cache hit), module_load, configure (function attributes, occupancy, co-residency proof),
  // plan (once, for the grid: the co-resident maximum where the program leaves grid and
  // scheduling to amk), upload (buffers, instructions, queues, buffer table), tma_encode.
  // `initial` holds every buffer's initial contents (initial_data, or InitialData::view).
  static GpuExecutable open(const Program& program, const InitialData& initial,
                            const GpuOptions& options);

  GpuExecutable(GpuExecutable&&) noexcept;
  GpuExecutable& operator=(GpuExecutable&&) noexcept;
  GpuExecutable(const GpuExecutable&) = delete;
  GpuExecutable& operator=(const GpuExecutable&) = delete;
  ~GpuExecutable();

  // Zeroes counters, abort flag and diag, launches `iterations` passes, waits. A watchdog stop
  // returns status "timeout" with the diag; a sticky fault throws Error(launch, launch.fault); a
  // kernel that ignores the watchdog and the host abort throws Error(timeout, launch.hang).
  LaunchResult launch(uint32_t iterations = 1);

  // Starts `iterations` passes in one launch behind the work queued so far on `after` (a stream
  // of the executable's context; null: the legacy default stream), puts `after`'s later work
  // behind the launch, and
  // returns at once: the device's watchdog still bounds the launch. finish() waits for it as
  // launch() does and returns its result; until then every call that launches or copies throws
  // internal.pending, and close() waits for it.
  void start(uint32_t iterations, CUstream after);
  LaunchResult finish();
  [[nodiscard]] bool started() const;  // a launch start() began and finish() has not taken

  // warmup + iterations launches of the program's launch.passes passes, timed with CUDA
  // events: scope "kernel" brackets the
  // launch only, "launch" also the counter reset. A launch that does not finish ok throws.
  // `flush_bytes` != 0: before every launch (untimed), a fresh pattern is written over a scratch
  // buffer of that size, so the launch starts with nothing of the program's in L2.
  // `passes` != 0 times launches of that many passes instead (amk bench: one, as its
  // one-instruction-a-launch arms run).
  ProfileStats profile(uint32_t warmup, uint32_t iterations, const std::string& scope,
                       uint64_t flush_bytes = 0, uint32_t passes = 0);

  [[nodiscard]] HostBuffers download() const;  // every buffer, in program order
  void upload(const InitialData& data);        // e.g. the initial contents again

  // ---- one buffer at a time (the public API, src/api) ----
  // Copies buffer `index` whole from / into host memory of its size, at the buffer's address (the
  // arena's, or the caller's after bind_buffer), and waits.
  void upload_buffer(uint32_t index, std::span<const std::byte> data);
  void download_buffer(uint32_t index, std::span<std::byte> out) const;
  // Moves buffer `index` to `address`, device memory the caller owns: checked with the driver to
  // lie inside one allocation on this device and context (Error usage api.bind.pointer /
  // .device / .context / .range) and below 2^56 (device.memory, as the arena); then the tensor
  // maps are encoded again and the buffer table uploaded. On any error nothing changes. The
  // arena keeps the buffer's old place and contents.
  void bind_buffer(uint32_t index, uint64_t address);

  [[nodiscard]] const std::vector<std::pair<std::string, double>>& setup_timings_ms() const;
  // Buffer `index`'s device address now (the arena's, or the caller's after bind_buffer).
  [[nodiscard]] uint64_t buffer_address(uint32_t index) const;
  [[nodiscard]] const DeviceInfo& device() const;
  [[nodiscard]] const KernelResources& kernel() const;
  [[nodiscard]] const CompileOutput& compiled() const;
  [[nodiscard]] const VmChoice& vm() const;  // the configuration the VM was compiled with
  [[nodiscard]] const Plan& plan() const;    // the plan it runs
  // The program it runs (without inline initial data) and its watchdog deadline.
  [[nodiscard]] const Program& program() const;
  [[nodiscard]] uint64_t timeout_ms() const;
  [[nodiscard]] uint32_t grid() const;
  [[nodiscard]] uint32_t block() const;
  // Dynamic shared memory amk_vm launches with: the program's own, or what the VM needs (gemv's
  // ring, the TMA gemv's stages), whichever is larger.
  [[nodiscard]] uint32_t dynamic_smem() const;
  [[nodiscard]] std::vector<uint64_t> trace() const;  // raw words; empty unless options.trace

  // ---- the pieces of a launch, for cuda/bench.cpp (`amk bench`); valid while open ----
  struct StepLaunch {
    CUfunction function = nullptr;     // amk_step; null unless GpuOptions::step_kernel
    CUstream stream = nullptr;         // the executable's stream: resets, launches, copies, events
    amk_device_program_t program{};    // amk_vm's and amk_step's first parameter (one pass)
    const CUtensorMap* tma = nullptr;  // the tensor-map table parameter; null without TMA specs
    uint32_t block = 0;
    uint32_t dynamic_smem = 0;  // what amk_vm launches with; amk_step is configured for it
  };
  // Also makes the executable's context current on this thread.
  [[nodiscard]] StepLaunch step_launch() const;
  // Enqueues the counter and abort-flag reset on the stream and zeroes the diag record (an op
  // that fails records only while the abort flag is clear). Only while nothing runs.
  void enqueue_reset();
  // Waits for everything on the stream as launch() does (watchdog deadline, host abort; a sticky
  // fault throws) and returns the diag record (status AMK_STATUS_ABORTED when the host aborted).
  [[nodiscard]] amk_diag_t wait_idle();

  void close();  // idempotent; the destructor calls it
  [[nodiscard]] bool is_open() const noexcept { return impl_ != nullptr; }

  struct Impl;

private:
  GpuExecutable() = default;
  Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

// True when the driver loads and reports at least one device; otherwise *why says why.
[[nodiscard]] bool gpu_available(std::string* why = nullptr);

// The device `ordinal` (loading the driver) checked against the program's target, with the
// errors opening it for a launch would give (device.no_driver, device.*, device.target). The CLI
// calls it before it makes the program's host data, which for a decode step's weights takes
// minutes: a refusal then comes at once.
[[nodiscard]] DeviceInfo check_device_target(const Program& program, int ordinal);
// Every device the driver reports (throws Error(device, device.no_driver) without a driver).
[[nodiscard]] std::vector<DeviceInfo> list_devices();

// ---- pure helpers (no driver), exposed for tests and reports ----

// "ok" | "timeout" | "bad_operand" for an AMK_STATUS_* (aborted counts as timeout); throws
// Error(launch, launch.diag) for a value the VM never writes.
[[nodiscard]] std::string launch_status_name(uint32_t status);
// One line with every diag field ("status timeout, block 3, queue position 7, ...").
[[nodiscard]] std::string describe_diag(const amk_diag_t& diag);
// What a timed-out wait inside a block waited for (diag.counter none), from diag.detail: the TMA
// gemv's tile.
[[nodiscard]] std::string block_wait_text(uint32_t detail);
// Median, min, max, mean, sample stddev and stddev/mean of the samples.
[[nodiscard]] ProfileStats summarize_samples(std::vector<double> samples_ms);

}  // namespace amk
