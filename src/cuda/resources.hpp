// One move-only RAII type per driver resource. Constructors throw amk::Error through the checked
// wrappers; destructors use the unchecked calls (a destructor must not throw, and after a sticky
// fault every release fails anyway). release() hands a handle out without freeing it, for the one
// case where freeing is unsafe: a kernel that is still running (launch.hang).
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace amk::cu {

// The device's primary context, retained for the life of the object and made current.
class PrimaryContext {
public:
  PrimaryContext() = default;
  static PrimaryContext retain(int ordinal);
  PrimaryContext(PrimaryContext&& o) noexcept
      : device_(o.device_), context_(std::exchange(o.context_, nullptr)) {}
  PrimaryContext& operator=(PrimaryContext&& o) noexcept;
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext() { reset(); }

  void make_current() const;  // cuCtxSetCurrent, checked
  [[nodiscard]] CUdevice device() const noexcept { return device_; }
  [[nodiscard]] CUcontext get() const noexcept { return context_; }
  [[nodiscard]] explicit operator bool() const noexcept { return context_ != nullptr; }
  void reset() noexcept;
  CUcontext release() noexcept { return std::exchange(context_, nullptr); }

private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

class Module {
public:
  Module() = default;
  // `what` names the image for errors ("kernel amk_vm, arch sm_90a").
  static Module load(std::span<const std::byte> image, std::string_view what);
  Module(Module&& o) noexcept : module_(std::exchange(o.module_, nullptr)) {}
  Module& operator=(Module&& o) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module() { reset(); }

  [[nodiscard]] CUfunction function(const std::string& name) const;
  [[nodiscard]] CUmodule get() const noexcept { return module_; }
  void reset() noexcept;
  CUmodule release() noexcept { return std::exchange(module_, nullptr); }

private:
  CUmodule module_ = nullptr;
};

class DeviceMemory {
public:
  DeviceMemory() = default;
  // bytes == 0 allocates one byte so every region has a valid, distinct address.
  static DeviceMemory allocate(size_t bytes, std::string_view what);
  DeviceMemory(DeviceMemory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { reset(); }

  // Copies at a byte offset, ordered on `stream` (the range is checked against the allocation).
  // Always on amk's own stream: the synchronous cuMemcpy variants run on the legacy default stream,
  // which a non-blocking launch stream does not wait for, and a pageable upload may return before
  // its DMA lands. Synchronize the stream before relying on the result.
  void upload(std::span<const std::byte> data, size_t offset, CUstream stream,
              std::string_view what) const;
  void download(std::span<std::byte> out, size_t offset, CUstream stream,
                std::string_view what) const;

  [[nodiscard]] CUdeviceptr get() const noexcept { return ptr_; }
  [[nodiscard]] size_t size() const noexcept { return bytes_; }
  void reset() noexcept;
  CUdeviceptr release() noexcept {
    bytes_ = 0;
    return std::exchange(ptr_, 0);
  }

private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Copies between host memory and any device address (memory amk did not allocate too: a buffer
// bound to the caller's), ordered on `stream` as DeviceMemory's copies are.
void copy_to_device(CUdeviceptr address, std::span<const std::byte> data, CUstream stream,
                    std::string_view what);
void copy_to_host(std::span<std::byte> out, CUdeviceptr address, CUstream stream,
                  std::string_view what);

// A scratch buffer that pushes a program's data out of L2: each enqueue writes a fresh pattern
// over all of it (a new value every time, so the write is never a no-op), ordered on `stream`.
class L2Flush {
public:
  L2Flush() = default;
  explicit L2Flush(size_t bytes) : buffer_(DeviceMemory::allocate(bytes, "the L2 flush buffer")) {}
  void enqueue(CUstream stream);

private:
  DeviceMemory buffer_;
  uint32_t count_ = 0;
};

// Pinned host memory mapped into the device address space (cuMemHostAlloc DEVICEMAP): the kernel
// writes diagnostics here that the host can read even when the launch went wrong.
class HostMappedMemory {
public:
  HostMappedMemory() = default;
  static HostMappedMemory allocate(size_t bytes,
                                   std::string_view what);  // zero-filled
  // Pinned, not mapped (device() is 0) and not cleared: a staging buffer for copies.
  static HostMappedMemory allocate_staging(size_t bytes, std::string_view what);
  HostMappedMemory(HostMappedMemory&& o) noexcept
      : host_(std::exchange(o.host_, nullptr)), device_(std::exchange(o.device_, 0)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  HostMappedMemory& operator=(HostMappedMemory&& o) noexcept;
  HostMappedMemory(const HostMappedMemory&) = delete;
  HostMappedMemory& operator=(const HostMappedMemory&) = delete;
  ~HostMappedMemory() { reset(); }

  [[nodiscard]] void* host() const noexcept { return host_; }
  [[nodiscard]] CUdeviceptr device() const noexcept { return device_; }
  [[nodiscard]] size_t size() const noexcept { return bytes_; }
  void reset() noexcept;
  void* release() noexcept {
    device_ = 0;
    bytes_ = 0;
    return std::exchange(host_, nullptr);
  }

private:
  void* host_ = nullptr;
  CUdeviceptr device_ = 0;
  size_t bytes_ = 0;
};

class Stream {
public:
  Stream() = default;
  // Non-blocking: no implicit ordering with the legacy default stream, so a copy on another stream
  // can reach a running persistent kernel (the host abort path).
  static Stream create(std::string_view what);
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { reset(); }

  [[nodiscard]] CUstream get() const noexcept { return stream_; }
  // cuStreamQuery: CUDA_SUCCESS (done), CUDA_ERROR_NOT_READY, or an error; not checked.
  [[nodiscard]] CUresult query() const noexcept;
  void synchronize(std::string_view what) const;
  void reset() noexcept;
  CUstream release() noexcept { return std::exchange(stream_, nullptr); }

private:
  CUstream stream_ = nullptr;
};

class Event {
public:
  Event() = default;
  static Event create(std::string_view what);  // timing enabled
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { reset(); }

  void record(CUstream stream, std::string_view what) const;
  void synchronize(std::string_view what) const;
  [[nodiscard]] CUevent get() const noexcept { return event_; }
  void reset() noexcept;
  CUevent release() noexcept { return std::exchange(event_, nullptr); }

private:
  CUevent event_ = nullptr;
};

// Milliseconds between two recorded, completed events.
[[nodiscard]] double elapsed_ms(const Event& start, const Event& end, std::string_view what);

// The host side of a persistent launch's watchdog: how long to wait before raising the abort,
// and how long the blocks then get to see it.
struct HostWatchdog {
  uint64_t timeout_ms = 0;                // 0: no deadline, wait as long as it takes
  std::chrono::milliseconds grace{0};     // past the timeout, before raise_abort
  std::chrono::milliseconds abort_grace;  // past raise_abort, before hang
};

// Waits for everything queued on `stream`, polling cuStreamQuery (spinning for the first 2 ms,
// then sleeping with a backoff up to 1 ms). Past the deadline, or at once on an interrupt request
// (core/interrupt.hpp), it calls raise_abort(interrupted) once (which enqueues the abort write on
// a stream of its own); abort_grace later, hang(), which throws. A failed query calls
// fault(result), which throws. An interrupted launch that stops throws Error(timeout,
// run.interrupted). Returns true when the deadline's abort was raised.
bool wait_with_watchdog(const Stream& stream, const HostWatchdog& watchdog,
                        const std::function<void(bool interrupted)>& raise_abort,
                        const std::function<void()>& hang,
                        const std::function<void(CUresult)>& fault);

// "0x7f..." for an address in messages.
[[nodiscard]] std::string hex_address(uint64_t address);

// [address, address + bytes) must lie in one allocation the driver knows, on device `ordinal`,
// made in `context` where the driver names one; Error(usage, api.bind.pointer / .device /
// .context / .range) naming `what` otherwise.
void check_caller_memory(uint64_t address, uint64_t bytes, CUcontext context, int ordinal,
                         const std::string& what);

}  // namespace amk::cu
