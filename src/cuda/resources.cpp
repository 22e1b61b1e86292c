#include "cuda/resources.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <thread>
#include <cstring>

#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "cuda/driver.hpp"
#include "device/device.hpp"

namespace amk::cu {

// ---- PrimaryContext ----

PrimaryContext PrimaryContext::retain(int ordinal) {
  const DriverApi& d = driver();
  int count = 0;
  check(d.device_get_count(&count), "cuDeviceGetCount");
  check_ordinal(ordinal, count);
  const auto what = [&] { return "device " + std::to_string(ordinal); };
  PrimaryContext ctx;
  check(d.device_get(&ctx.device_, ordinal), "cuDeviceGet", what);
  check(d.primary_ctx_retain(&ctx.context_, ctx.device_), "cuDevicePrimaryCtxRetain", what);
  ctx.make_current();  // on failure ctx's destructor releases the retain
  return ctx;
}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = o.device_;
    context_ = std::exchange(o.context_, nullptr);
  }
  return *this;
}

void PrimaryContext::make_current() const {
  check(driver().ctx_set_current(context_), "cuCtxSetCurrent",
        [&] { return "the primary context of device " + std::to_string(device_); });
}

void PrimaryContext::reset() noexcept {
  if (context_ == nullptr) return;
  context_ = nullptr;
  if (const DriverApi* d = driver_if_loaded()) (void)d->primary_ctx_release(device_);
}

// ---- Module ----

Module Module::load(std::span<const std::byte> image, std::string_view what) {
  Module m;
  check(driver().module_load_data(&m.module_, image.data()), "cuModuleLoadData", what);
  return m;
}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    reset();
    module_ = std::exchange(o.module_, nullptr);
  }
  return *this;
}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  check(driver().module_get_function(&f, module_, name.c_str()), "cuModuleGetFunction",
        [&] { return "kernel " + name; });
  return f;
}

void Module::reset() noexcept {
  if (module_ == nullptr) return;
  if (const DriverApi* d = driver_if_loaded())
    (void)d->module_unload(std::exchange(module_, nullptr));
}

// ---- DeviceMemory ----

namespace {

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

// device.memory (exit 5), naming what needed how much and what the device has.
[[noreturn]] void throw_out_of_memory(size_t n, std::string_view what) {
  size_t free_bytes = 0, total_bytes = 0;
  const bool known = driver().mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS;
  throw Error(ErrorKind::device, "device.memory", std::string(what),
              std::string(what) + " need " + mib(n) + " (" + std::to_string(n) +
                  " bytes) of device memory; " +
                  (known ? "the device has " + mib(free_bytes) + " free of " + mib(total_bytes)
                         : std::string("the driver has no more")));
}

}  // namespace

DeviceMemory DeviceMemory::allocate(size_t bytes, std::string_view what) {
  DeviceMemory m;
  const size_t n = bytes == 0 ? 1 : bytes;
  // Refused before cuMemAlloc where the free memory cannot hold it, and as device.memory where
  // the driver runs out anyway (fragmentation, another process), not as a driver error.
  size_t free_bytes = 0, total_bytes = 0;
  if (driver().mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS && n > free_bytes)
    throw_out_of_memory(n, what);
  const CUresult r = driver().mem_alloc(&m.ptr_, n);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw_out_of_memory(n, what);
  check(r, "cuMemAlloc", [&] { return std::string(what) + " (" + std::to_string(n) + " bytes)"; });
  m.bytes_ = n;
  return m;
}

