// The CPU reference of the decode-step ops (rope, kv_append, attention_decode,
// attention_combine) against straightforward implementations written here, on fresh random
// inputs: rope against the direct formula in every Llama 3 frequency band, chunked attention
// plus combine against one full softmax attention, with GQA groups; attention_decode with fused
// RoPE and the new token's row against the separate rope + kv_append + attention_decode.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "core/numeric.hpp"
#include "ops/registry.hpp"

#include "helpers.hpp"

using namespace amk;
using namespace amk::test;

namespace {

using Fixture = HostFixture;

std::vector<float> randoms(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed ^ std::random_device{}());
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Largest |got - want| over the largest |want|: the normalized error of a vector.
double norm_err(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

// Llama 3 inverse frequency written out band by band (the HF function, not the backend's).
double llama3_inv_freq(int i, int hd, double theta, double factor, double low, double high,
                       double orig, int* band = nullptr) {
  const double base = 1.0 / std::pow(theta, static_cast<double>(2 * i) / hd);
  if (factor == 0) return base;
  const double low_freq_wavelen = orig / low, high_freq_wavelen = orig / high;
  const double wavelen = 2 * std::numbers::pi / base;
  if (wavelen < high_freq_wavelen) {
    if (band) *band = 0;
    return base;
  }
  if (wavelen > low_freq_wavelen) {
    if (band) *band = 2;
    return base / factor;
  }
  if (band) *band = 1;
  const double smooth = (orig / wavelen - low) / (high - low);
  return (1 - smooth) * base / factor + smooth * base;
}

}  // namespace

TEST_CASE("rope: rotate_half pairs, plain and Llama 3 scaled, every frequency band, in place") {
  const uint32_t hd = 128, heads = 3, position = 1234;
  for (const float factor : {0.0f, 8.0f, 32.0f}) {
    CAPTURE(factor);
    Fixture f;
    const std::vector<float> xs = randoms(heads * hd + 4, 11);
    const uint32_t x = f.add("x", DType::f32, xs);
    const uint32_t y = f.add("y", DType::f32, heads * hd);
    const uint32_t yb = f.add("y_bf16", DType::bf16, heads * hd);
    const float theta = 500000.0f, low = 1.0f, high = 4.0f;
    const uint32_t orig = 8192;
    const std::initializer_list<uint32_t> params = {
        hd, position, f32_bits(theta), f32_bits(factor), f32_bits(low), f32_bits(high), orig};
    // x at offset 4.
    f.run(make_ins(id(OpId::rope), 0, {{x, 4, heads * hd}, {y, 0, heads * hd}}, params));
    f.run(make_ins(id(OpId::rope), 1, {{x, 4, heads * hd}, {yb, 0, heads * hd}}, params));
    int bands[3] = {0, 0, 0};
    for (uint32_t h = 0; h < heads; ++h) {
      for (uint32_t i = 0; i < hd / 2; ++i) {
        int band = 0;
        const double inv = llama3_inv_freq(i, hd, theta, factor, low, high, orig, &band);
        ++bands[band];
        const double a = position * inv;
        const double x0 = xs[4 + h * hd + i], x1 = xs[4 + h * hd + i + hd / 2];
        const double want0 = x0 * std::cos(a) - x1 * std::sin(a);
        const double want1 = x1 * std::cos(a) + x0 * std::sin(a);
        CHECK(f.get(y, h * hd + i) == doctest::Approx(want0).epsilon(1e-6));
        CHECK(f.get(y, h * hd + i + hd / 2) == doctest::Approx(want1).epsilon(1e-6));
        CHECK(f.get(yb, h * hd + i) == doctest::Approx(want0).epsilon(1.0 / 128).scale(1));
      }
    }
    if (factor != 0) {  // all three branches of the scaling were exercised
      CHECK(bands[0] > 0);
      CHECK(bands[1] > 0);
      CHECK(bands[2] > 0);
    }
  }
  SUBCASE("y aliases x") {
    Fixture f;
    const std::vector<float> xs = randoms(2 * 64, 12);
    const uint32_t x = f.add("x", DType::f32, xs);
    f.run(make_ins(
        id(OpId::rope), 0, {{x, 0, 128}, {x, 0, 128}},
        {64, 7, f32_bits(10000.0f), f32_bits(0.0f), f32_bits(1.0f), f32_bits(4.0f), 8192}));
    for (uint32_t h = 0; h < 2; ++h)
      for (uint32_t i = 0; i < 32; ++i) {
        const double a = 7.0 * std::pow(10000.0, -2.0 * i / 64);
        const double want = xs[h * 64 + i] * std::cos(a) - xs[h * 64 + i + 32] * std::sin(a);
        CHECK(f.get(x, h * 64 + i) == doctest::Approx(want).epsilon(1e-6));
      }
  }
}

TEST_CASE("kv_append writes one position of every head and nothing else") {
  Fixture f;
  const uint32_t hd = 16, n_kv = 3, max_len = 10, position = 7;
  const std::vector<float> xs = randoms(n_kv * hd, 21);
  const std::vector<float> before = randoms(n_kv * max_len * hd, 22);
  const uint32_t x = f.add("x", DType::f32, xs);
  const uint32_t cache = f.add("cache", DType::bf16, before);
  f.run(make_ins(id(OpId::kv_append), 0, {{x, 0, n_kv * hd}, {cache, 0, n_kv * max_len * hd}},
                 {hd, position, max_len}));
  for (uint32_t h = 0; h < n_kv; ++h)
    for (uint32_t t = 0; t < max_len; ++t)
      for (uint32_t d = 0; d < hd; ++d) {
        const uint64_t at = (uint64_t{h} * max_len + t) * hd + d;
        std::byte tmp[2];
        store_element(tmp, DType::bf16, 0, t == position ? xs[h * hd + d] : before[at]);
        CHECK(f.get(cache, at) == load_element(tmp, DType::bf16, 0));
      }
  // position == max_len is a run-time error, nothing written.
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::kv_append), 1,
                         {{x, 0, n_kv * hd}, {cache, 0, n_kv * max_len * hd}},
                         {hd, max_len, max_len}));
        }) == "run.position");
}

