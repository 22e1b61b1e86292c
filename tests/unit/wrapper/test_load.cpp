// Wrapper programs (schemas/wrapper.md): the sample loads to the model it describes, the writer
// round-trips it, the kind is told apart from VM programs, and every load-time refusal comes with
// its code and JSON pointer.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/load.hpp"
#include "wrapper/wrapper.hpp"

#include "common/files.hpp"
#include "sample.hpp"

using namespace amk;
using json = nlohmann::json;
namespace fs = std::filesystem;
using amk_test::read_text;

namespace {

WrapperProgram parse(const json& j) {
  return parse_json_wrapper(j.dump(), test::kWrapperSampleDir);
}

// The load of `j` fails with `code` at `where`.
void load_refuses(const json& j, const std::string& code, const std::string& where) {
  try {
    (void)parse(j);
    FAIL("accepted; expected " << code << " at " << where);
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == code, std::string(e.what()));
    CHECK_MESSAGE(e.where() == where, std::string(e.what()));
  }
}

std::string b64_i32(std::initializer_list<int32_t> values) {
  std::vector<std::byte> bytes(values.size() * 4);
  size_t i = 0;
  for (int32_t v : values) std::memcpy(bytes.data() + 4 * i++, &v, 4);
  return base64_encode(bytes);
}

}  // namespace

TEST_CASE("the sample wrapper loads to the model it describes") {
  const WrapperProgram w = load_wrapper_file(test::kWrapperSampleDir / "wrapper.json");
  CHECK(w.name == "sample_dataflow");
  CHECK(w.wrapper.kernel_name == "df_main");
  CHECK(w.wrapper.source_path == "kernel.cu");
  CHECK(w.wrapper.source == read_text(test::kWrapperSampleDir / "kernel.cu"));
  REQUIRE(w.wrapper.defines.size() == 2);
  CHECK(w.wrapper.defines[0] == WrapperDefine{"DF_TILE", std::string("64")});
  CHECK(w.wrapper.defines[1] == WrapperDefine{"DF_FAST", std::nullopt});
  CHECK(w.launch.queues == 2);
  CHECK(w.launch.block3() == std::array<uint32_t, 3>{128, 1, 1});
  CHECK(w.launch.cluster_size == 2);
  CHECK(w.launch.dynamic_smem_bytes == 1024);
  CHECK(w.launch.timeout_ms == 5000);
  const PackageEntry& ins = w.entry(PackageArray::instructions);
  CHECK(ins.present);
  CHECK(ins.bytes() == 64);
  CHECK(ins.records() == 4);
  CHECK(w.entry(PackageArray::task_coords).records() == 4);
  CHECK_FALSE(w.entry(PackageArray::comms).present);
  CHECK(w.entry(PackageArray::slots).buffer.init.kind == InitKind::zeros);
  REQUIRE(w.tensor_args.size() == 3);
  CHECK(w.tensor_args[1].dtype == DType::bf16);
  CHECK(w.tensor_args[2].output);
  REQUIRE(w.tma.size() == 1);
  CHECK(w.tma[0].buffer == 1);
  CHECK(w.target.arch == 90);
  CHECK(w.target.arch_specific);
  CHECK(w.target.cluster_launch);
  CHECK(w.artifact_fingerprint == "artifact:sample_dataflow:1");
  CHECK(fs::path(w.base_dir) == fs::weakly_canonical(test::kWrapperSampleDir));
}

TEST_CASE("a wrapper program round-trips through the canonical writer") {
  const WrapperProgram w = load_wrapper_file(test::kWrapperSampleDir / "wrapper.json");
  const std::string text = wrapper_to_json(w);
  const WrapperProgram again = parse_json_wrapper(text, test::kWrapperSampleDir);
  CHECK(again == w);
  CHECK(wrapper_to_json(again) == text);  // the writer is canonical

  // Inline source and package arrays given as VM inits come back the same way.
  json j = test::sample_wrapper_json();
  j["wrapper"].erase("source_path");
  j["wrapper"]["source"] = "extern \"C\" __global__ void df_main() {}";
  j["package"]["args"] = {
      {"dtype", "f32"}, {"count", 2}, {"init", {{"kind", "constant"}, {"value", 2}}}};
  // An empty array with empty data keeps no contents.
  j["package"]["comms"] = {{"dtype", "u8"}, {"count", 0}, {"data", ""}};
  const WrapperProgram inl = parse(j);
  CHECK(inl.entry(PackageArray::comms).present);
  CHECK(parse_json_wrapper(wrapper_to_json(inl), test::kWrapperSampleDir) == inl);
}

