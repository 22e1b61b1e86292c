// The .amkb encoding of wrapper programs (schemas/wrapper.md, "Binary encoding"): JSON -> .amkb
// -> model is lossless for the sample and for a program with every kind of package array, the
// writer is canonical, and each damaged header field, section table entry, section and offset is
// refused with its code and location.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "wrapper/amkb.hpp"
#include "wrapper/wrapper.hpp"

#include "sample.hpp"

using namespace amk;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::byte>;

uint32_t rd32(const Bytes& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint64_t rd64(const Bytes& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
void put32(Bytes& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put64(Bytes& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }
uint32_t crc(const Bytes& b, size_t at, size_t n) {
  return crc32c(std::span<const std::byte>(b.data() + at, n));
}

struct Part {
  uint32_t kind;
  Bytes bytes;
};

// The sections of a file, in table order.
std::vector<Part> split(const Bytes& f) {
  std::vector<Part> parts;
  for (uint32_t i = 0; i < rd32(f, 28); ++i) {
    const size_t e = 64 + 32 * i;
    const uint64_t off = rd64(f, e + 8), size = rd64(f, e + 16);
    parts.push_back({rd32(f, e), Bytes(f.begin() + off, f.begin() + off + size)});
  }
  return parts;
}

// Recomputes every checksum from the table (what a careful forger would do).
Bytes fixed(Bytes f) {
  const uint32_t count = rd32(f, 28);
  for (uint32_t i = 0; i < count && 64 + 32 * (i + 1) <= f.size(); ++i) {
    const size_t e = 64 + 32 * i;
    const uint64_t off = rd64(f, e + 8), size = rd64(f, e + 16);
    if (off <= f.size() && size <= f.size() - off) put32(f, e + 24, crc(f, off, size));
  }
  if (64 + 32 * count <= f.size()) put32(f, 52, crc(f, 64, 32 * count));
  put32(f, 60, crc(f, 0, 60));
  return f;
}

// A file with these sections, laid out as the writer lays them out.
Bytes assemble(const std::vector<Part>& parts) {
  Bytes f(64 + 32 * parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const size_t align = parts[i].kind == 3 ? 256 : 8;
    f.resize((f.size() + align - 1) / align * align);
    const size_t e = 64 + 32 * i;
    put32(f, e, parts[i].kind);
    put64(f, e + 8, f.size());
    put64(f, e + 16, parts[i].bytes.size());
    f.insert(f.end(), parts[i].bytes.begin(), parts[i].bytes.end());
  }
  std::memcpy(f.data(), kWrapperAmkbMagic.data(), 8);
  put32(f, 8, 1);
  put32(f, 12, 0x01020304);
  put32(f, 16, 64);
  put32(f, 20, 14);
  put32(f, 24, 144);
  put32(f, 28, static_cast<uint32_t>(parts.size()));
  put64(f, 32, 64);
  put64(f, 40, f.size());
  return fixed(f);
}

Part* find(std::vector<Part>& parts, uint32_t kind) {
  for (Part& p : parts)
    if (p.kind == kind) return &p;
  return nullptr;
}

json meta_of(const std::vector<Part>& parts) {
  const Bytes& m = parts[0].bytes;
  return json::parse(std::string(reinterpret_cast<const char*>(m.data()), m.size()));
}
Bytes text_bytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

// A file whose META is edited by `edit`.
template <typename F>
Bytes with_meta(const Bytes& f, F&& edit) {
  auto parts = split(f);
  json m = meta_of(parts);
  edit(m);
  parts[0].bytes = text_bytes(m.dump());
  return assemble(parts);
}

WrapperProgram decode(const Bytes& f, const fs::path& dir = test::kWrapperSampleDir) {
  return parse_amkb_wrapper(f, dir);
}

void refuses(const Bytes& f, const std::string& code, const std::string& where) {
  try {
    (void)decode(f);
    FAIL("accepted; expected " << code << " at " << where);
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == code, std::string(e.what()));
    CHECK_MESSAGE(e.where() == where, std::string(e.what()));
  }
}

std::string b64(const std::vector<uint8_t>& v) {
  Bytes b(v.size());
  std::memcpy(b.data(), v.data(), v.size());
  return base64_encode(b);
}
template <typename T>
std::string b64_of(std::initializer_list<T> values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  size_t i = 0;
  for (T v : values) std::memcpy(bytes.data() + sizeof(T) * i++, &v, sizeof(T));
  return b64(bytes);
}

// Every kind of package array: inline bytes of each dtype, zeros, constant, random, values and a
// raw data file, an empty array and absent ones; tensor arguments with values and a TMA spec.
json every_kind() {
  std::vector<uint8_t> comm(32, 0);
  comm[0] = 3;  // an HBM send
  std::vector<float> xs(128);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i) * 0.25f;
  return {
      {"format", "amk.wrapper"},
      {"version", 1},
      {"name", "every_kind"},
      {"description", "one of each"},
      {"wrapper",
       {{"kernel_name", "k"},
        {"source", "extern \"C\" __global__ void k() {} // \xc3\xa9"},
        {"defines", {"A=1", "B"}}}},
      {"launch", {{"queues", 2}, {"block_dim", {64, 2}}, {"timeout_ms", 77}}},
      {"package",
       {{"instructions", {{"dtype", "u8"}, {"count", 3}, {"record_bytes", 1}, {"data", "AQID"}}},
        {"queue_offsets", {{"dtype", "i64"}, {"count", 2}, {"data", b64_of<int64_t>({0, 1})}}},
        {"queue_lengths", {{"dtype", "u32"}, {"count", 2}, {"data", b64_of<uint32_t>({1, 2})}}},
        {"slots",
         {{"dtype", "u8"}, {"count", 32}, {"record_bytes", 16}, {"init", {{"kind", "zeros"}}}}},
        {"comms", {{"dtype", "u8"}, {"count", 32}, {"data", b64(comm)}}},
        {"barrier_init_offsets",
         {{"dtype", "i32"}, {"count", 2}, {"data", b64_of<int32_t>({0, 1})}}},
        {"barrier_init_lengths",
         {{"dtype", "i32"}, {"count", 2}, {"data", b64_of<int32_t>({1, 1})}}},
        {"barrier_init_indices",
         {{"dtype", "f16"}, {"count", 2}, {"data", b64_of<uint16_t>({1, 2})}}},
        {"args",
         {{"dtype", "f32"}, {"count", 4}, {"init", {{"kind", "constant"}, {"value", 1.5}}}}},
        {"input_slots",
         {{"dtype", "bf16"}, {"count", 8}, {"init", {{"kind", "random"}, {"seed", 3}}}}},
        {"task_coords",
         {{"dtype", "i32"}, {"count", 2}, {"init", {{"kind", "values"}, {"values", {4, 5}}}}}},
        {"global_staging",
         {{"dtype", "u8"}, {"count", 16}, {"init", {{"kind", "raw"}, {"path", "coords.bin"}}}}},
        {"flags", {{"dtype", "u32"}, {"count", 0}}}}},
      {"tensor_args",
       {{{"name", "x"},
         {"dtype", "f32"},
         {"shape", {2, 64}},
         {"init", {{"kind", "values"}, {"values", xs}}}},
        {{"name", "y"}, {"dtype", "f32"}, {"shape", {16}}, {"output", true}}}},
      {"tma", {{{"name", "m"}, {"tensor", "x"}, {"dims", {64, 2}}, {"box", {32, 1}}}}},
      {"target",
       {{"arch", "sm_90"},
        {"sm_count", 8},
        {"max_shared_memory_per_block_optin", 1000},
        {"cluster_launch", false},
        {"compiler_version", "c 1"},
        {"fingerprint", "t"}}},
      {"artifact_fingerprint", "a"}};
}

}  // namespace

