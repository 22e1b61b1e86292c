#include "cuda/device_query.hpp"

#include <nvrtc.h>

#include <array>
#include <string>

#include "cuda/driver.hpp"

namespace amk::cu {
namespace {

constexpr uint32_t kPortableClusterLimit = 8;

int attribute(CUdevice dev, CUdevice_attribute attr, const char* name, int ordinal) {
  int v = 0;
  check(driver().device_get_attribute(&v, attr, dev), "cuDeviceGetAttribute",
        [&] { return std::string(name) + " of device " + std::to_string(ordinal); });
  return v;
}

uint32_t u32(int v) { return v < 0 ? 0u : static_cast<uint32_t>(v); }

int func_attribute(CUfunction f, CUfunction_attribute attr, const char* name,
                   std::string_view what) {
  int v = 0;
  check(driver().func_get_attribute(&v, attr, f), "cuFuncGetAttribute",
        [&] { return std::string(name) + " of " + std::string(what); });
  return v;
}

}  // namespace

int device_count() {
  int n = 0;
  check(driver().device_get_count(&n), "cuDeviceGetCount");
  return n;
}

DeviceInfo query_device(int ordinal) {
  const DriverApi& d = driver();
  CUdevice dev = 0;
  check(d.device_get(&dev, ordinal), "cuDeviceGet",
        [&] { return "device " + std::to_string(ordinal); });
  DeviceInfo info;
  info.ordinal = ordinal;
  std::array<char, 256> name{};
  check(d.device_get_name(name.data(), static_cast<int>(name.size()), dev), "cuDeviceGetName",
        [&] { return "device " + std::to_string(ordinal); });
  info.name = name.data();
#define AMK_ATTR(attr) attribute(dev, attr, #attr, ordinal)
  info.cc_major = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  info.cc_minor = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  info.sm_count = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  info.smem_per_block = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  info.smem_per_block_optin = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  info.smem_per_sm = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  info.regs_per_sm = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR));
  info.regs_per_block = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK));
  info.max_threads_per_block = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  info.max_threads_per_sm = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR));
  info.max_blocks_per_sm = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR));
  info.l2_bytes = u32(AMK_ATTR(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
  info.cooperative_launch = AMK_ATTR(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) != 0;
  info.cluster_launch = AMK_ATTR(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH) != 0;
#undef AMK_ATTR
  size_t total = 0;
  check(d.device_total_mem(&total, dev), "cuDeviceTotalMem",
        [&] { return "device " + std::to_string(ordinal); });
  info.global_mem_bytes = total;
  check(d.driver_get_version(&info.driver_version), "cuDriverGetVersion");
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) {  // informational; compile reports failures
    info.nvrtc_major = major;
    info.nvrtc_minor = minor;
  }
  return info;
}

void configure_function(CUfunction function, const LaunchShape& shape, std::string_view what) {
  const DriverApi& d = driver();
  if (shape.dynamic_smem > 0)
    check(d.func_set_attribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(shape.dynamic_smem)),
          "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)", [&] {
            return std::string(what) + ", " + std::to_string(shape.dynamic_smem) +
                   " bytes of dynamic shared memory";
          });
  if (shape.cluster_size > kPortableClusterLimit)
    check(
        d.func_set_attribute(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
        "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_"
        "ALLOWED)",
        [&] { return std::string(what) + ", cluster size " + std::to_string(shape.cluster_size); });
}

KernelResources kernel_attributes(CUfunction function, std::string_view what) {
  KernelResources k;
#define AMK_FATTR(attr) func_attribute(function, attr, #attr, what)
  k.regs_per_thread = u32(AMK_FATTR(CU_FUNC_ATTRIBUTE_NUM_REGS));
  k.static_smem = u32(AMK_FATTR(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
  k.local_bytes = u32(AMK_FATTR(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES));
  k.const_bytes = u32(AMK_FATTR(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES));
  k.max_threads = u32(AMK_FATTR(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
#undef AMK_FATTR
  return k;
}

KernelResources query_kernel(CUfunction function, const LaunchShape& shape, std::string_view what) {
  const DriverApi& d = driver();
  KernelResources k = kernel_attributes(function, what);
  const auto at_shape = [&] {
    return std::string(what) + " at block " + std::to_string(shape.block) + ", " +
           std::to_string(shape.dynamic_smem) + " bytes dynamic shared memory";
  };
  // A block larger than the kernel allows has no occupancy; prove_coresidency reports it.
  if (shape.block == 0 || shape.block > k.max_threads) return k;
  int blocks = 0;
  check(d.occupancy_max_active_blocks(&blocks, function, static_cast<int>(shape.block),
                                      shape.dynamic_smem),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor", at_shape);
  k.blocks_per_sm = u32(blocks);
  if (shape.cluster_size <= 1) return k;

  // Cluster queries take a launch config; one cluster when the grid is not known yet.
  const uint32_t c = shape.cluster_size;
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = c;
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = (shape.grid != 0 && shape.grid % c == 0) ? shape.grid : c;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = shape.block;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = shape.dynamic_smem;
  config.hStream = nullptr;
  config.attrs = &attr;
  config.numAttrs = 1;
  int max_cluster = 0;
  check(d.occupancy_max_potential_cluster_size(&max_cluster, function, &config),
        "cuOccupancyMaxPotentialClusterSize", at_shape);
  k.max_cluster_size = u32(max_cluster);
  if (c > k.max_cluster_size) return k;  // the query below would fail; the proof names both
  int clusters = 0;
  check(d.occupancy_max_active_clusters(&clusters, function, &config),
        "cuOccupancyMaxActiveClusters",
        [&] { return at_shape() + ", cluster size " + std::to_string(c); });
  k.max_active_clusters = u32(clusters);
  return k;
}

}  // namespace amk::cu