TEST_CASE("attention_decode over chunks + attention_combine == one full softmax attention") {
  struct Case {
    uint32_t hd, group, len, chunk;
    float scale;
  };
  for (const Case c : {Case{64, 1, 37, 37, 0.0f}, Case{64, 4, 100, 32, 0.0f},
                       Case{128, 8, 70, 16, 0.05f}, Case{32, 2, 5, 1, 0.0f}}) {
    CAPTURE(c.hd);
    CAPTURE(c.group);
    CAPTURE(c.len);
    CAPTURE(c.chunk);
    Fixture f;
    const std::vector<float> qs = randoms(c.group * c.hd, 31);
    const std::vector<float> ks = randoms(c.len * c.hd, 32, -3.0f, 3.0f);
    const std::vector<float> vs = randoms(c.len * c.hd, 33);
    const uint32_t q = f.add("q", DType::f32, qs);
    const uint32_t k = f.add("k", DType::f32, ks);
    const uint32_t v = f.add("v", DType::f32, vs);
    const uint32_t chunks = (c.len + c.chunk - 1) / c.chunk;
    const uint32_t row = c.hd + 2, block = c.group * row;
    const uint32_t part = f.add("partials", DType::f32, chunks * block);
    const uint32_t out = f.add("out", DType::f32, c.group * c.hd);
    for (uint32_t ch = 0; ch < chunks; ++ch) {
      const uint32_t t0 = ch * c.chunk, n = std::min(c.chunk, c.len - t0);
      f.run(make_ins(id(OpId::attention_decode), ch,
                     {{q, 0, c.group * c.hd},
                      {k, uint64_t{t0} * c.hd, n * c.hd},
                      {v, uint64_t{t0} * c.hd, n * c.hd},
                      {part, uint64_t{ch} * block, block}},
                     {c.hd, f32_bits(c.scale)}));
    }
    f.run(make_ins(id(OpId::attention_combine), chunks,
                   {{part, 0, chunks * block}, {out, 0, c.group * c.hd}}, {c.hd}));

    const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.hd));
    for (uint32_t g = 0; g < c.group; ++g) {
      // Full attention of query head g over all positions.
      std::vector<double> s(c.len), want(c.hd, 0.0), got(c.hd);
      double m = -INFINITY;
      for (uint32_t t = 0; t < c.len; ++t) {
        double dot = 0;
        for (uint32_t d = 0; d < c.hd; ++d) dot += double{qs[g * c.hd + d]} * ks[t * c.hd + d];
        s[t] = scale * dot;
        m = std::max(m, s[t]);
      }
      double sum = 0;
      for (uint32_t t = 0; t < c.len; ++t) sum += std::exp(s[t] - m);
      for (uint32_t t = 0; t < c.len; ++t)
        for (uint32_t d = 0; d < c.hd; ++d) want[d] += std::exp(s[t] - m) / sum * vs[t * c.hd + d];
      for (uint32_t d = 0; d < c.hd; ++d) got[d] = f.get(out, g * c.hd + d);
      CHECK(norm_err(got, want) < 1e-6);

      // The partials of chunk 0: chunk-normalized output, its max score and sum of exp.
      const uint32_t n0 = std::min(c.chunk, c.len);
      double m0 = -INFINITY, l0 = 0;
      for (uint32_t t = 0; t < n0; ++t) m0 = std::max(m0, s[t]);
      for (uint32_t t = 0; t < n0; ++t) l0 += std::exp(s[t] - m0);
      CHECK(f.get(part, g * row + c.hd) == doctest::Approx(m0).epsilon(1e-6));
      CHECK(f.get(part, g * row + c.hd + 1) == doctest::Approx(l0).epsilon(1e-6));
      double o0 = 0;
      for (uint32_t t = 0; t < n0; ++t) o0 += std::exp(s[t] - m0) / l0 * vs[t * c.hd];
      CHECK(f.get(part, g * row) == doctest::Approx(o0).epsilon(1e-5).scale(1));
    }
  }
}

