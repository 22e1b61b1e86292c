// Byte-level helpers both .amkb encodings share (VM programs: io/amkb.cpp; wrapper programs:
// wrapper/amkb.cpp): little-endian fields, CRC-32C checks and strict UTF-8.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "core/hash.hpp"

namespace amk::amkb_bytes {

inline uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t rd64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline bool all_zero(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

inline uint32_t crc_of(const uint8_t* p, uint64_t n) {
  return crc32c(std::span<const std::byte>(reinterpret_cast<const std::byte*>(p), n));
}

// Whether a stored checksum disagrees. Fuzzing builds (the libFuzzer convention macro, set on
// both stages that include this) accept any checksum so that mutations reach the parsers behind
// it; nothing else changes.
inline bool crc_mismatch(uint32_t stored, const uint8_t* p, uint64_t n) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  (void)crc_of(p, n);
  (void)stored;
  return false;
#else
  return crc_of(p, n) != stored;
#endif
}

// The offset of the first byte that breaks strict UTF-8 (no overlongs, surrogates or code points
// past U+10FFFF), or npos: the JSON encoding can carry only valid text.
inline size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    uint32_t min = 0;
    if ((c & 0xE0) == 0xC0)
      n = 1, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      n = 2, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      n = 3, cp = c & 0x07, min = 0x10000;
    else
      return i;
    if (s.size() - i - 1 < n) return i;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

}  // namespace amk::amkb_bytes
