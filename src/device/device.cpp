#include "device/device.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace amk {
namespace {

constexpr uint32_t kTmaMinMajor = 9;      // the tensor memory accelerator first appears in sm_90
constexpr uint32_t kClusterMinMajor = 9;  // thread block clusters likewise

std::string cc_string(const DeviceInfo& d) {
  return std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
}

std::string device_label(const DeviceInfo& d) {
  return d.name + " (" + d.arch() + ", compute capability " + cc_string(d) + ")";
}

uint64_t cluster_size(const Launch& launch) {
  return uint64_t{launch.cluster[0]} * launch.cluster[1] * launch.cluster[2];
}

}  // namespace

std::string DeviceInfo::arch() const {
  // Hopper's arch-specific features (wgmma, setmaxnreg) need the `a` target; later archs get the
  // portable target until amk has code that needs theirs.
  std::string s = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (cc_major == 9 && cc_minor == 0) s += 'a';
  return s;
}

std::string DeviceInfo::fingerprint() const {
  // Canonical, versioned text of the fields that change what runs or how fast; the ordinal is left
  // out so two identical GPUs share a fingerprint.
  std::string s = "amk.device.v1";
  auto field = [&](std::string_view key, const std::string& value) {
    s += '\n';
    s += key;
    s += '=';
    s += value;
  };
  field("name", name);
  field("cc", cc_string(*this));
  field("sm_count", std::to_string(sm_count));
  field("smem_per_block", std::to_string(smem_per_block));
  field("smem_per_block_optin", std::to_string(smem_per_block_optin));
  field("smem_per_sm", std::to_string(smem_per_sm));
  field("regs_per_sm", std::to_string(regs_per_sm));
  field("regs_per_block", std::to_string(regs_per_block));
  field("l2_bytes", std::to_string(l2_bytes));
  field("cooperative_launch", cooperative_launch ? "1" : "0");
  field("cluster_launch", cluster_launch ? "1" : "0");
  field("driver_version", std::to_string(driver_version));
  return sha256_hex(s);
}

nlohmann::json DeviceInfo::to_json() const {
  nlohmann::json j;
  j["name"] = name;
  j["ordinal"] = ordinal;
  j["arch"] = arch();
  j["compute_capability"] = cc_string(*this);
  j["sm_count"] = sm_count;
  j["smem_per_block_bytes"] = smem_per_block;
  j["smem_per_block_optin_bytes"] = smem_per_block_optin;
  j["smem_per_sm_bytes"] = smem_per_sm;
  j["regs_per_sm"] = regs_per_sm;
  j["regs_per_block"] = regs_per_block;
  j["max_threads_per_block"] = max_threads_per_block;
  j["max_threads_per_sm"] = max_threads_per_sm;
  j["max_blocks_per_sm"] = max_blocks_per_sm;
  j["l2_bytes"] = l2_bytes;
  j["global_mem_bytes"] = global_mem_bytes;
  j["cooperative_launch"] = cooperative_launch;
  j["cluster_launch"] = cluster_launch;
  j["driver_version"] = driver_version;
  j["nvrtc_version"] = std::to_string(nvrtc_major) + "." + std::to_string(nvrtc_minor);
  j["fingerprint"] = fingerprint();
  return j;
}

void check_ordinal(int ordinal, int count) {
  if (ordinal >= 0 && ordinal < count) return;
  throw Error(ErrorKind::device, "device.ordinal", "--device",
              "CUDA device " + std::to_string(ordinal) + " does not exist: the driver reports " +
                  std::to_string(count) + " device(s)" +
                  (count > 0 ? ", ordinals 0.." + std::to_string(count - 1) : std::string()));
}

DeviceInfo device_for_arch(uint32_t arch, uint64_t smem_per_block_optin) {
  DeviceInfo d;
  d.name = "sm_" + std::to_string(arch) + " (--arch)";
  d.cc_major = arch / 10;
  d.cc_minor = arch % 10;
  d.cooperative_launch = true;
  d.cluster_launch = d.cc_major >= kClusterMinMajor;
  d.smem_per_block_optin = smem_per_block_optin;
  return d;
}