TEST_CASE("attention_decode reads bf16 caches and combine writes bf16") {
  Fixture f;
  const uint32_t hd = 32, group = 2, len = 24;
  const std::vector<float> qs = randoms(group * hd, 41), ks = randoms(len * hd, 42),
                           vs = randoms(len * hd, 43);
  const uint32_t q = f.add("q", DType::bf16, qs);
  const uint32_t k = f.add("k", DType::bf16, ks);
  const uint32_t v = f.add("v", DType::bf16, vs);
  const uint32_t part = f.add("partials", DType::f32, group * (hd + 2));
  const uint32_t out = f.add("out", DType::bf16, group * hd);
  f.run(make_ins(
      id(OpId::attention_decode), 0,
      {{q, 0, group * hd}, {k, 0, len * hd}, {v, 0, len * hd}, {part, 0, group * (hd + 2)}},
      {hd, 0}));
  f.run(make_ins(id(OpId::attention_combine), 1,
                 {{part, 0, group * (hd + 2)}, {out, 0, group * hd}}, {hd}));
  for (uint32_t g = 0; g < group; ++g) {
    std::vector<double> s(len), want(hd, 0.0), got(hd);
    double m = -INFINITY, sum = 0;
    for (uint32_t t = 0; t < len; ++t) {
      double dot = 0;
      for (uint32_t d = 0; d < hd; ++d) dot += f.get(q, g * hd + d) * f.get(k, t * hd + d);
      s[t] = dot / std::sqrt(double{hd});
      m = std::max(m, s[t]);
    }
    for (uint32_t t = 0; t < len; ++t) sum += std::exp(s[t] - m);
    for (uint32_t t = 0; t < len; ++t)
      for (uint32_t d = 0; d < hd; ++d) want[d] += std::exp(s[t] - m) / sum * f.get(v, t * hd + d);
    for (uint32_t d = 0; d < hd; ++d) got[d] = f.get(out, g * hd + d);
    CHECK(norm_err(got, want) < 1.0 / 128);
  }
}

