// Device capabilities as plain data, and the pure checks over them (no CUDA here: the CUDA
// layer fills DeviceInfo from the driver; tests fill it by hand).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "program/program.hpp"

namespace amk {

struct DeviceInfo {
  std::string name;
  int ordinal = 0;
  uint32_t cc_major = 0, cc_minor = 0;  // compute capability
  uint32_t sm_count = 0;
  uint64_t smem_per_block = 0;  // default limit
  uint64_t smem_per_block_optin = 0;
  uint64_t smem_per_sm = 0;
  uint32_t regs_per_sm = 0;
  uint32_t regs_per_block = 0;
  uint32_t max_threads_per_block = 0;
  uint32_t max_threads_per_sm = 0;
  uint32_t max_blocks_per_sm = 0;
  uint64_t l2_bytes = 0;
  uint64_t global_mem_bytes = 0;
  bool cooperative_launch = false;
  bool cluster_launch = false;
  int driver_version = 0;  // e.g. 13000
  int nvrtc_major = 0, nvrtc_minor = 0;

  [[nodiscard]] std::string arch() const;  // "sm_90a" on Hopper, else "sm_XY"
  [[nodiscard]] uint32_t arch_number() const { return cc_major * 10 + cc_minor; }
  [[nodiscard]] std::string fingerprint() const;  // sha256 over the fields that matter
  [[nodiscard]] nlohmann::json to_json() const;
};

// What the compiled kernel needs, from the driver (cuFuncGetAttribute / occupancy queries).
struct KernelResources {
  uint32_t regs_per_thread = 0;
  uint64_t static_smem = 0;
  uint64_t local_bytes = 0;
  uint64_t const_bytes = 0;
  uint32_t max_threads = 0;
  uint32_t blocks_per_sm = 0;        // occupancy at (block, dynamic smem)
  uint32_t max_cluster_size = 0;     // cuOccupancyMaxPotentialClusterSize (cluster mode)
  uint32_t max_active_clusters = 0;  // cuOccupancyMaxActiveClusters (cluster mode)
};

// Throws Error(kind device, code device.ordinal) unless 0 <= ordinal < count: "CUDA device 7
// does not exist: the driver reports 2 device(s), ordinals 0..1".
void check_ordinal(int ordinal, int count);

// The capabilities a compile for `arch` (e.g. 90 for sm_90a) may assume without a device: its
// compute capability, cooperative launch, clusters from sm_90, and the arch's opt-in shared
// memory per block. Named "sm_NN (--arch)" in messages.
[[nodiscard]] DeviceInfo device_for_arch(uint32_t arch, uint64_t smem_per_block_optin);

// Every way the program's target requirements are not met by the device; empty = compatible.
[[nodiscard]] std::vector<std::string> target_mismatches(const Program& program,
                                                         const DeviceInfo& device);

// Throws Error(kind device, code device.*) naming the numbers when the persistent grid cannot be
// co-resident: cooperative, grid <= blocks_per_sm * SMs; cluster, grid % cluster == 0,
// cluster <= max_cluster_size, clusters <= max_active_clusters. Also checks block dims and
// dynamic shared memory against the device.
void prove_coresidency(const Program& program, uint32_t grid, const DeviceInfo& device,
                       const KernelResources& kernel);

// The grid `auto` resolves to: the co-resident maximum for the kernel on this device.
[[nodiscard]] uint32_t auto_grid(const Program& program, const DeviceInfo& device,
                                 const KernelResources& kernel);

}  // namespace amk
