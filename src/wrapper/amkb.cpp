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
#include "wrapper/amkb.hpp"

namespace amk {
namespace {

using namespace amkb_bytes;

static_assert(std::endian::native == std::endian::little, ".amkb I/O assumes a little-endian host");

constexpr std::array<uint8_t, 4> kVmMagic = {'A', 'M', 'K', 'B'};
constexpr uint32_t kAmkbVersion = 1;
constexpr uint32_t kByteOrderMark = 0x01020304u;
constexpr uint32_t kByteOrderSwapped = 0x04030201u;
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kEntryBytes = 32;
constexpr uint64_t kPackageAlign = 256;  // every array's contents start on this file alignment

// Header field offsets (the VM .amkb's, with the wrapper's two ABI sizes at 20 and 24).
constexpr size_t kHdrVersion = 8;
constexpr size_t kHdrByteOrder = 12;
constexpr size_t kHdrHeaderBytes = 16;
constexpr size_t kHdrPackageArrays = 20;
constexpr size_t kHdrTensorArgBytes = 24;
constexpr size_t kHdrSectionCount = 28;
constexpr size_t kHdrTableOffset = 32;
constexpr size_t kHdrFileBytes = 40;
constexpr size_t kHdrFlags = 48;
constexpr size_t kHdrTableCrc = 52;
constexpr size_t kHdrReserved = 56;
constexpr size_t kHdrCrc = 60;

enum SectionKind : uint32_t { kMeta = 1, kSource = 2, kPackage = 3 };
constexpr uint32_t kSectionKinds = 3;

struct KindInfo {
  uint32_t kind;
  const char* name;
  uint64_t align;
};
constexpr KindInfo kKinds[kSectionKinds] = {
    {kMeta, "META", 8}, {kSource, "SOURCE", 8}, {kPackage, "PACKAGE", kPackageAlign}};

const KindInfo* find_kind(uint32_t kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return &k;
  return nullptr;
}

[[noreturn]] void fail(std::string code, std::string_view area, uint64_t byte, std::string msg) {
  std::string where(area);
  where += " byte ";
  where += std::to_string(byte);
  throw Error(ErrorKind::program, std::move(code), std::move(where), std::move(msg));
}

void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

uint64_t round_up(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

struct Section {
  const char* name = "";
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc = 0;
  bool present = false;
};
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
  if (n < kHeaderBytes)
    fail("amkb.truncated", "header", n,
         "file ends after " + std::to_string(n) + " bytes, inside the 64-byte header");
  if (const uint32_t v = rd32(f + kHdrVersion); v != kAmkbVersion)
    fail("amkb.version", "header", kHdrVersion,
         "wrapper .amkb version " + std::to_string(v) + " (this amk reads version 1)");
  if (const uint32_t bom = rd32(f + kHdrByteOrder); bom != kByteOrderMark)
    fail("amkb.endian", "header", kHdrByteOrder,
         bom == kByteOrderSwapped ? "file is big endian; amk reads little-endian .amkb only"
                                  : "bad byte order marker");
  if (crc_mismatch(rd32(f + kHdrCrc), f, kHdrCrc))
    fail("amkb.checksum", "header", kHdrCrc, "header checksum mismatch");
  if (rd32(f + kHdrHeaderBytes) != kHeaderBytes)
    fail("amkb.header", "header", kHdrHeaderBytes, "header size must be 64");
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
  if (rd64(f + kHdrTableOffset) != kHeaderBytes)
    fail("amkb.header", "header", kHdrTableOffset, "the section table must follow the header");
  for (const size_t field : {kHdrFlags, kHdrReserved})
    if (rd32(f + field) != 0)
      fail("amkb.header", "header", field,
           std::string(field == kHdrFlags ? "flags" : "reserved") +
               " header field must be zero, found " + std::to_string(rd32(f + field)));
  const uint64_t file_bytes = rd64(f + kHdrFileBytes);
  if (file_bytes > kMaxFileBytes)
    fail("limit.file", "header", kHdrFileBytes,
         "file size field " + std::to_string(file_bytes) + " exceeds the limit");
  if (n < file_bytes)
    fail("amkb.truncated", "header", n,
         "file ends after " + std::to_string(n) + " of " + std::to_string(file_bytes) + " bytes");
  if (n > file_bytes)
    fail("amkb.header", "header", kHdrFileBytes,
         std::to_string(n - file_bytes) + " trailing bytes after the declared end");
  const uint64_t table_end = kHeaderBytes + rd32(f + kHdrSectionCount) * kEntryBytes;
  if (table_end > n)
    fail("amkb.header", "header", kHdrSectionCount,
         "the section table runs past the end of the file");
  if (crc_mismatch(rd32(f + kHdrTableCrc), f + kHeaderBytes, table_end - kHeaderBytes))
    fail("amkb.checksum", "section table", kHeaderBytes, "section table checksum mismatch");
}

Sections read_section_table(const uint8_t* f, uint64_t n) {
  const uint32_t count = rd32(f + kHdrSectionCount);
  Sections by_kind{};
  uint64_t prev_end = kHeaderBytes + uint64_t{count} * kEntryBytes;
  std::string prev_name = "the section table";
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t e = kHeaderBytes + uint64_t{i} * kEntryBytes;
    const uint8_t* p = f + e;
    const uint32_t kind = rd32(p);
    const KindInfo* info = find_kind(kind);
    if (!info)
      fail("amkb.section", "section table", e, "unknown section kind " + std::to_string(kind));
    if (by_kind[kind].present)
      fail("amkb.section", "section table", e, std::string("duplicate section ") + info->name);
    for (const uint64_t field : {uint64_t{4}, uint64_t{28}})  // flags, reserved
      if (rd32(p + field) != 0)
        fail("amkb.section", "section table", e + field,
             std::string("section ") + info->name + ": reserved fields must be zero");
    Section s;
    s.name = info->name;
    s.offset = rd64(p + 8);
    s.size = rd64(p + 16);
    s.crc = rd32(p + 24);
    s.present = true;
    const auto end = checked_add(s.offset, s.size);
    if (!end || *end > n)
      fail("amkb.section", "section table", e + 8,
           std::string("section ") + info->name + " [" + std::to_string(s.offset) + ", +" +
               std::to_string(s.size) + ") lies past the end of the file (" + std::to_string(n) +
               " bytes)");
    if (s.offset % info->align != 0)
      fail("amkb.section", "section table", e + 8,
           std::string("section ") + info->name + " offset " + std::to_string(s.offset) +
               " is not a multiple of " + std::to_string(info->align));
    if (s.offset < prev_end)
      fail("amkb.section.overlap", "section table", e + 8,
           std::string("section ") + info->name + " at " + std::to_string(s.offset) + " overlaps " +
               prev_name + " ending at " + std::to_string(prev_end));
    if (!all_zero(f + prev_end, s.offset - prev_end))
      fail("amkb.section", "section table", e + 8,
           "nonzero padding before section " + std::string(info->name));
    prev_end = *end;
    prev_name = std::string("section ") + info->name;
    by_kind[kind] = s;
  }
  if (!all_zero(f + prev_end, n - prev_end))
    fail("amkb.section", "section table", kHeaderBytes, "nonzero bytes after the last section");
  if (!by_kind[kMeta].present)
    fail("amkb.section.missing", "section table", kHeaderBytes, "required section META is missing");
  for (const Section& s : by_kind)
    if (s.present && crc_mismatch(s.crc, f + s.offset, s.size))
      fail("amkb.checksum", std::string("section ") + s.name, s.offset,
           std::string("section ") + s.name + " checksum mismatch");
  return by_kind;
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
  const Sections sec = read_section_table(f, n);

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