TEST_CASE("attention_decode with fused RoPE and the new token == rope + kv_append + attention") {
  // position == the number of cached rows, as in a decode step; len 0: the first token.
  struct Case {
    uint32_t hd, len;
    float theta, factor;
  };
  for (const Case c :
       {Case{64, 37, 500000.0f, 32.0f}, Case{128, 70, 10000.0f, 0.0f}, Case{128, 45, 0.0f, 32.0f},
        Case{64, 3000, 500000.0f, 8.0f}, Case{64, 0, 500000.0f, 32.0f}}) {
    CAPTURE(c.hd);
    CAPTURE(c.len);
    CAPTURE(c.theta);
    CAPTURE(c.factor);
    const uint32_t group = 4, hd = c.hd, len = c.len, pos = c.len, max_len = len + 1;
    const uint32_t row = hd + 2, block = group * row, chunk = 16;
    const float low = 1.0f, high = 4.0f;
    const uint32_t orig = 8192;
    Fixture f;
    const uint32_t q = f.add("q", DType::f32, randoms(group * hd, 51));
    const uint32_t kn = f.add("k_new", DType::f32, randoms(hd, 52, -3.0f, 3.0f));
    const uint32_t vn = f.add("v_new", DType::f32, randoms(hd, 53));
    // The caches the fused op reads (bf16, rows [0, len) valid, row len garbage it must not
    // read) and f32 copies of the same values for the reference, so kv_append is exact there.
    const uint32_t kc = f.add("k_cache", DType::bf16, randoms(max_len * hd, 54, -3.0f, 3.0f));
    const uint32_t vc = f.add("v_cache", DType::bf16, randoms(max_len * hd, 55));
    std::vector<float> k32(max_len * hd), v32(max_len * hd);
    for (uint32_t i = 0; i < max_len * hd; ++i) {
      k32[i] = static_cast<float>(f.get(kc, i));
      v32[i] = static_cast<float>(f.get(vc, i));
    }
    const uint32_t kc32 = f.add("k_cache_f32", DType::f32, k32);
    const uint32_t vc32 = f.add("v_cache_f32", DType::f32, v32);
    uint32_t index = 0;

    // Reference: rope(q), rope(k_new), append k_new / v_new at pos, attention over [0, pos].
    uint32_t q_ref = q, kn_ref = kn;
    if (c.theta != 0.0f) {
      q_ref = f.add("q_rot", DType::f32, group * hd);
      kn_ref = f.add("k_new_rot", DType::f32, hd);
      const std::initializer_list<uint32_t> rope = {
          hd, pos, f32_bits(c.theta), f32_bits(c.factor), f32_bits(low), f32_bits(high), orig};
      f.run(make_ins(id(OpId::rope), index++, {{q, 0, group * hd}, {q_ref, 0, group * hd}}, rope));
      f.run(make_ins(id(OpId::rope), index++, {{kn, 0, hd}, {kn_ref, 0, hd}}, rope));
    }
    f.run(make_ins(id(OpId::kv_append), index++, {{kn_ref, 0, hd}, {kc32, 0, max_len * hd}},
                   {hd, pos, max_len}));
    f.run(make_ins(id(OpId::kv_append), index++, {{vn, 0, hd}, {vc32, 0, max_len * hd}},
                   {hd, pos, max_len}));
    const uint32_t ref_part = f.add("ref_partials", DType::f32, block);
    const uint32_t ref_out = f.add("ref_out", DType::f32, group * hd);
    f.run(make_ins(id(OpId::attention_decode), index++,
                   {{q_ref, 0, group * hd},
                    {kc32, 0, max_len * hd},
                    {vc32, 0, max_len * hd},
                    {ref_part, 0, block}},
                   {hd, 0}));
    f.run(make_ins(id(OpId::attention_combine), index++,
                   {{ref_part, 0, block}, {ref_out, 0, group * hd}}, {hd}));

    // Fused: q unrotated, the cache rows [t0, t0 + n) as stored, the new row when `with_new`.
    const std::initializer_list<uint32_t> params = {
        hd, 0, pos, f32_bits(c.theta), f32_bits(c.factor), f32_bits(low), f32_bits(high), orig};
    auto fused = [&](uint32_t part, uint64_t at, uint32_t t0, uint32_t n, bool with_new) {
      if (with_new) {
        f.run(make_ins(id(OpId::attention_decode), index++,
                       {{q, 0, group * hd},
                        {kc, uint64_t{t0} * hd, uint64_t{n} * hd},
                        {vc, uint64_t{t0} * hd, uint64_t{n} * hd},
                        {part, at, block},
                        {kn, 0, hd},
                        {vn, 0, hd}},
                       params));
      } else {
        f.run(make_ins(id(OpId::attention_decode), index++,
                       {{q, 0, group * hd},
                        {kc, uint64_t{t0} * hd, uint64_t{n} * hd},
                        {vc, uint64_t{t0} * hd, uint64_t{n} * hd},
                        {part, at, block}},
                       params));
      }
    };
    auto combine = [&](uint32_t part, uint32_t chunks) {
      const uint32_t out = f.add("out", DType::f32, group * hd);
      f.run(make_ins(id(OpId::attention_combine), index++,
                     {{part, 0, uint64_t{chunks} * block}, {out, 0, group * hd}}, {hd}));
      std::vector<double> v(group * hd);
      for (uint32_t i = 0; i < group * hd; ++i) v[i] = f.get(out, i);
      return v;
    };
    std::vector<double> want(group * hd);
    for (uint32_t i = 0; i < group * hd; ++i) want[i] = f.get(ref_out, i);

    // One chunk: the partials themselves match, (output, max score, sum of exp) per head.
    const uint32_t part1 = f.add("partials_1", DType::f32, block);
    fused(part1, 0, 0, len, true);
    for (uint32_t g = 0; g < group; ++g) {
      CAPTURE(g);
      std::vector<double> got(hd), ref(hd);
      for (uint32_t d = 0; d < hd; ++d) {
        got[d] = f.get(part1, g * row + d);
        ref[d] = f.get(ref_part, g * row + d);
      }
      CHECK(norm_err(got, ref) < 1e-5);
      CHECK(f.get(part1, g * row + hd) ==
            doctest::Approx(f.get(ref_part, g * row + hd)).epsilon(1e-5));
      CHECK(f.get(part1, g * row + hd + 1) ==
            doctest::Approx(f.get(ref_part, g * row + hd + 1)).epsilon(1e-5));
    }
    const std::vector<double> unsplit = combine(part1, 1);
    CHECK(norm_err(unsplit, want) < 1e-5);

    // Chunks of 16 cached rows; the new row with the last of them, or alone in an empty chunk
    // (k and v of extent 0). Every chunk rotates q.
    const uint32_t cached_chunks = (len + chunk - 1) / chunk;
    for (const bool alone : {false, true}) {
      CAPTURE(alone);
      if (!alone && cached_chunks == 0) continue;
      const uint32_t chunks = cached_chunks + (alone ? 1 : 0);
      const uint32_t part = f.add("partials_split", DType::f32, chunks * block);
      for (uint32_t ch = 0; ch < chunks; ++ch) {
        const uint32_t t0 = std::min(ch * chunk, len), n = std::min(chunk, len - t0);
        fused(part, uint64_t{ch} * block, t0, n, ch + 1 == chunks);
      }
      const std::vector<double> split = combine(part, chunks);
      CHECK(norm_err(split, unsplit) < 1e-5);
      CHECK(norm_err(split, want) < 1e-5);
    }
  }
}

