// A wrapper program against a live device (wrapper_target_mismatches, check_wrapper_target): the
// snapshot's fields and the launch's needs, each difference named, both fingerprints in the error.
#include <doctest/doctest.h>

#include <array>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "device/device.hpp"
#include "wrapper/wrapper.hpp"

#include "sample.hpp"

using namespace amk;

namespace {

// The device the sample's snapshot describes (an H100 SXM's limits).
DeviceInfo matching(const WrapperProgram& w) {
  DeviceInfo d;
  d.name = "test GPU";
  d.cc_major = w.target.arch / 10;
  d.cc_minor = w.target.arch % 10;
  d.sm_count = w.target.sm_count;
  d.smem_per_block = w.target.max_shared_memory_per_block;
  d.smem_per_block_optin = w.target.max_shared_memory_per_block_optin;
  d.smem_per_sm = w.target.max_shared_memory_per_sm;
  d.cluster_launch = w.target.cluster_launch;
  d.cooperative_launch = true;
  d.max_threads_per_block = 1024;
  return d;
}

bool has(const std::vector<std::string>& v, const std::string& prefix) {
  for (const std::string& s : v)
    if (s.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

TEST_CASE("the device the snapshot describes runs the sample") {
  const WrapperProgram w = test::sample_wrapper();
  REQUIRE(w.target.arch == 90);
  const DeviceInfo d = matching(w);
  CHECK(wrapper_target_mismatches(w, d).empty());
  CHECK_NOTHROW(check_wrapper_target(w, d));
}

TEST_CASE("every snapshot field that differs is named, snapshot vs device") {
  const WrapperProgram w = test::sample_wrapper();
  DeviceInfo d = matching(w);
  d.cc_major = 10;
  d.cc_minor = 0;
  d.sm_count = 148;
  d.smem_per_block_optin = 232448 - 1024;
  const std::vector<std::string> m = wrapper_target_mismatches(w, d);
  CHECK(m.size() == 3);
  CHECK(has(m, "arch: snapshot sm_90a, device sm_100"));
  CHECK(has(m, "sm_count: snapshot 132, device 148"));
  CHECK(has(m, "max_shared_memory_per_block_optin: snapshot 232448, device 231424"));
  try {
    check_wrapper_target(w, d);
    FAIL("expected device.target");
  } catch (const Error& e) {
    CHECK(e.code() == "device.target");
    CHECK(e.kind() == ErrorKind::device);
    CHECK(e.exit_code() == ExitCode::device);
    CHECK(e.where() == "/target");
    CHECK(e.message().find("snapshot fingerprint " + w.target.fingerprint) != std::string::npos);
    CHECK(e.message().find("device fingerprint " + d.fingerprint()) != std::string::npos);
    CHECK(e.message().find("sm_count: snapshot 132, device 148") != std::string::npos);
  }
  d = matching(w);
  d.smem_per_block = 0;
  d.smem_per_sm = 1;
  CHECK(wrapper_target_mismatches(w, d).size() == 2);
  // Limits the snapshot does not record (0) are not compared.
  WrapperProgram unrecorded = w;
  unrecorded.target.max_shared_memory_per_block = 0;
  unrecorded.target.max_shared_memory_per_sm = 0;
  CHECK(wrapper_target_mismatches(unrecorded, d).empty());
}

TEST_CASE("the launch's needs are checked against the device itself") {
  WrapperProgram w = test::sample_wrapper();
  DeviceInfo d = matching(w);
  w.launch.cluster_size = 2;
  d.cluster_launch = false;
  w.target.cluster_launch = false;  // the snapshot agrees; the launch still needs clusters
  std::vector<std::string> m = wrapper_target_mismatches(w, d);
  REQUIRE(m.size() == 1);
  CHECK(has(m, "cluster_size 2: the device has no cluster launch"));

  w = test::sample_wrapper();
  d = matching(w);
  w.launch.dynamic_smem_bytes = static_cast<uint32_t>(d.smem_per_block_optin + 1);
  d.max_threads_per_block = 64;
  m = wrapper_target_mismatches(w, d);
  CHECK(has(m, "dynamic_smem_bytes: " + std::to_string(d.smem_per_block_optin + 1)));
  REQUIRE(w.launch.block3() == std::array<uint32_t, 3>{128, 1, 1});
  CHECK(has(m, "block_dim: 128 threads, the device allows 64 per block"));
  CHECK(m.size() == 2);
}