  struct Part {
    uint32_t kind;
    const uint8_t* bytes;
    uint64_t size;
  };
  std::vector<Part> parts = {{kMeta, reinterpret_cast<const uint8_t*>(meta.data()), meta.size()}};
  if (w.wrapper.source_path.empty())
    parts.push_back({kSource, reinterpret_cast<const uint8_t*>(w.wrapper.source.data()),
                     w.wrapper.source.size()});
  if (!package.empty())
    parts.push_back({kPackage, reinterpret_cast<const uint8_t*>(package.data()), package.size()});

  std::vector<uint64_t> offsets;
  uint64_t size = kHeaderBytes + parts.size() * kEntryBytes;
  for (const Part& p : parts) {
    size = round_up(size, find_kind(p.kind)->align);
    offsets.push_back(size);
    size += p.size;
  }
  if (size > kMaxFileBytes)
    throw Error(ErrorKind::program, "amkb.encode", "/package",
                "the file would be " + std::to_string(size) + " bytes, more than the " +
                    std::to_string(kMaxFileBytes) + " a program file may have");
  std::vector<std::byte> file(size);
  auto* f = reinterpret_cast<uint8_t*>(file.data());
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].size != 0) std::memcpy(f + offsets[i], parts[i].bytes, parts[i].size);
    uint8_t* e = f + kHeaderBytes + i * kEntryBytes;
    put32(e, parts[i].kind);
    put64(e + 8, offsets[i]);
    put64(e + 16, parts[i].size);
    put32(e + 24, crc_of(f + offsets[i], parts[i].size));
  }
  std::memcpy(f, kWrapperAmkbMagic.data(), kWrapperAmkbMagic.size());
  put32(f + kHdrVersion, kAmkbVersion);
  put32(f + kHdrByteOrder, kByteOrderMark);
  put32(f + kHdrHeaderBytes, kHeaderBytes);
  put32(f + kHdrPackageArrays, kPackageArrays);
  put32(f + kHdrTensorArgBytes, sizeof(WrapperTensorArgRecord));
  put32(f + kHdrSectionCount, static_cast<uint32_t>(parts.size()));
  put64(f + kHdrTableOffset, kHeaderBytes);
  put64(f + kHdrFileBytes, size);
  put32(f + kHdrTableCrc, crc_of(f + kHeaderBytes, parts.size() * kEntryBytes));
  put32(f + kHdrCrc, crc_of(f, kHdrCrc));
  return file;
}

}  // namespace amk
