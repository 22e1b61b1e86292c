// run_program on the CPU backend: the outputs, inputs and report.json it writes, --check and
// --reseed, the report a failed run leaves beside the folder (without outputs), and the folder
// replaced as a whole.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/outputs.hpp"
#include "session/run_session.hpp"

#include "backend/helpers.hpp"
#include "common/files.hpp"

using namespace amk;
using namespace amk::test;
namespace fs = std::filesystem;
using amk_test::read_text;

namespace {

constexpr uint64_t kValues = 64;

// x (from x.npy) and w (random) -> y = 3x, z = x + y, u = w * x: three f32 outputs.
std::string program_text(const std::string& x_path) {
  return R"({
  "format": "amk.program", "version": 1, "name": "run_session",
  "launch": {"grid": 2, "block": 128},
  "buffers": [
    {"name": "x", "dtype": "f32", "shape": [64], "init": {"kind": "npy", "path": ")" +
         x_path + R"("}},
    {"name": "w", "dtype": "f32", "shape": [64], "init": {"kind": "random", "seed": 21, "low": 0.5, "high": 2}},
    {"name": "y", "dtype": "f32", "shape": [64], "output": true},
    {"name": "z", "dtype": "f32", "shape": [64], "output": true},
    {"name": "u", "dtype": "f32", "shape": [64], "output": true}
  ],
  "counters": ["y_ready"],
  "instructions": [
    {"name": "triple", "op": "scale", "operands": {"x": "x", "y": "y"}, "params": {"alpha": 3},
     "signals": [{"counter": "y_ready"}]},
    {"name": "sum", "op": "add", "operands": {"a": "x", "b": "y", "y": "z"},
     "waits": [{"counter": "y_ready", "value": 1}]},
    {"name": "product", "op": "mul", "operands": {"a": "w", "b": "x", "y": "u"}}
  ]
})";
}

// The f32 values of a .npy file of kValues elements (the data is its last kValues * 4 bytes).
std::vector<float> read_npy_f32(const fs::path& p) {
  const std::string s = read_text(p);
  REQUIRE(s.size() > kValues * 4);
  std::vector<std::byte> data(kValues * 4);
  std::memcpy(data.data(), s.data() + s.size() - kValues * 4, kValues * 4);
  return values_of<float>(data);
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_text(p)); }

// Every file under `dir` and its contents.
std::map<std::string, std::string> contents_under(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out[fs::relative(e.path(), dir).generic_string()] = read_text(e.path());
  return out;
}

std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), dir).generic_string());
  return out;
}

// A program folder: the program and its x.npy of random non-zero values.
struct Fixture {
  TempDir dir;
  std::vector<float> x = nonzero_floats(kValues, 5);
  fs::path program = dir / "p.json";

  Fixture() {
    const uint64_t shape[] = {kValues};
    write_bytes(dir / "x.npy", encode_npy(DType::f32, shape, bytes_of(x)));
    std::ofstream(program) << program_text("x.npy");
  }

  [[nodiscard]] RunRequest request(const std::string& out) const {
    RunRequest r;
    r.program_path = program.string();
    r.backend = "cpu";
    r.out_dir = (dir / out).string();
    return r;
  }
};

}  // namespace

