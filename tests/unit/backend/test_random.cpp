// Seeded random init: the generator's definition (schemas/init.md), determinism, independence
// of elements, statistics and parameter checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "backend/init_sources.hpp"
#include "core/numeric.hpp"

#include "helpers.hpp"

using namespace amk;
using namespace amk::test;

namespace {

BufferInit uniform(uint64_t seed, double low, double high) {
  BufferInit init;
  init.kind = InitKind::random;
  init.seed = seed;
  init.distribution = Distribution::uniform;
  init.a = low;
  init.b = high;
  return init;
}

BufferInit normal(uint64_t seed, double mean, double stddev) {
  BufferInit init = uniform(seed, mean, stddev);
  init.distribution = Distribution::normal;
  return init;
}

struct Moments {
  double mean, stddev, min, max;
};

Moments moments(const std::vector<std::byte>& bytes, DType dtype, uint64_t n) {
  double sum = 0, sum2 = 0, mn = 1e300, mx = -1e300;
  for (uint64_t i = 0; i < n; ++i) {
    const double v = load_element(bytes.data(), dtype, i);
    sum += v;
    sum2 += v * v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  const double mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean), mn, mx};
}

}  // namespace

TEST_CASE("draws are the standard SplitMix64 sequence") {
  // Seed 0: mix(0) == 0, so the stream is SplitMix64 started from state 0, whose published
  // first outputs are these.
  CHECK(splitmix64_mix(0) == 0);
  CHECK(random_bits(0, 0) == 0xe220a8397b1dcdafull);
  CHECK(random_bits(0, 1) == 0x6e789e6aa1b965f4ull);
  CHECK(random_bits(0, 2) == 0x06c45d188009454full);
  CHECK(random_bits(0, 3) == 0xf88bb8a8724c81ecull);
  // Other seeds start from mix(seed) (values from an independent Python implementation).
  CHECK(splitmix64_mix(1) == 0x5692161d100b05e5ull);
  CHECK(random_bits(1, 0) == 0xbfef8030ddc2d772ull);
  CHECK(random_bits(42, 0) == 0x989b3f130a063869ull);
  CHECK(random_bits(42, 1000) == 0xd810b893b111893aull);
  CHECK(random_unit(0, 0) == static_cast<double>(0xe220a8397b1dcdafull >> 11) * 0x1.0p-53);
}

TEST_CASE("pinned element values") {
  // Computed with the definition in schemas/init.md in Python.
  const auto u = random_fill(uniform(42, -1, 1), DType::f32, 3, "/b");
  const auto uv = values_of<float>(u);
  CHECK(f32_bits(uv[0]) == 0x3e44d9f9u);
  CHECK(f32_bits(uv[1]) == 0xbf2de497u);
  CHECK(f32_bits(uv[2]) == 0xbf2acde8u);
  const auto nv = values_of<float>(random_fill(normal(7, 0.5, 2), DType::f32, 3, "/b"));
  CHECK(f32_bits(nv[0]) == 0xbe91acd2u);
  CHECK(f32_bits(nv[1]) == 0x4081169au);
  CHECK(f32_bits(nv[2]) == 0xbf93a7b9u);
  const auto iv = values_of<int32_t>(random_fill(uniform(3, 0, 10), DType::i32, 5, "/b"));
  CHECK(iv == std::vector<int32_t>{8, 4, 4, 8, 6});
}

TEST_CASE("same seed gives the same bytes, another seed different bytes") {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8, DType::i64}) {
    CAPTURE(dtype_name(t));
    const BufferInit a = uniform(5, 0, 100);
    const auto x = random_fill(a, t, 4096, "/b");
    const auto y = random_fill(a, t, 4096, "/b");
    CHECK(x == y);
    CHECK(x.size() == 4096 * dtype_size(t));
    const auto z = random_fill(uniform(6, 0, 100), t, 4096, "/b");
    CHECK(x != z);
  }
  CHECK(random_fill(normal(9, 0, 1), DType::f32, 1000, "/b") ==
        random_fill(normal(9, 0, 1), DType::f32, 1000, "/b"));
  CHECK(random_fill(normal(9, 0, 1), DType::f32, 1000, "/b") !=
        random_fill(normal(10, 0, 1), DType::f32, 1000, "/b"));
}

