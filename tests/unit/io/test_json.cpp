// The JSON encoding of program format v1: what parses to what, the canonical writer, round
// trips, the exact code and JSON pointer of every kind of rejection, and program files.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/numeric.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"
#include "common/files.hpp"

using namespace amk;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Every init kind, every built-in op, a custom op, queues by name and by index, TMA specs,
// comments at several depths.
const char* const kRich = R"({
  "format": "amk.program",
  "version": 1,
  "_comment": "ignored",
  "name": "rich",
  "description": "every feature of format v1",
  "target": {"min_arch": "sm_90a", "features": ["tma", "cooperative"], "smem_per_block": 1024},
  "launch": {"mode": "cooperative", "grid": 2, "block": 128, "cluster": [1],
             "dynamic_smem": 4096, "timeout_ms": 5000},
  "buffers": [
    {"name": "x", "dtype": "f32", "shape": [64],
     "init": {"kind": "random", "seed": 1, "distribution": "uniform", "low": -2, "high": 2}},
    {"name": "n", "dtype": "f16", "shape": [64],
     "init": {"kind": "random", "seed": 7, "distribution": "normal", "mean": 0.5, "std": 2}},
    {"name": "w", "dtype": "f32", "shape": [16, 64], "init": {"kind": "npy", "path": "data/w.npy"}},
    {"name": "rb", "dtype": "bf16", "shape": [16],
     "init": {"kind": "raw", "path": "data/b.bin", "offset": 128}},
    {"name": "st", "dtype": "f32", "shape": [8, 16],
     "init": {"kind": "safetensors", "path": "model.safetensors", "tensor": "layers.0.w"}},
    {"name": "c", "dtype": "f32", "shape": [16], "init": {"kind": "constant", "value": 0.25}},
    {"name": "ids", "dtype": "i32", "shape": [4], "init": {"kind": "values", "values": [0, 3, 7, -2]}},
    {"name": "big", "dtype": "i64", "shape": [3],
     "init": {"kind": "values", "values": [9007199254740993, -9223372036854775808, 9223372036854775807]}},
    {"name": "h", "dtype": "f16", "shape": [2, 2], "init": {"kind": "values", "values": [0.1, -65504, 1e-7, 3]}},
    {"name": "bh", "dtype": "bf16", "shape": [2], "init": {"kind": "values", "values": [1.5, -3.3895313892515355e38]}},
    {"name": "u", "dtype": "u8", "shape": [3], "init": {"kind": "values", "values": [0, 255, 7.0]}},
    {"name": "uu", "dtype": "u32", "shape": [2], "init": {"kind": "values", "values": [4294967295, 0]}},
    {"name": "fv", "dtype": "f32", "shape": [3], "init": {"kind": "values", "values": [0.1, 1e-45, 3.4028234663852886e38]}},
    {"name": "s", "dtype": "f32", "shape": [], "init": {"kind": "zeros", "_why": "scalar"}},
    {"name": "y", "dtype": "f32", "shape": [16], "output": true},
    {"name": "idx", "dtype": "u32", "shape": [1], "output": true},
    {"name": "emb", "dtype": "f32", "shape": [4, 8], "output": true},
    {"name": "table", "dtype": "f32", "shape": [8, 8], "init": {"kind": "random"}}
  ],
  "counters": ["c0", "c1", "c2"],
  "custom_ops": [
    {"name": "my_op", "operands": ["a", "out"], "params": ["k", "alpha", "neg"],
     "source": "__device__ void my_op() {}\n"}
  ],
  "instructions": [
    {"name": "start", "op": "nop", "signals": [{"counter": "c0"}]},
    {"op": "copy", "operands": {"x": "c", "y": {"buffer": "y"}}, "waits": [{"counter": "c0", "value": 1}]},
    {"op": "fill", "operands": {"y": {"buffer": "y", "offset": 8, "extent": 8}}, "params": {"value": 1.5}},
    {"op": "add", "operands": {"a": "c", "b": "y", "y": "y"}},
    {"op": "mul", "operands": {"a": "c", "b": "y", "y": "y"}},
    {"op": "scale", "operands": {"x": "y", "y": "y"}, "params": {"alpha": 0.1, "_note": "x"}},
    {"op": "silu_mul", "operands": {"gate": "c", "up": "y", "y": "y"}},
    {"op": "rmsnorm", "operands": {"x": "x", "weight": {"buffer": "x", "offset": 32}, "y": "x"}},
    {"op": "softmax", "operands": {"x": "c", "y": "y"}, "params": {"cols": 4, "scale": 0.5}},
    {"name": "g0", "op": "gemv", "operands": {"w": "w", "x": "x", "y": "y", "residual": "c"},
     "signals": [{"counter": "c1", "add": 2}, {"counter": "c2", "add": 1}]},
    {"name": "g1", "op": "gemv", "operands": {"w": {"buffer": "w", "offset": 0, "extent": 512}, "x": "x",
     "y": {"buffer": "y", "offset": 0, "extent": 8}, "_residual": "left out"},
     "waits": [{"counter": "c1", "value": 2}, {"counter": "c2", "value": 1}]},
    {"op": "argmax", "operands": {"x": "y", "index": "idx"}},
    {"op": "embedding", "operands": {"table": "table", "ids": "ids", "y": "emb"}},
    {"name": "mine", "op": "my_op", "operands": {"a": "x", "out": "y"},
     "params": {"k": 3, "alpha": 0.5, "neg": -1}}
  ],
  "queues": [["start", 1, 2, 3, 4, 5, 6, "g0"], [7, 8, "g1", 11, 12, "mine"]],
  "tma": [
    {"name": "tw", "buffer": "w", "offset": 64, "dims": [64, 15], "strides": [256], "box": [64, 8],
     "element_strides": [1, 1], "swizzle": "128B", "interleave": "none", "l2_promotion": "256B",
     "oob_fill": "nan"},
    {"name": "tx", "buffer": "x", "dims": [64], "box": [32]}
  ]
})";

LoadOptions trusted() {
  LoadOptions o;
  o.trust_custom_ops = true;
  return o;
}

Program parse_rich() { return parse_json_program(kRich, trusted()); }

struct Failure {
  std::string code;
  std::string where;
  std::string message;
  ErrorKind kind = ErrorKind::internal;
};

// Runs f and returns the Error it throws (or a failure marker when it throws nothing or
// something else, which makes the CHECKs below fail with a readable value).
template <typename F>
Failure catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.where(), e.message(), e.kind()};
  } catch (const std::exception& e) {
    return {"<foreign exception>", "", e.what()};
  }
  return {"<no error>", "", ""};
}

Failure parse_failure(const std::string& text, const LoadOptions& options = trusted()) {
  return catch_error([&] { (void)parse_json_program(text, options); });
}

// The rich program with one edit applied at a JSON pointer.
std::string with(const std::string& pointer, const json& value) {
  json doc = json::parse(kRich);
  doc[json::json_pointer(pointer)] = value;
  return doc.dump();
}

std::string without(const std::string& pointer) {
  json doc = json::parse(kRich);
  const json::json_pointer p(pointer);
  json& parent = doc[p.parent_pointer()];
  if (parent.is_array())
    parent.erase(static_cast<size_t>(std::stoul(p.back())));
  else
    parent.erase(p.back());
  return doc.dump();
}