std::vector<std::string> target_mismatches(const Program& program, const DeviceInfo& device) {
  std::vector<std::string> out;
  const Target& t = program.target;
  const std::string dev = device_label(device);

  if (t.min_arch != 0 && device.arch_number() < t.min_arch)
    out.push_back("the program needs sm_" + std::to_string(t.min_arch) +
                  " or newer (target.min_arch " + std::to_string(t.min_arch) + "); " + dev +
                  " is sm_" + std::to_string(device.arch_number()));

  // Features the program asks for, plus those its launch and TMA specs imply.
  uint32_t features = t.features;
  if (program.launch.mode == LaunchMode::cooperative) features |= kFeatureCooperative;
  if (program.launch.mode == LaunchMode::cluster) features |= kFeatureCluster;
  if (!program.tma.empty()) features |= kFeatureTma;

  if ((features & kFeatureCooperative) && !device.cooperative_launch)
    out.push_back("the program needs cooperative launch (persistent blocks "
                  "must be co-resident); " +
                  dev + " does not support it");
  if ((features & kFeatureCluster) &&
      (!device.cluster_launch || device.cc_major < kClusterMinMajor))
    out.push_back("the program needs thread block cluster launch (compute capability " +
                  std::to_string(kClusterMinMajor) + ".0 or newer); " + dev +
                  (device.cluster_launch ? " is too old" : " does not support it"));
  if ((features & kFeatureTma) && device.cc_major < kTmaMinMajor)
    out.push_back("the program needs TMA tensor maps (compute capability " +
                  std::to_string(kTmaMinMajor) + ".0 or newer, " +
                  std::to_string(program.tma.size()) + " tensor map(s)); " + dev + " has " +
                  cc_string(device));
  if (t.smem_per_block != 0 && t.smem_per_block > device.smem_per_block_optin)
    out.push_back("the program needs " + std::to_string(t.smem_per_block) +
                  " bytes of shared memory per block (target.smem_per_block); " + dev +
                  " allows at most " + std::to_string(device.smem_per_block_optin) +
                  " bytes per block (opt-in limit)");
  return out;
}

