// The output folder's contents: sanitized and disambiguated file names, manifest contents,
// manifest written last, fingerprints. (How the folder is replaced: test_output_folder.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/hash.hpp"
#include "io/load.hpp"
#include "report/outputs.hpp"

#include "support.hpp"

namespace fs = std::filesystem;
using amk::DType;
using amk::HostBuffers;
using amk::Program;
using amk_test::entries;
using amk_test::read_bytes;
using amk_test::ScratchDir;
using amk_test::snapshot;

namespace {

const std::string kLongName(256, 'a');

amk::Buffer buffer(std::string name, DType dtype, std::vector<uint64_t> shape, bool output) {
  amk::Buffer b;
  b.name = std::move(name);
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.output = output;
  return b;
}

// Names chosen to collide once sanitized, with case folded, or to need cutting.
Program sample_program() {
  Program p;
  p.name = "names";
  p.buffers = {
      buffer("y/out:0", DType::bf16, {2, 3}, true),  // -> y_out_0_2.npy (y_out_0 is taken)
      buffer("y_out_0", DType::f32, {}, true),       // already safe: keeps y_out_0.npy
      buffer("x", DType::f32, {4}, false),           // input
      buffer(".hidden", DType::u8, {3}, true),       // no hidden files: _hidden.npy
      buffer("w", DType::i32, {2, 2}, false),        // input
      buffer(kLongName, DType::u8, {1}, true),       // cut to 240 characters
      buffer("Y_out_0", DType::u8, {1}, true),       // same as y_out_0 without case: _3
  };
  return p;
}

template <typename T>
std::vector<std::byte> bytes_of(std::vector<T> v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Buffer contents; `bias` tells the final results from the initial contents.
HostBuffers sample_data(int bias) {
  HostBuffers h;
  h.data = {
      bytes_of(std::vector<uint16_t>{0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0,
                                     static_cast<uint16_t>(0x40c0 + bias)}),  // 1..6 (bf16)
      bytes_of(std::vector<float>{0.5f + static_cast<float>(bias)}),
      bytes_of(std::vector<float>{1.0f, 2.0f, 3.0f, static_cast<float>(4 + bias)}),
      bytes_of(std::vector<uint8_t>{7, 8, static_cast<uint8_t>(9 + bias)}),
      bytes_of(std::vector<int32_t>{-1, -2, -3, -4 - bias}),
      bytes_of(std::vector<uint8_t>{static_cast<uint8_t>(42 + bias)}),
      bytes_of(std::vector<uint8_t>{static_cast<uint8_t>(5 + bias)}),
  };
  return h;
}

std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), dir).generic_string());
  return out;
}

std::vector<std::string> manifest_files(const nlohmann::json& m, const char* section) {
  std::vector<std::string> out;
  for (const auto& e : m[section]) out.push_back(e["file"]);
  return out;
}

}  // namespace

TEST_CASE("safe_file_stem") {
  CHECK(amk::safe_file_stem("weights.0-a_b") == "weights.0-a_b");
  CHECK(amk::safe_file_stem("a/b:c d") == "a_b_c_d");
  CHECK(amk::safe_file_stem("\xc3\xa9") == "__");  // one UTF-8 character, two bytes
  CHECK(amk::safe_file_stem(".") == "_");
  CHECK(amk::safe_file_stem("..") == "_.");
  CHECK(amk::safe_file_stem(".x") == "_x");
  CHECK(amk::safe_file_stem("") == "_");
  CHECK(amk::safe_file_stem(kLongName) == std::string(240, 'a'));
}

