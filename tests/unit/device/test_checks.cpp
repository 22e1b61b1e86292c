// The device capability checks are pure functions over DeviceInfo / KernelResources: tested here
// with made-up devices, no CUDA at all.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "device/device.hpp"
#include "common/files.hpp"

using namespace amk;
using amk_test::contains;

namespace {

DeviceInfo h200() {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.smem_per_block = 49152;
  d.smem_per_block_optin = 232448;
  d.smem_per_sm = 233472;
  d.regs_per_sm = 65536;
  d.regs_per_block = 65536;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.max_blocks_per_sm = 32;
  d.l2_bytes = 62914560;
  d.global_mem_bytes = 150ull << 30;
  d.cooperative_launch = true;
  d.cluster_launch = true;
  d.driver_version = 13000;
  d.nvrtc_major = 13;
  return d;
}

DeviceInfo a100() {
  DeviceInfo d = h200();
  d.name = "NVIDIA A100-SXM4-80GB";
  d.cc_major = 8;
  d.cc_minor = 0;
  d.sm_count = 108;
  d.smem_per_block_optin = 166912;
  d.smem_per_sm = 167936;
  d.l2_bytes = 41943040;
  d.cluster_launch = false;
  return d;
}

DeviceInfo no_coop() {
  DeviceInfo d = h200();
  d.name = "NVIDIA H200 (MPS client)";
  d.cooperative_launch = false;
  return d;
}

KernelResources kernel(uint32_t blocks_per_sm) {
  KernelResources k;
  k.regs_per_thread = 96;
  k.static_smem = 1024;
  k.max_threads = 1024;
  k.blocks_per_sm = blocks_per_sm;
  k.max_cluster_size = 8;
  k.max_active_clusters = 33;
  return k;
}

Program program() {
  Program p;
  p.name = "t";
  p.launch.block = 256;
  return p;
}

// Runs prove_coresidency and returns the thrown error (code + message), or "" if none.
std::pair<std::string, std::string> refusal(const Program& p, uint32_t grid, const DeviceInfo& d,
                                            const KernelResources& k) {
  try {
    prove_coresidency(p, grid, d, k);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::device);
    CHECK(e.exit_code() == ExitCode::device);
    return {e.code(), e.message()};
  }
  return {"", ""};
}

}  // namespace

TEST_CASE("arch strings") {
  CHECK(h200().arch() == "sm_90a");
  CHECK(h200().arch_number() == 90);
  CHECK(a100().arch() == "sm_80");
  DeviceInfo b = h200();
  b.cc_major = 10;
  CHECK(b.arch() == "sm_100");
  DeviceInfo ada = h200();
  ada.cc_major = 8;
  ada.cc_minor = 9;
  CHECK(ada.arch() == "sm_89");
}

TEST_CASE("fingerprint covers the fields that matter and only those") {
  const std::string base = h200().fingerprint();
  CHECK(base.size() == 64);
  CHECK(base == h200().fingerprint());
  DeviceInfo other_ordinal = h200();
  other_ordinal.ordinal = 3;
  other_ordinal.global_mem_bytes = 1;
  CHECK(other_ordinal.fingerprint() == base);

  std::vector<DeviceInfo> changed(12, h200());
  changed[0].name = "NVIDIA H100";
  changed[1].cc_minor = 1;
  changed[2].sm_count = 114;
  changed[3].smem_per_block = 1;
  changed[4].smem_per_block_optin = 1;
  changed[5].smem_per_sm = 1;
  changed[6].regs_per_sm = 1;
  changed[7].regs_per_block = 1;
  changed[8].l2_bytes = 1;
  changed[9].cooperative_launch = false;
  changed[10].cluster_launch = false;
  changed[11].driver_version = 12080;
  for (size_t i = 0; i < changed.size(); ++i) {
    CAPTURE(i);
    CHECK(changed[i].fingerprint() != base);
  }
}

TEST_CASE("to_json") {
  const auto j = h200().to_json();
  CHECK(j.at("arch") == "sm_90a");
  CHECK(j.at("sm_count") == 132);
  CHECK(j.at("smem_per_block_optin_bytes") == 232448);
  CHECK(j.at("compute_capability") == "9.0");
  CHECK(j.at("cooperative_launch") == true);
  CHECK(j.at("nvrtc_version") == "13.0");
  CHECK(j.at("fingerprint") == h200().fingerprint());
}

