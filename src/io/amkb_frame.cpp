#include "io/amkb_frame.hpp"

#include <bit>
#include <cstring>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "io/amkb_bytes.hpp"
#include "program/program.hpp"

namespace amk::amkb_frame {
namespace {

using namespace amkb_bytes;

static_assert(std::endian::native == std::endian::little, ".amkb I/O assumes a little-endian host");

constexpr uint32_t kByteOrderMark = 0x01020304u;
constexpr uint32_t kByteOrderSwapped = 0x04030201u;

const SectionKind* find_kind(std::span<const SectionKind> kinds, uint32_t kind) {
  for (const auto& k : kinds)
    if (k.kind == kind) return &k;
  return nullptr;
}

void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint64_t round_up(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

}  // namespace

void fail(std::string code, std::string_view area, uint64_t byte, std::string msg) {
  std::string where(area);
  where += " byte ";
  where += std::to_string(byte);
  throw Error(ErrorKind::program, std::move(code), std::move(where), std::move(msg));
}

void check_header_start(const uint8_t* f, uint64_t n, std::string_view label) {
  if (n < kHeaderBytes)
    fail("amkb.truncated", "header", n,
         "file ends after " + std::to_string(n) + " bytes, inside the 64-byte header");
  if (const uint32_t v = rd32(f + kHdrVersion); v != kVersion)
    fail("amkb.version", "header", kHdrVersion,
         std::string(label) + " version " + std::to_string(v) + " (this amk reads version 1)");
  if (const uint32_t bom = rd32(f + kHdrByteOrder); bom != kByteOrderMark)
    fail("amkb.endian", "header", kHdrByteOrder,
         bom == kByteOrderSwapped ? "file is big endian; amk reads little-endian .amkb only"
                                  : "bad byte order marker");
  if (crc_mismatch(rd32(f + kHdrCrc), f, kHdrCrc))
    fail("amkb.checksum", "header", kHdrCrc, "header checksum mismatch");
  if (rd32(f + kHdrHeaderBytes) != kHeaderBytes)
    fail("amkb.header", "header", kHdrHeaderBytes, "header size must be 64");
}

void check_header_end(const uint8_t* f, uint64_t n, uint32_t count) {
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
  const uint64_t table_end = kHeaderBytes + uint64_t{count} * kEntryBytes;
  if (table_end > n)
    fail("amkb.header", "header", kHdrSectionCount,
         "the section table runs past the end of the file");
  if (crc_mismatch(rd32(f + kHdrTableCrc), f + kHeaderBytes, table_end - kHeaderBytes))
    fail("amkb.checksum", "section table", kHeaderBytes, "section table checksum mismatch");
}

void read_section_table(const uint8_t* f, uint64_t n, uint32_t count,
                        std::span<const SectionKind> kinds, std::span<Section> by_kind) {
  uint64_t prev_end = kHeaderBytes + uint64_t{count} * kEntryBytes;
  std::string prev_name = "the section table";
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t e = kHeaderBytes + uint64_t{i} * kEntryBytes;
    const uint8_t* p = f + e;
    const uint32_t kind = rd32(p);
    const SectionKind* info = find_kind(kinds, kind);
    if (!info || kind >= by_kind.size())
      fail("amkb.section", "section table", e, "unknown section kind " + std::to_string(kind));
    if (by_kind[kind].present)
      fail("amkb.section", "section table", e, std::string("duplicate section ") + info->name);
    for (const uint64_t field : {uint64_t{4}, uint64_t{28}})  // flags, reserved
      if (rd32(p + field) != 0)
        fail("amkb.section", "section table", e + field,
             std::string("section ") + info->name + ": reserved fields must be zero");
    Section s;
    s.kind = kind;
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
    // Entries are in file order; a section starting before the previous one ends overlaps it.
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
  for (const auto& k : kinds)
    if (k.required && !by_kind[k.kind].present)
      fail("amkb.section.missing", "section table", kHeaderBytes,
           std::string("required section ") + k.name + " is missing");
  for (const Section& s : by_kind)
    if (s.present && crc_mismatch(s.crc, f + s.offset, s.size))
      fail("amkb.checksum", std::string("section ") + s.name, s.offset,
           std::string("section ") + s.name + " checksum mismatch");
}

uint64_t frame_bytes(std::span<const Part> parts, std::span<const SectionKind> kinds) {
  uint64_t size = kHeaderBytes + parts.size() * kEntryBytes;
  for (const Part& p : parts)
    size = round_up(size, find_kind(kinds, p.kind)->align) + p.bytes.size();
  return size;
}

std::vector<std::byte> write_frame(std::span<const uint8_t> magic, uint32_t own20, uint32_t own24,
                                   std::span<const Part> parts,
                                   std::span<const SectionKind> kinds) {
  std::vector<std::byte> file(frame_bytes(parts, kinds));
  auto* f = reinterpret_cast<uint8_t*>(file.data());
  uint64_t at = kHeaderBytes + parts.size() * kEntryBytes;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& part = parts[i];
    at = round_up(at, find_kind(kinds, part.kind)->align);
    if (!part.bytes.empty()) std::memcpy(f + at, part.bytes.data(), part.bytes.size());
    uint8_t* e = f + kHeaderBytes + i * kEntryBytes;
    put32(e, part.kind);
    put64(e + 8, at);
    put64(e + 16, part.bytes.size());
    put32(e + 24, crc_of(f + at, part.bytes.size()));
    at += part.bytes.size();
  }
  std::memcpy(f, magic.data(), magic.size());
  put32(f + kHdrVersion, kVersion);
  put32(f + kHdrByteOrder, kByteOrderMark);
  put32(f + kHdrHeaderBytes, kHeaderBytes);
  put32(f + kHdrOwn20, own20);
  put32(f + kHdrOwn24, own24);
  put32(f + kHdrSectionCount, static_cast<uint32_t>(parts.size()));
  put64(f + kHdrTableOffset, kHeaderBytes);
  put64(f + kHdrFileBytes, file.size());
  put32(f + kHdrTableCrc, crc_of(f + kHeaderBytes, parts.size() * kEntryBytes));
  put32(f + kHdrCrc, crc_of(f, kHdrCrc));
  return file;
}

}  // namespace amk::amkb_frame
