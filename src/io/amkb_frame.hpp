// The frame both .amkb encodings share (VM programs: io/amkb.cpp; wrapper programs:
// wrapper/amkb.cpp; schemas/amkb.md): a 64-byte header, a table of 32-byte section entries, the
// sections in file order at their kinds' alignments with zero padding, CRC-32C over the header,
// the table and each section. Each encoding has its own magic, header words 20 and 24 and
// section kinds; the rest is read and written here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace amk::amkb_frame {

inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr uint64_t kEntryBytes = 32;

// Header field offsets; words 20 and 24 are the encoding's own.
inline constexpr size_t kHdrVersion = 8;
inline constexpr size_t kHdrByteOrder = 12;
inline constexpr size_t kHdrHeaderBytes = 16;
inline constexpr size_t kHdrOwn20 = 20;
inline constexpr size_t kHdrOwn24 = 24;
inline constexpr size_t kHdrSectionCount = 28;
inline constexpr size_t kHdrTableOffset = 32;
inline constexpr size_t kHdrFileBytes = 40;
inline constexpr size_t kHdrFlags = 48;
inline constexpr size_t kHdrTableCrc = 52;
inline constexpr size_t kHdrReserved = 56;
inline constexpr size_t kHdrCrc = 60;

struct SectionKind {
  uint32_t kind;
  const char* name;
  uint64_t align;
  bool required;
};

struct Section {
  uint32_t kind = 0;
  const char* name = "";
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc = 0;
  bool present = false;
};

// Error(program, code) at "AREA byte BYTE".
[[noreturn]] void fail(std::string code, std::string_view area, uint64_t byte, std::string msg);

// After the magic: the header's own size (amkb.truncated), version, byte order, checksum and
// header size. `label` names the encoding in the version error (".amkb", "wrapper .amkb").
void check_header_start(const uint8_t* f, uint64_t n, std::string_view label);

// After the encoding's words and the section count: the table offset, the zero flags and
// reserved words, the file size (limit, truncation, trailing bytes), the table's bounds and
// checksum.
void check_header_end(const uint8_t* f, uint64_t n, uint32_t count);

// The section table of `count` entries: known kinds, no duplicates, zero reserved fields, each
// within the file, aligned, in file order without overlap, zero padding between and after,
// every required kind present, every checksum right. by_kind[kind] gets each section.
void read_section_table(const uint8_t* f, uint64_t n, uint32_t count,
                        std::span<const SectionKind> kinds, std::span<Section> by_kind);

// One section to write: its kind and contents.
struct Part {
  uint32_t kind;
  std::span<const std::byte> bytes;
};
// The file size of `parts` laid out in order, each at its kind's alignment after the table.
[[nodiscard]] uint64_t frame_bytes(std::span<const Part> parts, std::span<const SectionKind> kinds);
// The whole file: header (magic, the encoding's words 20 and 24), table and sections.
[[nodiscard]] std::vector<std::byte> write_frame(std::span<const uint8_t> magic, uint32_t own20,
                                                 uint32_t own24, std::span<const Part> parts,
                                                 std::span<const SectionKind> kinds);

}  // namespace amk::amkb_frame