TEST_CASE("wrapper programs are told apart from VM programs") {
  const std::string text = read_text(test::kWrapperSampleDir / "wrapper.json");
  CHECK(is_wrapper_json(text));
  CHECK(is_wrapper_file(test::kWrapperSampleDir / "wrapper.json"));
  CHECK_FALSE(is_wrapper_json(R"({"format": "amk.program", "version": 1})"));
  CHECK_FALSE(is_wrapper_json(R"({"name": {"format": "amk.wrapper"}})"));  // not top level
  CHECK(is_wrapper_json(R"({"name": "x", "format": "amk.wrapper"})"));     // any position
  CHECK_FALSE(is_wrapper_json("not json"));
  CHECK_FALSE(is_wrapper_file(test::kWrapperSampleDir / "no_such_file.json"));

  // The VM loader says what the file is instead of refusing its keys.
  try {
    (void)parse_json_program(text);
    FAIL("the VM loader accepted a wrapper program");
  } catch (const Error& e) {
    CHECK(e.code() == "wrapper.unsupported");
    CHECK(e.where() == "/format");
    CHECK(e.exit_code() == ExitCode::invalid_program);
  }
}

TEST_CASE("load refusals: keys, kernel, source, defines") {
  json j = test::sample_wrapper_json();
  j["kernel"] = "x";
  load_refuses(j, "json.unknown_key", "/kernel");

  j = test::sample_wrapper_json();
  j["launch"]["grid"] = 2;
  load_refuses(j, "json.unknown_key", "/launch/grid");

  j = test::sample_wrapper_json();
  j["format"] = "amk.wrapper2";
  load_refuses(j, "program.format", "/format");

  j = test::sample_wrapper_json();
  j["wrapper"]["kernel_name"] = "df-main";
  load_refuses(j, "wrapper.kernel_name", "/wrapper/kernel_name");

  j = test::sample_wrapper_json();
  j["wrapper"]["source"] = "x";
  load_refuses(j, "wrapper.source", "/wrapper/source_path");

  j = test::sample_wrapper_json();
  j["wrapper"]["source_path"] = "../sample/kernel.cu";
  load_refuses(j, "path.escape", "/wrapper/source_path");
  j["wrapper"]["source_path"] = "/etc/hostname";
  load_refuses(j, "path.escape", "/wrapper/source_path");
  // --allow-outside is for data files; a wrapper's source never leaves the folder.
  try {
    (void)parse_json_wrapper(j.dump(), test::kWrapperSampleDir, LoadOptions{true, false});
    FAIL("accepted a source path outside the folder");
  } catch (const Error& e) {
    CHECK(e.code() == "path.escape");
  }
  j["wrapper"]["source_path"] = "missing.cu";
  load_refuses(j, "io.missing", "/wrapper/source_path");

  for (const char* bad :
       {"-I/usr/include", "DF_TILE=64 -O0", "1X", "A=", "A=-", "A=1.5", "A B", "A=\"s\""}) {
    CAPTURE(bad);
    j = test::sample_wrapper_json();
    j["wrapper"]["defines"] = {bad};
    load_refuses(j, "wrapper.define", "/wrapper/defines/0");
  }
  j = test::sample_wrapper_json();
  j["wrapper"]["defines"] = {"A=1", "B=-2", "C=0x1F", "D=E", "A=3"};
  load_refuses(j, "wrapper.define", "/wrapper/defines/4");
}

TEST_CASE("load refusals: launch") {
  json j = test::sample_wrapper_json();
  j["launch"]["block_dim"] = json::array();
  load_refuses(j, "wrapper.launch.block_dim", "/launch/block_dim");
  j["launch"]["block_dim"] = {1, 1, 1, 1};
  load_refuses(j, "wrapper.launch.block_dim", "/launch/block_dim");
  j["launch"]["block_dim"] = {128, 0};
  load_refuses(j, "wrapper.launch.block_dim", "/launch/block_dim/1");
  j["launch"]["block_dim"] = {64, 32};
  load_refuses(j, "wrapper.launch.block_dim", "/launch/block_dim");
  j["launch"]["block_dim"] = {1, 1, 128};
  load_refuses(j, "wrapper.launch.block_dim", "/launch/block_dim/2");
  j["launch"]["block_dim"] = {32, 32};
  CHECK(parse(j).launch.block3() == std::array<uint32_t, 3>{32, 32, 1});

  j = test::sample_wrapper_json();
  j["launch"]["scheduling_policy"] = "spread";
  load_refuses(j, "wrapper.launch.scheduling_policy", "/launch/scheduling_policy");
  j = test::sample_wrapper_json();
  j["launch"]["cluster_size"] = 3;
  load_refuses(j, "wrapper.launch.cluster_size", "/launch/cluster_size");
  j["launch"]["cluster_size"] = 0;
  load_refuses(j, "wrapper.launch.cluster_size", "/launch/cluster_size");
  j = test::sample_wrapper_json();
  j["launch"]["queues"] = 0;
  load_refuses(j, "wrapper.launch.queues", "/launch/queues");
  j = test::sample_wrapper_json();
  j["launch"]["timeout_ms"] = 0;
  load_refuses(j, "wrapper.launch.timeout_ms", "/launch/timeout_ms");
}