TEST_CASE("write_outputs: names, manifest, files") {
  ScratchDir scratch("outputs");
  const fs::path dir = scratch.path() / "out" / "nested";  // created, parents too
  const Program p = sample_program();
  const HostBuffers initial = sample_data(0);
  const HostBuffers result = sample_data(1);
  const nlohmann::json m = amk::write_outputs(dir, p, result, true, &initial);

  const std::string long_file = std::string(240, 'a') + ".npy";
  CHECK(manifest_files(m, "outputs") == std::vector<std::string>{"y_out_0_2.npy", "y_out_0.npy",
                                                                 "_hidden.npy", long_file,
                                                                 "Y_out_0_3.npy"});
  CHECK(manifest_files(m, "inputs") == std::vector<std::string>{"inputs/x.npy", "inputs/w.npy"});

  // Exactly the files the manifest names, plus the manifest: no temp files, nothing else.
  std::set<std::string> want = {"manifest.json", "inputs/x.npy", "inputs/w.npy"};
  for (const auto& f : manifest_files(m, "outputs")) want.insert(f);
  CHECK(files_under(dir) == want);

  CHECK(m["schema_version"] == amk::kManifestSchemaVersion);
  CHECK(m["program"] == "names");
  CHECK(m["program_fingerprint"] == amk::sha256_hex(amk::program_to_json(p)));
  CHECK(m["program_fingerprint"] == amk::program_fingerprint(p));
  CHECK(m["program_fingerprint"].get<std::string>().size() == 64);

  const auto& y = m["outputs"][0];
  CHECK(y["name"] == "y/out:0");
  CHECK(y["dtype"] == "bf16");
  CHECK(y["stored_dtype"] == "f32");
  CHECK(y["shape"] == nlohmann::json::array({2, 3}));
  CHECK(y["elements"] == 6);
  CHECK(y["bytes"] == 128 + 6 * 4);
  const auto& scalar = m["outputs"][1];
  CHECK(scalar["shape"] == nlohmann::json::array());
  CHECK(scalar["elements"] == 1);
  CHECK(scalar["stored_dtype"] == "f32");
  CHECK(m["inputs"][1]["name"] == "w");
  CHECK(m["inputs"][1]["dtype"] == "i32");
  CHECK(m["inputs"][1]["bytes"] == 128 + 16);

  // Every entry's size and sha256 describe the file on disk, and the file holds the right data:
  // outputs from `result`, inputs from `initial`.
  for (const char* section : {"outputs", "inputs"}) {
    for (const auto& e : m[section]) {
      const auto file = read_bytes(dir / e["file"].get<std::string>());
      CHECK(e["bytes"] == file.size());
      CHECK(e["sha256"] == amk::sha256_hex(file));
    }
  }
  const std::vector<uint64_t> shape_y = {2, 3};
  CHECK(read_bytes(dir / "y_out_0_2.npy") == amk::encode_npy(DType::bf16, shape_y, result.data[0]));
  const std::vector<uint64_t> shape_x = {4};
  CHECK(read_bytes(dir / "inputs/x.npy") == amk::encode_npy(DType::f32, shape_x, initial.data[2]));

  // The file on disk is the returned manifest.
  const auto on_disk = nlohmann::json::parse(amk_test::read_text(dir / "manifest.json"));
  CHECK(on_disk == m);
  // Written last: no .npy is newer than the manifest.
  const auto manifest_time = fs::last_write_time(dir / "manifest.json");
  for (const auto& f : want) CHECK(fs::last_write_time(dir / f) <= manifest_time);
}

TEST_CASE("write_outputs without inputs writes only outputs") {
  ScratchDir scratch("outputs_only");
  const Program p = sample_program();
  const nlohmann::json m = amk::write_outputs(scratch.path(), p, sample_data(1));
  CHECK(m["inputs"] == nlohmann::json::array());
  CHECK(m["outputs"].size() == 5);
  CHECK(!fs::exists(scratch.path() / "inputs"));
  CHECK(files_under(scratch.path()).size() == 6);
}

TEST_CASE("write_outputs that fails part-way leaves the previous folder as it was") {
  ScratchDir scratch("outputs_fail");
  const fs::path dir = scratch.path() / "out";
  const Program p = sample_program();
  const HostBuffers initial = sample_data(0);
  amk::write_outputs(dir, p, initial);  // a previous successful run
  const std::map<std::string, std::string> before = snapshot(dir);

  // Every file is 128 + a few bytes; with the limit the first one already fails, and so would
  // a disk that is full.
  {
    amk_test::FileSizeLimit limit(129);
    REQUIRE(limit.ok());
    try {
      amk::write_outputs(dir, p, sample_data(1), true, &initial);
      FAIL("expected an error");
    } catch (const amk::Error& e) {
      CHECK(e.code() == "io.write");
      CHECK_MESSAGE(e.message().find("File too large") != std::string::npos, e.message());
    }
  }
  CHECK(snapshot(dir) == before);
  // Nothing beside the folder either: the staging folder is gone.
  CHECK(entries(scratch.path()) == std::vector<std::string>{"out"});

  // A fresh folder with the same failure is not created at all.
  {
    amk_test::FileSizeLimit limit(129);
    CHECK_THROWS_AS(amk::write_outputs(scratch.path() / "fresh", p, initial), amk::Error);
  }
  CHECK(entries(scratch.path()) == std::vector<std::string>{"out"});
}

