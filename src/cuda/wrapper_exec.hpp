// The persistent executable of a wrapper program (schemas/wrapper.md): a compiler-made kernel
// compiled, loaded, proven to fit and co-reside, its package arrays and tensor arguments uploaded
// once, then launched (or profiled) as often as needed under the host watchdog. Its buffers are
// wrapper_buffers(w): the 14 package arrays, then the tensor arguments.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/initial_data.hpp"
#include "cuda/compile.hpp"
#include "cuda/executor.hpp"
#include "device/device.hpp"
#include "program/program.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {

struct WrapperGpuOptions {
  int device = 0;
  // The device as check_wrapper_device saw it (the target is not compared twice).
  std::optional<DeviceInfo> checked_device;
  CompileOptions compile;              // arch: the target snapshot's
  std::optional<uint64_t> timeout_ms;  // default: launch.timeout_ms
};

struct WrapperLaunchResult {
  std::string status;  // ok | timeout (the wrapper returned after the host set the abort word)
  double host_ms = 0;  // resets + launch + wait, host clock
};

// Compiles (or fetches from the cache) the wrapper's source for options.arch with its defines.
// Throws Error(nvrtc) with the log, Error(program, wrapper.kernel_missing) at
// /wrapper/kernel_name when the cubin has no such entry point. Needs no GPU.
[[nodiscard]] CompileOutput compile_wrapper(const WrapperProgram& w, const CompileOptions& options);

// The device `ordinal` compared with the wrapper's target snapshot (check_wrapper_target:
// device.target listing every difference), and its memory against the wrapper's buffers
// (device.memory), before any host data is made.
[[nodiscard]] DeviceInfo check_wrapper_device(const WrapperProgram& w, int ordinal);

class WrapperExecutable {
public:
  // Phases, timed in setup_timings_ms() in this order: context, target (device snapshot and
  // target check, unless options.checked_device), compile (or cache hit), module_load, configure
  // (function attributes, occupancy, cluster limit and co-residency proof), upload (every
  // buffer of wrapper_buffers from `initial`), tensor_args (the records), tma_encode.
  static WrapperExecutable open(const WrapperProgram& w, const InitialData& initial,
                                const WrapperGpuOptions& options);

  WrapperExecutable(WrapperExecutable&&) noexcept;
  WrapperExecutable& operator=(WrapperExecutable&&) noexcept;
  WrapperExecutable(const WrapperExecutable&) = delete;
  WrapperExecutable& operator=(const WrapperExecutable&) = delete;
  ~WrapperExecutable();

  // Clears the abort word (and the whole flags array when a comm record needs it), launches one
  // grid and waits. At the deadline the host sets the abort word; a wrapper that returns then
  // gives status "timeout", one that does not throws Error(timeout, launch.hang) and the
  // executable is abandoned. A device fault throws Error(launch, launch.fault).
  WrapperLaunchResult launch();

  // warmup + iterations launches timed with CUDA events; scope "kernel" brackets the launch,
  // "launch" also the flag resets. A launch that passes its deadline throws Error(timeout).
  // `flush_bytes` != 0: a fresh pattern over a scratch buffer of that size before each launch
  // (untimed), so the launch starts with nothing of the wrapper's in L2.
  ProfileStats profile(uint32_t warmup, uint32_t iterations, const std::string& scope,
                       uint64_t flush_bytes = 0);

  // One buffer of wrapper_buffers, whole (the tensor_args array is amk's: not writable).
  void upload_buffer(uint32_t index, std::span<const std::byte> data);
  void download_buffer(uint32_t index, std::span<std::byte> out) const;
  // Moves tensor argument buffer `index` to device memory the caller owns (checked with the
  // driver as GpuExecutable::bind_buffer does), re-validates and re-encodes every TMA map over
  // it and rewrites its record. On any error nothing changes.
  void bind_buffer(uint32_t index, uint64_t address);

  [[nodiscard]] const std::vector<std::pair<std::string, double>>& setup_timings_ms() const;
  // Buffer `index`'s device address now (amk's memory, or the caller's after bind_buffer).
  [[nodiscard]] uint64_t buffer_address(uint32_t index) const;
  [[nodiscard]] const DeviceInfo& device() const;
  [[nodiscard]] const KernelResources& kernel() const;
  [[nodiscard]] const CompileOutput& compiled() const;
  [[nodiscard]] const WrapperProgram& program() const;  // without the source and inline data
  [[nodiscard]] const Program& buffers() const;         // wrapper_buffers of it
  [[nodiscard]] uint64_t timeout_ms() const;
  [[nodiscard]] bool flags_reset() const;  // the whole flags array is zeroed before a launch

  void close();  // idempotent; the destructor calls it
  [[nodiscard]] bool is_open() const noexcept { return impl_ != nullptr; }

  struct Impl;

private:
  WrapperExecutable() = default;
  Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace amk
