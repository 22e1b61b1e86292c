// SHA-256 (FIPS 180-4), CRC-32C (Castagnoli) and XXH64 (xxHash). SHA-256 fingerprints every byte of a run's
// host data (2.5 GB for a Llama-3.2-1B step, 16 GB for 8B), so on x86-64 CPUs with the SHA
// extensions its compression runs on them (several times the portable loop); elsewhere, or when
// a test turns them off, the portable code below. Both give the same digests (tested).
#include "core/hash.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define AMK_SHA_NI 1
#else
#define AMK_SHA_NI 0
#endif

namespace amk {
namespace {

constexpr uint32_t kSha256K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

// Byte-at-a-time table for the reflected Castagnoli polynomial, built at compile time.
constexpr auto make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

#if AMK_SHA_NI
// CPUID: SSSE3 (leaf 1 ECX bit 9), SSE4.1 (leaf 1 ECX bit 19), SHA (leaf 7 EBX bit 29).
bool cpu_has_sha_ni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19))) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 29)) != 0;
}

// n 64-byte blocks at p into h[8], with SHA256RNDS2 (two rounds on the state split as ABEF and
// CDGH, A in the high lane) and SHA256MSG1/MSG2 (the message schedule, four words at a time).
__attribute__((target("sha,sse4.1,ssse3"))) void sha256_blocks_ni(uint32_t h[8], const uint8_t* p,
                                                                  size_t n) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  // h[0..3] = A B C D, h[4..7] = E F G H (lane 0 first) -> abef = [F E B A], cdgh = [H G D C].
  __m128i t = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)), 0xB1);
  __m128i cdgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4)), 0x1B);
  __m128i abef = _mm_alignr_epi8(t, cdgh, 8);
  cdgh = _mm_blend_epi16(cdgh, t, 0xF0);
  for (; n != 0; --n, p += 64) {
    const __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i m[4];  // m[g % 4] holds W[4g .. 4g + 3] of the current group g
    for (int j = 0; j < 4; ++j)
      m[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j)), bswap);
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const __m128i wk = _mm_add_epi32(
          m[g & 3], _mm_loadu_si128(reinterpret_cast<const __m128i*>(kSha256K + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);  // rounds 4g, 4g + 1: cdgh becomes ABEF
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
      if (g < 12) {
        // W[4g + 16 ..] = W[4g ..] + s0(W[4g + 1 ..]) + W[4g + 9 ..] + s1(W[4g + 14 ..]).
        const __m128i w4 = m[(g + 1) & 3], w8 = m[(g + 2) & 3], w12 = m[(g + 3) & 3];
        const __m128i x =
            _mm_add_epi32(_mm_sha256msg1_epu32(m[g & 3], w4), _mm_alignr_epi8(w12, w8, 4));
        m[g & 3] = _mm_sha256msg2_epu32(x, w12);
      }
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  // Back to A B C D / E F G H.
  t = _mm_shuffle_epi32(abef, 0x1B);     // [A B E F]
  cdgh = _mm_shuffle_epi32(cdgh, 0xB1);  // [G H C D]
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm_blend_epi16(t, cdgh, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 4), _mm_alignr_epi8(cdgh, t, 8));
}

const bool kCpuHasShaNi = cpu_has_sha_ni();
#else
constexpr bool kCpuHasShaNi = false;
#endif
std::atomic<bool> g_sha_ni_allowed{true};

std::string to_hex(const std::array<uint8_t, 32>& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    s[2 * i] = kHex[digest[i] >> 4];
    s[2 * i + 1] = kHex[digest[i] & 15];
  }
  return s;
}

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
      buf_{} {}

bool sha256_sha_ni(bool allow) {
  g_sha_ni_allowed.store(allow, std::memory_order_relaxed);
  return kCpuHasShaNi && allow;
}

void Sha256::blocks(const uint8_t* p, size_t n) {
#if AMK_SHA_NI
  if (kCpuHasShaNi && g_sha_ni_allowed.load(std::memory_order_relaxed)) {
    sha256_blocks_ni(h_, p, n);
    return;
  }
#endif
  for (; n != 0; --n, p += 64) block(p);
}

