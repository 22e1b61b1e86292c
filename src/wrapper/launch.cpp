// What a wrapper's launch needs before and around the driver, as pure functions: the package
// arrays and tensor arguments as one list of amk buffers, the tensor-argument records, and the
// proof that the launch shape fits the compiled kernel on the device.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "device/device.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {

Program wrapper_buffers(const WrapperProgram& w) {
  Program p;
  p.name = w.name;
  p.base_dir = w.base_dir;
  p.launch.timeout_ms = w.launch.timeout_ms;
  p.buffers.reserve(kPackageArrays + w.tensor_args.size());
  for (size_t i = 0; i < kPackageArrays; ++i) {
    const auto a = static_cast<PackageArray>(i);
    const PackageEntry& e = w.package[i];
    Buffer b;
    if (e.present) {
      b = e.buffer;
    } else {
      b.dtype = DType::u8;
      b.init = {};
    }
    b.name = std::string(package_array_name(a));
    b.shape = {e.present ? e.count() : 0};
    b.output = a == PackageArray::global_staging;
    if (a == PackageArray::tensor_args) {
      b.dtype = DType::u8;
      b.shape = {w.tensor_args.size() * sizeof(WrapperTensorArgRecord)};
      b.init = {};
    }
    p.buffers.push_back(std::move(b));
  }
  for (const Buffer& t : w.tensor_args) p.buffers.push_back(t);
  return p;
}

std::vector<std::byte> tensor_arg_records(const WrapperProgram& w,
                                          std::span<const uint64_t> addresses) {
  if (addresses.size() != w.tensor_args.size())
    throw Error(ErrorKind::internal, "internal.tensor_args", "",
                std::to_string(addresses.size()) + " addresses for " +
                    std::to_string(w.tensor_args.size()) + " tensor arguments");
  std::vector<std::byte> out(w.tensor_args.size() * sizeof(WrapperTensorArgRecord));
  for (size_t i = 0; i < w.tensor_args.size(); ++i) {
    const Buffer& b = w.tensor_args[i];
    WrapperTensorArgRecord r{};
    r.data = addresses[i];
    r.dtype = static_cast<uint32_t>(b.dtype);
    r.rank = static_cast<uint32_t>(b.shape.size());
    int64_t stride = 1;
    for (size_t d = b.shape.size(); d-- > 0;) {
      r.shape[d] = b.shape[d];
      r.strides[d] = stride;
      stride *= static_cast<int64_t>(b.shape[d]);
    }
    std::memcpy(out.data() + i * sizeof r, &r, sizeof r);
  }
  return out;
}

void prove_wrapper_launch(const WrapperProgram& w, const DeviceInfo& d, const KernelResources& k) {
  const WrapperLaunch& l = w.launch;
  const auto b = l.block3();
  const uint64_t threads = uint64_t{b[0]} * b[1] * b[2];
  const std::string on = " on " + d.name + " (" + d.arch() + ")";
  const uint32_t thread_limit = k.max_threads != 0
                                    ? std::min(k.max_threads, d.max_threads_per_block)
                                    : d.max_threads_per_block;
  if (threads == 0 || threads > thread_limit)
    throw Error(ErrorKind::device, "device.block", "/launch/block_dim",
                "a block of " + std::to_string(threads) +
                    " threads cannot launch: the compiled kernel allows 1.." +
                    std::to_string(thread_limit) + " threads per block (" +
                    std::to_string(k.regs_per_thread) + " registers per thread)" + on);
  const uint64_t smem = k.static_smem + l.dynamic_smem_bytes;
  if (smem > d.smem_per_block_optin)
    throw Error(ErrorKind::device, "device.smem", "/launch/dynamic_smem_bytes",
                "the kernel needs " + std::to_string(smem) + " bytes of shared memory per block (" +
                    std::to_string(k.static_smem) + " static + " +
                    std::to_string(l.dynamic_smem_bytes) + " dynamic); the device allows " +
                    std::to_string(d.smem_per_block_optin) + " (opt-in limit)" + on);
  const uint64_t per_sm = uint64_t{k.blocks_per_sm} * d.sm_count;
  const std::string occupancy = std::to_string(k.blocks_per_sm) + " blocks per SM x " +
                                std::to_string(d.sm_count) + " SMs = " + std::to_string(per_sm) +
                                " co-resident blocks at " + std::to_string(threads) + " threads, " +
                                std::to_string(k.regs_per_thread) + " registers per thread and " +
                                std::to_string(smem) + " bytes of shared memory";
  if (l.cluster_size <= 1) {
    // One cooperative launch: the driver and this proof both require the whole grid resident.
    if (!d.cooperative_launch)
      throw Error(ErrorKind::device, "device.coresidency", "/launch",
                  "the device has no cooperative launch: co-residency of " +
                      std::to_string(l.queues) + " persistent blocks cannot be guaranteed" + on);
    if (l.queues > per_sm)
      throw Error(ErrorKind::device, "device.coresidency", "/launch/queues",
                  std::to_string(l.queues) + " queues (one persistent block each) cannot be " +
                      "co-resident: at most " + occupancy + on);
    return;
  }
  const uint32_t c = l.cluster_size;
  if (!d.cluster_launch)
    throw Error(ErrorKind::device, "device.cluster", "/launch/cluster_size",
                "a cluster of " + std::to_string(c) +
                    " blocks, but the device has no cluster "
                    "launch" +
                    on);
  if (l.queues % c != 0)
    throw Error(ErrorKind::device, "device.cluster", "/launch/queues",
                std::to_string(l.queues) + " queues are not a multiple of the cluster size " +
                    std::to_string(c));
  if (c > k.max_cluster_size)
    throw Error(ErrorKind::device, "device.cluster", "/launch/cluster_size",
                "a cluster of " + std::to_string(c) + " blocks exceeds this kernel's limit of " +
                    std::to_string(k.max_cluster_size) +
                    " (cuOccupancyMaxPotentialClusterSize at " + std::to_string(threads) +
                    " threads and " + std::to_string(smem) + " bytes of shared memory)" + on);
  const uint64_t clusters = l.queues / c;
  if (clusters > k.max_active_clusters)
    throw Error(ErrorKind::device, "device.coresidency", "/launch/queues",
                std::to_string(l.queues) + " queues = " + std::to_string(clusters) +
                    " clusters of " + std::to_string(c) + " cannot be co-resident: at most " +
                    std::to_string(k.max_active_clusters) +
                    " active clusters (cuOccupancyMaxActiveClusters; " + occupancy + ")" + on);
}

}  // namespace amk