TEST_CASE("write_outputs needs only the outputs' contents") {
  ScratchDir scratch("outputs_only");
  const Program p = sample_program();
  const HostBuffers all = sample_data(7);
  HostBuffers outputs_only = sample_data(7);
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if (!p.buffers[i].output) outputs_only.data[i].clear();  // as a GPU run downloads them
  (void)amk::write_outputs(scratch.path() / "all", p, all);
  (void)amk::write_outputs(scratch.path() / "outs", p, outputs_only);
  CHECK(snapshot(scratch.path() / "all") == snapshot(scratch.path() / "outs"));
  // An output left empty is still refused.
  HostBuffers no_output = sample_data(7);
  no_output.data[0].clear();
  CHECK_THROWS_AS(amk::write_outputs(scratch.path() / "bad", p, no_output), amk::Error);
}

TEST_CASE("write_outputs refuses inconsistent arguments") {
  ScratchDir scratch("outputs_bad");
  const Program p = sample_program();
  HostBuffers short_list = sample_data(0);
  short_list.data.pop_back();
  try {
    amk::write_outputs(scratch.path() / "a", p, short_list);
    FAIL("expected an error");
  } catch (const amk::Error& e) {
    CHECK(e.code() == "outputs.buffers");
    CHECK(e.kind() == amk::ErrorKind::internal);
  }
  HostBuffers wrong_size = sample_data(0);
  wrong_size.data[3].push_back(std::byte{0});
  CHECK_THROWS_AS(amk::write_outputs(scratch.path() / "a", p, wrong_size), amk::Error);
  try {
    amk::write_outputs(scratch.path() / "a", p, sample_data(0), true, nullptr);
    FAIL("expected an error");
  } catch (const amk::Error& e) {
    CHECK(e.code() == "outputs.inputs");
  }
  CHECK(!fs::exists(scratch.path() / "a"));  // nothing created before the checks

  amk::write_text_atomic(scratch.path() / "file", "not a folder");
  try {
    amk::write_outputs(scratch.path() / "file", p, sample_data(0));
    FAIL("expected an error");
  } catch (const amk::Error& e) {
    CHECK(e.kind() == amk::ErrorKind::usage);
    CHECK(e.code() == "usage.out_dir");
    CHECK(e.message().find("it is not a folder") != std::string::npos);
  }
  CHECK(amk_test::read_text(scratch.path() / "file") == "not a folder");
}

TEST_CASE("program_fingerprint follows the program") {
  Program p = sample_program();
  const std::string before = amk::program_fingerprint(p);
  CHECK(before == amk::program_fingerprint(sample_program()));
  p.buffers[2].shape = {5};
  CHECK(amk::program_fingerprint(p) != before);
}

TEST_CASE("the output folder loads in numpy and the manifest validates") {
  ScratchDir scratch("outputs_py");
  const Program p = sample_program();
  const HostBuffers initial = sample_data(0);
  amk::write_outputs(scratch.path(), p, sample_data(1), true, &initial);

  if (amk_test::python_has("jsonschema")) {
    const auto [status, out] = amk_test::validate_against_schema(
        scratch.path(), scratch.path() / "manifest.json", "manifest");
    CHECK(status == 0);
    CHECK(out == "valid\n");
  } else {
    MESSAGE("skipped schema check: /usr/bin/python3 with jsonschema not available");
  }

  if (!amk_test::python_has("numpy")) {
    MESSAGE("skipped: /usr/bin/python3 with numpy not available");
    return;
  }
  const auto script = scratch.path() / "sums.py";
  {
    std::ofstream s(script);
    s << "import json, os, sys, numpy as np\n"
         "d = sys.argv[1]\n"
         "m = json.load(open(os.path.join(d, 'manifest.json')))\n"
         "for e in m['outputs'] + m['inputs']:\n"
         "    a = np.load(os.path.join(d, e['file']))\n"
         "    assert list(a.shape) == e['shape'] and a.size == e['elements']\n"
         "    print(e['name'][:8], a.dtype.str, a.sum().item())\n";
  }
  const auto [status, out] = amk_test::run_python(script, {scratch.path().string()});
  CHECK(status == 0);
  // bf16 1..5 and 6.03125 (0x40c1: `bias` moved the last bit) widened exactly to f32.
  CHECK(out == "y/out:0 <f4 21.03125\n"
               "y_out_0 <f4 1.5\n"
               ".hidden |u1 25\n"
               "aaaaaaaa |u1 43\n"
               "Y_out_0 |u1 6\n"
               "x <f4 10.0\n"
               "w <i4 -10\n");
}