void Sha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t{p[4 * i]} << 24) | (uint32_t{p[4 * i + 1]} << 16) |
           (uint32_t{p[4 * i + 2]} << 8) | uint32_t{p[4 * i + 3]};
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t big_s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + big_s1 + ch + kSha256K[i] + w[i];
    uint32_t big_s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = big_s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::update(std::span<const std::byte> data) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = data.size();
  if (n == 0) return;  // an empty span may carry a null pointer, which memcpy must not see
  len_ += n;
  if (fill_ > 0) {
    size_t take = std::min(n, sizeof(buf_) - fill_);
    std::memcpy(buf_ + fill_, p, take);
    fill_ += take;
    p += take;
    n -= take;
    if (fill_ < sizeof(buf_)) return;
    blocks(buf_, 1);
    fill_ = 0;
  }
  blocks(p, n / 64);
  p += n / 64 * 64;
  n %= 64;
  if (n > 0) std::memcpy(buf_, p, n);
  fill_ = n;
}

void Sha256::update(std::string_view text) {
  update(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::array<uint8_t, 32> Sha256::finish() {
  // Padding: 0x80, zeros up to 56 mod 64, then the message length in bits, big endian.
  uint64_t bits = len_ * 8;
  buf_[fill_++] = 0x80;
  if (fill_ > 56) {
    std::memset(buf_ + fill_, 0, 64 - fill_);
    blocks(buf_, 1);
    fill_ = 0;
  }
  std::memset(buf_ + fill_, 0, 56 - fill_);
  for (int i = 0; i < 8; ++i) buf_[56 + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  blocks(buf_, 1);
  std::array<uint8_t, 32> out{};
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
  *this = Sha256();  // ready for reuse; a finished state must not be extended by mistake
  return out;
}

std::string Sha256::finish_hex() { return to_hex(finish()); }

std::string sha256_hex(std::span<const std::byte> data) {
  Sha256 h;
  h.update(data);
  return h.finish_hex();
}

std::string sha256_hex(std::string_view text) {
  Sha256 h;
  h.update(text);
  return h.finish_hex();
}

uint32_t crc32c(std::span<const std::byte> data, uint32_t seed) noexcept {
  // `seed` is a previous result, so crc32c(b, crc32c(a)) == crc32c(a + b).
  uint32_t c = ~seed;
  for (std::byte b : data) c = kCrc32cTable[(c ^ static_cast<uint8_t>(b)) & 0xFF] ^ (c >> 8);
  return ~c;
}

namespace {

constexpr uint64_t kXxPrime1 = 0x9E3779B185EBCA87ull, kXxPrime2 = 0xC2B2AE3D27D4EB4Full,
                   kXxPrime3 = 0x165667B19E3779F9ull, kXxPrime4 = 0x85EBCA77C2B2AE63ull,
                   kXxPrime5 = 0x27D4EB2F165667C5ull;

constexpr uint64_t rotl64(uint64_t x, unsigned n) { return (x << n) | (x >> (64 - n)); }

// XXH64 reads its input as little-endian words: the host's order on every machine amk runs on.
static_assert(std::endian::native == std::endian::little);
uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint64_t load32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint64_t xx_round(uint64_t acc, uint64_t lane) {
  return rotl64(acc + lane * kXxPrime2, 31) * kXxPrime1;
}

uint64_t xx_merge(uint64_t h, uint64_t acc) {
  return (h ^ xx_round(0, acc)) * kXxPrime1 + kXxPrime4;
}

}  // namespace

uint64_t xxh64(std::span<const std::byte> data, uint64_t seed) noexcept {
  const std::byte* p = data.data();
  const size_t n = data.size();
  size_t i = 0;
  uint64_t h;
  if (n >= 32) {
    // Four lanes of 8 bytes over each 32-byte stripe.
    uint64_t v[4] = {seed + kXxPrime1 + kXxPrime2, seed + kXxPrime2, seed, seed - kXxPrime1};
    for (; i + 32 <= n; i += 32)
      for (int k = 0; k < 4; ++k) v[k] = xx_round(v[k], load64(p + i + 8 * k));
    h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18);
    for (uint64_t lane : v) h = xx_merge(h, lane);
  } else {
    h = seed + kXxPrime5;
  }
  h += n;
  for (; i + 8 <= n; i += 8) h = rotl64(h ^ xx_round(0, load64(p + i)), 27) * kXxPrime1 + kXxPrime4;
  if (i + 4 <= n) {
    h = rotl64(h ^ load32(p + i) * kXxPrime1, 23) * kXxPrime2 + kXxPrime3;
    i += 4;
  }
  for (; i < n; ++i) h = rotl64(h ^ static_cast<uint8_t>(p[i]) * kXxPrime5, 11) * kXxPrime1;
  h ^= h >> 33;
  h *= kXxPrime2;
  h ^= h >> 29;
  h *= kXxPrime3;
  h ^= h >> 32;
  return h;
}

}  // namespace amk
