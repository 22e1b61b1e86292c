// gemv's fusions on the CPU reference: the norm operand (rmsnorm of x folded in) and w2 (a GLU:
// silu(W x') * (W2 x')) must agree with the unfused chain of ops they replace, by normalized
// error on seeded random inputs, with operands at non-zero offsets and rows not a multiple of 8.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
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

// ||got - want|| / ||want|| over the whole vectors.
double normalized_error(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  REQUIRE(den > 0);
  return std::sqrt(num / den);
}

// A layer's worth of inputs: bf16 weights (two matrices of kRows x kK inside larger buffers at
// row offsets), f32 x, a norm weight around 1, an f32 residual.
constexpr uint64_t kRows = 37, kK = 200, kRow0 = 3;  // rows [3, 40) of [48, kK] matrices
constexpr uint64_t kX0 = 5;                          // x at offset 5 of its buffer
struct Layer {
  Fixture f;
  uint32_t w, w2, x, norm, res;
  Layer(DType norm_dtype, float x_scale) {
    w = f.add("w", DType::bf16, nonzero_floats(48 * kK, 101, -0.06f, 0.06f));
    w2 = f.add("w2", DType::bf16, nonzero_floats(48 * kK, 102, -0.06f, 0.06f));
    std::vector<float> xv = nonzero_floats(kK + kX0, 103);
    for (float& v : xv) v *= x_scale;
    x = f.add("x", DType::f32, xv);
    norm = f.add("norm", norm_dtype, nonzero_floats(kK, 104, 0.8f, 1.2f));
    res = f.add("res", DType::f32, nonzero_floats(kRows, 105));
  }
  OperandSpec w_op() const { return {w, kRow0 * kK, kRows * kK}; }
  OperandSpec w2_op() const { return {w2, kRow0 * kK, kRows * kK}; }
  OperandSpec x_op() const { return {x, kX0, kK}; }
  OperandSpec norm_op() const { return {norm, 0, kK}; }
};

}  // namespace

TEST_CASE("gemv with norm equals rmsnorm then gemv") {
  // eps matters at this scale of x: mean(x^2) ~ 1.3e-3 against eps 1e-3.
  for (DType nt : {DType::f32, DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(nt));
    Layer l(nt, 0.025f);
    Fixture& f = l.f;
    const float eps = 1e-3f;
    const uint32_t xn = f.add("xn", DType::f32, kK);
    const uint32_t want = f.add("want", DType::f32, kRows);
    const uint32_t got = f.add("got", DType::f32, kRows);
    const uint32_t plain = f.add("plain", DType::f32, kRows);
    f.run(make_ins(id(OpId::rmsnorm), 0, {l.x_op(), l.norm_op(), {xn, 0, kK}}, {f32_bits(eps)}));
    f.run(make_ins(id(OpId::gemv), 1, {l.w_op(), {xn, 0, kK}, {want, 0, kRows}}, {f32_bits(eps)}));
    f.run(make_ins(id(OpId::gemv), 2, {l.w_op(), l.x_op(), {got, 0, kRows}, {}, l.norm_op(), {}},
                   {f32_bits(eps)}));
    CHECK(normalized_error(f.all(got), f.all(want)) < 1e-6);

    // The fusion changes the result: the same gemv without norm is far off, and so is the fused
    // one with another eps.
    f.run(make_ins(id(OpId::gemv), 3, {l.w_op(), l.x_op(), {plain, 0, kRows}}, {f32_bits(eps)}));
    CHECK(normalized_error(f.all(plain), f.all(want)) > 0.1);
    f.run(make_ins(id(OpId::gemv), 4, {l.w_op(), l.x_op(), {plain, 0, kRows}, {}, l.norm_op(), {}},
                   {f32_bits(1e-5f)}));
    CHECK(normalized_error(f.all(plain), f.all(want)) > 0.05);
  }
}

TEST_CASE("gemv with norm, w2 and residual equals rmsnorm, two gemvs, silu_mul and add") {
  for (DType yt : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(yt));
    Layer l(DType::bf16, 1.0f);
    Fixture& f = l.f;
    const float eps = 1e-5f;
    const uint32_t xn = f.add("xn", DType::f32, kK);
    const uint32_t gate = f.add("gate", DType::f32, kRows);
    const uint32_t up = f.add("up", DType::f32, kRows);
    const uint32_t act = f.add("act", DType::f32, kRows);
    const uint32_t want = f.add("want", yt, kRows);
    const uint32_t got = f.add("got", yt, kRows);
    f.run(make_ins(id(OpId::rmsnorm), 0, {l.x_op(), l.norm_op(), {xn, 0, kK}}, {f32_bits(eps)}));
    f.run(make_ins(id(OpId::gemv), 1, {l.w_op(), {xn, 0, kK}, {gate, 0, kRows}}));
    f.run(make_ins(id(OpId::gemv), 2, {l.w2_op(), {xn, 0, kK}, {up, 0, kRows}}));
    f.run(make_ins(id(OpId::silu_mul), 3, {{gate, 0, kRows}, {up, 0, kRows}, {act, 0, kRows}}));
    f.run(make_ins(id(OpId::add), 4, {{act, 0, kRows}, {l.res, 0, kRows}, {want, 0, kRows}}));
    f.run(make_ins(id(OpId::gemv), 5,
                   {l.w_op(), l.x_op(), {got, 0, kRows}, {l.res, 0, kRows}, l.norm_op(), l.w2_op()},
                   {f32_bits(eps)}));
    // f32 chain vs double reference: rounding of the intermediates only (and of y's dtype).
    CHECK(normalized_error(f.all(got), f.all(want)) < (yt == DType::f32 ? 1e-6 : 8e-3));
    // silu(a) * b differs from the residual alone and from a plain gemv.
    CHECK(normalized_error(f.all(got), f.all(l.res)) > 0.01);
    const uint32_t plain = f.add("plain", DType::f32, kRows);
    f.run(make_ins(id(OpId::gemv), 6, {l.w_op(), l.x_op(), {plain, 0, kRows}, {l.res, 0, kRows}}));
    CHECK(normalized_error(f.all(plain), f.all(want)) > 0.1);
  }
}

