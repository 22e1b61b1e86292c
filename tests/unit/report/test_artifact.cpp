// Ahead-of-time artifacts (report/artifact.hpp): the cubin and its record FILE.json written and
// read back, every difference from the expected record listed, malformed records and missing
// files refused with their place. No CUDA: the cubins are made-up ELF-headed bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "report/artifact.hpp"

#include "support.hpp"

namespace fs = std::filesystem;
using amk::ArtifactRecord;
using amk::Error;
using amk::ErrorKind;
using amk_test::contains;
using amk_test::entries;
using amk_test::FileSizeLimit;
using amk_test::read_text;
using amk_test::ScratchDir;
using amk_test::write_text;

namespace {

std::vector<std::byte> fake_cubin(size_t size, unsigned char fill) {
  std::vector<std::byte> b(size, std::byte{fill});
  const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
  for (size_t i = 0; i < 4; ++i) b[i] = std::byte{elf[i]};
  return b;
}

ArtifactRecord sample_record() {
  ArtifactRecord r;
  r.arch = "sm_90a";
  r.kernel_name = "amk_vm";
  r.tma_count = 2;
  r.nvrtc_version = "13.0";
  r.amk_version = "0.1.0";
  r.source_fingerprint = std::string(64, 'a');
  r.program_fingerprint = std::string(64, 'b');
  r.options = {"--gpu-architecture=sm_90a", "-std=c++17", "--ptxas-options=-v"};
  return r;
}

template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an amk::Error");
  return Error(ErrorKind::internal, "", "", "");
}

// The record of a written artifact with one field replaced (or removed: `value` discarded).
void rewrite_record(const fs::path& cubin, const std::string& key, const nlohmann::json& value) {
  const fs::path rec = amk::artifact_record_path(cubin);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(read_text(rec));
  if (value.is_discarded())
    j.erase(key);
  else
    j[key] = value;
  write_text(rec, j.dump(2));
}

}  // namespace

TEST_CASE("artifact: written and read back, the record beside the cubin") {
  ScratchDir dir("artifact_roundtrip");
  const fs::path cubin = dir.path() / "vm.cubin";
  const std::vector<std::byte> bytes = fake_cubin(4096, 0x5a);
  amk::write_artifact(cubin, bytes, sample_record());
  // The cubin and its record, nothing else (no temporary file left).
  CHECK(entries(dir.path()) == std::vector<std::string>{"vm.cubin", "vm.cubin.json"});
  CHECK(amk::artifact_record_path(cubin) == dir.path() / "vm.cubin.json");

  const nlohmann::json j = nlohmann::json::parse(read_text(dir.path() / "vm.cubin.json"));
  CHECK(j["format"] == "amk.cubin");
  CHECK(j["version"] == amk::kArtifactVersion);
  CHECK(j["arch"] == "sm_90a");
  CHECK(j["cubin_bytes"] == 4096);
  CHECK(j["cubin_sha256"] == amk::sha256_hex(bytes));

  const amk::LoadedArtifact a = amk::read_artifact(cubin);
  CHECK(a.cubin == bytes);
  const ArtifactRecord& r = a.record;
  const ArtifactRecord want = sample_record();
  CHECK(r.arch == want.arch);
  CHECK(r.kernel_name == want.kernel_name);
  CHECK(r.tma_count == want.tma_count);
  CHECK(r.nvrtc_version == want.nvrtc_version);
  CHECK(r.amk_version == want.amk_version);
  CHECK(r.source_fingerprint == want.source_fingerprint);
  CHECK(r.program_fingerprint == want.program_fingerprint);
  CHECK(r.options == want.options);
  CHECK(r.cubin_bytes == 4096);
  CHECK(r.cubin_sha256 == amk::sha256_hex(bytes));
  // What this run would compile: the same, so it loads.
  CHECK(amk::artifact_mismatches(a, want).empty());
  amk::check_artifact(cubin, a, want);
  // The program's fingerprint is kept for people, not compared: the VM serves any program whose
  // VM source is the same.
  ArtifactRecord other_program = want;
  other_program.program_fingerprint = std::string(64, 'c');
  CHECK(amk::artifact_mismatches(a, other_program).empty());

  // Writing again replaces both files.
  const std::vector<std::byte> bytes2 = fake_cubin(100, 0x11);
  amk::write_artifact(cubin, bytes2, sample_record());
  CHECK(amk::read_artifact(cubin).cubin == bytes2);
  CHECK(amk::read_artifact(cubin).record.cubin_bytes == 100);
  CHECK(entries(dir.path()) == std::vector<std::string>{"vm.cubin", "vm.cubin.json"});
}

