// report.json: key order, null for absent parts, timestamps, and validation against
// schemas/report.schema.json (with the system Python's jsonschema when present).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "report/outputs.hpp"

#include "support.hpp"

using amk::RunReport;
using nlohmann::ordered_json;

namespace {

const std::string kHashA(64, 'a');
const std::string kHashB = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::vector<std::string> keys_of(const ordered_json& j) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  return keys;
}

nlohmann::json sample_manifest() {
  return nlohmann::json::parse(R"({
    "schema_version": 1, "program": "mlp", "program_fingerprint": ")" +
                               kHashA + R"(",
    "outputs": [{"name": "y/out:0", "file": "y_out_0.npy", "dtype": "bf16", "stored_dtype": "f32",
                 "shape": [2, 3], "elements": 6, "bytes": 152, "sha256": ")" +
                               kHashB + R"("}],
    "inputs": [{"name": "x", "file": "inputs/x.npy", "dtype": "f32", "stored_dtype": "f32",
                "shape": [], "elements": 1, "bytes": 132, "sha256": ")" +
                               kHashB + R"("}]})");
}

RunReport full_report() {
  RunReport r;
  r.command = "run";
  r.status = "ok";
  r.backend = "cuda";
  r.program_path = "samples/mlp.json";
  r.program_name = "mlp";
  r.program_fingerprint = kHashA;
  r.data_fingerprint = kHashB;
  r.target_fingerprint = "sm_90a:132";
  r.artifact_fingerprint = kHashB;
  r.grid = 132;
  r.block = 256;
  r.passes = 7;
  r.instructions = 1024;
  r.timings_ms = {{"load", 1.5}, {"verify", 0.25}, {"compile", 120.0}, {"execute", 3.0}};
  r.device = {{"name", "NVIDIA H200"}, {"sm_count", 132}};
  r.versions = {{"driver", "12.8"}, {"nvrtc", "12.8"}};
  r.check = {{"max_normalized_error", 1e-6}, {"passed", true}};
  r.outputs = sample_manifest();
  r.extra = {{"samples", 10}};
  r.created_utc = "2024-05-06T07:08:09Z";
  return r;
}

// Writes `j` and validates it; "valid" or the validator's complaints.
std::string validate(const amk_test::ScratchDir& dir, const ordered_json& j,
                     const std::string& name) {
  const auto file = dir.path() / (name + "_instance.json");
  {
    std::ofstream out(file);
    out << j.dump(2);
  }
  const auto result = amk_test::validate_against_schema(dir.path(), file, name);
  REQUIRE_MESSAGE(result.first == 0, result.second);
  return result.second;
}

}  // namespace

TEST_CASE("report keys come in the documented order with the given values") {
  const ordered_json j = amk::make_report(full_report());
  CHECK(keys_of(j) ==
        std::vector<std::string>{"schema_version", "amk_version", "command", "status", "backend",
                                 "program", "target_fingerprint", "artifact_fingerprint", "launch",
                                 "instructions", "timings_ms", "device", "versions", "error",
                                 "diagnostics", "check", "outputs", "extra", "created_utc"});
  CHECK(j["schema_version"] == amk::kReportSchemaVersion);
  CHECK(j["amk_version"] == AMK_VERSION);
  CHECK(j["command"] == "run");
  CHECK(j["status"] == "ok");
  CHECK(j["backend"] == "cuda");
  CHECK(keys_of(j["program"]) ==
        std::vector<std::string>{"path", "name", "fingerprint", "data_fingerprint"});
  CHECK(j["program"]["path"] == "samples/mlp.json");
  CHECK(j["program"]["name"] == "mlp");
  CHECK(j["program"]["fingerprint"] == kHashA);
  CHECK(j["program"]["data_fingerprint"] == kHashB);
  CHECK(j["target_fingerprint"] == "sm_90a:132");
  CHECK(j["artifact_fingerprint"] == kHashB);
  CHECK(j["launch"].dump() == R"({"grid":132,"block":256,"passes":7,"passes_run":7})");
  CHECK(j["instructions"] == 1024);
  // Phases stay in the order they ran, not alphabetical.
  CHECK(j["timings_ms"].dump() == R"({"load":1.5,"verify":0.25,"compile":120.0,"execute":3.0})");
  CHECK(j["device"]["sm_count"] == 132);
  CHECK(j["error"].is_null());
  CHECK(j["diagnostics"].is_null());
  CHECK(j["check"]["passed"] == true);
  CHECK(j["outputs"]["outputs"][0]["name"] == "y/out:0");
  CHECK(j["extra"]["samples"] == 10);
  CHECK(j["created_utc"] == "2024-05-06T07:08:09Z");
}