TEST_CASE("target_mismatches: a plain cooperative program fits the H200") {
  CHECK(target_mismatches(program(), h200()).empty());
}

TEST_CASE("target_mismatches: min_arch, tma, cluster and smem on an sm_80 device") {
  Program p = program();
  p.target.min_arch = 90;
  p.target.features = kFeatureTma | kFeatureCluster;
  p.target.smem_per_block = 200000;
  const auto m = target_mismatches(p, a100());
  REQUIRE(m.size() == 4);
  CHECK(contains(m[0], "sm_90 or newer"));
  CHECK(contains(m[0], "is sm_80"));
  CHECK(contains(m[1], "cluster"));
  CHECK(contains(m[2], "TMA"));
  CHECK(contains(m[2], "8.0"));
  CHECK(contains(m[3], "200000"));
  CHECK(contains(m[3], "166912"));
  // The same program fits the H200.
  CHECK(target_mismatches(p, h200()).empty());
}

TEST_CASE("target_mismatches: features implied by launch mode and TMA specs") {
  Program p = program();
  p.tma.push_back(TmaSpec{});
  const auto m = target_mismatches(p, a100());
  REQUIRE(m.size() == 1);
  CHECK(contains(m[0], "TMA"));

  Program c = program();
  c.launch.mode = LaunchMode::cluster;
  c.launch.cluster[0] = 2;
  REQUIRE(target_mismatches(c, a100()).size() == 1);
  CHECK(target_mismatches(c, no_coop()).empty());  // cluster mode does not need cooperative

  const auto n = target_mismatches(program(), no_coop());
  REQUIRE(n.size() == 1);
  CHECK(contains(n[0], "cooperative"));
}

TEST_CASE("target_mismatches: smem exactly at the opt-in limit is fine") {
  Program p = program();
  p.target.smem_per_block = 232448;
  CHECK(target_mismatches(p, h200()).empty());
  p.target.smem_per_block = 232449;
  CHECK(target_mismatches(p, h200()).size() == 1);
}

TEST_CASE("device_for_arch: what a compile without a device may assume") {
  const DeviceInfo d80 = device_for_arch(80, 166912);
  CHECK(d80.arch_number() == 80);
  CHECK(d80.name == "sm_80 (--arch)");
  Program p = program();
  p.target.min_arch = 90;
  p.tma.push_back(TmaSpec{});
  const auto m = target_mismatches(p, d80);
  REQUIRE(m.size() == 2);
  CHECK(contains(m[0], "sm_90 or newer"));
  CHECK(contains(m[0], "sm_80 (--arch)"));
  CHECK(contains(m[1], "TMA"));
  // sm_90a provides both, and clusters; sm_89 has no clusters.
  CHECK(target_mismatches(p, device_for_arch(90, 232448)).empty());
  Program c = program();
  c.launch.mode = LaunchMode::cluster;
  c.launch.cluster[0] = 2;
  CHECK(target_mismatches(c, device_for_arch(89, 101376)).size() == 1);
  CHECK(target_mismatches(c, device_for_arch(90, 232448)).empty());
}

TEST_CASE("prove_coresidency: cooperative grid limit") {
  const Program p = program();
  CHECK(refusal(p, 264, h200(), kernel(2)).first.empty());
  CHECK(refusal(p, 1, h200(), kernel(1)).first.empty());
  const auto [code, msg] = refusal(p, 265, h200(), kernel(2));
  CHECK(code == "device.coresidency");
  CHECK(contains(msg, "265"));
  CHECK(contains(msg, "2 blocks per SM"));
  CHECK(contains(msg, "132 SMs"));
  CHECK(contains(msg, "264"));
  CHECK(contains(msg, "96 registers"));
}

TEST_CASE("prove_coresidency: zero occupancy, no cooperative launch, grid 0") {
  const Program p = program();
  auto z = refusal(p, 1, h200(), kernel(0));
  CHECK(z.first == "device.coresidency");
  CHECK(contains(z.second, "even one block"));
  auto n = refusal(p, 4, no_coop(), kernel(2));
  CHECK(n.first == "device.coresidency");
  CHECK(contains(n.second, "cooperative launch is not supported"));
  CHECK(refusal(p, 0, h200(), kernel(2)).first == "device.coresidency");
}