TEST_CASE("load refusals: package arrays") {
  json j = test::sample_wrapper_json();
  j["package"]["tensor_args"] = {{"dtype", "u8"}, {"count", 0}};
  load_refuses(j, "wrapper.package.tensor_args", "/package/tensor_args");
  j = test::sample_wrapper_json();
  j["package"]["extra"] = {{"dtype", "u8"}, {"count", 0}};
  load_refuses(j, "json.unknown_key", "/package/extra");
  j = test::sample_wrapper_json();
  j["package"].erase("queue_lengths");
  load_refuses(j, "json.missing", "/package");
  j = test::sample_wrapper_json();
  j["package"]["instructions"].erase("record_bytes");
  load_refuses(j, "json.missing", "/package/instructions");
  j = test::sample_wrapper_json();
  j["package"]["queue_offsets"]["dtype"] = "f32";
  load_refuses(j, "wrapper.package.dtype", "/package/queue_offsets/dtype");
  j = test::sample_wrapper_json();
  j["package"]["queue_offsets"]["data"] = "AAAA*AAA";
  load_refuses(j, "wrapper.package.base64", "/package/queue_offsets/data");
  j = test::sample_wrapper_json();
  j["package"]["queue_offsets"]["count"] = 3;  // the data holds 2
  load_refuses(j, "wrapper.package.size", "/package/queue_offsets/data");
  j = test::sample_wrapper_json();
  j["package"]["slots"]["data"] = "";
  load_refuses(j, "wrapper.package.data", "/package/slots/init");
  j = test::sample_wrapper_json();
  j["package"]["comms"] = {{"dtype", "u8"}, {"count", 32}, {"record_bytes", 16}};
  load_refuses(j, "wrapper.package.record_bytes", "/package/comms/record_bytes");
  // Inits are read by the VM reader; its errors point into the wrapper file.
  j = test::sample_wrapper_json();
  j["package"]["slots"]["init"] = {{"kind", "zeros"}, {"seed", 1}};
  load_refuses(j, "json.unknown_key", "/package/slots/init/seed");
  j = test::sample_wrapper_json();
  j["package"]["slots"]["init"] = {{"kind", "npy"}, {"path", "../w.npy"}};
  load_refuses(j, "path.escape", "/package/slots/init/path");
}

TEST_CASE("load refusals: tensor arguments, TMA specs, target, JSON") {
  json j = test::sample_wrapper_json();
  j["tensor_args"][0]["dtype"] = "f64";
  load_refuses(j, "buffer.dtype", "/tensor_args/0/dtype");
  j = test::sample_wrapper_json();
  j["tensor_args"][1]["name"] = "x";
  load_refuses(j, "name.duplicate", "/tensor_args/1/name");
  j = test::sample_wrapper_json();
  j["tma"][0]["tensor"] = "nope";
  load_refuses(j, "ref.tensor_arg", "/tma/0/tensor");
  j = test::sample_wrapper_json();
  j["tma"][0]["buffer"] = "w";
  load_refuses(j, "json.unknown_key", "/tma/0/buffer");
  j = test::sample_wrapper_json();
  j["tma"][0]["swizzle"] = "256B";
  load_refuses(j, "tma.swizzle", "/tma/0/swizzle");
  j = test::sample_wrapper_json();
  j["tma"][0]["box"] = {512, 8};
  load_refuses(j, "tma.box", "/tma/0/box/0");
  j = test::sample_wrapper_json();
  j["target"]["arch"] = "sm90";
  load_refuses(j, "wrapper.target.arch", "/target/arch");
  j = test::sample_wrapper_json();
  j["target"].erase("fingerprint");
  load_refuses(j, "json.missing", "/target");
  j = test::sample_wrapper_json();
  j["artifact_fingerprint"] = "has space";
  load_refuses(j, "wrapper.fingerprint", "/artifact_fingerprint");

  try {
    (void)parse_json_wrapper(R"({"format": "amk.wrapper", "launch": {"queues": 1, "queues": 2}})",
                             test::kWrapperSampleDir);
    FAIL("accepted a duplicate key");
  } catch (const Error& e) {
    CHECK(e.code() == "json.duplicate_key");
    CHECK(e.where() == "/launch/queues");
  }
  try {
    (void)parse_json_wrapper(R"({"format": "amk.wrapper",)", test::kWrapperSampleDir);
    FAIL("accepted truncated JSON");
  } catch (const Error& e) {
    CHECK(e.code() == "json.syntax");
  }
}

TEST_CASE("base64 is strict RFC 4648") {
  std::vector<std::byte> bytes;
  for (int n = 0; n < 8; ++n) {
    CHECK(base64_decode(base64_encode(bytes)) == bytes);
    bytes.push_back(static_cast<std::byte>(0xF0 + n));
  }
  CHECK(base64_encode({std::byte{'M'}, std::byte{'a'}}) == "TWE=");
  CHECK(b64_i32({1}) == "AQAAAA==");
  CHECK_FALSE(base64_decode("abc"));
  CHECK_FALSE(base64_decode("ab=c"));
  CHECK_FALSE(base64_decode("AB=="));  // unused bits set: not canonical
  CHECK_FALSE(base64_decode("AA==AAAA"));
  CHECK_FALSE(base64_decode("AA AA=="));
}