TEST_CASE("attention_decode: an empty chunk without the new row is a run-time error") {
  Fixture f;
  const uint32_t hd = 32;
  const uint32_t q = f.add("q", DType::f32, randoms(hd, 61));
  const uint32_t k = f.add("k", DType::f32, randoms(hd, 62));
  const uint32_t part = f.add("partials", DType::f32, hd + 2);
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::attention_decode), 0,
                         {{q, 0, hd}, {k, 0, 0}, {k, 0, 0}, {part, 0, hd + 2}}, {hd, 0}));
        }) == "run.operand.shape");
  // k_new without v_new.
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::attention_decode), 1,
                         {{q, 0, hd}, {k, 0, 0}, {k, 0, 0}, {part, 0, hd + 2}, {k, 0, hd}},
                         {hd, 0}));
        }) == "run.operand.shape");
}

// ---- the runtime position (a u32 operand: position[0] + pass - 1) ----

TEST_CASE("rope and kv_append at the position operand equal the position param") {
  Fixture f;
  const uint32_t hd = 64, n_kv = 2, max_len = 12;
  const std::vector<float> xs = randoms(n_kv * hd, 71);
  const uint32_t x = f.add("x", DType::f32, xs);
  const uint32_t pos = f.add("position", DType::u32, 1);
  store_element(f.host.data[pos].data(), DType::u32, 0, 5.0);
  const std::initializer_list<uint32_t> scaling = {f32_bits(500000.0f), f32_bits(32.0f),
                                                   f32_bits(1.0f), f32_bits(4.0f), 8192};
  for (const uint32_t pass : {1u, 4u}) {
    CAPTURE(pass);
    const uint32_t p = 5 + pass - 1;
    // rope: the operand at pass `pass` == the param p.
    const uint32_t y_param = f.add("y_param", DType::f32, n_kv * hd);
    const uint32_t y_op = f.add("y_op", DType::f32, n_kv * hd);
    std::vector<uint32_t> rope_params = {hd, p};
    rope_params.insert(rope_params.end(), scaling);
    amk_instruction_t a = make_ins(id(OpId::rope), 0, {{x, 0, n_kv * hd}, {y_param, 0, n_kv * hd}});
    a.n_params = static_cast<uint8_t>(rope_params.size());
    std::copy(rope_params.begin(), rope_params.end(), a.params);
    f.run(a);
    rope_params[1] = 999;  // ignored beside the operand
    amk_instruction_t b =
        make_ins(id(OpId::rope), 1, {{x, 0, n_kv * hd}, {y_op, 0, n_kv * hd}, {pos, 0, 1}});
    b.n_params = static_cast<uint8_t>(rope_params.size());
    std::copy(rope_params.begin(), rope_params.end(), b.params);
    f.run(b, pass);
    for (uint32_t i = 0; i < n_kv * hd; ++i) CHECK(f.get(y_op, i) == f.get(y_param, i));

    // kv_append with theta: the rotated rows at p, every other row untouched.
    const std::vector<float> before = randoms(n_kv * max_len * hd, 72);
    const uint32_t cache = f.add("cache", DType::f32, before);
    std::vector<uint32_t> append_params = {hd, 0, max_len};
    append_params.insert(append_params.end(), scaling);
    amk_instruction_t c = make_ins(
        id(OpId::kv_append), 2, {{x, 0, n_kv * hd}, {cache, 0, n_kv * max_len * hd}, {pos, 0, 1}});
    c.n_params = static_cast<uint8_t>(append_params.size());
    std::copy(append_params.begin(), append_params.end(), c.params);
    f.run(c, pass);
    for (uint32_t h = 0; h < n_kv; ++h)
      for (uint32_t t = 0; t < max_len; ++t)
        for (uint32_t d = 0; d < hd; ++d) {
          const uint64_t at = (uint64_t{h} * max_len + t) * hd + d;
          CHECK(f.get(cache, at) == (t == p ? f.get(y_param, h * hd + d) : before[at]));
        }
  }
  // A position past the cache is a run-time error that writes nothing.
  store_element(f.host.data[pos].data(), DType::u32, 0, 11.0);
  const uint32_t cache = f.add("cache2", DType::f32, n_kv * max_len * hd);
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::kv_append), 3,
                         {{x, 0, n_kv * hd}, {cache, 0, n_kv * max_len * hd}, {pos, 0, 1}},
                         {hd, 0, max_len}),
                2);
        }) == "run.position");
}

