// Overflow-safe arithmetic for sizes, counts and offsets read from untrusted files.
#pragma once

#include <cstdint>
#include <optional>

namespace amk {

[[nodiscard]] inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) noexcept {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

[[nodiscard]] inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) noexcept {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Rounds v up to a multiple of a power-of-two alignment; nullopt on overflow.
[[nodiscard]] inline std::optional<uint64_t> checked_align_up(uint64_t v, uint64_t align) noexcept {
  auto sum = checked_add(v, align - 1);
  if (!sum) return std::nullopt;
  return *sum & ~(align - 1);
}

}  // namespace amk
