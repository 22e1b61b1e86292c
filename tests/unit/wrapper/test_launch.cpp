// A wrapper's launch before the driver: its arrays as one buffer list (wrapper_buffers), the
// tensor-argument records the kernel reads, and the proof of the launch shape against made-up
// kernels and devices (prove_wrapper_launch), each refusal with its code and numbers.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "device/device.hpp"
#include "wrapper/wrapper.hpp"

#include "sample.hpp"

using namespace amk;

namespace {

DeviceInfo device() {
  DeviceInfo d;
  d.name = "test GPU";
  d.cc_major = 9;
  d.sm_count = 132;
  d.smem_per_block_optin = 232448;
  d.cluster_launch = true;
  d.cooperative_launch = true;
  d.max_threads_per_block = 1024;
  return d;
}

KernelResources kernel() {
  KernelResources k;
  k.regs_per_thread = 64;
  k.static_smem = 1024;
  k.max_threads = 1024;
  k.blocks_per_sm = 2;
  k.max_cluster_size = 8;
  k.max_active_clusters = 100;
  return k;
}

// The error's code and where, or "" when nothing is thrown.
std::string refusal(const WrapperProgram& w, const DeviceInfo& d, const KernelResources& k,
                    std::string* message = nullptr) {
  try {
    prove_wrapper_launch(w, d, k);
  } catch (const Error& e) {
    if (message != nullptr) *message = e.message();
    return e.code() + " at " + e.where();
  }
  return "";
}

}  // namespace

TEST_CASE("wrapper_buffers: the 14 package arrays in parameter order, then the tensor arguments") {
  const WrapperProgram w = test::sample_wrapper();
  const Program p = wrapper_buffers(w);
  REQUIRE(p.buffers.size() == kPackageArrays + w.tensor_args.size());
  for (size_t i = 0; i < kPackageArrays; ++i)
    CHECK(p.buffers[i].name == package_array_name(static_cast<PackageArray>(i)));
  // Sizes follow the package; the absent comms array is empty; tensor_args holds the records.
  CHECK(p.buffers[0].bytes() == w.entry(PackageArray::instructions).bytes());
  CHECK(p.buffers[static_cast<size_t>(PackageArray::comms)].bytes() == 0);
  CHECK(p.buffers[static_cast<size_t>(PackageArray::tensor_args)].bytes() ==
        w.tensor_args.size() * 144);
  for (size_t i = 0; i < w.tensor_args.size(); ++i) {
    CHECK(p.buffers[wrapper_tensor_buffer(i)].name == w.tensor_args[i].name);
    CHECK(p.buffers[wrapper_tensor_buffer(i)].bytes() == w.tensor_args[i].bytes());
  }
  // The outputs: global staging and the tensor arguments marked output (y), nothing else.
  std::vector<std::string> outputs;
  for (const Buffer& b : p.buffers)
    if (b.output) outputs.push_back(b.name);
  CHECK(outputs == std::vector<std::string>{"global_staging", "y"});
  CHECK(p.base_dir == w.base_dir);
}

TEST_CASE("tensor_arg_records: address, dtype, rank, row-major shape and strides") {
  const WrapperProgram w = test::sample_wrapper();  // x f32[64], w bf16[16, 64], y f32[16]
  const std::vector<uint64_t> addresses = {0x7f0000001000, 0x7f0000002000, 0x7f0000003000};
  const std::vector<std::byte> bytes = tensor_arg_records(w, addresses);
  REQUIRE(bytes.size() == 3 * sizeof(WrapperTensorArgRecord));
  WrapperTensorArgRecord r{};
  std::memcpy(&r, bytes.data() + sizeof r, sizeof r);  // w
  CHECK(r.data == 0x7f0000002000);
  CHECK(r.dtype == AMK_DTYPE_BF16);
  CHECK(r.rank == 2);
  CHECK(r.shape[0] == 16);
  CHECK(r.shape[1] == 64);
  CHECK(r.shape[2] == 0);
  CHECK(r.strides[0] == 64);
  CHECK(r.strides[1] == 1);
  CHECK(r.strides[2] == 0);
  std::memcpy(&r, bytes.data(), sizeof r);  // x
  CHECK(r.data == 0x7f0000001000);
  CHECK(r.dtype == AMK_DTYPE_F32);
  CHECK(r.rank == 1);
  CHECK(r.strides[0] == 1);
  CHECK_THROWS_AS((void)tensor_arg_records(w, std::vector<uint64_t>{1, 2}), Error);
}

TEST_CASE("prove_wrapper_launch: block, shared memory, cluster and co-residency") {
  WrapperProgram w = test::sample_wrapper();  // 2 queues, block 128, cluster 2, 1024 bytes dynamic
  const DeviceInfo d = device();
  CHECK(refusal(w, d, kernel()).empty());

  std::string msg;
  KernelResources k = kernel();
  k.max_threads = 96;  // register pressure
  CHECK(refusal(w, d, k, &msg) == "device.block at /launch/block_dim");
  CHECK(msg.find("1..96 threads") != std::string::npos);

  k = kernel();
  k.static_smem = 232448;  // + 1024 dynamic
  CHECK(refusal(w, d, k, &msg) == "device.smem at /launch/dynamic_smem_bytes");
  CHECK(msg.find("233472 bytes") != std::string::npos);

  k = kernel();
  k.max_cluster_size = 1;  // cuOccupancyMaxPotentialClusterSize for this kernel
  CHECK(refusal(w, d, k, &msg) == "device.cluster at /launch/cluster_size");
  CHECK(msg.find("limit of 1") != std::string::npos);

  k = kernel();
  k.max_active_clusters = 0;
  CHECK(refusal(w, d, k, &msg) == "device.coresidency at /launch/queues");
  CHECK(msg.find("1 clusters of 2") != std::string::npos);

  DeviceInfo no_cluster = d;
  no_cluster.cluster_launch = false;
  CHECK(refusal(w, no_cluster, kernel()) == "device.cluster at /launch/cluster_size");

  w.launch.queues = 3;  // (the loader refuses it too; the proof does not rely on that)
  CHECK(refusal(w, d, kernel()) == "device.cluster at /launch/queues");

  // Without a cluster: one cooperative launch of every queue.
  w.launch.cluster_size = 1;
  w.launch.queues = 264;  // 2 blocks per SM x 132 SMs
  CHECK(refusal(w, d, kernel()).empty());
  w.launch.queues = 265;
  CHECK(refusal(w, d, kernel(), &msg) == "device.coresidency at /launch/queues");
  CHECK(msg.find("264 co-resident blocks") != std::string::npos);
  DeviceInfo no_coop = d;
  no_coop.cooperative_launch = false;
  w.launch.queues = 2;
  CHECK(refusal(w, no_coop, kernel()) == "device.coresidency at /launch");
}