TEST_CASE("attention_decode with the position operand attends the rows below it") {
  // A cache of max_len rows in chunks of 8 (start 0, 8, 16): at P the rows below P count and the
  // new row joins the chunk holding P; chunks past P are empty (o 0, m -inf, l 0). Combined, they
  // equal one attention over rows [0, P) plus the new row.
  const uint32_t hd = 32, group = 2, max_len = 24, chunk = 8, row = hd + 2, block = group * row;
  for (const uint32_t p : {0u, 5u, 8u, 13u, 23u}) {
    CAPTURE(p);
    Fixture f;
    const uint32_t q = f.add("q", DType::f32, randoms(group * hd, 81));
    const uint32_t kc = f.add("k", DType::f32, randoms(max_len * hd, 82));
    const uint32_t vc = f.add("v", DType::f32, randoms(max_len * hd, 83));
    const uint32_t kn = f.add("k_new", DType::f32, randoms(hd, 84));
    const uint32_t vn = f.add("v_new", DType::f32, randoms(hd, 85));
    const uint32_t pos = f.add("position", DType::i32, 1);
    store_element(f.host.data[pos].data(), DType::i32, 0, 1.0);  // pass p runs at p
    const uint32_t chunks = max_len / chunk;
    const uint32_t part = f.add("partials", DType::f32, chunks * block);
    uint32_t index = 0;
    for (uint32_t c = 0; c < chunks; ++c) {
      amk_instruction_t ins = make_ins(id(OpId::attention_decode), index++,
                                       {{q, 0, group * hd},
                                        {kc, uint64_t{c} * chunk * hd, chunk * hd},
                                        {vc, uint64_t{c} * chunk * hd, chunk * hd},
                                        {part, uint64_t{c} * block, block},
                                        {kn, 0, hd},
                                        {vn, 0, hd},
                                        {pos, 0, 1}},
                                       {hd, 0, 0, f32_bits(500000.0f), f32_bits(32.0f),
                                        f32_bits(1.0f), f32_bits(4.0f), 8192, c * chunk});
      f.run(ins, p);  // position[0] 1 + pass p - 1 = p
      if (c * chunk > p) {
        for (uint32_t g = 0; g < group; ++g) {
          CHECK(f.get(part, c * block + g * row) == 0.0);
          CHECK(std::isinf(f.get(part, c * block + g * row + hd)));
          CHECK(f.get(part, c * block + g * row + hd + 1) == 0.0);
        }
      }
    }
    const uint32_t out = f.add("out", DType::f32, group * hd);
    f.run(make_ins(id(OpId::attention_combine), index++,
                   {{part, 0, uint64_t{chunks} * block}, {out, 0, group * hd}}, {hd}));
    // The reference: the position-param form over rows [0, p) with the new row.
    const uint32_t ref_part = f.add("ref_partials", DType::f32, block);
    f.run(make_ins(
        id(OpId::attention_decode), index++,
        {{q, 0, group * hd},
         {kc, 0, uint64_t{p} * hd},
         {vc, 0, uint64_t{p} * hd},
         {ref_part, 0, block},
         {kn, 0, hd},
         {vn, 0, hd}},
        {hd, 0, p, f32_bits(500000.0f), f32_bits(32.0f), f32_bits(1.0f), f32_bits(4.0f), 8192}));
    const uint32_t ref_out = f.add("ref_out", DType::f32, group * hd);
    f.run(make_ins(id(OpId::attention_combine), index++,
                   {{ref_part, 0, block}, {ref_out, 0, group * hd}}, {hd}));
    std::vector<double> got(group * hd), want(group * hd);
    for (uint32_t i = 0; i < group * hd; ++i) {
      got[i] = f.get(out, i);
      want[i] = f.get(ref_out, i);
    }
    CHECK(norm_err(got, want) < 1e-6);
  }
}

