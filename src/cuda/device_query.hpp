// DeviceInfo and KernelResources from the driver (the pure checks over them live in
// device/device.hpp).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "device/device.hpp"

namespace amk::cu {

[[nodiscard]] int device_count();
// Every DeviceInfo field from cuDeviceGetAttribute / cuDriverGetVersion / nvrtcVersion.
[[nodiscard]] DeviceInfo query_device(int ordinal);

// The launch a kernel is configured and measured for.
struct LaunchShape {
  uint32_t grid = 0;  // 0: not known yet (cluster queries then use one cluster)
  uint32_t block = 0;
  uint32_t dynamic_smem = 0;
  uint32_t cluster_size = 1;  // > 1: cluster launch
};

// Function attributes a launch needs: the dynamic shared memory limit (when any is requested:
// static + dynamic may pass 48 KiB) and non-portable cluster sizes (> 8).
void configure_function(CUfunction function, const LaunchShape& shape, std::string_view what);

// The compiled footprint only (registers, static / local / const memory, thread limit).
[[nodiscard]] KernelResources kernel_attributes(CUfunction function, std::string_view what);

// Register / smem footprint and occupancy of a configured function at `shape`.
[[nodiscard]] KernelResources query_kernel(CUfunction function, const LaunchShape& shape,
                                           std::string_view what);

}  // namespace amk::cu