TEST_CASE("run_program on the CPU writes the outputs, the inputs and report.json") {
  const Fixture f;
  RunRequest req = f.request("out");
  req.save_inputs = true;
  const RunResult run = run_program(req);

  const fs::path out = f.dir / "out";
  CHECK(files_under(out) == std::set<std::string>{"inputs/w.npy", "inputs/x.npy", "manifest.json",
                                                  "report.json", "u.npy", "y.npy", "z.npy"});
  CHECK(read_npy_f32(out / "inputs/x.npy") == f.x);
  const std::vector<float> w = read_npy_f32(out / "inputs/w.npy");
  const std::vector<float> y = read_npy_f32(out / "y.npy");
  const std::vector<float> z = read_npy_f32(out / "z.npy");
  const std::vector<float> u = read_npy_f32(out / "u.npy");
  for (uint64_t i = 0; i < kValues; ++i) {
    CHECK(w[i] >= 0.5f);
    CHECK(y[i] == doctest::Approx(3.0 * f.x[i]));
    CHECK(z[i] == doctest::Approx(4.0 * f.x[i]));
    CHECK(u[i] == doctest::Approx(static_cast<double>(w[i]) * f.x[i]));
  }

  const nlohmann::json rep = read_json(out / "report.json");
  CHECK(rep["status"] == "ok");
  CHECK(rep["command"] == "run");
  CHECK(rep["backend"] == "cpu");
  CHECK(rep["program"]["name"] == "run_session");
  CHECK(rep["program"]["path"] == f.program.string());
  CHECK(rep["instructions"] == 3);
  CHECK(rep["error"].is_null());
  CHECK(rep["check"].is_null());
  CHECK(rep["outputs"] == read_json(out / "manifest.json"));
  for (const char* phase :
       {"load_verify", "materialize", "plan", "cpu_execute", "write_outputs", "total"})
    CHECK_MESSAGE(rep["timings_ms"].contains(phase), phase);
  // The returned report is the one written (but for the time it was made).
  CHECK(run.report["status"] == "ok");
  CHECK(run.report["program"]["data_fingerprint"].dump() ==
        rep["program"]["data_fingerprint"].dump());
  CHECK(run.report["outputs"].dump() == rep["outputs"].dump());

  CHECK_MESSAGE(run.text.rfind("run_session: ok on cpu (3 instructions, load_verify ", 0) == 0,
                run.text);
  CHECK_MESSAGE(run.text.find("\n  y f32[64] = [") != std::string::npos, run.text);
  CHECK_MESSAGE(run.text.find("\noutputs written to " + out.string() + "\n") != std::string::npos,
                run.text);
}

TEST_CASE("run_program --check passes on the CPU and writes what a run without it writes") {
  const Fixture f;
  (void)run_program(f.request("plain"));
  RunRequest req = f.request("checked");
  req.check = true;
  const RunResult run = run_program(req);

  CHECK(run.report["check"]["passed"].get<bool>());
  CHECK(run.report["check"]["poisoned"] == "y, z, u");
  CHECK(read_json(f.dir / "checked/report.json")["check"]["passed"].get<bool>());
  CHECK(run.report["timings_ms"].contains("check"));
  for (const char* name : {"y.npy", "z.npy", "u.npy"})
    CHECK(read_text(f.dir / "plain" / name) == read_text(f.dir / "checked" / name));
  CHECK_MESSAGE(run.text.find("\ncheck: every output matches the CPU reference\n") !=
                    std::string::npos,
                run.text);
  CHECK_MESSAGE(run.text.find("\ncheck: poisoned before the run, every element the reference "
                              "writes written: y, z, u\n") != std::string::npos,
                run.text);
  // The fixture's backend is the CPU: the check says it compared the backend with itself.
  CHECK_MESSAGE(run.text.find("\ncheck: ran on the CPU backend, so it compared the CPU backend "
                              "with itself\n") != std::string::npos,
                run.text);
}

TEST_CASE("run_program --reseed draws the random init from another seed") {
  const Fixture f;
  const RunResult plain = run_program(f.request("plain"));
  RunRequest req = f.request("reseeded");
  req.reseed = 9;
  const RunResult run = run_program(req);

  CHECK(run.report["extra"]["reseed"] == 9);
  CHECK(run.report["extra"]["reseeded_buffers"] == 1);
  CHECK(run.report["program"]["data_fingerprint"] != plain.report["program"]["data_fingerprint"]);
  CHECK(read_text(f.dir / "plain/y.npy") == read_text(f.dir / "reseeded/y.npy"));
  CHECK(read_text(f.dir / "plain/u.npy") != read_text(f.dir / "reseeded/u.npy"));
  CHECK_MESSAGE(run.text.find("\ninputs: 1 random init(s) reseeded from 9\n") != std::string::npos,
                run.text);
}

