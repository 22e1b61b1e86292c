// The structural checks of wrapper programs (check_wrapper): queue and barrier-init ranges, record
// sizes, comm kinds, the launch against the target snapshot, TMA specs; each refusal with its code
// and JSON pointer. Package arrays given by file are read through the VM's init sources.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "wrapper/wrapper.hpp"

#include "sample.hpp"

using namespace amk;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

WrapperSummary check(const json& j, const fs::path& dir = test::kWrapperSampleDir) {
  return check_wrapper(parse_json_wrapper(j.dump(), dir));
}

template <typename T>
std::string b64(std::initializer_list<T> values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  size_t i = 0;
  for (T v : values) std::memcpy(bytes.data() + sizeof(T) * i++, &v, sizeof(T));
  return base64_encode(bytes);
}

json i32_array(std::initializer_list<int32_t> values) {
  return {{"dtype", "i32"}, {"count", values.size()}, {"data", b64<int32_t>(values)}};
}

// check_wrapper on `j` fails with `code` at `where` (the file itself loads).
void check_refuses(const json& j, const std::string& code, const std::string& where) {
  const WrapperProgram w = parse_json_wrapper(j.dump(), test::kWrapperSampleDir);
  try {
    (void)check_wrapper(w);
    FAIL("passed; expected " << code << " at " << where);
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == code, std::string(e.what()));
    CHECK_MESSAGE(e.where() == where, std::string(e.what()));
    CHECK(e.exit_code() == ExitCode::invalid_program);
  }
}

}  // namespace

TEST_CASE("the sample wrapper passes the structural checks") {
  const WrapperSummary s = check(test::sample_wrapper_json());
  CHECK(s.instruction_count == 4);
  CHECK(s.slot_count == 4);
  CHECK(s.comm_count == 0);
  CHECK_FALSE(s.flags_need_reset);
  CHECK(s.tensor_args_bytes == 3 * 144);
}

TEST_CASE("queues lie within the instruction records, one entry per queue") {
  json j = test::sample_wrapper_json();
  j["package"]["queue_lengths"] = i32_array({2, 3});
  check_refuses(j, "wrapper.package.queue_range", "/package/queue_offsets");
  j["package"]["queue_lengths"] = i32_array({2, 2});
  j["package"]["queue_offsets"] = i32_array({0, 3});
  check_refuses(j, "wrapper.package.queue_range", "/package/queue_offsets");
  j["package"]["queue_offsets"] = i32_array({0, -1});
  check_refuses(j, "wrapper.package.negative", "/package/queue_offsets");
  j["package"]["queue_offsets"] = i32_array({0});
  check_refuses(j, "wrapper.package.queue_count", "/package/queue_offsets/count");
  j["package"]["queue_offsets"] = i32_array({0, 2});
  j["package"]["queue_lengths"] = i32_array({2, 2, 0});
  check_refuses(j, "wrapper.package.queue_count", "/package/queue_lengths/count");
  // i64 offsets and an empty queue are fine.
  j = test::sample_wrapper_json();
  j["package"]["queue_offsets"] = {{"dtype", "i64"}, {"count", 2}, {"data", b64<int64_t>({0, 4})}};
  j["package"]["queue_lengths"] = i32_array({4, 0});
  CHECK(check(j).instruction_count == 4);
}

TEST_CASE("barrier-init ranges lie within barrier_init_indices") {
  json j = test::sample_wrapper_json();
  j["package"]["barrier_init_lengths"] = i32_array({1, 2});
  check_refuses(j, "wrapper.package.barrier_init_range", "/package/barrier_init_offsets");
  j["package"]["barrier_init_lengths"] = i32_array({1});
  check_refuses(j, "wrapper.package.barrier_init_count", "/package/barrier_init_lengths/count");
  j["package"]["barrier_init_offsets"] = i32_array({0});
  check_refuses(j, "wrapper.package.barrier_init_count", "/package/barrier_init_offsets/count");
  // No barrier inits at all is fine.
  j = test::sample_wrapper_json();
  j["package"].erase("barrier_init_offsets");
  j["package"].erase("barrier_init_lengths");
  j["package"].erase("barrier_init_indices");
  CHECK_NOTHROW((void)check(j));
}

TEST_CASE("record sizes divide their arrays") {
  json j = test::sample_wrapper_json();
  j["package"]["instructions"]["record_bytes"] = 24;
  check_refuses(j, "wrapper.package.record_bytes", "/package/instructions/record_bytes");
  j = test::sample_wrapper_json();
  j["package"]["task_coords"]["record_bytes"] = 12;
  check_refuses(j, "wrapper.package.record_bytes", "/package/task_coords/record_bytes");
  j = test::sample_wrapper_json();
  j["package"]["comms"] = {{"dtype", "u8"}, {"count", 40}};
  check_refuses(j, "wrapper.package.record_bytes", "/package/comms/record_bytes");
}