void L2Flush::enqueue(CUstream stream) {
  check(
      driver().memset_d32_async(buffer_.get(), 0x9E3779B9u + ++count_, buffer_.size() / 4, stream),
      "cuMemsetD32Async", "the L2 flush buffer");
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

namespace {
void check_range(size_t offset, size_t count, size_t size, std::string_view call,
                 std::string_view what) {
  if (offset > size || count > size - offset)
    throw Error(ErrorKind::internal, "internal.copy_range", std::string(what),
                std::string(call) + " of " + std::to_string(count) + " bytes at offset " +
                    std::to_string(offset) + " exceeds the allocation of " + std::to_string(size) +
                    " bytes");
}
}  // namespace

void DeviceMemory::upload(std::span<const std::byte> data, size_t offset, CUstream stream,
                          std::string_view what) const {
  check_range(offset, data.size(), bytes_, "cuMemcpyHtoDAsync", what);
  copy_to_device(ptr_ + offset, data, stream, what);
}

void DeviceMemory::download(std::span<std::byte> out, size_t offset, CUstream stream,
                            std::string_view what) const {
  check_range(offset, out.size(), bytes_, "cuMemcpyDtoHAsync", what);
  copy_to_host(out, ptr_ + offset, stream, what);
}

void copy_to_device(CUdeviceptr address, std::span<const std::byte> data, CUstream stream,
                    std::string_view what) {
  if (data.empty()) return;
  check(driver().memcpy_htod_async(address, data.data(), data.size(), stream), "cuMemcpyHtoDAsync",
        what);
}

void copy_to_host(std::span<std::byte> out, CUdeviceptr address, CUstream stream,
                  std::string_view what) {
  if (out.empty()) return;
  check(driver().memcpy_dtoh_async(out.data(), address, out.size(), stream), "cuMemcpyDtoHAsync",
        what);
}

void DeviceMemory::reset() noexcept {
  if (ptr_ == 0) return;
  bytes_ = 0;
  if (const DriverApi* d = driver_if_loaded()) (void)d->mem_free(std::exchange(ptr_, 0));
}

// ---- HostMappedMemory ----

HostMappedMemory HostMappedMemory::allocate(size_t bytes, std::string_view what) {
  HostMappedMemory m;
  const size_t n = bytes == 0 ? 1 : bytes;
  const auto describe = [&] { return std::string(what) + " (" + std::to_string(n) + " bytes)"; };
  check(driver().mem_host_alloc(&m.host_, n, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc",
        describe);
  m.bytes_ = n;
  std::memset(m.host_, 0, n);
  check(driver().mem_host_get_device_pointer(&m.device_, m.host_, 0), "cuMemHostGetDevicePointer",
        describe);  // on failure m's destructor frees the host allocation
  return m;
}

HostMappedMemory HostMappedMemory::allocate_staging(size_t bytes, std::string_view what) {
  HostMappedMemory m;
  const size_t n = bytes == 0 ? 1 : bytes;
  check(driver().mem_host_alloc(&m.host_, n, 0), "cuMemHostAlloc",
        [&] { return std::string(what) + " (" + std::to_string(n) + " bytes)"; });
  m.bytes_ = n;
  return m;
}

HostMappedMemory& HostMappedMemory::operator=(HostMappedMemory&& o) noexcept {
  if (this != &o) {
    reset();
    host_ = std::exchange(o.host_, nullptr);
    device_ = std::exchange(o.device_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void HostMappedMemory::reset() noexcept {
  if (host_ == nullptr) return;
  device_ = 0;
  bytes_ = 0;
  if (const DriverApi* d = driver_if_loaded())
    (void)d->mem_free_host(std::exchange(host_, nullptr));
}

// ---- Stream ----

Stream Stream::create(std::string_view what) {
  Stream s;
  check(driver().stream_create(&s.stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate", what);
  return s;
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    reset();
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

CUresult Stream::query() const noexcept { return driver().stream_query(stream_); }

void Stream::synchronize(std::string_view what) const {
  check(driver().stream_synchronize(stream_), "cuStreamSynchronize", what);
}

void Stream::reset() noexcept {
  if (stream_ == nullptr) return;
  if (const DriverApi* d = driver_if_loaded())
    (void)d->stream_destroy(std::exchange(stream_, nullptr));
}

// ---- Event ----

Event Event::create(std::string_view what) {
  Event e;
  check(driver().event_create(&e.event_, CU_EVENT_DEFAULT), "cuEventCreate", what);
  return e;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    reset();
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void Event::record(CUstream stream, std::string_view what) const {
  check(driver().event_record(event_, stream), "cuEventRecord", what);
}

void Event::synchronize(std::string_view what) const {
  check(driver().event_synchronize(event_), "cuEventSynchronize", what);
}

void Event::reset() noexcept {
  if (event_ == nullptr) return;
  if (const DriverApi* d = driver_if_loaded())
    (void)d->event_destroy(std::exchange(event_, nullptr));
}

double elapsed_ms(const Event& start, const Event& end, std::string_view what) {
  float ms = 0.0f;
  check(driver().event_elapsed_time(&ms, start.get(), end.get()), "cuEventElapsedTime", what);
  return static_cast<double>(ms);
}

bool wait_with_watchdog(const Stream& stream, const HostWatchdog& watchdog,
                        const std::function<void(bool interrupted)>& raise_abort,
                        const std::function<void()>& hang,
                        const std::function<void(CUresult)>& fault) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kSpinPhase = std::chrono::milliseconds(2);
  constexpr auto kMaxPollSleep = std::chrono::microseconds(1000);
  constexpr uint64_t kMaxDeadlineMs = uint64_t{1} << 40;  // ~35 years: no time_point overflow
  const auto t0 = Clock::now();
  const auto deadline = t0 +
                        std::chrono::milliseconds(std::min(watchdog.timeout_ms, kMaxDeadlineMs)) +
                        watchdog.grace;
  const InterruptibleWait under_way;
  std::optional<Clock::time_point> abort_deadline;
  bool interrupted = false;
  auto sleep = std::chrono::microseconds(10);
  for (;;) {
    const CUresult r = stream.query();
    if (r == CUDA_SUCCESS && interrupted)
      throw Error(ErrorKind::timeout, "run.interrupted", "",
                  "interrupted: the host raised the abort flag and the launch stopped (its "
                  "outputs are incomplete)");
    if (r == CUDA_SUCCESS) return abort_deadline.has_value();
    if (r != CUDA_ERROR_NOT_READY) {
      fault(r);
      throw_driver_error(r, "cuStreamQuery", "the launch");  // (fault throws first)
    }
    const auto now = Clock::now();
    if (!abort_deadline && !interrupted && take_interrupt()) {
      interrupted = true;
      raise_abort(true);
      abort_deadline = now + watchdog.abort_grace;
    } else if (watchdog.timeout_ms != 0 && !abort_deadline && now > deadline) {
      raise_abort(false);
      abort_deadline = now + watchdog.abort_grace;
    } else if (abort_deadline && now > *abort_deadline) {
      hang();
      throw Error(ErrorKind::timeout, "launch.hang", "", "the launch did not finish");
    }
    if (now - t0 < kSpinPhase) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, kMaxPollSleep);
    }
  }
}

std::string hex_address(uint64_t address) {
  char s[32];
  std::snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(address));
  return s;
}

// [address, address + bytes) must lie in one allocation the driver knows, on device `ordinal`,
// made in `context` where the driver names one (memory from a pool or the virtual memory API
// may name none). A range the driver cannot tell is taken as it is.
void check_caller_memory(uint64_t address, uint64_t bytes, CUcontext context, int ordinal,
                         const std::string& what) {
  const cu::DriverApi& d = cu::driver();
  const auto refuse = [&](const char* code, const std::string& why) {
    throw Error(ErrorKind::usage, code, what,
                "bind: device pointer " + hex_address(address) + " for " + what + " " + why);
  };
  int device = -1;
  const CUresult r = d.pointer_get_attribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
  if (r == CUDA_ERROR_INVALID_VALUE)
    refuse("api.bind.pointer", "is not memory the CUDA driver knows");
  cu::check(r, "cuPointerGetAttribute", what);
  if (device != ordinal)
    refuse("api.bind.device", "is memory of device " + std::to_string(device) +
                                  ", the executable runs on device " + std::to_string(ordinal));
  CUcontext owner = nullptr;
  if (d.pointer_get_attribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, address) == CUDA_SUCCESS &&
      owner != nullptr && owner != context)
    refuse("api.bind.context", "was allocated in another context than the device's primary "
                               "context, which the executable uses");
  CUdeviceptr start = 0;
  size_t size = 0;
  if (d.pointer_get_attribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address) ==
          CUDA_SUCCESS &&
      d.pointer_get_attribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, address) == CUDA_SUCCESS &&
      (address - start > size || bytes > size - (address - start)))
    refuse("api.bind.range", "lies in an allocation of " + std::to_string(size) + " bytes at " +
                                 hex_address(start) + ", too small for its " +
                                 std::to_string(bytes) + " bytes");
}

}  // namespace amk::cu