TEST_CASE("the sample converts to .amkb and back without loss, canonically") {
  const WrapperProgram w = load_wrapper_file(test::kWrapperSampleDir / "wrapper.json");
  const Bytes f = wrapper_to_amkb(w);
  CHECK(std::memcmp(f.data(), "AMKW\r\n\x1a\n", 8) == 0);
  CHECK(is_wrapper_amkb(std::string_view(reinterpret_cast<const char*>(f.data()), f.size())));
  const WrapperProgram back = decode(f);
  CHECK(back == w);
  CHECK(wrapper_to_json(back) == wrapper_to_json(w));
  CHECK(wrapper_to_amkb(back) == f);
  // The source is a file: no SOURCE section; the inline arrays sit raw in PACKAGE.
  const auto parts = split(f);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].kind == 1);
  CHECK(parts[1].kind == 3);
  const json m = meta_of(parts);
  CHECK(m["wrapper"]["source_path"] == "kernel.cu");
  CHECK_FALSE(m["wrapper"].contains("source"));
  CHECK(m["package"]["instructions"]["raw"] == 0);
  CHECK(m["package"]["queue_offsets"]["raw"] == 256);
  CHECK_FALSE(m["package"]["instructions"].contains("data"));
}

TEST_CASE("a program with every kind of package array round-trips through .amkb") {
  const fs::path dir = fs::temp_directory_path() / "amk_test_wrapper_amkb";
  fs::create_directories(dir);
  std::ofstream(dir / "coords.bin", std::ios::binary) << std::string(16, '\x07');
  const WrapperProgram w = parse_json_wrapper(every_kind().dump(), dir);
  const Bytes f = wrapper_to_amkb(w);
  const WrapperProgram back = decode(f, dir);
  CHECK(back == w);
  CHECK(wrapper_to_json(back) == wrapper_to_json(w));
  CHECK(back.wrapper.source == w.wrapper.source);
  CHECK(back.entry(PackageArray::comms).buffer.init.data ==
        w.entry(PackageArray::comms).buffer.init.data);
  CHECK(back.entry(PackageArray::global_staging).buffer.init.kind == InitKind::raw);
  CHECK(back.entry(PackageArray::flags).present);
  CHECK_FALSE(back.entry(PackageArray::input_slots).buffer.init.data.size() > 0);
  const auto parts = split(f);
  REQUIRE(parts.size() == 3);
  CHECK(parts[1].kind == 2);
  CHECK(std::string(reinterpret_cast<const char*>(parts[1].bytes.data()), parts[1].bytes.size()) ==
        w.wrapper.source);
  (void)check_wrapper(back);  // the structural checks pass on what came back
  fs::remove_all(dir);
}

