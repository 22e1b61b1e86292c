// RFC 4648 base64 (standard alphabet, '=' padding): how a wrapper program's JSON carries the
// package arrays inline. Decoding is strict (no whitespace, canonical padding), so a file has
// one spelling of its bytes.
#include <array>
#include <cstdint>

#include "wrapper/wrapper.hpp"

namespace amk {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> decode_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kDecode = decode_table();

}  // namespace

std::string base64_encode(const std::vector<std::byte>& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = std::to_integer<uint32_t>(bytes[i]) << 16 |
                       std::to_integer<uint32_t>(bytes[i + 1]) << 8 |
                       std::to_integer<uint32_t>(bytes[i + 2]);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = std::to_integer<uint32_t>(bytes[i]) << 16;
    if (rest == 2) v |= std::to_integer<uint32_t>(bytes[i + 1]) << 8;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += rest == 2 ? kAlphabet[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::vector<std::byte>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::vector<std::byte> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=y=" style
    uint32_t v = 0;
    for (size_t k = 0; k < 4 - pad; ++k) {
      const int8_t d = kDecode[static_cast<uint8_t>(text[i + k])];
      if (d < 0) return std::nullopt;
      v |= static_cast<uint32_t>(d) << (18 - 6 * k);
    }
    // Canonical: the bits a padded group does not use are zero.
    if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) return std::nullopt;
    out.push_back(static_cast<std::byte>(v >> 16));
    if (pad < 2) out.push_back(static_cast<std::byte>(v >> 8 & 0xff));
    if (pad < 1) out.push_back(static_cast<std::byte>(v & 0xff));
  }
  return out;
}

}  // namespace amk
