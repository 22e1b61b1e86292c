// Seeded random initial contents. Counter-based so that every element is a pure function of
// (seed, index): the fill can be split, reordered or reproduced by another tool exactly.
// schemas/init.md is the normative description; keep the two in step.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <thread>

#include "backend/host_data.hpp"
#include "backend/init_sources.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/numeric.hpp"

namespace amk {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// Inclusive integer range that uniform draws of an integer dtype land in: [ceil(low), ceil(high) - 1].
struct IntRange {
  double lo;
  double hi;
};

IntRange int_range(const BufferInit& init) noexcept {
  return {std::ceil(init.a), std::ceil(init.b) - 1.0};
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

uint64_t splitmix64_mix(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t random_bits(uint64_t seed, uint64_t k) noexcept {
  // Unsigned arithmetic wraps mod 2^64, as the definition requires.
  return splitmix64_mix(splitmix64_mix(seed) + (k + 1) * kGolden);
}

double random_unit(uint64_t seed, uint64_t k) noexcept {
  return static_cast<double>(random_bits(seed, k) >> 11) * 0x1.0p-53;
}

double random_value(const BufferInit& init, DType dtype, uint64_t i) noexcept {
  double v;
  if (init.distribution == Distribution::normal) {
    // Box-Muller, cosine branch only: two draws per element so element i stays independent.
    const double u1 = random_unit(init.seed, 2 * i);
    const double u2 = random_unit(init.seed, 2 * i + 1);
    const double z = std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2);
    v = init.a + init.b * z;
    if (!dtype_is_float(dtype)) v = std::floor(v);  // then saturated by store_element
  } else {
    const double u = random_unit(init.seed, i);
    v = init.a + (init.b - init.a) * u;
    if (!dtype_is_float(dtype)) {
      // floor into [low, high); the clamp catches a product that rounded up to high.
      const IntRange r = int_range(init);
      v = std::fmin(std::fmax(std::floor(v), r.lo), r.hi);
    }
  }
  return v;
}

uint64_t window_element(const BufferInit& init, const std::vector<uint64_t>& shape,
                        uint64_t i) noexcept {
  if (init.window_of.empty()) return i;
  // Coordinates of i in the buffer, last dimension first, shifted by `at`, then Horner over
  // the tensor's shape.
  uint64_t t = 0, stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    t += (i % shape[d] + init.window_at[d]) * stride;
    i /= shape[d];
    stride *= init.window_of[d];
  }
  return t;
}

std::vector<std::byte> window_gather(const BufferInit& init, const std::vector<uint64_t>& shape,
                                     const std::vector<std::byte>& tensor, size_t item) {
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  std::vector<std::byte> out = host_bytes(elements * item);
  // Runs of the last dimension are contiguous in both.
  const uint64_t run = shape.empty() ? 1 : shape.back();
  for (uint64_t i = 0; i < elements; i += run)
    std::memcpy(out.data() + i * item, tensor.data() + window_element(init, shape, i) * item,
                run * item);
  return out;
}

std::vector<std::byte> random_fill(const BufferInit& init, DType dtype, uint64_t elements,
                                   const std::string& where, const std::vector<uint64_t>& shape) {
  const bool is_float = dtype_is_float(dtype);
  if (!std::isfinite(init.a) || !std::isfinite(init.b)) {
    throw_program_error("init.random.range", where,
                        "random parameters must be finite, got " + num(init.a) + " and " +
                            num(init.b));
  }
  if (init.distribution == Distribution::normal) {
    if (init.b < 0.0) {
      throw_program_error("init.random.std", where, "normal std must be >= 0, got " + num(init.b));
    }
    if (!value_fits(dtype, is_float ? init.a : std::floor(init.a))) {
      throw_program_error("init.random.range", where,
                          "normal mean " + num(init.a) + " does not fit dtype " +
                              std::string(dtype_name(dtype)));
    }
  } else if (is_float) {
    if (!(init.a <= init.b)) {
      throw_program_error("init.random.range", where,
                          "uniform low " + num(init.a) + " is above high " + num(init.b));
    }
    if (!value_fits(dtype, init.a) || !value_fits(dtype, init.b)) {
      throw_program_error("init.random.range", where,
                          "uniform range [" + num(init.a) + ", " + num(init.b) +
                              ") does not fit dtype " + std::string(dtype_name(dtype)));
    }
  } else {
    const IntRange r = int_range(init);
    if (!(r.lo <= r.hi)) {
      throw_program_error("init.random.range", where,
                          "uniform range [" + num(init.a) + ", " + num(init.b) +
                              ") holds no integer");
    }
    if (!value_fits(dtype, r.lo) || !value_fits(dtype, r.hi)) {
      throw_program_error("init.random.range", where,
                          "uniform integers [" + num(r.lo) + ", " + num(r.hi) +
                              "] do not fit dtype " + std::string(dtype_name(dtype)));
    }
  }
  const auto bytes = checked_mul(elements, dtype_size(dtype));
  if (!bytes || *bytes > kMaxBufferBytes) {
    throw_program_error("init.size", where,
                        "buffer of " + std::to_string(elements) + " elements is too large");
  }
  std::vector<std::byte> out = host_bytes(*bytes);
  // Every element is a pure function of (seed, index), so large fills split over threads and
  // give the same bytes (weights of a 1B-parameter model: ~30 s on one core).
  auto fill = [&](uint64_t begin, uint64_t end) {
    for (uint64_t i = begin; i < end; ++i)
      store_element(out.data(), dtype, i,
                    random_value(init, dtype, window_element(init, shape, i)));
  };
  constexpr uint64_t kPerThreadMin = uint64_t{1} << 20;
  const uint64_t threads = std::min<uint64_t>(
      {std::max(1u, std::thread::hardware_concurrency()), 32, elements / kPerThreadMin + 1});
  if (threads <= 1) {
    fill(0, elements);
    return out;
  }
  std::vector<std::thread> pool;
  const uint64_t per = (elements + threads - 1) / threads;
  for (uint64_t t = 1; t < threads; ++t)
    pool.emplace_back(fill, std::min(elements, t * per), std::min(elements, (t + 1) * per));
  fill(0, std::min(elements, per));
  for (std::thread& th : pool) th.join();
  return out;
}

}  // namespace amk