TEST_CASE("element i does not depend on the element count") {
  const auto small = random_fill(normal(11, 0, 1), DType::bf16, 10, "/b");
  const auto large = random_fill(normal(11, 0, 1), DType::bf16, 1000, "/b");
  CHECK(std::equal(small.begin(), small.end(), large.begin()));
}

TEST_CASE("uniform statistics over 1e5 samples") {
  const uint64_t n = 100000;
  const auto bytes = random_fill(uniform(123, -2, 3), DType::f32, n, "/b");
  const Moments m = moments(bytes, DType::f32, n);
  CHECK(std::fabs(m.mean - 0.5) < 0.02);  // sigma of the mean ~0.0046
  CHECK(std::fabs(m.stddev - 5.0 / std::sqrt(12.0)) < 0.02);
  CHECK(m.min >= -2.0);
  CHECK(m.max < 3.0);
  CHECK(m.min < -1.99);
  CHECK(m.max > 2.99);
}

TEST_CASE("normal statistics over 1e5 samples") {
  const uint64_t n = 100000;
  const auto bytes = random_fill(normal(321, 1.5, 2.0), DType::f32, n, "/b");
  const Moments m = moments(bytes, DType::f32, n);
  CHECK(std::fabs(m.mean - 1.5) < 0.03);  // sigma of the mean ~0.0063
  CHECK(std::fabs(m.stddev - 2.0) < 0.03);
  // Tails: about 4.55% of samples beyond 2 sigma.
  uint64_t beyond = 0;
  for (uint64_t i = 0; i < n; ++i)
    if (std::fabs(load_element(bytes.data(), DType::f32, i) - 1.5) > 4.0) ++beyond;
  CHECK(beyond > 4000);
  CHECK(beyond < 5100);
}

TEST_CASE("integer uniform draws floor into [low, high)") {
  const uint64_t n = 100000;
  const auto bytes = random_fill(uniform(77, 0, 10), DType::i32, n, "/b");
  std::map<int32_t, int> histogram;
  for (int32_t v : values_of<int32_t>(bytes)) ++histogram[v];
  CHECK(histogram.size() == 10);
  CHECK(histogram.begin()->first == 0);
  CHECK(histogram.rbegin()->first == 9);
  for (const auto& [v, count] : histogram) {
    const int32_t value = v;  // (CAPTURE's lambda may not capture a structured binding)
    CAPTURE(value);
    CHECK(std::abs(count - 10000) < 500);  // sigma ~95
  }
  // Non-integral bounds: [-0.5, 2.5) holds the integers 0, 1, 2.
  const auto odd = values_of<int64_t>(random_fill(uniform(1, -0.5, 2.5), DType::i64, 10000, "/b"));
  CHECK(*std::min_element(odd.begin(), odd.end()) == 0);
  CHECK(*std::max_element(odd.begin(), odd.end()) == 2);
  // u8 over its full range.
  const auto full = random_fill(uniform(2, 0, 256), DType::u8, 100000, "/b");
  const Moments m = moments(full, DType::u8, 100000);
  CHECK(m.min == 0);
  CHECK(m.max == 255);
}

TEST_CASE("random parameters are checked") {
  CHECK(error_code([] { (void)random_fill(uniform(1, 1, 0), DType::f32, 4, "/b"); }) ==
        "init.random.range");
  CHECK(error_code([] { (void)random_fill(uniform(1, 0, 1e6), DType::f16, 4, "/b"); }) ==
        "init.random.range");
  CHECK(error_code([] { (void)random_fill(uniform(1, -1, 1), DType::u8, 4, "/b"); }) ==
        "init.random.range");
  CHECK(error_code([] { (void)random_fill(uniform(1, 0.2, 0.7), DType::i32, 4, "/b"); }) ==
        "init.random.range");
  CHECK(error_code([] { (void)random_fill(uniform(1, 0, INFINITY), DType::f32, 4, "/b"); }) ==
        "init.random.range");
  CHECK(error_code([] { (void)random_fill(normal(1, 0, -1), DType::f32, 4, "/b"); }) ==
        "init.random.std");
  const auto e =
      caught([] { (void)random_fill(normal(1, 0, -1), DType::f32, 4, "/buffers/2/init"); });
  REQUIRE(e);
  CHECK(e->where() == "/buffers/2/init");
  CHECK(e->kind() == ErrorKind::program);
  // low == high is a constant.
  const auto c = values_of<float>(random_fill(uniform(1, 0.25, 0.25), DType::f32, 8, "/b"));
  for (float v : c) CHECK(v == 0.25f);
}