TEST_CASE("run_program writes --report alone without an output folder") {
  const Fixture f;
  RunRequest req = f.request("");
  req.out_dir.clear();
  req.report_path = (f.dir / "only.json").string();
  const RunResult run = run_program(req);
  CHECK(files_under(f.dir.path()) == std::set<std::string>{"only.json", "p.json", "x.npy"});
  CHECK(read_json(f.dir / "only.json")["status"] == "ok");
  CHECK(run.report["outputs"].is_null());
  CHECK(run.text.find("outputs written") == std::string::npos);
}

TEST_CASE("a failed run writes its report beside the folder, and no outputs") {
  const Fixture f;
  const fs::path failed = f.dir / "out.failed-report.json";

  SUBCASE("no such program") {
    RunRequest req = f.request("out");
    req.program_path = (f.dir / "missing.json").string();
    const auto e = caught([&] { (void)run_program(req); });
    REQUIRE(e);
    CHECK(e->kind() == ErrorKind::io);
    CHECK_FALSE(fs::exists(f.dir / "out"));
    CHECK(files_under(f.dir.path()) ==
          std::set<std::string>{"out.failed-report.json", "p.json", "x.npy"});
    const nlohmann::json rep = read_json(failed);
    CHECK(rep["status"] == "error");
    CHECK(rep["error"]["code"] == e->code());
    CHECK(rep["error"]["kind"] == "io");
    CHECK(rep["program"]["path"] == req.program_path);
    CHECK(rep["program"]["name"].is_null());
    CHECK(rep["outputs"].is_null());
  }
  SUBCASE("a missing data file: the previous outputs and their report stay, byte for byte") {
    (void)run_program(f.request("out"));
    const std::map<std::string, std::string> before = contents_under(f.dir / "out");
    std::ofstream(f.dir / "broken.json") << program_text("missing.npy");
    RunRequest req = f.request("out");
    req.program_path = (f.dir / "broken.json").string();
    req.check = true;
    const auto e = caught([&] { (void)run_program(req); });
    REQUIRE(e);
    CHECK(e->kind() == ErrorKind::io);
    CHECK(contents_under(f.dir / "out") == before);
    const nlohmann::json rep = read_json(failed);
    CHECK(rep["status"] == "error");
    CHECK(rep["error"]["code"] == e->code());
    CHECK(rep["program"]["name"] == "run_session");
    CHECK(rep["program"]["data_fingerprint"].is_null());
    CHECK(rep["check"].is_null());

    // The next good run replaces the folder and removes the stale failed report.
    (void)run_program(f.request("out"));
    CHECK_FALSE(fs::exists(failed));
    CHECK(read_json(f.dir / "out/report.json")["status"] == "ok");

    req.out_dir = (f.dir / "fresh").string();
    CHECK(caught([&] { (void)run_program(req); }).has_value());
    CHECK_FALSE(fs::exists(f.dir / "fresh"));
    CHECK(read_json(f.dir / "fresh.failed-report.json")["status"] == "error");
  }
  SUBCASE("--report PATH takes a failed run's report instead") {
    (void)run_program(f.request("out"));
    const std::map<std::string, std::string> before = contents_under(f.dir / "out");
    RunRequest req = f.request("out");
    req.program_path = (f.dir / "missing.json").string();
    req.report_path = (f.dir / "r.json").string();
    CHECK(caught([&] { (void)run_program(req); }).has_value());
    CHECK(read_json(f.dir / "r.json")["status"] == "error");
    CHECK_FALSE(fs::exists(failed));
    CHECK(contents_under(f.dir / "out") == before);
  }
  SUBCASE("the cuda backend without a GPU is refused before the data") {
    std::string why;
    if (gpu_present(&why)) return;
    RunRequest req = f.request("out");
    req.backend = "cuda";
    const auto e = caught([&] { (void)run_program(req); });
    REQUIRE(e);
    CHECK(e->kind() == ErrorKind::device);
    const nlohmann::json rep = read_json(failed);
    CHECK(rep["status"] == "rejected");
    CHECK(rep["backend"] == "cuda");
    CHECK(rep["program"]["data_fingerprint"].is_null());
    CHECK_FALSE(fs::exists(f.dir / "out"));
  }
  // No staging folder is left beside the output folder.
  for (const auto& e : fs::directory_iterator(f.dir.path()))
    CHECK_MESSAGE(e.path().filename().string().find(".amk-") == std::string::npos, e.path());
}

