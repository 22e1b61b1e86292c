#include "core/numeric.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace amk {

float f16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((mant & 0x3ffu) << 13);
  }
  return bits_f32(bits);
}

uint16_t f32_to_f16(float f) noexcept {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero in f16
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14 + (112 - e) + 1 ... aligns to f16 subnormal ulp
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

float bf16_to_f32(uint16_t h) noexcept { return bits_f32(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_bf16(float f) noexcept {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

double load_element(const std::byte* base, DType t, uint64_t i) noexcept {
  const std::byte* p = base + i * dtype_size(t);
  switch (t) {
    case DType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::f16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16_to_f32(v);
    }
    case DType::bf16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_f32(v);
    }
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::u32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::i64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::u8: return static_cast<double>(static_cast<uint8_t>(*p));
  }
  return 0.0;
}

namespace {

template <typename T>
T saturate(double v) noexcept {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace

void store_element(std::byte* base, DType t, uint64_t i, double v) noexcept {
  std::byte* p = base + i * dtype_size(t);
  switch (t) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::f16: {
      const uint16_t h = f32_to_f16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::bf16: {
      const uint16_t h = f32_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::i32: {
      const int32_t x = saturate<int32_t>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case DType::u32: {
      const uint32_t x = saturate<uint32_t>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case DType::i64: {
      const int64_t x = saturate<int64_t>(v);
      std::memcpy(p, &x, 8);
      return;
    }
    case DType::u8: {
      const uint8_t x = saturate<uint8_t>(v);
      std::memcpy(p, &x, 1);
      return;
    }
  }
}

bool value_fits(DType t, double v) noexcept {
  auto integral_in = [v](double lo, double hi) { return v == std::trunc(v) && v >= lo && v <= hi; };
  switch (t) {
    case DType::f32: return !std::isfinite(v) || std::fabs(v) <= 3.4028234663852886e38;
    case DType::f16: return !std::isfinite(v) || std::fabs(v) <= 65504.0;
    case DType::bf16: return !std::isfinite(v) || std::fabs(v) <= 3.3895313892515355e38;
    case DType::i32: return integral_in(-2147483648.0, 2147483647.0);
    case DType::u32: return integral_in(0.0, 4294967295.0);
    case DType::i64: return integral_in(-9223372036854775808.0, 9223372036854775807.0);
    case DType::u8: return integral_in(0.0, 255.0);
  }
  return false;
}

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace amk