TEST_CASE("flags are reset only when a comm record is an HBM send or receive") {
  const auto comms = [](uint32_t kind) {
    std::vector<std::byte> bytes(2 * sizeof(WrapperCommRecord));
    WrapperCommRecord r{1, 1, 0, 64, 64};
    std::memcpy(bytes.data(), &r, sizeof r);
    r.kind = kind;
    std::memcpy(bytes.data() + sizeof r, &r, sizeof r);
    return json{{"dtype", "u8"}, {"count", bytes.size()}, {"data", base64_encode(bytes)}};
  };
  json j = test::sample_wrapper_json();
  j["package"]["comms"] = comms(2);
  WrapperSummary s = check(j);
  CHECK(s.comm_count == 2);
  CHECK_FALSE(s.flags_need_reset);
  j["package"]["comms"] = comms(kCommKindHbmSend);
  CHECK(check(j).flags_need_reset);
  j["package"]["comms"] = comms(kCommKindHbmRecv);
  CHECK(check(j).flags_need_reset);
}

TEST_CASE("the launch is checked against the target snapshot") {
  json j = test::sample_wrapper_json();
  j["launch"]["dynamic_smem_bytes"] = 232449;
  check_refuses(j, "wrapper.launch.dynamic_smem_bytes", "/launch/dynamic_smem_bytes");
  j = test::sample_wrapper_json();
  j["target"]["cluster_launch"] = false;
  check_refuses(j, "wrapper.launch.cluster_size", "/launch/cluster_size");
  j["launch"]["cluster_size"] = 1;
  CHECK_NOTHROW((void)check(j));
}

TEST_CASE("TMA specs follow cuTensorMapEncodeTiled's rules, located in the wrapper") {
  json j = test::sample_wrapper_json();
  j["tma"][0]["dims"] = {64, 32};  // w is 16 x 64
  check_refuses(j, "verify.tma.bounds", "/tma/0");
}

TEST_CASE("package arrays given by file are read through the VM's init sources") {
  const fs::path dir = fs::path(AMK_BINARY_DIR) / "wrapper_check_files";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(test::kWrapperSampleDir / "kernel.cu", dir / "kernel.cu");
  {
    std::ofstream out(dir / "lengths.bin", std::ios::binary);
    const int32_t v[2] = {2, 7};  // queue 1 runs past the 4 records
    out.write(reinterpret_cast<const char*>(v), sizeof v);
  }
  json j = test::sample_wrapper_json();
  j["package"]["queue_lengths"] = {
      {"dtype", "i32"}, {"count", 2}, {"init", {{"kind", "raw"}, {"path", "lengths.bin"}}}};
  const WrapperProgram w = parse_json_wrapper(j.dump(), dir);
  try {
    (void)check_wrapper(w);
    FAIL("passed a queue past the instruction records");
  } catch (const Error& e) {
    CHECK(e.code() == "wrapper.package.queue_range");
  }
  // A file too short for its count is the init's own error, at the package entry.
  j["package"]["queue_lengths"]["count"] = 3;
  j["package"]["queue_offsets"] = i32_array({0, 2, 2});
  j["launch"]["queues"] = 3;
  j["launch"]["cluster_size"] = 1;
  const WrapperProgram short_file = parse_json_wrapper(j.dump(), dir);
  try {
    (void)check_wrapper(short_file);
    FAIL("read past the end of a data file");
  } catch (const Error& e) {
    CHECK(e.code().rfind("init.", 0) == 0);
    CHECK(e.where().rfind("/package/queue_lengths", 0) == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("schemas/wrapper.md documents every error code the wrapper stage gives") {
  std::ifstream in(fs::path(AMK_SOURCE_DIR) / "schemas" / "wrapper.md");
  std::stringstream doc;
  doc << in.rdbuf();
  REQUIRE_FALSE(doc.str().empty());
  for (const char* code : {"wrapper.unsupported",
                           "wrapper.backend.cpu",
                           "amkb.package",
                           "amkb.source",
                           "wrapper.kernel_name",
                           "wrapper.source",
                           "wrapper.define",
                           "wrapper.fingerprint",
                           "wrapper.launch.queues",
                           "wrapper.launch.block_dim",
                           "wrapper.launch.cluster_size",
                           "wrapper.launch.scheduling_policy",
                           "wrapper.launch.timeout_ms",
                           "wrapper.launch.dynamic_smem_bytes",
                           "wrapper.package.tensor_args",
                           "wrapper.package.dtype",
                           "wrapper.package.size",
                           "wrapper.package.record_bytes",
                           "wrapper.package.data",
                           "wrapper.package.base64",
                           "wrapper.package.queue_count",
                           "wrapper.package.queue_range",
                           "wrapper.package.negative",
                           "wrapper.package.barrier_init_count",
                           "wrapper.package.barrier_init_range",
                           "wrapper.target.arch",
                           "wrapper.target.sm_count",
                           "wrapper.target.compiler_version",
                           "ref.tensor_arg",
                           "limit.source",
                           "limit.defines",
                           "limit.tensor_args",
                           "usage.wrapper.attributes"}) {
    CAPTURE(code);
    CHECK(doc.str().find(std::string("`") + code + "`") != std::string::npos);
  }
}