TEST_CASE("a damaged header is refused with its code and byte") {
  const Bytes good = wrapper_to_amkb(load_wrapper_file(test::kWrapperSampleDir / "wrapper.json"));
  const auto patched = [&](size_t at, uint32_t v, bool fix = true) {
    Bytes f = good;
    put32(f, at, v);
    return fix ? fixed(f) : f;
  };
  refuses(Bytes(good.begin(), good.begin() + 30), "amkb.truncated", "header byte 30");
  refuses(Bytes(good.begin(), good.end() - 1), "amkb.truncated",
          "header byte " + std::to_string(good.size() - 1));
  {
    Bytes f = good;
    f[5] = std::byte{'A'};
    refuses(f, "amkb.magic", "header byte 0");
    f = good;
    f[3] = std::byte{'B'};  // a VM program's magic
    refuses(f, "amkb.magic", "header byte 0");
  }
  refuses(patched(8, 2), "amkb.version", "header byte 8");
  refuses(patched(12, 0x04030201), "amkb.endian", "header byte 12");
  refuses(patched(56, 7, false), "amkb.checksum", "header byte 60");
  refuses(patched(56, 7), "amkb.header", "header byte 56");
  refuses(patched(48, 1), "amkb.header", "header byte 48");
  refuses(patched(16, 32), "amkb.header", "header byte 16");
  refuses(patched(20, 13), "amkb.header", "header byte 20");
  refuses(patched(24, 128), "amkb.header", "header byte 24");
  refuses(patched(28, 0), "amkb.header", "header byte 28");
  refuses(patched(28, 4), "amkb.header", "header byte 28");
  refuses(patched(32, 96), "amkb.header", "header byte 32");
  {
    Bytes f = good;
    put64(f, 40, good.size() - 8);
    refuses(fixed(f), "amkb.header", "header byte 40");
    put64(f, 40, uint64_t{1} << 40);
    refuses(fixed(f), "limit.file", "header byte 40");
  }
  {
    Bytes f = good;
    put32(f, 52, rd32(f, 52) ^ 1);
    put32(f, 60, crc(f, 0, 60));
    refuses(f, "amkb.checksum", "section table byte 64");
  }
}