TEST_CASE("feed_token: the prompt's next id, then the argmax; ids and logits per step") {
  Fixture f;
  const uint32_t n_prompt = 3, steps = 4, passes = n_prompt + steps - 1, vocab = 5;
  const uint32_t index = f.add("index", DType::i32, 1);
  const uint32_t prompt = f.add("prompt", DType::i32, n_prompt);
  const uint32_t token = f.add("token", DType::i32, 1);
  const uint32_t ids = f.add("ids", DType::i32, steps);
  const uint32_t logits = f.add("logits", DType::f32, randoms(vocab, 91));
  const uint32_t all = f.add("all_logits", DType::f32, uint64_t{passes} * vocab);
  for (uint32_t i = 0; i < n_prompt; ++i)
    store_element(f.host.data[prompt].data(), DType::i32, i, 100.0 + i);
  for (uint32_t pass = 1; pass <= passes; ++pass) {
    CAPTURE(pass);
    store_element(f.host.data[index].data(), DType::i32, 0, 200.0 + pass);
    store_element(f.host.data[logits].data(), DType::f32, 0, pass);
    f.run(make_ins(id(OpId::feed_token), 0,
                   {{index, 0, 1},
                    {prompt, 0, n_prompt},
                    {token, 0, 1},
                    {ids, 0, steps},
                    {logits, 0, vocab},
                    {all, 0, uint64_t{passes} * vocab}}),
          pass);
    const double want = pass < n_prompt ? 100.0 + pass : 200.0 + pass;
    CHECK(f.get(token, 0) == want);
    if (pass >= n_prompt) CHECK(f.get(ids, pass - n_prompt) == want);
    CHECK(f.get(all, uint64_t{pass - 1} * vocab) == pass);
    CHECK(f.get(all, uint64_t{pass - 1} * vocab + 1) == f.get(logits, 1));
  }
}

