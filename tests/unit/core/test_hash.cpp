// SHA-256 against the FIPS 180-4 / NIST example vectors, CRC-32C against the standard check value,
// XXH64 against xxHash's reference values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/hash.hpp"

using amk::crc32c;
using amk::Sha256;
using amk::sha256_hex;
using amk::xxh64;

namespace {
std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
}  // namespace

TEST_CASE("sha256 standard vectors, with the CPU's SHA extensions (where present) and without") {
  for (const bool allow : {true, false}) {
    CAPTURE(allow);
    amk::sha256_sha_ni(allow);
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                     "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu") ==
          "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    std::string million(1000000, 'a');
    CHECK(sha256_hex(million) ==
          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  amk::sha256_sha_ni(true);
}

TEST_CASE("sha256: the SHA-extension path and the portable one agree on every length to 300 bytes "
          "and on 1 MiB of pseudo-random bytes, in pieces") {
  std::vector<std::byte> data(1u << 20);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x >> 24);
  }
  auto digest = [&](bool allow, size_t len, size_t piece) {
    amk::sha256_sha_ni(allow);
    Sha256 h;
    for (size_t at = 0; at < len; at += piece)
      h.update(std::span<const std::byte>(data.data() + at, std::min(piece, len - at)));
    return h.finish_hex();
  };
  const bool used = amk::sha256_sha_ni(true);
  MESSAGE("SHA extensions " << (used ? "used" : "absent: both paths are the portable code"));
  for (size_t len = 0; len <= 300; ++len)
    CHECK_MESSAGE(digest(true, len, 300) == digest(false, len, 300), "len " << len);
  for (size_t piece : {size_t{1} << 20, size_t{4097}, size_t{64}, size_t{1000}})
    CHECK_MESSAGE(digest(true, data.size(), piece) == digest(false, data.size(), 1u << 20),
                  "piece " << piece);
  amk::sha256_sha_ni(true);
}

TEST_CASE("sha256 streaming equals one shot across every split point") {
  // Lengths around the 55/56/64-byte padding boundaries are where streaming bugs hide.
  std::string text;
  for (int i = 0; i < 130; ++i) text.push_back(static_cast<char>('A' + i % 57));
  for (size_t len : {0u, 1u, 55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u, 130u}) {
    std::string_view msg(text.data(), len);
    std::string expect = sha256_hex(msg);
    for (size_t split = 0; split <= len; ++split) {
      Sha256 h;
      h.update(msg.substr(0, split));
      h.update(msg.substr(split));
      CHECK_MESSAGE(h.finish_hex() == expect, "len " << len << " split " << split);
    }
  }
}

TEST_CASE("sha256 of an empty span with no storage (null data) is the empty digest") {
  amk::Sha256 h;
  h.update(std::span<const std::byte>{});
  CHECK(h.finish_hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  amk::Sha256 g;
  g.update(std::string_view("ab"));
  g.update(std::span<const std::byte>{});
  g.update(std::string_view("c"));
  CHECK(g.finish_hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("sha256 finish resets the state") {
  Sha256 h;
  h.update("abc");
  auto first = h.finish();
  CHECK(first[0] == 0xba);
  CHECK(first[31] == 0xad);
  h.update("abc");
  CHECK(h.finish_hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("crc32c check value and chaining") {
  CHECK(crc32c(bytes_of("123456789")) == 0xE3069283u);
  CHECK(crc32c(bytes_of("")) == 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, and of 0xFF.
  std::vector<std::byte> zeros(32, std::byte{0});
  CHECK(crc32c(zeros) == 0x8A9136AAu);
  std::vector<std::byte> ones(32, std::byte{0xFF});
  CHECK(crc32c(ones) == 0x62A8AB43u);
  // Chaining through the seed equals hashing the concatenation.
  CHECK(crc32c(bytes_of("6789"), crc32c(bytes_of("12345"))) == 0xE3069283u);
  CHECK(crc32c(bytes_of("123456788")) != 0xE3069283u);
}

TEST_CASE("xxh64 reference values: short, stripe, 8-, 4- and 1-byte tails, seed") {
  CHECK(xxh64(bytes_of("")) == 0xEF46DB3751D8E999ull);
  CHECK(xxh64(bytes_of("a")) == 0xD24EC4F1A98C6E5Bull);
  CHECK(xxh64(bytes_of("abc")) == 0x44BC2CF5AD770999ull);
  CHECK(xxh64(bytes_of("1234567890123456123456789012345")) == 0x8947ECB58263B70Full);  // 31 bytes
  CHECK(xxh64(bytes_of("Nobody inspects the spammish repetition")) == 0xFBCEA83C8A378BF1ull);
  CHECK(xxh64(bytes_of("Nobody inspects the spammish repetition"), 123) == 0xA8BA45551F24B7AEull);
  CHECK(xxh64(bytes_of("The quick brown fox jumps over the lazy dog")) == 0x0B242D361FDA71BCull);
  CHECK(xxh64(bytes_of("abd")) != xxh64(bytes_of("abc")));
}