TEST_CASE("gemv with w2 and no norm is silu(W x) * (W2 x); eps is then ignored") {
  Layer l(DType::f32, 1.0f);
  Fixture& f = l.f;
  const uint32_t gate = f.add("gate", DType::f32, kRows);
  const uint32_t up = f.add("up", DType::f32, kRows);
  const uint32_t want = f.add("want", DType::f32, kRows);
  const uint32_t got = f.add("got", DType::f32, kRows);
  const uint32_t got_eps = f.add("got_eps", DType::f32, kRows);
  f.run(make_ins(id(OpId::gemv), 0, {l.w_op(), l.x_op(), {gate, 0, kRows}}));
  f.run(make_ins(id(OpId::gemv), 1, {l.w2_op(), l.x_op(), {up, 0, kRows}}));
  f.run(make_ins(id(OpId::silu_mul), 2, {{gate, 0, kRows}, {up, 0, kRows}, {want, 0, kRows}}));
  f.run(make_ins(id(OpId::gemv), 3, {l.w_op(), l.x_op(), {got, 0, kRows}, {}, {}, l.w2_op()},
                 {f32_bits(1e-5f)}));
  f.run(make_ins(id(OpId::gemv), 4, {l.w_op(), l.x_op(), {got_eps, 0, kRows}, {}, {}, l.w2_op()},
                 {f32_bits(0.5f)}));
  CHECK(normalized_error(f.all(got), f.all(want)) < 1e-6);
  CHECK(f.all(got_eps) == f.all(got));
  CHECK(normalized_error(f.all(got), f.all(gate)) > 0.1);
}

TEST_CASE("gemv fusions refuse operands of the wrong extent") {
  Layer l(DType::f32, 1.0f);
  Fixture& f = l.f;
  const uint32_t y = f.add("y", DType::f32, kRows);
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::gemv), 0,
                         {l.w_op(), l.x_op(), {y, 0, kRows}, {}, {l.norm, 0, kK - 1}, {}},
                         {f32_bits(1e-5f)}));
        }) == "run.operand.shape");
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::gemv), 1,
                         {l.w_op(), l.x_op(), {y, 0, kRows}, {}, {}, {l.w2, 0, (kRows - 1) * kK}},
                         {f32_bits(1e-5f)}));
        }) == "run.operand.shape");
}

// gemv with head_dim / heads (the o_proj of `amk gen llama --combine oproj`): x is chunk-major
// attention partials, merged into x' as attention_combine merges them, then the gemv; equal to
// attention_combine then gemv, and different when a chunk is left out.
TEST_CASE("gemv merging attention partials equals attention_combine then gemv") {
  constexpr uint32_t hd = 8, heads = 4, chunks = 3, k = heads * hd, rows = 11;
  constexpr uint32_t row = hd + 2;
  Fixture f;
  std::vector<float> pv = nonzero_floats(chunks * heads * row, 301, -1.0f, 1.0f);
  const std::vector<float> ms = nonzero_floats(chunks * heads, 302, -3.0f, 3.0f);
  const std::vector<float> ls = nonzero_floats(chunks * heads, 303, 1.0f, 5.0f);
  for (uint32_t i = 0; i < chunks * heads; ++i) {
    pv[i * row + hd] = ms[i];
    pv[i * row + hd + 1] = ls[i];
  }
  const uint32_t parts = f.add("parts", DType::f32, pv);
  const uint32_t w = f.add("w", DType::bf16, nonzero_floats((rows + 2) * k, 304, -0.1f, 0.1f));
  const uint32_t res = f.add("res", DType::f32, nonzero_floats(rows, 305));
  const uint32_t attn = f.add("attn", DType::f32, k);
  const uint32_t want = f.add("want", DType::f32, rows);
  const uint32_t got = f.add("got", DType::f32, rows);
  const uint32_t two = f.add("two", DType::f32, rows);
  const OperandSpec w_op{w, 2 * k, rows * k};  // rows [2, 13) of a [13, K] matrix
  f.run(make_ins(id(OpId::attention_combine), 0, {{parts, 0, chunks * heads * row}, {attn, 0, k}},
                 {hd, 1}));
  f.run(make_ins(id(OpId::gemv), 1, {w_op, {attn, 0, k}, {want, 0, rows}, {res, 0, rows}},
                 {f32_bits(1e-5f), 0, 0}));
  f.run(make_ins(id(OpId::gemv), 2,
                 {w_op, {parts, 0, chunks * heads * row}, {got, 0, rows}, {res, 0, rows}},
                 {f32_bits(1e-5f), hd, heads}));
  CHECK(normalized_error(f.all(got), f.all(want)) < 1e-6);
  // The first two chunks only: another x', another y.
  f.run(make_ins(id(OpId::gemv), 3,
                 {w_op, {parts, 0, 2 * heads * row}, {two, 0, rows}, {res, 0, rows}},
                 {f32_bits(1e-5f), hd, heads}));
  CHECK(normalized_error(f.all(two), f.all(want)) > 1e-3);
  // Partials that are not whole chunks are refused by the reference too.
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::gemv), 4,
                         {w_op, {parts, 0, chunks * heads * row - 1}, {got, 0, rows}},
                         {f32_bits(1e-5f), hd, heads}));
        }) == "run.operand.shape");
}