TEST_CASE("feed_token with eos: the pass of the first generated eos, then nothing written") {
  Fixture f;
  const uint32_t n_prompt = 3, steps = 5, passes = n_prompt + steps - 1, vocab = 4;
  const uint32_t index = f.add("index", DType::i32, 1);
  const uint32_t prompt = f.add("prompt", DType::i32, n_prompt);
  const uint32_t token = f.add("token", DType::i32, 1);
  const uint32_t ids = f.add("ids", DType::i32, steps);
  const uint32_t logits = f.add("logits", DType::f32, randoms(vocab, 17));
  const uint32_t all = f.add("all_logits", DType::f32, uint64_t{passes} * vocab);
  const uint32_t eos = f.add("eos", DType::i32, 1);
  // The prompt holds the eos id (no stop there); the argmax gives 7, 9, 9, 7, 9 from pass 3.
  const double argmax[] = {0, 0, 0, 7, 9, 9, 7, 9};
  store_element(f.host.data[eos].data(), DType::i32, 0, 9.0);
  for (uint32_t i = 0; i < n_prompt; ++i)
    store_element(f.host.data[prompt].data(), DType::i32, i, i == 1 ? 9.0 : 40.0 + i);
  for (uint32_t i = 0; i < steps; ++i) store_element(f.host.data[ids].data(), DType::i32, i, -5.0);
  for (uint32_t i = 0; i < passes * vocab; ++i)
    store_element(f.host.data[all].data(), DType::f32, i, -5.0);
  for (uint32_t pass = 1; pass <= passes; ++pass) {
    CAPTURE(pass);
    store_element(f.host.data[index].data(), DType::i32, 0, argmax[pass]);
    f.run(make_ins(id(OpId::feed_token), 0,
                   {{index, 0, 1},
                    {prompt, 0, n_prompt},
                    {token, 0, 1},
                    {ids, 0, steps},
                    {logits, 0, vocab},
                    {all, 0, uint64_t{passes} * vocab},
                    {eos, 0, 1}}),
          pass);
    // Pass 1 feeds prompt[1] (the eos id, not generated); pass 4 generates the first 9.
    CHECK(f.stop_word == (pass < 4 ? 0u : 4u));
  }
  CHECK(f.get(ids, 0) == 7);  // pass 3
  CHECK(f.get(ids, 1) == 9);  // pass 4: the eos
  for (uint32_t i = 2; i < steps; ++i) CHECK(f.get(ids, i) == -5);
  CHECK(f.get(token, 0) == 9);
  CHECK(f.get(all, uint64_t{3} * vocab) == f.get(logits, 0));  // pass 4's row
  for (uint32_t i = 4 * vocab; i < passes * vocab; ++i) CHECK(f.get(all, i) == -5);
}
