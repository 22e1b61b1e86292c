// .amkb for wrapper programs. The byte layout and every error code are in schemas/wrapper.md
// ("Binary encoding"); keep the two in step. Header and section table are the VM .amkb's
// (src/io/amkb.cpp) under the magic AMKW. META is the JSON encoding's canonical text, read by the
// JSON reader, so both encodings take exactly the same checks; SOURCE and PACKAGE hold the inline
// source and the package arrays' contents raw. The reader is fuzzed: every size and offset is
// checked against the input's byte count before it is used to read or allocate.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "io/amkb_bytes.hpp"
#include "io/amkb_frame.hpp"
#include "wrapper/amkb.hpp"

namespace amk {
namespace {

using namespace amkb_bytes;

using namespace amkb_frame;

constexpr std::array<uint8_t, 4> kVmMagic = {'A', 'M', 'K', 'B'};
constexpr uint64_t kPackageAlign = 256;  // every array's contents start on this file alignment

// The header's own words: the package array count and the tensor-argument record size.
constexpr size_t kHdrPackageArrays = kHdrOwn20;
constexpr size_t kHdrTensorArgBytes = kHdrOwn24;

enum WrapperSection : uint32_t { kMeta = 1, kSource = 2, kPackage = 3 };
constexpr SectionKind kKinds[] = {{kMeta, "META", 8, true},
                                  {kSource, "SOURCE", 8, false},
                                  {kPackage, "PACKAGE", kPackageAlign, false}};
constexpr uint32_t kSectionKinds = 3;

uint64_t round_up(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

using Sections = std::array<Section, kSectionKinds + 1>;  // by kind

void read_header(const uint8_t* f, uint64_t n) {
  if (n > kMaxFileBytes)
    fail("limit.file", "header", 0,
         "file is " + std::to_string(n) + " bytes (limit " + std::to_string(kMaxFileBytes) + ")");
  // Magic first (over what exists), so that a short file that is no wrapper .amkb says so.
  const auto* magic = reinterpret_cast<const uint8_t*>(kWrapperAmkbMagic.data());
  if (n > 0 && std::memcmp(f, magic, std::min<uint64_t>(n, kWrapperAmkbMagic.size())) != 0) {
    if (n >= kVmMagic.size() && std::memcmp(f, kVmMagic.data(), kVmMagic.size()) == 0)
      fail("amkb.magic", "header", 0,
           "a VM program's .amkb (magic AMKB), not a wrapper program's (magic AMKW)");
    fail("amkb.magic", "header", 0, "not a wrapper .amkb file (bad magic bytes)");
  }
  check_header_start(f, n, "wrapper .amkb");
  if (const uint32_t a = rd32(f + kHdrPackageArrays); a != kPackageArrays)
    fail("amkb.header", "header", kHdrPackageArrays,
         "the file is for " + std::to_string(a) + " package arrays; this amk passes " +
             std::to_string(kPackageArrays));
  if (const uint32_t t = rd32(f + kHdrTensorArgBytes); t != sizeof(WrapperTensorArgRecord))
    fail("amkb.header", "header", kHdrTensorArgBytes,
         "the file is for " + std::to_string(t) +
             "-byte tensor-argument records; this amk writes " +
             std::to_string(sizeof(WrapperTensorArgRecord)));
  if (const uint32_t c = rd32(f + kHdrSectionCount); c < 1 || c > kSectionKinds)
    fail("amkb.header", "header", kHdrSectionCount,
         "section count " + std::to_string(c) + " is not 1..3");
  check_header_end(f, n, rd32(f + kHdrSectionCount));
}

std::string read_source(const uint8_t* f, const Section& s) {
  if (s.size == 0)
    fail("wrapper.source", "section SOURCE", s.offset, "the kernel's source is empty");
  if (s.size > kMaxWrapperSourceBytes)
    fail("limit.source", "section SOURCE", s.offset,
         "the source is " + std::to_string(s.size) + " bytes; at most " +
             std::to_string(kMaxWrapperSourceBytes));
  std::string text(reinterpret_cast<const char*>(f + s.offset), s.size);
  if (const size_t bad = invalid_utf8_at(text); bad != std::string::npos)
    fail("amkb.source", "section SOURCE", s.offset + bad, "the source is not valid UTF-8");
  return text;
}

// Moves a META reader error to the section: "byte N" of the text becomes the file's byte, a JSON
// pointer is kept after the section's name.
Error in_meta(const Error& e, const Section& s) {
  std::string where = "section META ";
  if (e.where().rfind("byte ", 0) == 0) {
    uint64_t at = 0;
    for (char c : e.where().substr(5)) at = c >= '0' && c <= '9' ? at * 10 + (c - '0') : at;
    where += "byte " + std::to_string(s.offset + std::min(at == 0 ? 0 : at - 1, s.size));
  } else {
    where += e.where().empty() ? "/" : e.where();
  }
  Error moved(e.kind(), e.code(), std::move(where), e.message());
  moved.with_detail(e.detail());
  return moved;
}

// Copies each raw array's contents out of PACKAGE, in parameter order, each at its canonical
// offset (the previous end rounded up to 256; the first at 0) with zero padding between.
void read_package(const uint8_t* f, const Section& pk, const detail::WrapperMeta& meta,
                  WrapperProgram& w) {
  uint64_t end = 0;
  bool any = false;
  for (size_t i = 0; i < kPackageArrays; ++i) {
    if (!meta.raw[i]) continue;
    const std::string name(package_array_name(static_cast<PackageArray>(i)));
    if (!pk.present)
      fail("amkb.section.missing", "section table", kHeaderBytes,
           "package array " + name +
               " has its contents in PACKAGE, but there is no PACKAGE section");
    PackageEntry& e = w.package[i];
    const uint64_t start = any ? round_up(end, kPackageAlign) : 0;
    const uint64_t at = pk.offset + std::min(start, pk.size);
    if (*meta.raw[i] != start)
      fail("amkb.package", "section PACKAGE", at,
           "package array " + name + ": META gives raw offset " + std::to_string(*meta.raw[i]) +
               "; its place is " + std::to_string(start) +
               " (in parameter order, each at the previous end rounded up to 256)");
    const uint64_t bytes = e.bytes();  // at most kMaxBufferBytes (the reader checked the count)
    if (start > pk.size || bytes > pk.size - start)
      fail("amkb.package", "section PACKAGE", at,
           "package array " + name + " needs PACKAGE bytes [" + std::to_string(start) + ", " +
               std::to_string(start + bytes) + "); the section holds " + std::to_string(pk.size));
    if (!all_zero(f + pk.offset + end, start - end))
      fail("amkb.package", "section PACKAGE", pk.offset + end,
           "nonzero padding before package array " + name);
    const auto* p = reinterpret_cast<const std::byte*>(f + pk.offset + start);
    e.buffer.init.data.assign(p, p + bytes);
    end = start + bytes;
    any = true;
  }
  if (pk.present && !any)
    fail("amkb.section", "section PACKAGE", pk.offset,
         "a PACKAGE section, but no package array has its contents there");
  if (pk.present && end != pk.size)
    fail("amkb.package", "section PACKAGE", pk.offset + end,
         std::to_string(pk.size - end) + " bytes after the last package array's contents");
}

}  // namespace

bool is_wrapper_amkb(std::string_view bytes) noexcept {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kWrapperAmkbMagic.data(), 4) == 0;
}

WrapperProgram parse_amkb_wrapper(std::span<const std::byte> bytes,
                                  const std::filesystem::path& base_dir,
                                  const LoadOptions& options) {
  const auto* f = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint64_t n = bytes.size();
  read_header(f, n);
  Sections sec{};
  read_section_table(f, n, rd32(f + kHdrSectionCount), kKinds, sec);

  detail::WrapperMeta meta;
  std::string source;
  if (sec[kSource].present) {
    source = read_source(f, sec[kSource]);
    meta.source = &source;
  }
  const Section& m = sec[kMeta];
  WrapperProgram w;
  try {
    w = detail::parse_wrapper_meta(
        std::string_view(reinterpret_cast<const char*>(f + m.offset), m.size), base_dir, options,
        meta);
  } catch (const Error& e) {
    throw in_meta(e, m);
  }
  read_package(f, sec[kPackage], meta, w);
  return w;
}

std::vector<std::byte> wrapper_to_amkb(const WrapperProgram& w) {
  // META: the canonical JSON of the program without its bulk. The copy leaves out the raw
  // arrays' contents (written as zeros, then given a "raw" offset) and the inline source.
  WrapperProgram s;
  s.name = w.name;
  s.description = w.description;
  s.version = w.version;
  s.wrapper.kernel_name = w.wrapper.kernel_name;
  s.wrapper.source_path = w.wrapper.source_path;
  s.wrapper.defines = w.wrapper.defines;
  s.launch = w.launch;
  s.tensor_args = w.tensor_args;
  s.tma = w.tma;
  s.target = w.target;
  s.artifact_fingerprint = w.artifact_fingerprint;
  const auto raw = [](const PackageEntry& e) {
    return e.present && e.count() > 0 && e.buffer.init.kind == InitKind::values;
  };
  for (size_t i = 0; i < kPackageArrays; ++i) {
    const PackageEntry& e = w.package[i];
    PackageEntry& c = s.package[i];
    c.present = e.present;
    c.record_bytes = e.record_bytes;
    c.buffer.name = e.buffer.name;
    c.buffer.dtype = e.buffer.dtype;
    c.buffer.shape = e.buffer.shape;
    c.buffer.output = e.buffer.output;
    if (!raw(e)) c.buffer.init = e.buffer.init;
  }
  auto j = nlohmann::ordered_json::parse(wrapper_to_json(s));
  if (w.wrapper.source_path.empty()) j["wrapper"].erase("source");

  std::vector<std::byte> package;
  for (size_t i = 0; i < kPackageArrays; ++i) {
    const PackageEntry& e = w.package[i];
    if (!raw(e)) continue;
    const std::string name(package_array_name(static_cast<PackageArray>(i)));
    if (e.buffer.init.data.size() != e.bytes())
      throw Error(ErrorKind::program, "amkb.encode", "/package/" + name,
                  "the contents are " + std::to_string(e.buffer.init.data.size()) +
                      " bytes; count x dtype is " + std::to_string(e.bytes()));
    const uint64_t start = package.empty() ? 0 : round_up(package.size(), kPackageAlign);
    if (start > kMaxFileBytes || e.bytes() > kMaxFileBytes - start)
      throw Error(ErrorKind::program, "amkb.encode", "/package/" + name,
                  "the package arrays need more than the " + std::to_string(kMaxFileBytes) +
                      " bytes a program file may have");
    package.resize(start);
    package.insert(package.end(), e.buffer.init.data.begin(), e.buffer.init.data.end());
    auto& entry = j["package"][name];
    entry.erase("init");  // the zeros the copy was written with
    entry["raw"] = start;
  }
  const std::string meta = j.dump();

  const auto as_bytes = [](const auto& c) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(c.data()), c.size());
  };
  std::vector<Part> parts = {{kMeta, as_bytes(meta)}};
  if (w.wrapper.source_path.empty()) parts.push_back({kSource, as_bytes(w.wrapper.source)});
  if (!package.empty()) parts.push_back({kPackage, as_bytes(package)});
  if (const uint64_t size = frame_bytes(parts, kKinds); size > kMaxFileBytes)
    throw Error(ErrorKind::program, "amkb.encode", "/package",
                "the file would be " + std::to_string(size) + " bytes, more than the " +
                    std::to_string(kMaxFileBytes) + " a program file may have");
  return write_frame(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kWrapperAmkbMagic.data()),
                               kWrapperAmkbMagic.size()),
      static_cast<uint32_t>(kPackageArrays), static_cast<uint32_t>(sizeof(WrapperTensorArgRecord)),
      parts, kKinds);
}

}  // namespace amk