TEST_CASE("a damaged section table or section is refused with its code and byte") {
  const Bytes good = wrapper_to_amkb(load_wrapper_file(test::kWrapperSampleDir / "wrapper.json"));
  const size_t meta_entry = 64, package_entry = 96;
  const uint64_t package_at = rd64(good, package_entry + 8);
  const auto entry = [&](size_t at, uint64_t v, bool wide) {
    Bytes f = good;
    if (wide)
      put64(f, at, v);
    else
      put32(f, at, static_cast<uint32_t>(v));
    return fixed(f);
  };
  refuses(entry(package_entry, 9, false), "amkb.section", "section table byte 96");
  refuses(entry(package_entry, 1, false), "amkb.section", "section table byte 96");
  refuses(entry(package_entry + 4, 1, false), "amkb.section", "section table byte 100");
  refuses(entry(package_entry + 28, 1, false), "amkb.section", "section table byte 124");
  refuses(entry(package_entry + 8, package_at + 8, true), "amkb.section", "section table byte 104");
  refuses(entry(package_entry + 8, 0, true), "amkb.section.overlap", "section table byte 104");
  refuses(entry(package_entry + 16, uint64_t{1} << 60, true), "amkb.section",
          "section table byte 104");
  refuses(entry(meta_entry, 2, false), "amkb.section.missing", "section table byte 64");
  {
    Bytes f = good;
    f[package_at + 3] ^= std::byte{0x5A};
    refuses(f, "amkb.checksum", "section PACKAGE byte " + std::to_string(package_at));
    f = good;
    f[package_at - 1] = std::byte{1};  // padding before PACKAGE
    refuses(fixed(f), "amkb.section", "section table byte 104");
  }
}

TEST_CASE("SOURCE, META and PACKAGE contents are checked, located in their section") {
  const Bytes sample = wrapper_to_amkb(load_wrapper_file(test::kWrapperSampleDir / "wrapper.json"));
  json inline_src = every_kind();
  inline_src["package"].erase("global_staging");  // no data file needed
  const Bytes good =
      wrapper_to_amkb(parse_json_wrapper(inline_src.dump(), test::kWrapperSampleDir));
  auto parts = split(good);
  const uint64_t source_at = rd64(good, 96 + 8);
  const uint64_t meta_at = rd64(good, 64 + 8);
  const uint64_t package_at = rd64(good, 128 + 8);

  SUBCASE("SOURCE") {
    auto p = parts;
    find(p, 2)->bytes.clear();
    refuses(assemble(p), "wrapper.source", "section SOURCE byte " + std::to_string(source_at));
    p = parts;
    find(p, 2)->bytes[4] = std::byte{0xFF};
    refuses(assemble(p), "amkb.source", "section SOURCE byte " + std::to_string(source_at + 4));
    p = {parts[0], parts[2]};  // neither SOURCE nor source_path
    refuses(assemble(p), "wrapper.source", "section META /wrapper");
    refuses(with_meta(good, [](json& m) { m["wrapper"]["source_path"] = "kernel.cu"; }),
            "wrapper.source", "section META /wrapper/source_path");
  }
  SUBCASE("META") {
    auto p = parts;
    p[0].bytes[0] = std::byte{'x'};
    refuses(assemble(p), "json.syntax", "section META byte " + std::to_string(meta_at));
    refuses(with_meta(good, [](json& m) { m["wrapper"]["source"] = "int x;"; }), "json.unknown_key",
            "section META /wrapper/source");
    refuses(with_meta(good, [](json& m) { m["package"]["queue_offsets"]["data"] = "AAAAAA=="; }),
            "json.unknown_key", "section META /package/queue_offsets/data");
    refuses(with_meta(good, [](json& m) { m["launch"]["queues"] = 0; }), "wrapper.launch.queues",
            "section META /launch/queues");
    refuses(with_meta(good, [](json& m) { m["package"]["flags"]["raw"] = 0; }), "amkb.package",
            "section META /package/flags/raw");
    refuses(with_meta(good, [](json& m) { m["package"]["slots"]["raw"] = 0; }),
            "wrapper.package.data", "section META /package/slots/init");
  }
  SUBCASE("PACKAGE") {
    // instructions at 0 (3 bytes), queue_offsets at 256, queue_lengths at 512, comms at 768, ...
    refuses(with_meta(good, [](json& m) { m["package"]["queue_offsets"]["raw"] = 8; }),
            "amkb.package", "section PACKAGE byte " + std::to_string(package_at + 256));
    auto p = parts;
    find(p, 3)->bytes.resize(600);  // queue_lengths [512, 520) fits, comms [768, 800) does not
    refuses(assemble(p), "amkb.package",
            "section PACKAGE byte " + std::to_string(package_at + 600));
    p = parts;
    find(p, 3)->bytes.push_back(std::byte{0});
    const uint64_t end = parts[2].bytes.size();
    refuses(assemble(p), "amkb.package",
            "section PACKAGE byte " + std::to_string(package_at + end));
    p = parts;
    find(p, 3)->bytes[100] = std::byte{1};  // padding after instructions
    refuses(assemble(p), "amkb.package", "section PACKAGE byte " + std::to_string(package_at + 3));
    p = {parts[0], parts[1]};  // raw arrays but no PACKAGE
    refuses(assemble(p), "amkb.section.missing", "section table byte 64");
  }
  SUBCASE("PACKAGE without raw arrays") {
    auto p = split(sample);
    json m = meta_of(p);
    for (auto& [k, v] : m["package"].items())
      if (v.contains("raw")) v.erase("raw");
    p[0].bytes = text_bytes(m.dump());
    const Bytes f = assemble(p);
    refuses(f, "amkb.section", "section PACKAGE byte " + std::to_string(rd64(f, 96 + 8)));
  }
}