TEST_CASE("artifact: every difference from the expected record is listed in one error") {
  ScratchDir dir("artifact_mismatch");
  const fs::path cubin = dir.path() / "vm.cubin";
  amk::write_artifact(cubin, fake_cubin(256, 0x22), sample_record());
  const amk::LoadedArtifact a = amk::read_artifact(cubin);

  SUBCASE("each field on its own") {
    struct Case {
      const char* field;
      void (*change)(ArtifactRecord&);
    };
    const Case cases[] = {
        {"arch", [](ArtifactRecord& r) { r.arch = "sm_100a"; }},
        {"kernel_name", [](ArtifactRecord& r) { r.kernel_name = "amk_vm2"; }},
        {"tma_count", [](ArtifactRecord& r) { r.tma_count = 3; }},
        {"nvrtc_version", [](ArtifactRecord& r) { r.nvrtc_version = "12.8"; }},
        {"amk_version", [](ArtifactRecord& r) { r.amk_version = "0.2.0"; }},
        {"source_fingerprint", [](ArtifactRecord& r) { r.source_fingerprint = "f00d"; }},
        {"options", [](ArtifactRecord& r) { r.options.push_back("-lineinfo"); }},
    };
    for (const Case& c : cases) {
      CAPTURE(c.field);
      ArtifactRecord expected = sample_record();
      c.change(expected);
      const std::vector<std::string> m = amk::artifact_mismatches(a, expected);
      REQUIRE(m.size() == 1);
      CHECK(m[0].rfind(std::string(c.field) + ": recorded ", 0) == 0);
    }
  }

  SUBCASE("all at once, recorded vs expected") {
    ArtifactRecord expected = sample_record();
    expected.arch = "sm_100a";
    expected.kernel_name = "amk_vm2";
    expected.tma_count = 3;
    expected.nvrtc_version = "12.8";
    expected.amk_version = "0.2.0";
    expected.source_fingerprint = std::string(64, 'd');
    expected.options = {"--gpu-architecture=sm_100a", "-std=c++17", "--ptxas-options=-v"};
    const std::vector<std::string> m = amk::artifact_mismatches(a, expected);
    REQUIRE(m.size() == 7);
    CHECK(m[0] == "arch: recorded sm_90a, expected sm_100a (the device's)");
    CHECK(contains(m[2], "tma_count: recorded 2, expected 3"));
    CHECK(contains(m[3], "nvrtc_version: recorded 13.0, expected 12.8"));
    CHECK(contains(m[5], "source_fingerprint: recorded " + std::string(64, 'a') + ", expected " +
                             std::string(64, 'd')));
    CHECK(contains(m[6], "only recorded [--gpu-architecture=sm_90a], only expected "
                         "[--gpu-architecture=sm_100a]"));

    const Error e = expect_error([&] { amk::check_artifact(cubin, a, expected); });
    CHECK(e.kind() == ErrorKind::device);
    CHECK(e.code() == "artifact.mismatch");
    CHECK(e.where() == cubin.string());
    CHECK(static_cast<int>(e.exit_code()) == 5);
    CHECK(contains(e.message(), "7 difference(s)"));
    for (const std::string& line : m) CHECK(contains(e.message(), line));
    CHECK(e.message().find('\n') == std::string::npos);  // one line
  }

  SUBCASE("a cubin that is not the one its record names") {
    // Rewritten in place after amk compile (or a crash between the two renames).
    write_text(cubin, std::string("\x7f"
                                  "ELF") +
                          std::string(300, 'x'));
    const amk::LoadedArtifact changed = amk::read_artifact(cubin);
    const std::vector<std::string> m = amk::artifact_mismatches(changed, sample_record());
    REQUIRE(m.size() == 2);
    CHECK(m[0] == "cubin_bytes: recorded 256, the file has 304");
    CHECK(contains(m[1], "cubin_sha256: recorded " + amk::sha256_hex(fake_cubin(256, 0x22))));
  }
}