// A minimal valid program with the given extra top-level members.
std::string minimal(const json& extra = json::object()) {
  json doc = {{"format", "amk.program"},
              {"version", 1},
              {"name", "m"},
              {"buffers", json::array({{{"name", "b"}, {"dtype", "f32"}, {"shape", {4}}}})},
              {"instructions", json::array({{{"op", "nop"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) doc[it.key()] = it.value();
  return doc.dump();
}

}  // namespace

TEST_CASE("the rich program parses to the expected model") {
  const Program p = parse_rich();
  CHECK(p.name == "rich");
  CHECK(p.description == "every feature of format v1");
  CHECK(p.version == 1);
  CHECK(p.target.min_arch == 90);
  CHECK(p.target.features == (kFeatureTma | kFeatureCooperative));
  CHECK(p.target.smem_per_block == 1024);
  CHECK(p.launch.mode == LaunchMode::cooperative);
  CHECK(p.launch.grid == 2);
  CHECK(p.launch.block == 128);
  CHECK(p.launch.cluster[0] == 1);
  CHECK(p.launch.cluster[1] == 1);
  CHECK(p.launch.cluster[2] == 1);
  CHECK(p.launch.dynamic_smem == 4096);
  CHECK(p.launch.timeout_ms == 5000);

  REQUIRE(p.buffers.size() == 18);
  const Buffer& x = p.buffers[0];
  CHECK(x.init.kind == InitKind::random);
  CHECK(x.init.distribution == Distribution::uniform);
  CHECK(x.init.seed == 1);
  CHECK(x.init.a == -2.0);
  CHECK(x.init.b == 2.0);
  const Buffer& n = p.buffers[1];
  CHECK(n.dtype == DType::f16);
  CHECK(n.init.distribution == Distribution::normal);
  CHECK(n.init.a == 0.5);
  CHECK(n.init.b == 2.0);
  CHECK(p.buffers[2].init.kind == InitKind::npy);
  CHECK(p.buffers[2].init.path == "data/w.npy");
  CHECK(p.buffers[2].shape == std::vector<uint64_t>{16, 64});
  CHECK(p.buffers[3].init.kind == InitKind::raw);
  CHECK(p.buffers[3].init.offset == 128);
  CHECK(p.buffers[4].init.kind == InitKind::safetensors);
  CHECK(p.buffers[4].init.tensor == "layers.0.w");
  CHECK(p.buffers[5].init.kind == InitKind::constant);
  CHECK(p.buffers[5].init.constant == 0.25);

  const Buffer& ids = p.buffers[6];
  REQUIRE(ids.init.data.size() == 16);
  CHECK(load_element(ids.init.data.data(), DType::i32, 3) == -2.0);
  const Buffer& big = p.buffers[7];
  REQUIRE(big.init.data.size() == 24);
  int64_t v[3];
  std::memcpy(v, big.init.data.data(), 24);
  CHECK(v[0] == 9007199254740993LL);  // not representable as a double: read exactly
  CHECK(v[1] == INT64_MIN);
  CHECK(v[2] == INT64_MAX);
  const Buffer& h = p.buffers[8];
  REQUIRE(h.init.data.size() == 8);
  CHECK(load_element(h.init.data.data(), DType::f16, 0) == doctest::Approx(0.1).epsilon(1e-3));
  CHECK(load_element(h.init.data.data(), DType::f16, 1) == -65504.0);
  CHECK(load_element(h.init.data.data(), DType::f16, 3) == 3.0);
  CHECK(load_element(p.buffers[10].init.data.data(), DType::u8, 1) == 255.0);
  CHECK(load_element(p.buffers[11].init.data.data(), DType::u32, 0) == 4294967295.0);
  CHECK(p.buffers[13].shape.empty());
  CHECK(p.buffers[13].elements() == 1);
  CHECK(p.buffers[13].init.kind == InitKind::zeros);
  CHECK(p.buffers[14].output);
  CHECK_FALSE(p.buffers[0].output);
  CHECK(p.buffers[17].init.kind == InitKind::random);
  CHECK(p.buffers[17].init.a == -1.0);
  CHECK(p.buffers[17].init.b == 1.0);
  CHECK(p.buffers[17].init.seed == 0);

  REQUIRE(p.counters.size() == 3);
  CHECK(p.counters[2].name == "c2");

  REQUIRE(p.instructions.size() == 14);
  for (size_t i = 0; i + 1 < p.instructions.size(); ++i)
    CHECK(p.instructions[i].op == static_cast<uint16_t>(builtin_ops()[i < 10 ? i : i - 1].id));
  CHECK(p.instructions[0].name == "start");
  CHECK(p.instructions[0].operands.empty());
  REQUIRE(p.instructions[0].signals.size() == 1);
  CHECK(p.instructions[0].signals[0].add == 1);  // default

  const Instruction& copy = p.instructions[1];
  CHECK(copy.name.empty());
  REQUIRE(copy.operands.size() == 2);
  CHECK(copy.operands[0] == Operand{5, 0, 16});
  CHECK(copy.operands[1] == Operand{14, 0, 16});  // object without offset/extent: whole buffer
  REQUIRE(copy.waits.size() == 1);
  CHECK(copy.waits[0] == Wait{0, 1});

  const Instruction& fill = p.instructions[2];
  CHECK(fill.operands[0] == Operand{14, 8, 8});
  REQUIRE(fill.params.size() == 1);
  CHECK(fill.params[0] == f32_bits(1.5f));
  CHECK(p.instructions[5].params[0] == f32_bits(0.1f));
  const Instruction& rms = p.instructions[7];
  CHECK(rms.operands[1] == Operand{0, 32, 32});  // extent defaults to the rest of the buffer
  CHECK(rms.params[0] == f32_bits(1e-5f));       // default param
  const Instruction& softmax = p.instructions[8];
  CHECK(softmax.params == std::vector<uint32_t>{4, f32_bits(0.5f)});

  const Instruction& g0 = p.instructions[9];
  REQUIRE(g0.operands.size() == 6);
  CHECK(g0.operands[0] == Operand{2, 0, 1024});
  CHECK(g0.operands[3] == Operand{5, 0, 16});
  CHECK(g0.signals == std::vector<Signal>{{1, 2}, {2, 1}});
  const Instruction& g1 = p.instructions[10];
  REQUIRE(g1.operands.size() == 6);
  for (size_t s : {3, 4, 5})  // optional slots (residual, norm, w2) left out
    CHECK(g1.operands[s] == Operand{AMK_NO_BUFFER, 0, 0});
  CHECK(g1.params ==
        std::vector<uint32_t>{f32_bits(1e-5f), 0, 0});  // eps, head_dim, heads: defaults
  CHECK(g1.operands[0] == Operand{2, 0, 512});
  CHECK(g1.waits == std::vector<Wait>{{1, 2}, {2, 1}});

  const Instruction& mine = p.instructions[13];
  CHECK(mine.op == kCustomOpBase);
  CHECK(mine.operands == std::vector<Operand>{{0, 0, 64}, {14, 0, 16}});
  CHECK(mine.params == std::vector<uint32_t>{3, f32_bits(0.5f), 0xFFFFFFFFu});

  REQUIRE(p.queues.has_value());
  CHECK(*p.queues ==
        std::vector<std::vector<uint32_t>>{{0, 1, 2, 3, 4, 5, 6, 9}, {7, 8, 10, 11, 12, 13}});

  REQUIRE(p.tma.size() == 2);
  const TmaSpec& tw = p.tma[0];
  CHECK(tw.buffer == 2);
  CHECK(tw.offset == 64);
  CHECK(tw.dims == std::vector<uint64_t>{64, 15});
  CHECK(tw.strides == std::vector<uint64_t>{256});
  CHECK(tw.box == std::vector<uint32_t>{64, 8});
  CHECK(tw.element_strides == std::vector<uint32_t>{1, 1});
  CHECK(tw.swizzle == TmaSwizzle::b128);
  CHECK(tw.interleave == TmaInterleave::none);
  CHECK(tw.l2_promotion == TmaL2Promotion::b256);
  CHECK(tw.oob_fill == TmaOobFill::nan);
  const TmaSpec& tx = p.tma[1];
  CHECK(tx.strides.empty());
  CHECK(tx.element_strides.empty());
  CHECK(tx.swizzle == TmaSwizzle::none);
  CHECK(tx.oob_fill == TmaOobFill::zeros);

  REQUIRE(p.custom_ops.size() == 1);
  CHECK(p.custom_ops[0].operands == std::vector<std::string>{"a", "out"});
  CHECK(p.custom_ops[0].source == "__device__ void my_op() {}\n");
}

TEST_CASE("defaults of a minimal program") {
  const Program p = parse_json_program(minimal());
  CHECK(p.target == Target{});
  CHECK(p.launch == Launch{});
  CHECK(p.launch.grid == 0);
  CHECK_FALSE(p.queues.has_value());
  CHECK(p.counters.empty());
  CHECK(p.tma.empty());
  CHECK(p.custom_ops.empty());
  CHECK(p.description.empty());
  CHECK(p.buffers[0].init == BufferInit{});
  CHECK_FALSE(parse_json_program(minimal({{"queues", nullptr}})).queues.has_value());
  const Program auto_grid = parse_json_program(
      minimal({{"launch", {{"grid", "auto"}, {"mode", "cluster"}, {"cluster", {2, 2}}}},
               {"target", {{"min_arch", "sm_100"}}}}));
  CHECK(auto_grid.launch.grid == 0);
  CHECK(auto_grid.launch.mode == LaunchMode::cluster);
  CHECK(auto_grid.launch.cluster[0] == 2);
  CHECK(auto_grid.launch.cluster[1] == 2);
  CHECK(auto_grid.launch.cluster[2] == 1);
  CHECK(auto_grid.target.min_arch == 100);
  CHECK(parse_json_program(minimal({{"target", {{"min_arch", 0}}}})).target.min_arch == 0);
  // Integral numbers written as floats are accepted where integers are expected.
  CHECK(parse_json_program(minimal({{"launch", {{"block", 6.4e1}}}})).launch.block == 64);
}

TEST_CASE("round trip: parse(program_to_json(p)) == p, and the text is a fixed point") {
  const Program p = parse_rich();
  const std::string text = program_to_json(p);
  const Program back = parse_json_program(text, trusted());
  CHECK(back == p);
  CHECK(program_to_json(back) == text);

  // Spot checks of the canonical form.
  CHECK(text.rfind("{\n  \"format\": \"amk.program\",\n  \"version\": 1,\n", 0) == 0);
  CHECK(text.find("\"grid\": 2") != std::string::npos);
  CHECK(text.find("\"queues\": [\n    [0, 1, 2, 3, 4, 5, 6, 9],\n") != std::string::npos);
  CHECK(text.find("\"_comment\"") == std::string::npos);
  CHECK(text.find("\"x\": {\"buffer\": \"c\", \"offset\": 0, \"extent\": 16}") !=
        std::string::npos);
  CHECK(text.find("\"eps\": 1e-05") != std::string::npos);  // defaults are written
  CHECK(text.find("\"alpha\": 0.1") != std::string::npos);  // shortest f32 text
  CHECK(text.find("\"residual\"") != std::string::npos);    // g0's
  CHECK(text.find("9007199254740993") != std::string::npos);
  CHECK(text.find("\"min_arch\": \"sm_90\"") != std::string::npos);
  CHECK(text.find("\"params\": {\"k\": 3, \"alpha\": 1056964608, \"neg\": 4294967295}") !=
        std::string::npos);  // custom params: raw words

  // The file for the schema check (scripts validate it with python3-jsonschema).
  std::ofstream(fs::path(AMK_BINARY_DIR) / "test_io_json_rich.json") << text;

  const Program m = parse_json_program(minimal());
  CHECK(parse_json_program(program_to_json(m)) == m);
  CHECK(program_to_json(m).find("\"queues\": null") != std::string::npos);
  CHECK(program_to_json(m).find("\"grid\": \"auto\"") != std::string::npos);
}

TEST_CASE("round trip of values at the edges of each dtype") {
  json doc = json::parse(minimal());
  doc["buffers"] = json::array();
  const std::vector<std::pair<std::string, json>> cases = {
      {"f32", {0.1, -0.0, 1e-45, 3.4028234663852886e38, -1.17549435e-38, 16777217}},
      {"f16", {65504, -6e-8, 0.333, 1, 2049}},
      {"bf16", {3.3895313892515355e38, 1.00390625, -1e-40, 0.1}},
      {"i32", {-2147483648LL, 2147483647, 0}},
      {"u32", {0, 4294967295ULL, 17}},
      {"i64", {INT64_MIN, INT64_MAX, -9007199254740993LL, 1e3}},
      {"u8", {0, 255, 128}},
  };
  int k = 0;
  for (const auto& [dtype, values] : cases)
    doc["buffers"].push_back({{"name", "b" + std::to_string(k++)},
                              {"dtype", dtype},
                              {"shape", {values.size()}},
                              {"init", {{"kind", "values"}, {"values", values}}}});
  const Program p = parse_json_program(doc.dump());
  const Program back = parse_json_program(program_to_json(p));
  CHECK(back == p);
  for (size_t b = 0; b < p.buffers.size(); ++b)
    CHECK(back.buffers[b].init.data == p.buffers[b].init.data);
  CHECK(load_element(p.buffers[5].init.data.data(), DType::i64, 3) == 1000.0);
}

TEST_CASE("comments: keys starting with _ are ignored anywhere") {
  json doc = json::parse(kRich);
  doc["_top"] = {{"anything", {1, 2}}};
  doc["launch"]["_x"] = 1;
  doc["buffers"][0]["_x"] = "y";
  doc["buffers"][0]["init"]["_x"] = nullptr;
  doc["instructions"][9]["_x"] = 3;
  doc["instructions"][9]["operands"]["_x"] = "not a buffer";
  doc["instructions"][10]["operands"]["w"]["_x"] = 1;
  doc["instructions"][9]["signals"][0]["_x"] = 1;
  doc["instructions"][8]["params"]["_x"] = "z";
  doc["tma"][0]["_x"] = 1;
  doc["custom_ops"][0]["_x"] = 1;
  doc["target"]["_x"] = 1;
  CHECK(parse_json_program(doc.dump(), trusted()) == parse_rich());
}

struct BadCase {
  std::string text;
  std::string code;
  std::string where;
};

TEST_CASE("rejections carry the exact code and JSON pointer") {
  const json big_shape = {4294967296ULL, 4294967296ULL};
  const std::vector<BadCase> cases = {
      // top level
      {"[]", "json.type", "/"},
      {"3", "json.type", "/"},
      {with("/extra", 1), "json.unknown_key", "/extra"},
      {with("/format", "amk.prog"), "program.format", "/format"},
      {with("/format", 1), "json.type", "/format"},
      {without("/format"), "json.missing", "/"},
      {with("/version", 2), "program.version", "/version"},
      {with("/version", "1"), "json.type", "/version"},
      {with("/version", 1.5), "json.range", "/version"},
      {without("/name"), "json.missing", "/"},
      {with("/name", ""), "name.invalid", "/name"},
      {with("/name", "a b"), "name.invalid", "/name"},
      {with("/name", std::string(257, 'a')), "name.invalid", "/name"},
      {with("/description", 5), "json.type", "/description"},
      {without("/buffers"), "json.missing", "/"},
      {without("/instructions"), "json.missing", "/"},
      {with("/buffers", json::object()), "json.type", "/buffers"},
      // target
      {with("/target/min_arch", "sm90"), "target.min_arch", "/target/min_arch"},
      {with("/target/min_arch", "sm_9"), "target.min_arch", "/target/min_arch"},
      {with("/target/min_arch", "sm_90b"), "target.min_arch", "/target/min_arch"},
      {with("/target/min_arch", 90), "target.min_arch", "/target/min_arch"},
      {with("/target/min_arch", true), "json.type", "/target/min_arch"},
      {with("/target/features/1", "fast"), "target.features", "/target/features/1"},
      {with("/target/features/1", "tma"), "target.features", "/target/features/1"},
      {with("/target/smem_per_block", -1), "json.range", "/target/smem_per_block"},
      {with("/target/smem_per_block", 4294967296ULL), "json.range", "/target/smem_per_block"},
      {with("/target/bogus", 1), "json.unknown_key", "/target/bogus"},
      // launch
      {with("/launch/mode", "graph"), "launch.mode", "/launch/mode"},
      {with("/launch/grid", 0), "launch.grid", "/launch/grid"},
      {with("/launch/grid", "all"), "launch.grid", "/launch/grid"},
      {with("/launch/grid", -3), "json.range", "/launch/grid"},
      {with("/launch/grid", 2.5), "json.range", "/launch/grid"},
      {with("/launch/grid", 65537), "launch.grid", "/launch/grid"},  // past kMaxQueues
      {with("/launch/grid", 4294967295ULL), "launch.grid", "/launch/grid"},
      {with("/launch/grid", 18446744073709551615ULL), "launch.grid", "/launch/grid"},
      {with("/launch/block", 100), "launch.block", "/launch/block"},
      {with("/launch/block", 2048), "launch.block", "/launch/block"},
      {with("/launch/cluster", json::array()), "launch.cluster", "/launch/cluster"},
      {with("/launch/cluster", {1, 1, 1, 1}), "launch.cluster", "/launch/cluster"},
      {with("/launch/cluster", {2, 0}), "launch.cluster", "/launch/cluster/1"},
      {with("/launch/timeout_ms", 0), "launch.timeout_ms", "/launch/timeout_ms"},
      {with("/launch/timeout_ms", 1e300), "json.range", "/launch/timeout_ms"},
      {with("/launch/passes", 0), "launch.passes", "/launch/passes"},
      {with("/launch/passes", 16777216), "json.range", "/launch/passes"},
      {with("/launch/passes", "2"), "json.type", "/launch/passes"},
      // buffers
      {with("/buffers/1/name", "x"), "name.duplicate", "/buffers/1/name"},
      {without("/buffers/1/dtype"), "json.missing", "/buffers/1"},
      {with("/buffers/1/dtype", "f64"), "buffer.dtype", "/buffers/1/dtype"},
      {without("/buffers/1/shape"), "json.missing", "/buffers/1"},
      {with("/buffers/1/shape", {1, 2, 3, 4, 5, 6, 7, 8, 9}), "buffer.shape", "/buffers/1/shape"},
      {with("/buffers/1/shape/0", 0), "buffer.shape", "/buffers/1/shape/0"},
      {with("/buffers/1/shape/0", -4), "json.range", "/buffers/1/shape/0"},
      {with("/buffers/1/shape/0", 6.5), "json.range", "/buffers/1/shape/0"},
      {with("/buffers/1/shape/0", "4"), "json.type", "/buffers/1/shape/0"},
      {with("/buffers/1/shape", big_shape), "buffer.size", "/buffers/1/shape"},
      {with("/buffers/1/shape", {4294967296ULL, 4294967297ULL}), "buffer.size", "/buffers/1/shape"},
      {with("/buffers/1/shape", {uint64_t{1} << 40}), "buffer.size", "/buffers/1/shape"},
      {with("/buffers/1/output", 1), "json.type", "/buffers/1/output"},
      {with("/buffers/1/colour", 1), "json.unknown_key", "/buffers/1/colour"},
      // init
      {with("/buffers/0/init", "zeros"), "json.type", "/buffers/0/init"},
      {with("/buffers/0/init", json::object()), "json.missing", "/buffers/0/init"},
      {with("/buffers/0/init/kind", "ones"), "init.kind", "/buffers/0/init/kind"},
      {with("/buffers/0/init/mean", 0), "json.unknown_key", "/buffers/0/init/mean"},
      {with("/buffers/0/init/distribution", "poisson"), "init.random",
       "/buffers/0/init/distribution"},
      {with("/buffers/0/init/high", -2), "init.random", "/buffers/0/init/high"},
      {with("/buffers/1/init/std", -1), "init.random", "/buffers/1/init/std"},
      {with("/buffers/1/init/low", 0), "json.unknown_key", "/buffers/1/init/low"},
      {with("/buffers/0/init/seed", -1), "json.range", "/buffers/0/init/seed"},
      {without("/buffers/5/init/value"), "json.missing", "/buffers/5/init"},
      {with("/buffers/5/init/value", "1"), "json.type", "/buffers/5/init/value"},
      {with("/buffers/5/init/value", 1e39), "init.constant", "/buffers/5/init/value"},
      {with("/buffers/6/init/value", 1), "json.unknown_key", "/buffers/6/init/value"},
      {with("/buffers/6/init/values", {1, 2, 3}), "init.values", "/buffers/6/init/values"},
      {with("/buffers/6/init/values/2", 1.5), "init.values", "/buffers/6/init/values/2"},
      {with("/buffers/6/init/values/2", 2147483648LL), "init.values", "/buffers/6/init/values/2"},
      {with("/buffers/6/init/values/2", "7"), "json.type", "/buffers/6/init/values/2"},
      {with("/buffers/6/init/values/2", nullptr), "json.type", "/buffers/6/init/values/2"},
      {with("/buffers/7/init/values/0", 9223372036854775808ULL), "init.values",
       "/buffers/7/init/values/0"},
      {with("/buffers/8/init/values/0", 65520), "init.values", "/buffers/8/init/values/0"},
      {with("/buffers/10/init/values/1", 256), "init.values", "/buffers/10/init/values/1"},
      {with("/buffers/10/init/values/1", -1), "init.values", "/buffers/10/init/values/1"},
      {with("/buffers/12/init/values/2", 3.5e38), "init.values", "/buffers/12/init/values/2"},
      {without("/buffers/6/init/values"), "json.missing", "/buffers/6/init"},
      {with("/buffers/2/init/path", ""), "init.path", "/buffers/2/init/path"},
      {with("/buffers/2/init/path", 7), "json.type", "/buffers/2/init/path"},
      {with("/buffers/3/init/offset", -1), "json.range", "/buffers/3/init/offset"},
      {without("/buffers/4/init/tensor"), "json.missing", "/buffers/4/init"},
      {with("/buffers/4/init/tensor", ""), "init.tensor", "/buffers/4/init/tensor"},
      {with("/buffers/2/init/tensor", "t"), "json.unknown_key", "/buffers/2/init/tensor"},
      // counters
      {with("/counters/2", "c0"), "name.duplicate", "/counters/2"},
      {with("/counters/1", 3), "json.type", "/counters/1"},
      {with("/counters/1", "bad name"), "name.invalid", "/counters/1"},
      // custom ops
      {with("/custom_ops/0/name", "gemv"), "custom.name", "/custom_ops/0/name"},
      {with("/custom_ops/0/name", "gemv_t"), "custom.name", "/custom_ops/0/name"},
      {with("/custom_ops/0/source", ""), "custom.source", "/custom_ops/0/source"},
      {without("/custom_ops/0/source"), "json.missing", "/custom_ops/0"},
      {with("/custom_ops/0/operands", {"a", "b", "c", "d", "e", "f", "g", "h"}), "custom.operands",
       "/custom_ops/0/operands"},
      {with("/custom_ops/0/operands/1", "a"), "name.duplicate", "/custom_ops/0/operands/1"},
      {with("/custom_ops/0/operands/1", "_a"), "name.invalid", "/custom_ops/0/operands/1"},
      {with("/custom_ops/0/params",
            json(std::vector<std::string>{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k",
                                          "l", "m", "n", "o", "p", "q"})),
       "custom.params", "/custom_ops/0/params"},
      {with("/custom_ops/1", {{"name", "my_op"}, {"source", "x"}}), "name.duplicate",
       "/custom_ops/1/name"},
      {with("/custom_ops/0/source", std::string(kMaxCustomSourceBytes + 1, 'x')),
       "limit.custom_source", "/custom_ops/0/source"},
      // instructions
      {without("/instructions/3/op"), "json.missing", "/instructions/3"},
      {with("/instructions/3/op", "sub"), "instruction.op", "/instructions/3/op"},
      {with("/instructions/3/op", "gemv_splitk"), "op.retired", "/instructions/3/op"},
      {with("/instructions/3/op", "attention_combine_splitk"), "op.retired", "/instructions/3/op"},
      {with("/instructions/3/op", "gemv_t"), "op.retired", "/instructions/3/op"},
      {with("/instructions/3/op", 3), "json.type", "/instructions/3/op"},
      {with("/instructions/3/name", "g0"), "name.duplicate", "/instructions/9/name"},
      {with("/instructions/3/name", "g 0"), "name.invalid", "/instructions/3/name"},
      {with("/instructions/3/flags", 0), "json.unknown_key", "/instructions/3/flags"},
      {without("/instructions/3/operands/b"), "instruction.operand", "/instructions/3/operands"},
      {without("/instructions/3/operands"), "instruction.operand", "/instructions/3"},
      {with("/instructions/3/operands/c", "c"), "instruction.operand",
       "/instructions/3/operands/c"},
      {with("/instructions/3/operands", {1}), "json.type", "/instructions/3/operands"},
      {with("/instructions/3/operands/b", "nope"), "ref.buffer", "/instructions/3/operands/b"},
      {with("/instructions/3/operands/b", 4), "json.type", "/instructions/3/operands/b"},
      {with("/instructions/10/operands/w/buffer", "nope"), "ref.buffer",
       "/instructions/10/operands/w/buffer"},
      {without("/instructions/10/operands/w/buffer"), "json.missing",
       "/instructions/10/operands/w"},
      {with("/instructions/10/operands/w/extent", 4294967296ULL), "instruction.operand",
       "/instructions/10/operands/w/extent"},
      {with("/instructions/10/operands/w/extent", -1), "json.range",
       "/instructions/10/operands/w/extent"},
      {with("/instructions/10/operands/w/offset", 18446744073709551615ULL), "instruction.operand",
       "/instructions/10/operands/w/extent"},
      {with("/instructions/7/operands/weight/offset", 65), "instruction.operand",
       "/instructions/7/operands/weight/offset"},
      {with("/instructions/10/operands/w/stride", 1), "json.unknown_key",
       "/instructions/10/operands/w/stride"},
      {without("/instructions/2/params/value"), "instruction.param", "/instructions/2/params"},
      {without("/instructions/2/params"), "instruction.param", "/instructions/2"},
      {with("/instructions/2/params/value", 1e39), "instruction.param",
       "/instructions/2/params/value"},
      {with("/instructions/2/params/value", "1"), "json.type", "/instructions/2/params/value"},
      {with("/instructions/2/params/vale", 1), "instruction.param", "/instructions/2/params/vale"},
      {with("/instructions/8/params/cols", -1), "instruction.param", "/instructions/8/params/cols"},
      {with("/instructions/8/params/cols", 1.5), "instruction.param",
       "/instructions/8/params/cols"},
      {with("/instructions/8/params/cols", 4294967296ULL), "instruction.param",
       "/instructions/8/params/cols"},
      {with("/instructions/13/params/k", 4294967296ULL), "instruction.param",
       "/instructions/13/params/k"},
      {with("/instructions/13/params/k", -2147483649LL), "instruction.param",
       "/instructions/13/params/k"},
      {without("/instructions/13/params/k"), "instruction.param", "/instructions/13/params"},
      {without("/instructions/13/operands/out"), "instruction.operand",
       "/instructions/13/operands"},
      {with("/instructions/13/operands/in", "x"), "instruction.operand",
       "/instructions/13/operands/in"},
      {with("/instructions/1/waits/0/counter", "c9"), "ref.counter",
       "/instructions/1/waits/0/counter"},
      {without("/instructions/1/waits/0/value"), "json.missing", "/instructions/1/waits/0"},
      {with("/instructions/1/waits/0/carried", 1), "json.type", "/instructions/1/waits/0/carried"},
      {with("/instructions/1/waits/0/value", 4294967296ULL), "json.range",
       "/instructions/1/waits/0/value"},
      {with("/instructions/1/waits/0/add", 1), "json.unknown_key", "/instructions/1/waits/0/add"},
      {with("/instructions/1/waits", json::array({{{"counter", "c0"}, {"value", 1}},
                                                  {{"counter", "c0"}, {"value", 1}},
                                                  {{"counter", "c0"}, {"value", 1}},
                                                  {{"counter", "c0"}, {"value", 1}},
                                                  {{"counter", "c0"}, {"value", 1}}})),
       "instruction.capacity", "/instructions/1/waits"},
      {with("/instructions/0/signals", json::array({{{"counter", "c0"}},
                                                    {{"counter", "c0"}},
                                                    {{"counter", "c0"}},
                                                    {{"counter", "c0"}},
                                                    {{"counter", "c0"}}})),
       "instruction.capacity", "/instructions/0/signals"},
      {with("/instructions/0/signals/0/counter", 0), "json.type",
       "/instructions/0/signals/0/counter"},
      {with("/instructions/0/signals/0/add", -1), "json.range", "/instructions/0/signals/0/add"},
      {with("/instructions/0/waits", json::object()), "json.type", "/instructions/0/waits"},
      // queues
      {with("/queues", json::array({json::array({0})})), "queue.shape", "/queues"},
      {with("/queues", json::array()), "queue.shape", "/queues"},
      {with("/queues", json::object()), "json.type", "/queues"},
      {with("/queues/1/0", "nope"), "ref.instruction", "/queues/1/0"},
      {with("/queues/1/0", 14), "ref.instruction", "/queues/1/0"},
      {with("/queues/1/0", -1), "json.range", "/queues/1/0"},
      {with("/queues/1/0", true), "json.type", "/queues/1/0"},
      {with("/queues/1/0", "start"), "queue.duplicate", "/queues/1/0"},
      {with("/queues/1/0", 1), "queue.duplicate", "/queues/1/0"},
      {without("/queues/1/5"), "queue.missing", "/queues"},
      {with("/queues/1", "g1"), "json.type", "/queues/1"},
      // tma
      {with("/tma/1/name", "tw"), "name.duplicate", "/tma/1/name"},
      {with("/tma/1/buffer", "nope"), "ref.buffer", "/tma/1/buffer"},
      {with("/tma/1/dims", json::array()), "tma.rank", "/tma/1/dims"},
      {with("/tma/1/dims", {1, 1, 1, 1, 1, 1}), "tma.rank", "/tma/1/dims"},
      {with("/tma/1/dims/0", 0), "tma.dims", "/tma/1/dims/0"},
      {with("/tma/1/dims/0", 4294967297ULL), "tma.dims", "/tma/1/dims/0"},
      {without("/tma/1/box"), "json.missing", "/tma/1"},
      {with("/tma/1/box", {1, 1}), "tma.box", "/tma/1/box"},
      {with("/tma/1/box/0", 257), "tma.box", "/tma/1/box/0"},
      {with("/tma/1/box/0", 0), "tma.box", "/tma/1/box/0"},
      {with("/tma/0/strides", {256, 256}), "tma.strides", "/tma/0/strides"},
      {with("/tma/0/element_strides", {1}), "tma.element_strides", "/tma/0/element_strides"},
      {with("/tma/0/element_strides/1", 9), "tma.element_strides", "/tma/0/element_strides/1"},
      {with("/tma/0/swizzle", "256B"), "tma.swizzle", "/tma/0/swizzle"},
      {with("/tma/0/interleave", "64B"), "tma.interleave", "/tma/0/interleave"},
      {with("/tma/0/l2_promotion", "32B"), "tma.l2_promotion", "/tma/0/l2_promotion"},
      {with("/tma/0/oob_fill", "inf"), "tma.oob_fill", "/tma/0/oob_fill"},
      {with("/tma/0/mode", "tiled"), "json.unknown_key", "/tma/0/mode"},
      {with("/tma/0/swizzle", 128), "json.type", "/tma/0/swizzle"},
  };
  for (const BadCase& c : cases) {
    const Failure f = parse_failure(c.text);
    INFO("expected ", c.code, " at '", c.where, "', got ", f.code, " at '", f.where,
         "': ", f.message);
    CHECK(f.code == c.code);
    CHECK(f.where == c.where);
    CHECK(f.kind == ErrorKind::program);
    CHECK_FALSE(f.message.empty());
    CHECK(f.message.find('\n') == std::string::npos);  // one line
  }
}

TEST_CASE("messages say what was expected and what was found") {
  Failure f = parse_failure(with("/launch/block", 100));
  CHECK(f.message.find("multiple of 32") != std::string::npos);
  CHECK(f.message.find("100") != std::string::npos);
  f = parse_failure(with("/instructions/3/operands/c", "c"));
  CHECK(f.message.find("a, b, y") != std::string::npos);
  f = parse_failure(with("/buffers/1/dtype", "f64"));
  CHECK(f.message.find("\"f64\"") != std::string::npos);
  f = parse_failure(with("/buffers/6/init/values", {1, 2, 3}));
  CHECK(f.message == "expected 4 values (one per element), found 3");
  f = parse_failure(without("/queues/1/5"));
  CHECK(f.message.find("instruction 13 (mine)") != std::string::npos);
  f = parse_failure(with("/instructions/3/op", "gemv_splitk"));
  CHECK(f.message == "op gemv_splitk (id 16) was removed because it measured slower than the "
                     "default layout; use gemv instead");
}

TEST_CASE("JSON pointer tokens are escaped") {
  json doc = json::parse(kRich);
  doc["launch"]["a/b~c"] = 1;
  const Failure f = parse_failure(doc.dump());
  CHECK(f.code == "json.unknown_key");
  CHECK(f.where == "/launch/a~1b~0c");
}

TEST_CASE("syntax errors name the byte; duplicate keys are refused") {
  Failure f = parse_failure("");
  CHECK(f.code == "json.syntax");
  CHECK(f.where == "byte 1");  // nlohmann's parse_error::byte: 1-based
  f = parse_failure("{\"format\": tru}");
  CHECK(f.code == "json.syntax");
  CHECK(f.where == "byte 15");
  CHECK(f.message.find("json.exception") == std::string::npos);
  f = parse_failure("{\"a\": [1, 2,]}");
  CHECK(f.code == "json.syntax");
  CHECK(f.where == "byte 13");
  f = parse_failure(minimal() + " x");
  CHECK(f.code == "json.syntax");
  f = parse_failure("{\"a\": \"\xff\"}");
  CHECK(f.code == "json.syntax");
  f = parse_failure("{\"a\": 1e999}");
  CHECK(f.code == "json.range");
  CHECK(f.where.rfind("byte ", 0) == 0);

  f = parse_failure(R"({"format": "amk.program", "format": "amk.program"})");
  CHECK(f.code == "json.duplicate_key");
  CHECK(f.where == "/format");
  f = parse_failure(R"({"buffers": [{}, {"name": "a", "shape": [], "name": "b"}]})");
  CHECK(f.code == "json.duplicate_key");
  CHECK(f.where == "/buffers/1/name");
  f = parse_failure(R"({"x": [[{"k": {"a": 1, "a": 2}}]]})");
  CHECK(f.code == "json.duplicate_key");
  CHECK(f.where == "/x/0/0/k/a");
}

TEST_CASE("nesting deeper than kMaxJsonDepth is refused at the byte and line that go past it") {
  // A comment may hold any JSON: 63 arrays inside the root object are 64 levels, one more is not.
  const auto nested = [](size_t arrays) {
    return "{\"_c\": \"[{\",\n \"_d\": " + std::string(arrays, '[') + std::string(arrays, ']') +
           "}";
  };
  Failure f = parse_failure(nested(kMaxJsonDepth - 1));
  CHECK(f.code != "json.depth");  // parsed; refused later for what the program lacks
  f = parse_failure(nested(kMaxJsonDepth));
  CHECK(f.code == "json.depth");
  CHECK(f.kind == ErrorKind::program);
  // The bracket strings do not count; the 64th '[' opens level 65: line 2, column 8 + 63.
  const size_t offset = std::string("{\"_c\": \"[{\",\n \"_d\": ").size() + kMaxJsonDepth - 1;
  CHECK(f.where == "byte " + std::to_string(offset + 1));
  CHECK(f.message.find("deeper than 64 levels (line 2, column 71)") != std::string::npos);
  // A million levels cost nothing past the limit.
  f = parse_failure(std::string(1'000'000, '['));
  CHECK(f.code == "json.depth");
  CHECK(f.where == "byte 65");
}

TEST_CASE("custom ops need trust") {
  const Failure f = parse_failure(kRich, LoadOptions{});
  CHECK(f.code == "custom.untrusted");
  CHECK(f.where == "/custom_ops");
  // No custom ops: nothing to trust.
  CHECK_NOTHROW((void)parse_json_program(minimal({{"custom_ops", json::array()}})));
}

TEST_CASE("list sizes are checked against the limits before their items") {
  // The items are not even valid: the count alone is refused.
  auto zeros = [](uint64_t n) { return json(std::vector<int>(n, 0)); };
  Failure f = parse_failure(minimal({{"buffers", zeros(kMaxBuffers + 1)}}));
  CHECK(f.code == "limit.buffers");
  CHECK(f.where == "/buffers");
  f = parse_failure(minimal({{"tma", zeros(kMaxTmaDescriptors + 1)}}));
  CHECK(f.code == "limit.tma");
  CHECK(f.where == "/tma");
  f = parse_failure(minimal({{"custom_ops", zeros(kMaxCustomOps + 1)}}));
  CHECK(f.code == "limit.custom_ops");
  f = parse_failure(minimal({{"queues", zeros(kMaxQueues + 1)}}));
  CHECK(f.code == "limit.queues");
  CHECK(f.where == "/queues");
  f = parse_failure(minimal({{"counters", zeros(kMaxCounters + 1)}}));
  CHECK(f.code == "limit.counters");
  CHECK(f.where == "/counters");
  // The total over all buffers.
  json doc = json::parse(minimal());
  doc["buffers"] = json::array();
  for (int i = 0; i < 3; ++i)
    doc["buffers"].push_back(
        {{"name", "b" + std::to_string(i)}, {"dtype", "u8"}, {"shape", {uint64_t{1} << 40}}});
  f = parse_failure(doc.dump());
  CHECK(f.code == "buffer.size");
  CHECK(f.where == "/buffers/2");
}

TEST_CASE("the writer refuses what JSON cannot say") {
  Program p = parse_json_program(minimal());
  p.buffers[0].init.kind = InitKind::constant;
  p.buffers[0].init.constant = std::numeric_limits<double>::infinity();
  Failure f = catch_error([&] { (void)program_to_json(p); });
  CHECK(f.code == "json.unrepresentable");
  CHECK(f.where == "/buffers/0/init/value");
  p = parse_json_program(minimal());
  p.instructions[0].waits.push_back({7, 1});
  f = catch_error([&] { (void)program_to_json(p); });
  CHECK(f.code == "ref.counter");
  CHECK(f.where == "/instructions/0/waits/0");
  p = parse_json_program(minimal());
  p.instructions[0].op = 999;
  f = catch_error([&] { (void)program_to_json(p); });
  CHECK(f.code == "instruction.op");
  p = parse_json_program(minimal());
  p.description = "\xff";
  f = catch_error([&] { (void)program_to_json(p); });
  CHECK(f.code == "json.unrepresentable");
  CHECK(f.where == "/description");
  // Escapes that are valid survive a round trip.
  p.description = "line\nquote\" tab\t \xc3\xa9";
  CHECK(parse_json_program(program_to_json(p)) == p);
}

TEST_CASE("a program of many instructions round-trips through JSON") {
  std::string text = R"({"format": "amk.program", "version": 1, "name": "big",
    "buffers": [{"name": "a", "dtype": "f32", "shape": [1048576]}], "counters": ["c"],
    "instructions": [)";
  constexpr int kN = 20000;
  for (int i = 0; i < kN; ++i) {
    if (i) text += ",\n";
    text += R"({"name": "i)" + std::to_string(i) +
            R"(", "op": "scale", "operands": {"x": {"buffer": "a", "offset": )" +
            std::to_string(i * 8) + R"(, "extent": 8}, "y": "a"}, "params": {"alpha": 2},
            "waits": [{"counter": "c", "value": )" +
            std::to_string(i) + R"(}], "signals": [{"counter": "c"}]})";
  }
  text += "]}";
  const Program p = parse_json_program(text);
  REQUIRE(p.instructions.size() == kN);
  CHECK(p.instructions[kN - 1].operands[0].offset == uint64_t{kN - 1} * 8);
  CHECK(p.instructions[kN - 1].waits[0].value == uint32_t{kN - 1});
  CHECK(parse_json_program(program_to_json(p)) == p);
}

// ---- files ----

namespace {

std::string with_npy_path(const std::string& p) {
  return minimal({{"buffers", json::array({{{"name", "b"},
                                            {"dtype", "f32"},
                                            {"shape", {4}},
                                            {"init", {{"kind", "npy"}, {"path", p}}}}})}});
}

}  // namespace

TEST_CASE("load_program_file: encodings, base_dir, read errors") {
  amk_test::ScratchDir dir("io_json");
  amk_test::write_text(dir.path() / "prog/p.json", kRich);
  const Program p = load_program_file(dir.path() / "prog" / "p.json", trusted());
  CHECK(p == parse_rich());
  CHECK(fs::path(p.base_dir) == (dir.path() / "prog").lexically_normal());

  // The extension does not matter; the magic does.
  amk_test::write_text(dir.path() / "prog/p.amkb", minimal());
  CHECK(load_program_file(dir.path() / "prog" / "p.amkb").name == "m");
  amk_test::write_text(dir.path() / "prog/q.json", std::string("AMKB\x01\x00\x00\x00", 8));
  Failure f = catch_error([&] { (void)load_program_file(dir.path() / "prog" / "q.json"); });
  CHECK(f.code.rfind("amkb.", 0) == 0);  // went to the binary reader

  f = catch_error([&] { (void)load_program_file(dir.path() / "nope.json"); });
  CHECK(f.code == "io.missing");
  CHECK(f.kind == ErrorKind::io);
  f = catch_error([&] { (void)load_program_file(dir.path() / "prog"); });
  CHECK(f.code == "io.read");
  CHECK(f.kind == ErrorKind::io);
  amk_test::write_text(dir.path() / "bad.json", "{\"format\": }");
  f = catch_error([&] { (void)load_program_file(dir.path() / "bad.json"); });
  CHECK(f.code == "json.syntax");
  CHECK(f.where == "byte 12");
}

TEST_CASE("data paths may not leave the program's folder") {
  amk_test::ScratchDir dir("io_json");
  amk_test::write_text(dir.path() / "prog/data/w.npy", "x");
  fs::create_directories(dir.path() / "outside");
  fs::create_symlink(dir.path() / "outside", dir.path() / "prog" / "link_out");
  fs::create_symlink(dir.path() / "prog" / "data", dir.path() / "prog" / "link_in");

  auto load = [&](const std::string& data_path, LoadOptions o = {}) {
    amk_test::write_text(dir.path() / "prog/p.json", with_npy_path(data_path));
    return catch_error([&] { (void)load_program_file(dir.path() / "prog" / "p.json", o); });
  };
  CHECK(load("data/w.npy").code == "<no error>");
  CHECK(load("data/not_yet_written.npy").code == "<no error>");  // existence is checked later
  CHECK(load("link_in/w.npy").code == "<no error>");
  CHECK(load("data/../data/w.npy").code == "<no error>");
  for (const std::string& bad : std::vector<std::string>{
           "../outside/w.npy", "data/../../w.npy", "link_out/w.npy", "link_out/deeper/x.npy",
           (dir.path() / "prog/data/w.npy").string(), std::string("/etc/passwd")}) {
    const Failure f = load(bad);
    INFO(bad, ": ", f.code, " ", f.message);
    CHECK(f.code == "path.escape");
    CHECK(f.where == "/buffers/0/init/path");
    CHECK(f.kind == ErrorKind::program);
  }
  LoadOptions allow;
  allow.allow_outside_paths = true;
  CHECK(load("../outside/w.npy", allow).code == "<no error>");
  CHECK(load("link_out/w.npy", allow).code == "<no error>");
  CHECK(load("/etc/passwd", allow).code == "<no error>");

  Program p;
  p.base_dir = (dir.path() / "prog").string();
  Failure f = catch_error([&] { (void)resolve_data_path(p, "", "/x", {}); });
  CHECK(f.code == "path.empty");
  CHECK(f.where == "/x");
  f = catch_error([&] { (void)resolve_data_path(p, std::string("a\0b", 3), "/x", {}); });
  CHECK(f.code == "path.invalid");
  f = parse_failure(with_npy_path(std::string("a\0b", 3)));
  CHECK(f.code == "init.path");
  CHECK(f.where == "/buffers/0/init/path");
  CHECK(resolve_data_path(p, "data/w.npy", "/x", {}) ==
        fs::weakly_canonical(dir.path() / "prog" / "data" / "w.npy"));
  CHECK(resolve_data_path(p, "link_in/w.npy", "/x", {}) ==
        fs::weakly_canonical(dir.path() / "prog" / "data" / "w.npy"));
}

// ---- the documentation and the schema keep up with the code ----

TEST_CASE("schemas/README.md documents every op and every error code") {
  const std::string readme =
      amk_test::read_text(fs::path(AMK_SOURCE_DIR) / "schemas" / "README.md");
  const std::string schema =
      amk_test::read_text(fs::path(AMK_SOURCE_DIR) / "schemas" / "program.schema.json");
  REQUIRE_FALSE(readme.empty());
  REQUIRE_FALSE(schema.empty());
  for (const OpSig& op : builtin_ops()) {
    INFO(op.name);
    CHECK(readme.find("| `" + std::string(op.name) + "` |") != std::string::npos);
    CHECK(schema.find("\"const\": \"" + std::string(op.name) + "\"") != std::string::npos);
  }
  // Retired ops: listed with their reserved ids; the schema refuses their names.
  for (const RetiredOp& op : retired_ops()) {
    INFO(op.name);
    CHECK(readme.find("| `" + std::string(op.name) + "` | " + std::to_string(op.id) + " |") !=
          std::string::npos);
    CHECK(schema.find("\"const\": \"" + std::string(op.name) + "\"") == std::string::npos);
    const size_t retired = schema.find("\"retired_op\": {");
    REQUIRE(retired != std::string::npos);
    CHECK(schema.find("\"" + std::string(op.name) + "\"", retired) != std::string::npos);
  }
  const char* const codes[] = {"json.syntax",
                               "json.range",
                               "json.type",
                               "json.missing",
                               "json.unknown_key",
                               "json.duplicate_key",
                               "json.depth",
                               "json.unrepresentable",
                               "program.format",
                               "program.version",
                               "name.invalid",
                               "name.duplicate",
                               "buffer.dtype",
                               "buffer.shape",
                               "buffer.size",
                               "init.kind",
                               "init.constant",
                               "init.random",
                               "init.values",
                               "init.path",
                               "init.tensor",
                               "ref.buffer",
                               "ref.counter",
                               "ref.instruction",
                               "instruction.op",
                               "op.retired",
                               "instruction.operand",
                               "instruction.param",
                               "instruction.capacity",
                               "queue.shape",
                               "queue.duplicate",
                               "queue.missing",
                               "launch.mode",
                               "launch.grid",
                               "launch.block",
                               "launch.cluster",
                               "launch.timeout_ms",
                               "launch.passes",
                               "target.min_arch",
                               "target.features",
                               "tma.rank",
                               "tma.dims",
                               "tma.strides",
                               "tma.box",
                               "tma.element_strides",
                               "tma.swizzle",
                               "tma.interleave",
                               "tma.l2_promotion",
                               "tma.oob_fill",
                               "custom.untrusted",
                               "custom.name",
                               "custom.source",
                               "custom.operands",
                               "custom.params",
                               "limit.buffers",
                               "limit.counters",
                               "limit.instructions",
                               "limit.queues",
                               "limit.tma",
                               "limit.custom_ops",
                               "limit.values",
                               "limit.custom_source",
                               "path.empty",
                               "path.invalid",
                               "path.escape",
                               "io.missing",
                               "io.read",
                               "io.too_large"};
  for (const char* code : codes) {
    INFO(std::string(code));
    CHECK(readme.find(std::string("`") + code + "`") != std::string::npos);
  }
}

TEST_CASE("the worked example in schemas/README.md is a valid program") {
  const std::string readme =
      amk_test::read_text(fs::path(AMK_SOURCE_DIR) / "schemas" / "README.md");
  const size_t section = readme.find("## Worked example");
  REQUIRE(section != std::string::npos);
  const size_t begin = readme.find("```json\n", section);
  REQUIRE(begin != std::string::npos);
  const size_t end = readme.find("\n```", begin + 8);
  REQUIRE(end != std::string::npos);
  const Program p = parse_json_program(readme.substr(begin + 8, end - begin - 8));
  REQUIRE(p.instructions.size() == 2);
  CHECK(p.instructions[0].op == static_cast<uint16_t>(OpId::scale));
  CHECK(p.instructions[0].params == std::vector<uint32_t>{f32_bits(2.0f)});
  CHECK(p.instructions[1].waits == std::vector<Wait>{{0, 1}});
  CHECK(*p.queues == std::vector<std::vector<uint32_t>>{{0}, {1}});
  CHECK(p.buffers[3].output);
}

TEST_CASE("damaged input only ever raises amk::Error") {
  const std::string rich = kRich;
  // Every prefix is invalid JSON.
  for (size_t n = 0; n < rich.size(); n += 7) {
    const Failure f = parse_failure(rich.substr(0, n));
    CHECK(f.code == "json.syntax");
  }
  // Byte flips (fixed seed): a program, or a clean program error, never anything else.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const char alphabet[] = "{}[]\",:0123456789-.eE_ azntrufl\\/";
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = rich;
    for (int k = 0; k < 3; ++k)
      text[next() % text.size()] = alphabet[next() % (sizeof alphabet - 1)];
    const Failure f = parse_failure(text);
    if (f.code == "<no error>") continue;
    ++errors;
    INFO(f.code, ": ", f.message);
    CHECK(f.kind == ErrorKind::program);
    CHECK(f.code != "<foreign exception>");
  }
  CHECK(errors > 0);
}