TEST_CASE("absent parts of a report are null") {
  RunReport r;  // a run rejected before anything was known
  r.status = "rejected";
  r.error = amk::error_to_json(amk::Error(amk::ErrorKind::program, "json.buffer.dtype",
                                          "/buffers/3/dtype", "unknown dtype"));
  const ordered_json j = amk::make_report(r);
  CHECK(j["backend"].is_null());
  CHECK(j["program"].dump() ==
        R"({"path":null,"name":null,"fingerprint":null,"data_fingerprint":null})");
  CHECK(j["target_fingerprint"].is_null());
  CHECK(j["artifact_fingerprint"].is_null());
  CHECK(j["launch"].dump() == R"({"grid":null,"block":null,"passes":1,"passes_run":1})");
  CHECK(j["instructions"] == 0);
  CHECK(j["timings_ms"].dump() == "{}");
  CHECK(j["device"].is_null());
  CHECK(j["outputs"].is_null());
  CHECK(j["error"].dump() == R"({"code":"json.buffer.dtype","detail":"","kind":"program",)"
                             R"("message":"unknown dtype","where":"/buffers/3/dtype"})");
}

TEST_CASE("non-finite timings become null") {
  RunReport r;
  r.timings_ms = {{"a", std::numeric_limits<double>::quiet_NaN()},
                  {"b", std::numeric_limits<double>::infinity()},
                  {"c", 2.0}};
  CHECK(amk::make_report(r)["timings_ms"].dump() == R"({"a":null,"b":null,"c":2.0})");
}

TEST_CASE("an unknown status or empty command is a caller bug") {
  RunReport r;
  r.status = "fine";
  try {
    (void)amk::make_report(r);
    FAIL("expected an error");
  } catch (const amk::Error& e) {
    CHECK(e.code() == "report.status");
    CHECK(e.kind() == amk::ErrorKind::internal);
  }
  r.status = "mismatch";
  r.command = "";
  CHECK_THROWS_AS((void)amk::make_report(r), amk::Error);
}

TEST_CASE("timestamps are ISO 8601 UTC") {
  using namespace std::chrono;
  CHECK(amk::utc_timestamp(system_clock::time_point{}) == "1970-01-01T00:00:00Z");
  CHECK(amk::utc_timestamp(system_clock::time_point{seconds{1700000000}}) ==
        "2023-11-14T22:13:20Z");
  // An unset created_utc is now: same length and shape, this century.
  const std::string now = amk::make_report(RunReport{})["created_utc"];
  REQUIRE(now.size() == 20);
  CHECK(now.substr(0, 2) == "20");
  CHECK(now[10] == 'T');
  CHECK(now.back() == 'Z');
}

TEST_CASE("write_report writes the same JSON, pretty-printed") {
  amk_test::ScratchDir dir("report_write");
  const auto file = dir.path() / "report.json";
  amk::write_report(file, full_report());
  const std::string text = amk_test::read_text(file);
  CHECK(text == amk::make_report(full_report()).dump(2) + "\n");
  CHECK(ordered_json::parse(text) == amk::make_report(full_report()));
}

TEST_CASE("reports validate against schemas/report.schema.json") {
  if (!amk_test::python_has("jsonschema")) {
    MESSAGE("skipped: /usr/bin/python3 with jsonschema not available");
    return;
  }
  amk_test::ScratchDir dir("report_schema");
  CHECK(validate(dir, amk::make_report(full_report()), "report") == "valid\n");

  RunReport minimal;
  minimal.status = "error";
  minimal.error = amk::error_to_json(
      amk::Error(amk::ErrorKind::io, "io.write", "/out/y.npy", "No space left on device"));
  CHECK(validate(dir, amk::make_report(minimal), "report") == "valid\n");
  CHECK(validate(dir, ordered_json(sample_manifest()), "manifest") == "valid\n");

  // The schema must be able to say no: each of these breaks one rule.
  ordered_json bad = amk::make_report(full_report());
  bad["status"] = "fine";
  CHECK(validate(dir, bad, "report") == "status 'fine' is not one of ['ok', 'timeout', 'error', "
                                        "'rejected', 'mismatch']\ninvalid\n");
  bad = amk::make_report(full_report());
  bad.erase("created_utc");
  CHECK(validate(dir, bad, "report") == " 'created_utc' is a required property\ninvalid\n");
  bad = amk::make_report(full_report());
  bad["program"]["fingerprint"] = "xyz";
  CHECK(validate(dir, bad, "report") ==
        "program/fingerprint 'xyz' does not match '^[0-9a-f]{64}$'\n"
        "invalid\n");
  bad = amk::make_report(full_report());
  bad["outputs"]["outputs"][0]["file"] = "../escape.npy";
  CHECK(validate(dir, bad, "report").find("invalid\n") != std::string::npos);
  bad = amk::make_report(full_report());
  bad["surprise"] = 1;
  CHECK(validate(dir, bad, "report").find("invalid\n") != std::string::npos);
}