TEST_CASE("artifact: a malformed record is refused with its place") {
  ScratchDir dir("artifact_malformed");
  const fs::path cubin = dir.path() / "vm.cubin";
  const std::string rec = (dir.path() / "vm.cubin.json").string();
  amk::write_artifact(cubin, fake_cubin(128, 0x33), sample_record());

  const auto refused = [&](const std::string& code, const std::string& where) {
    const Error e = expect_error([&] { (void)amk::read_artifact(cubin); });
    CHECK(e.kind() == ErrorKind::io);
    CHECK(e.code() == code);
    CHECK(e.where() == where);
    CHECK(static_cast<int>(e.exit_code()) == 4);
    return e.message();
  };

  SUBCASE("not JSON") {
    write_text(rec, "{\"format\": \"amk.cubin\", ");
    CHECK(contains(refused("io.artifact.syntax", rec), "is not JSON (byte"));
  }
  SUBCASE("not an object") {
    write_text(rec, "[1, 2]");
    refused("io.artifact.syntax", rec);
  }
  SUBCASE("another format") {
    rewrite_record(cubin, "format", "amk.cubin-cache");
    refused("io.artifact.format", rec + "#/format");
  }
  SUBCASE("another version") {
    rewrite_record(cubin, "version", 2);
    CHECK(contains(refused("io.artifact.format", rec + "#/version"), "version 2"));
  }
  SUBCASE("each field missing") {
    for (const char* key :
         {"arch", "kernel_name", "tma_count", "nvrtc_version", "amk_version", "source_fingerprint",
          "program_fingerprint", "options", "cubin_bytes", "cubin_sha256"}) {
      CAPTURE(key);
      amk::write_artifact(cubin, fake_cubin(128, 0x33), sample_record());
      rewrite_record(cubin, key, nlohmann::json(nlohmann::json::value_t::discarded));
      CHECK(contains(refused("io.artifact.field", rec + "#/" + key), "has no '"));
    }
  }
  SUBCASE("wrong types") {
    const std::pair<const char*, nlohmann::json> bad[] = {
        {"arch", 90},
        {"tma_count", "2"},
        {"tma_count", -1},
        {"tma_count", 1.5},
        {"tma_count", 5000000000LL},
        {"options", "--gpu-architecture=sm_90a"},
        {"options", nlohmann::json::array({"-std=c++17", 3})},
        {"cubin_bytes", nullptr},
        {"cubin_sha256", nlohmann::json::array()},
    };
    for (const auto& [key, value] : bad) {
      const std::string field = key, text = value.dump();  // (CAPTURE's lambda: no bindings)
      CAPTURE(field);
      CAPTURE(text);
      amk::write_artifact(cubin, fake_cubin(128, 0x33), sample_record());
      rewrite_record(cubin, key, value);
      CHECK(contains(refused("io.artifact.field", rec + "#/" + key), "must be"));
    }
  }
}

TEST_CASE("artifact: a missing or unreadable file is refused with its path") {
  ScratchDir dir("artifact_missing");
  const fs::path cubin = dir.path() / "vm.cubin";
  const auto refused = [&](const std::string& code, const fs::path& where) {
    const Error e = expect_error([&] { (void)amk::read_artifact(cubin); });
    CHECK(e.kind() == ErrorKind::io);
    CHECK(e.code() == code);
    CHECK(e.where() == where.string());
    return e.message();
  };
  // No cubin.
  CHECK(contains(refused("io.missing", cubin), "no such cubin"));
  // A cubin without its record: the message says what writes it.
  write_text(cubin, std::string("\x7f"
                                "ELF") +
                        std::string(60, '\0'));
  CHECK(contains(refused("io.missing", dir.path() / "vm.cubin.json"), "amk compile PROGRAM -o"));
  // A folder where the cubin should be.
  fs::remove(cubin);
  fs::create_directory(cubin);
  CHECK(contains(refused("io.read", cubin), "not a regular file"));
  fs::remove(cubin);
  // Not a cubin at all (a record naming a PTX file, say): refused before any comparison.
  const std::string ptx = "//\n// Generated by NVIDIA NVVM Compiler\n.version 8.0\n";
  amk::write_artifact(cubin, std::as_bytes(std::span(ptx.data(), ptx.size())), sample_record());
  CHECK(contains(refused("io.artifact.cubin", cubin), "no ELF header"));
}

TEST_CASE("artifact: a failed write leaves the previous pair whole and no temporary file") {
  ScratchDir dir("artifact_full");
  const fs::path cubin = dir.path() / "vm.cubin";
  const std::vector<std::byte> old_bytes = fake_cubin(64, 0x44);
  amk::write_artifact(cubin, old_bytes, sample_record());
  const std::string old_record = read_text(dir.path() / "vm.cubin.json");
  {
    FileSizeLimit limit(4096);  // a full disk for the 64 KiB cubin
    REQUIRE(limit.ok());
    const Error e =
        expect_error([&] { amk::write_artifact(cubin, fake_cubin(65536, 0x55), sample_record()); });
    CHECK(e.code() == "io.write");
    CHECK(e.where() == cubin.string());
  }
  CHECK(entries(dir.path()) == std::vector<std::string>{"vm.cubin", "vm.cubin.json"});
  CHECK(read_text(dir.path() / "vm.cubin.json") == old_record);
  const amk::LoadedArtifact a = amk::read_artifact(cubin);
  CHECK(a.cubin == old_bytes);
  CHECK(amk::artifact_mismatches(a, sample_record()).empty());
  // Into a folder that does not exist: nothing is written.
  const Error e = expect_error(
      [&] { amk::write_artifact(dir.path() / "no" / "vm.cubin", old_bytes, sample_record()); });
  CHECK(e.code() == "io.write");
  CHECK(!fs::exists(dir.path() / "no"));
}