TEST_CASE("run_program replaces an earlier run's folder as a whole, report.json included") {
  const Fixture f;
  RunRequest req = f.request("out");
  req.save_inputs = true;
  (void)run_program(req);
  CHECK(fs::exists(f.dir / "out/inputs/x.npy"));
  const RunResult run = run_program(f.request("out"));
  // Nothing of the first run is left: no inputs/, and the report is the second run's.
  CHECK(files_under(f.dir / "out") ==
        std::set<std::string>{"manifest.json", "report.json", "u.npy", "y.npy", "z.npy"});
  CHECK(read_json(f.dir / "out/report.json")["outputs"] == read_json(f.dir / "out/manifest.json"));
  CHECK(read_json(f.dir / "out/report.json")["program"]["data_fingerprint"].dump() ==
        run.report["program"]["data_fingerprint"].dump());

  // --report elsewhere: the folder holds no report.json.
  req = f.request("out");
  req.report_path = (f.dir / "r.json").string();
  (void)run_program(req);
  CHECK(files_under(f.dir / "out") ==
        std::set<std::string>{"manifest.json", "u.npy", "y.npy", "z.npy"});
  CHECK(read_json(f.dir / "r.json")["status"] == "ok");
  // --report OUT/report.json is the default.
  req.report_path = (f.dir / "out/report.json").string();
  (void)run_program(req);
  CHECK(read_json(f.dir / "out/report.json")["status"] == "ok");
}

TEST_CASE("run_program refuses a folder that is not amk's, or a report inside the folder") {
  const Fixture f;
  fs::create_directories(f.dir / "mine");
  std::ofstream(f.dir / "mine/notes.txt") << "keep me";
  auto e = caught([&] { (void)run_program(f.request("mine")); });
  REQUIRE(e);
  CHECK(e->kind() == ErrorKind::usage);
  CHECK(e->code() == "usage.out_dir");
  CHECK(read_text(f.dir / "mine/notes.txt") == "keep me");
  CHECK(files_under(f.dir / "mine") == std::set<std::string>{"notes.txt"});

  RunRequest req = f.request("out");
  req.report_path = (f.dir / "out/inputs/r.json").string();
  e = caught([&] { (void)run_program(req); });
  REQUIRE(e);
  CHECK(e->code() == "usage.report");
  CHECK_FALSE(fs::exists(f.dir / "out"));
  // Neither refusal leaves a report or a staging folder.
  CHECK(files_under(f.dir.path()) == std::set<std::string>{"mine/notes.txt", "p.json", "x.npy"});
  for (const auto& entry : fs::directory_iterator(f.dir.path()))
    CHECK_MESSAGE(entry.path().filename().string().find(".amk-") == std::string::npos,
                  entry.path());
}

TEST_CASE("run_program refuses an unknown backend before anything runs") {
  const Fixture f;
  RunRequest req = f.request("out");
  req.backend = "tpu";
  const auto e = caught([&] { (void)run_program(req); });
  REQUIRE(e);
  CHECK(e->kind() == ErrorKind::usage);
  CHECK(e->code() == "usage.backend");
  CHECK_FALSE(fs::exists(f.dir / "out"));
}