void prove_coresidency(const Program& program, uint32_t grid, const DeviceInfo& device,
                       const KernelResources& kernel) {
  const Launch& l = program.launch;
  const std::string dev = device_label(device);

  // Block shape: the compiled kernel's own limit is the binding one (register pressure).
  const uint32_t thread_limit = kernel.max_threads != 0
                                    ? std::min(kernel.max_threads, device.max_threads_per_block)
                                    : device.max_threads_per_block;
  if (l.block == 0 || l.block > thread_limit)
    throw Error(ErrorKind::device, "device.block", "/launch/block",
                "block of " + std::to_string(l.block) +
                    " threads cannot launch: the compiled kernel allows 1.." +
                    std::to_string(thread_limit) + " threads per block (kernel limit " +
                    std::to_string(kernel.max_threads) + " at " +
                    std::to_string(kernel.regs_per_thread) +
                    " registers per thread, device limit " +
                    std::to_string(device.max_threads_per_block) + ") on " + dev);

  // Shared memory: static (compiled) + dynamic (requested) against the opt-in limit.
  const uint64_t smem_total = kernel.static_smem + l.dynamic_smem;
  if (smem_total > device.smem_per_block_optin)
    throw Error(ErrorKind::device, "device.smem", "/launch/dynamic_smem",
                "the kernel needs " + std::to_string(smem_total) +
                    " bytes of shared memory per block (" + std::to_string(kernel.static_smem) +
                    " static + " + std::to_string(l.dynamic_smem) + " dynamic); " + dev +
                    " allows at most " + std::to_string(device.smem_per_block_optin) +
                    " bytes per block (opt-in limit)");

  if (grid == 0)
    throw Error(ErrorKind::device, "device.coresidency", "/launch/grid",
                "grid of 0 blocks: nothing to launch (the plan has no queues)");

  const uint64_t max_grid = uint64_t{kernel.blocks_per_sm} * device.sm_count;
  const std::string occupancy =
      std::to_string(kernel.blocks_per_sm) + " blocks per SM x " + std::to_string(device.sm_count) +
      " SMs = " + std::to_string(max_grid) + " co-resident blocks (block " +
      std::to_string(l.block) + " threads, " + std::to_string(kernel.regs_per_thread) +
      " registers per thread, " + std::to_string(kernel.static_smem) + " + " +
      std::to_string(l.dynamic_smem) + " bytes shared memory)";

  if (l.mode == LaunchMode::cooperative) {
    if (!device.cooperative_launch)
      throw Error(ErrorKind::device, "device.coresidency", "/launch/mode",
                  "cooperative launch is not supported by " + dev + ": co-residency of the " +
                      std::to_string(grid) + " persistent blocks cannot be guaranteed");
    if (kernel.blocks_per_sm == 0)
      throw Error(ErrorKind::device, "device.coresidency", "/launch",
                  "the compiled kernel cannot run even one block per SM at block " +
                      std::to_string(l.block) + " threads with " +
                      std::to_string(kernel.regs_per_thread) + " registers per thread and " +
                      std::to_string(smem_total) + " bytes of shared memory on " + dev);
    if (grid > max_grid)
      throw Error(ErrorKind::device, "device.coresidency", "/launch/grid",
                  "grid of " + std::to_string(grid) + " blocks cannot be co-resident on " + dev +
                      ": at most " + occupancy +
                      "; refusing to launch (persistent blocks would "
                      "deadlock); use grid <= " +
                      std::to_string(max_grid) + " or grid auto");
    return;
  }

  // Cluster launch. The grid is one-dimensional, so clusters are too.
  const uint64_t c = cluster_size(l);
  const std::string cluster_text = "cluster (" + std::to_string(l.cluster[0]) + ", " +
                                   std::to_string(l.cluster[1]) + ", " +
                                   std::to_string(l.cluster[2]) + ")";
  if (!device.cluster_launch || device.cc_major < kClusterMinMajor)
    throw Error(ErrorKind::device, "device.cluster", "/launch/mode",
                "cluster launch is not supported by " + dev);
  if (l.cluster[1] != 1 || l.cluster[2] != 1 || c == 0)
    throw Error(ErrorKind::device, "device.cluster", "/launch/cluster",
                cluster_text + " does not fit the one-dimensional grid of " + std::to_string(grid) +
                    " blocks: use cluster (n, 1, 1)");
  if (grid % c != 0)
    throw Error(ErrorKind::device, "device.cluster", "/launch/grid",
                "grid of " + std::to_string(grid) +
                    " blocks is not a multiple of the cluster size " + std::to_string(c));
  if (c > kernel.max_cluster_size)
    throw Error(ErrorKind::device, "device.cluster", "/launch/cluster",
                "cluster size " + std::to_string(c) + " exceeds the compiled kernel's maximum of " +
                    std::to_string(kernel.max_cluster_size) + " on " + dev + " (block " +
                    std::to_string(l.block) + " threads, " + std::to_string(smem_total) +
                    " bytes shared memory)");
  const uint64_t clusters = grid / c;
  if (clusters > kernel.max_active_clusters)
    throw Error(ErrorKind::device, "device.coresidency", "/launch/grid",
                "grid of " + std::to_string(grid) + " blocks = " + std::to_string(clusters) +
                    " clusters of " + std::to_string(c) + " cannot be co-resident on " + dev +
                    ": at most " + std::to_string(kernel.max_active_clusters) +
                    " active clusters (max cluster size " +
                    std::to_string(kernel.max_cluster_size) + "; " + occupancy +
                    "); refusing to launch (persistent blocks would deadlock); "
                    "use grid <= " +
                    std::to_string(uint64_t{kernel.max_active_clusters} * c) + " or grid auto");
}

uint32_t auto_grid(const Program& program, const DeviceInfo& device,
                   const KernelResources& kernel) {
  uint64_t g = 0;
  if (program.launch.mode == LaunchMode::cluster) {
    const uint64_t c = cluster_size(program.launch);
    if (c == 0) return 0;
    // Whole clusters only, also under the queue limit.
    g = std::min<uint64_t>(kernel.max_active_clusters, kMaxQueues / c) * c;
  } else {
    g = std::min<uint64_t>(uint64_t{kernel.blocks_per_sm} * device.sm_count, kMaxQueues);
  }
  return static_cast<uint32_t>(g);
}

}  // namespace amk