TEST_CASE("kind detection: a wrapper .amkb is a wrapper file; the VM loader refuses it by kind") {
  const fs::path dir = fs::temp_directory_path() / "amk_test_wrapper_amkb_kind";
  fs::create_directories(dir);
  const Bytes f = wrapper_to_amkb(parse_json_wrapper(every_kind().dump(), test::kWrapperSampleDir));
  std::ofstream(dir / "w.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
  std::ofstream(dir / "coords.bin", std::ios::binary) << std::string(16, '\x07');
  CHECK(is_wrapper_file(dir / "w.bin"));
  CHECK(load_wrapper_file(dir / "w.bin").name == "every_kind");
  try {
    (void)load_program_file(dir / "w.bin");
    FAIL("the VM loader took a wrapper .amkb");
  } catch (const Error& e) {
    CHECK(e.code() == "wrapper.unsupported");
    CHECK(e.where() == "header byte 0");
  }
  fs::remove_all(dir);
}

TEST_CASE("rebasing a wrapper rewrites its data and source paths; the source never leaves") {
  const fs::path dir = fs::temp_directory_path() / "amk_test_wrapper_rebase";
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "coords.bin", std::ios::binary) << std::string(16, '\x07');
  std::ofstream(dir / "sub" / "k.cu") << "extern \"C\" __global__ void k() {}";
  json j = every_kind();
  j["wrapper"].erase("source");
  j["wrapper"]["source_path"] = "k.cu";
  WrapperProgram w = parse_json_wrapper(j.dump(), dir / "sub");
  WrapperProgram up = w;
  CHECK(rebase_wrapper_paths(up, dir, {}) == 2);
  CHECK(up.wrapper.source_path == "sub/k.cu");
  CHECK(up.entry(PackageArray::global_staging).buffer.init.path == "sub/coords.bin");
  fs::create_directories(dir / "other");
  WrapperProgram away = w;
  try {
    (void)rebase_wrapper_paths(away, dir / "other", LoadOptions{true, false});
    FAIL("the source left the folder");
  } catch (const Error& e) {
    CHECK(e.code() == "usage.convert.path");
    CHECK(e.where() == "/wrapper/source_path");
  }
  try {
    (void)rebase_wrapper_paths(away, dir / "other", {});
    FAIL("a data path left the folder");
  } catch (const Error& e) {
    CHECK(e.code() == "usage.convert.path");
    CHECK(e.where() == "/package/global_staging/init/path");
  }
  fs::remove_all(dir);
}
