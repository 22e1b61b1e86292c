// f16 / bf16 conversions (core/numeric), which every CPU op result goes through, checked against
// GCC's _Float16 (hardware-independent soft conversions) and an independent nearest-even rule.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "program/program.hpp"

using namespace amk;

namespace {

// The compiler's own _Float16 is the reference where it has one (GCC on x86-64; not clang 14).
#ifdef __FLT16_MANT_DIG__
uint16_t gcc_f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float gcc_f16_value(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
#endif

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Nearest-even bf16 chosen by comparing the two neighbours in double (independent of the
// bit trick in numeric.cpp).
uint16_t reference_bf16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t lo = static_cast<uint16_t>(x >> 16);
  if ((x & 0xffffu) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next away from zero (may become inf)
  const double d_lo = std::fabs(static_cast<double>(f) - bf16_to_f32(lo));
  // Past the largest finite bf16 the next step is 2^128 (IEEE: overflow when at least half
  // an ulp above the maximum), not infinitely far.
  const double hi_value = (hi & 0x7fffu) == 0x7f80u ? std::copysign(0x1.0p128, f)
                                                    : static_cast<double>(bf16_to_f32(hi));
  const double d_hi = std::fabs(hi_value - f);
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo & 1u) ? hi : lo;
}

}  // namespace

#ifdef __FLT16_MANT_DIG__
TEST_CASE("f16 -> f32 agrees with _Float16 for all 65536 bit patterns") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = f16_to_f32(static_cast<uint16_t>(h));
    const float gcc = gcc_f16_value(static_cast<uint16_t>(h));
    if (std::isnan(gcc)) {
      if (!std::isnan(ours)) ++mismatches;
    } else if (f32_bits(ours) != f32_bits(gcc)) {
      ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}
#endif

TEST_CASE("f16 round trip is exact for every non-NaN value") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (f16_is_nan(static_cast<uint16_t>(h))) {
      CHECK(f16_is_nan(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h)))));
      continue;
    }
    if (f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
}

#ifdef __FLT16_MANT_DIG__
TEST_CASE("f32 -> f16 agrees with _Float16 over a sweep of floats") {
  std::vector<float> probes = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               65504.0f,
                               65519.99f,
                               65520.0f,
                               1e9f,
                               5.9604645e-8f /* smallest subnormal */,
                               2.9802322e-8f /* half */,
                               2.9802326e-8f,
                               6.1035156e-5f /* smallest normal */,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min()};
  // Every f16 value, the midpoints to its neighbours, and one f32 ulp on either side of those:
  // the places where rounding decides.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    const float next = f16_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
    for (float p : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      probes.push_back(p);
      probes.push_back(-p);
    }
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 1000000; ++i) probes.push_back(bits_f32(static_cast<uint32_t>(rng())));

  int mismatches = 0;
  for (float f : probes) {
    const uint16_t ours = f32_to_f16(f);
    if (std::isnan(f)) {
      if (!f16_is_nan(ours)) ++mismatches;
      continue;
    }
    if (ours != gcc_f16_bits(f)) {
      if (++mismatches < 5)
        MESSAGE("f32 bits " << f32_bits(f) << " ours " << ours << " gcc " << gcc_f16_bits(f));
    }
  }
  CHECK(mismatches == 0);
}
#endif

TEST_CASE("bf16 known bit patterns") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(f32_to_bf16(-2.0f) == 0xc000);
  CHECK(f32_to_bf16(-0.0f) == 0x8000);
  CHECK(f32_to_bf16(1.0f + 0x1.0p-8f) == 0x3f80);               // tie, even stays
  CHECK(f32_to_bf16(1.0f + 3 * 0x1.0p-8f) == 0x3f82);           // tie, rounds up to even
  CHECK(f32_to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f) == 0x3f81);  // above the tie
  CHECK(f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to inf
  CHECK(f32_to_bf16(3.140625f) == 0x4049);
  const uint16_t nan = f32_to_bf16(std::nanf(""));
  CHECK((nan & 0x7f80u) == 0x7f80u);
  CHECK((nan & 0x7fu) != 0);
  CHECK(bf16_to_f32(0x4049) == 3.140625f);
  CHECK(bf16_to_f32(0x0001) == 0x1.0p-133f);  // subnormal
}

TEST_CASE("f32 -> bf16 is nearest-even over a sweep of floats") {
  std::mt19937 rng(777);
  int mismatches = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float f = bits_f32(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    if (f32_to_bf16(f) != reference_bf16(f)) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("store_element and load_element round the float types") {
  std::byte buf[8];
  store_element(buf, DType::f16, 0, 1.0 + 1.0 / 2048);  // tie between 1 and 1+2^-10: even
  CHECK(load_element(buf, DType::f16, 0) == 1.0);
  store_element(buf, DType::bf16, 0, 3.14159);
  CHECK(load_element(buf, DType::bf16, 0) == 3.140625);
  store_element(buf, DType::i32, 0, -7.9);
  CHECK(load_element(buf, DType::i32, 0) == -7.0);
  store_element(buf, DType::u8, 0, 300.0);
  CHECK(load_element(buf, DType::u8, 0) == 255.0);
}
