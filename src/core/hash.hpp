// Hashes: SHA-256 for fingerprints and cache keys, CRC-32C for checksums, XXH64 for fast
// change detection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace amk {

class Sha256 {
public:
  Sha256();
  void update(std::span<const std::byte> data);
  void update(std::string_view text);
  [[nodiscard]] std::array<uint8_t, 32> finish();
  [[nodiscard]] std::string finish_hex();

private:
  void blocks(const uint8_t* p, size_t n);  // n 64-byte blocks
  void block(const uint8_t* p);             // one, portable code
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t len_ = 0;
  size_t fill_ = 0;
};

// Whether SHA-256 may use the CPU's SHA extensions (default true; tests turn them off to check
// the portable code); returns whether they are used from now on (false where absent).
bool sha256_sha_ni(bool allow);

[[nodiscard]] std::string sha256_hex(std::span<const std::byte> data);
[[nodiscard]] std::string sha256_hex(std::string_view text);
[[nodiscard]] uint32_t crc32c(std::span<const std::byte> data, uint32_t seed = 0) noexcept;
// XXH64 (xxHash's 64-bit hash, its reference values): about as fast as reading the bytes, for
// telling whether a buffer changed (the API's set_input), not for anything an adversary chooses.
[[nodiscard]] uint64_t xxh64(std::span<const std::byte> data, uint64_t seed = 0) noexcept;

}  // namespace amk
