// The CUDA driver API, loaded with dlopen at first use. amk never links libcuda: a machine without
// the NVIDIA driver (CI, the development boxes) must still run every CPU command. <cuda.h> is
// included for types and enums only; every entry point comes from the table below, fetched with
// cuGetProcAddress at the header's CUDA_VERSION so each name resolves to the ABI version
// (cuMemAlloc -> cuMemAlloc_v2, ...) that the declarations here describe.
#pragma once

#include <cuda.h>

#include <concepts>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.hpp"

namespace amk::cu {

// X(member, driver symbol): every driver entry point amk calls. The symbol is stringified
// unexpanded (the base name cuGetProcAddress wants); decltype sees the header's macro, i.e. the
// versioned declaration (cuMemAlloc_v2 and so on), so the pointer type always matches.
#define AMK_DRIVER_FUNCTIONS(X)                                                                    \
  X(driver_get_version, cuDriverGetVersion)                                                        \
  X(get_error_name, cuGetErrorName)                                                                \
  X(get_error_string, cuGetErrorString)                                                            \
  X(device_get_count, cuDeviceGetCount)                                                            \
  X(device_get, cuDeviceGet)                                                                       \
  X(device_get_name, cuDeviceGetName)                                                              \
  X(device_get_attribute, cuDeviceGetAttribute)                                                    \
  X(device_total_mem, cuDeviceTotalMem)                                                            \
  X(primary_ctx_retain, cuDevicePrimaryCtxRetain)                                                  \
  X(primary_ctx_release, cuDevicePrimaryCtxRelease)                                                \
  X(ctx_set_current, cuCtxSetCurrent)                                                              \
  X(module_load_data, cuModuleLoadData)                                                            \
  X(module_unload, cuModuleUnload)                                                                 \
  X(module_get_function, cuModuleGetFunction)                                                      \
  X(func_get_attribute, cuFuncGetAttribute)                                                        \
  X(func_set_attribute, cuFuncSetAttribute)                                                        \
  X(occupancy_max_active_blocks, cuOccupancyMaxActiveBlocksPerMultiprocessor)                      \
  X(occupancy_max_potential_cluster_size, cuOccupancyMaxPotentialClusterSize)                      \
  X(occupancy_max_active_clusters, cuOccupancyMaxActiveClusters)                                   \
  X(mem_alloc, cuMemAlloc)                                                                         \
  X(mem_get_info, cuMemGetInfo)                                                                    \
  X(mem_free, cuMemFree)                                                                           \
  X(mem_host_alloc, cuMemHostAlloc)                                                                \
  X(mem_free_host, cuMemFreeHost)                                                                  \
  X(mem_host_get_device_pointer, cuMemHostGetDevicePointer)                                        \
  X(memcpy_htod_async, cuMemcpyHtoDAsync)                                                          \
  X(memcpy_dtoh_async, cuMemcpyDtoHAsync)                                                          \
  X(memset_d8_async, cuMemsetD8Async)                                                              \
  X(pointer_get_attribute, cuPointerGetAttribute)                                                  \
  X(stream_create, cuStreamCreate)                                                                 \
  X(stream_destroy, cuStreamDestroy)                                                               \
  X(stream_query, cuStreamQuery)                                                                   \
  X(stream_synchronize, cuStreamSynchronize)                                                       \
  X(stream_wait_event, cuStreamWaitEvent)                                                          \
  X(event_create, cuEventCreate)                                                                   \
  X(event_destroy, cuEventDestroy)                                                                 \
  X(event_record, cuEventRecord)                                                                   \
  X(event_synchronize, cuEventSynchronize)                                                         \
  X(event_elapsed_time, cuEventElapsedTime)                                                        \
  X(launch_kernel_ex, cuLaunchKernelEx)                                                            \
  X(launch_kernel, cuLaunchKernel)                                                                 \
  X(memset_d32_async, cuMemsetD32Async)                                                            \
  X(memset_d16_async, cuMemsetD16Async)                                                            \
  X(stream_begin_capture, cuStreamBeginCapture)                                                    \
  X(stream_end_capture, cuStreamEndCapture)                                                        \
  X(graph_instantiate_with_flags, cuGraphInstantiateWithFlags)                                     \
  X(graph_launch, cuGraphLaunch)                                                                   \
  X(graph_exec_destroy, cuGraphExecDestroy)                                                        \
  X(graph_destroy, cuGraphDestroy)                                                                 \
  X(tensor_map_encode_tiled, cuTensorMapEncodeTiled)

struct DriverApi {
  decltype(&cuInit) init = nullptr;
#define AMK_DRIVER_MEMBER(member, symbol) decltype(&symbol) member = nullptr;
  AMK_DRIVER_FUNCTIONS(AMK_DRIVER_MEMBER)
#undef AMK_DRIVER_MEMBER
};

// True when libcuda.so.1 loads, every entry point resolves and cuInit succeeds. Otherwise false,
// and *why (if given) says which step failed and how. Never throws.
[[nodiscard]] bool driver_available(std::string* why = nullptr);

// The loaded table. Throws Error(kind device, code device.no_driver) when driver_available() is
// false, with its reason as the message.
[[nodiscard]] const DriverApi& driver();

// The table when loaded, else nullptr; for destructors, which must not throw.
[[nodiscard]] const DriverApi* driver_if_loaded() noexcept;

// Errors after which the context is unusable (the launch faulted).
[[nodiscard]] bool is_sticky(CUresult result) noexcept;

// The kind of error a failed call ends in: timeout for CUDA_ERROR_LAUNCH_TIMEOUT (the driver's
// own limit on a kernel's run time stopped it: exit 8, as the watchdog's stop), launch for the
// other sticky errors, driver for the rest (both exit 7).
[[nodiscard]] ErrorKind error_kind(CUresult result) noexcept;

// "CUDA_ERROR_ILLEGAL_ADDRESS" from the driver, or "CUresult 700" when it cannot say.
[[nodiscard]] std::string error_name(CUresult result);
[[nodiscard]] std::string error_string(CUresult result);

// Throws the amk::Error for a failed driver call, of error_kind(result): code "driver.<NAME>",
// "launch.fault" for sticky errors, "launch.driver_timeout" for CUDA_ERROR_LAUNCH_TIMEOUT;
// where = `what`; message "<call> for <what> failed: <NAME> (<description>)".
[[noreturn]] void throw_driver_error(CUresult result, std::string_view call, std::string what);

// One check per call. `what` is built only on failure.
inline void check(CUresult result, std::string_view call) {
  if (result != CUDA_SUCCESS) throw_driver_error(result, call, {});
}
inline void check(CUresult result, std::string_view call, std::string_view what) {
  if (result != CUDA_SUCCESS) throw_driver_error(result, call, std::string(what));
}
template <class F>
requires std::invocable<F>
void check(CUresult result, std::string_view call, F&& what) {
  if (result != CUDA_SUCCESS)
    throw_driver_error(result, call, std::string(std::forward<F>(what)()));
}

}  // namespace amk::cu