TEST_CASE("prove_coresidency: block and shared memory") {
  Program p = program();
  p.launch.block = 2048;
  auto b = refusal(p, 8, h200(), kernel(1));
  CHECK(b.first == "device.block");
  CHECK(contains(b.second, "2048"));
  CHECK(contains(b.second, "1024"));

  p.launch.block = 768;
  KernelResources k = kernel(1);
  k.max_threads = 640;  // register-limited kernel
  auto kb = refusal(p, 8, h200(), k);
  CHECK(kb.first == "device.block");
  CHECK(contains(kb.second, "640"));

  p.launch.block = 0;
  CHECK(refusal(p, 8, h200(), kernel(1)).first == "device.block");

  Program s = program();
  s.launch.dynamic_smem = 232448 - 1024;  // + 1024 static = exactly the limit
  CHECK(refusal(s, 132, h200(), kernel(1)).first.empty());
  s.launch.dynamic_smem += 1;
  auto sm = refusal(s, 132, h200(), kernel(1));
  CHECK(sm.first == "device.smem");
  CHECK(contains(sm.second, "232449"));
  CHECK(contains(sm.second, "1024 static"));
  CHECK(contains(sm.second, "232448"));
}

TEST_CASE("prove_coresidency: cluster launch") {
  Program p = program();
  p.launch.mode = LaunchMode::cluster;
  p.launch.cluster[0] = 4;
  CHECK(refusal(p, 132, h200(), kernel(2)).first.empty());  // 33 clusters of 4

  auto div = refusal(p, 130, h200(), kernel(2));
  CHECK(div.first == "device.cluster");
  CHECK(contains(div.second, "130"));
  CHECK(contains(div.second, "4"));

  auto many = refusal(p, 136, h200(), kernel(2));  // 34 clusters > 33
  CHECK(many.first == "device.coresidency");
  CHECK(contains(many.second, "34 clusters"));
  CHECK(contains(many.second, "33 active clusters"));
  CHECK(contains(many.second, "max cluster size 8"));

  p.launch.cluster[0] = 16;
  auto big = refusal(p, 128, h200(), kernel(2));
  CHECK(big.first == "device.cluster");
  CHECK(contains(big.second, "16"));
  CHECK(contains(big.second, "maximum of 8"));

  p.launch.cluster[0] = 2;
  p.launch.cluster[1] = 2;
  CHECK(refusal(p, 128, h200(), kernel(2)).first == "device.cluster");

  p.launch.cluster[1] = 1;
  CHECK(refusal(p, 128, a100(), kernel(2)).first == "device.cluster");
}

TEST_CASE("auto_grid") {
  CHECK(auto_grid(program(), h200(), kernel(2)) == 264);
  CHECK(auto_grid(program(), a100(), kernel(1)) == 108);
  CHECK(auto_grid(program(), h200(), kernel(0)) == 0);
  Program p = program();
  p.launch.mode = LaunchMode::cluster;
  p.launch.cluster[0] = 4;
  CHECK(auto_grid(p, h200(), kernel(2)) == 132);
  // The auto grid always passes the proof.
  CHECK(refusal(p, auto_grid(p, h200(), kernel(2)), h200(), kernel(2)).first.empty());
  CHECK(
      refusal(program(), auto_grid(program(), h200(), kernel(3)), h200(), kernel(3)).first.empty());
}

TEST_CASE("check_ordinal: device.ordinal (exit 5) for an ordinal the driver does not report") {
  CHECK_NOTHROW(check_ordinal(0, 1));
  CHECK_NOTHROW(check_ordinal(1, 2));
  for (const auto& [ordinal, count, range] :
       {std::tuple{7, 2, "2 device(s), ordinals 0..1"}, std::tuple{0, 0, "0 device(s)"},
        std::tuple{-1, 4, "4 device(s), ordinals 0..3"}}) {
    const int device = ordinal;  // (CAPTURE's lambda may not capture a structured binding)
    CAPTURE(device);
    try {
      check_ordinal(ordinal, count);
      FAIL("no refusal");
    } catch (const Error& e) {
      CHECK(e.code() == "device.ordinal");
      CHECK(e.where() == "--device");
      CHECK(e.exit_code() == ExitCode::device);
      CHECK(contains(e.message(), "CUDA device " + std::to_string(ordinal) + " does not exist"));
      CHECK(contains(e.message(), range));
    }
  }
}
