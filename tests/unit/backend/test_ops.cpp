// Every built-in op of the CPU reference against an independently computed expectation on
// random non-zero inputs, with operands at non-zero offsets inside larger buffers.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
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

// v rounded to dtype t, as the op's store does.
double rounded(DType t, double v) {
  std::byte tmp[8];
  store_element(tmp, t, 0, v);
  return load_element(tmp, t, 0);
}

double rel_tol(DType t) {
  switch (t) {
    case DType::f16: return 1.0 / 1024;
    case DType::bf16: return 1.0 / 128;
    default: return 2e-7;
  }
}

bool close(double got, double want, DType t, double abs_floor = 1e-30) {
  return std::fabs(got - want) <= rel_tol(t) * std::fabs(want) + abs_floor;
}

const DType kFloat[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("add, mul, scale: f32 arithmetic, rounded to the output dtype, bit exact") {
  for (DType t : kFloat) {
    CAPTURE(dtype_name(t));
    Fixture f;
    const uint32_t a = f.add("a", t, nonzero_floats(40, 1));
    const uint32_t b = f.add("b", DType::f32, nonzero_floats(40, 2));
    const uint32_t y = f.add("y", t, nonzero_floats(40, 3));
    const auto y_before = f.all(y);
    // Operands: a[4, 36), b[0, 32), y[8, 40).
    f.run(make_ins(id(OpId::add), 0, {{a, 4, 32}, {b, 0, 32}, {y, 8, 32}}));
    for (uint64_t i = 0; i < 32; ++i) {
      const float want = static_cast<float>(f.get(a, 4 + i)) + static_cast<float>(f.get(b, i));
      CHECK(f.get(y, 8 + i) == rounded(t, want));
    }
    for (uint64_t i = 0; i < 8; ++i) CHECK(f.get(y, i) == y_before[i]);  // outside: untouched

    f.run(make_ins(id(OpId::mul), 1, {{a, 0, 40}, {b, 0, 40}, {y, 0, 40}}));
    for (uint64_t i = 0; i < 40; ++i) {
      const float want = static_cast<float>(f.get(a, i)) * static_cast<float>(f.get(b, i));
      CHECK(f.get(y, i) == rounded(t, want));
    }
    f.run(make_ins(id(OpId::scale), 2, {{b, 0, 40}, {y, 0, 40}}, {f32_bits(-1.75f)}));
    for (uint64_t i = 0; i < 40; ++i)
      CHECK(f.get(y, i) == rounded(t, -1.75f * static_cast<float>(f.get(b, i))));
  }
}

TEST_CASE("in-place add reads the old values") {
  Fixture f;
  const uint32_t a = f.add("a", DType::f32, nonzero_floats(16, 4));
  const auto old = f.all(a);
  f.run(make_ins(id(OpId::add), 0, {{a, 0, 16}, {a, 0, 16}, {a, 0, 16}}));
  for (uint64_t i = 0; i < 16; ++i) CHECK(f.get(a, i) == 2 * old[i]);
}

TEST_CASE("silu_mul") {
  for (DType t : kFloat) {
    CAPTURE(dtype_name(t));
    Fixture f;
    const uint32_t g = f.add("g", t, nonzero_floats(64, 5, -8, 8));
    const uint32_t u = f.add("u", t, nonzero_floats(64, 6));
    const uint32_t y = f.add("y", t, 64);
    f.run(make_ins(id(OpId::silu_mul), 0, {{g, 0, 64}, {u, 0, 64}, {y, 0, 64}}));
    for (uint64_t i = 0; i < 64; ++i) {
      const double gv = f.get(g, i);
      const double want = gv / (1.0 + std::exp(-gv)) * f.get(u, i);
      CHECK(close(f.get(y, i), want, t, 1e-6));
      CHECK(f.get(y, i) != 0.0);
    }
  }
}

TEST_CASE("rmsnorm over rows of extent(weight)") {
  for (DType t : kFloat) {
    CAPTURE(dtype_name(t));
    Fixture f;
    const uint64_t rows = 3, cols = 24;
    const uint32_t x = f.add("x", t, nonzero_floats(rows * cols + 5, 7));
    const uint32_t w = f.add("w", DType::f32, nonzero_floats(cols, 8));
    const uint32_t y = f.add("y", t, rows * cols);
    const float eps = 1e-3f;
    f.run(make_ins(id(OpId::rmsnorm), 0, {{x, 5, rows * cols}, {w, 0, cols}, {y, 0, rows * cols}},
                   {f32_bits(eps)}));
    for (uint64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (uint64_t j = 0; j < cols; ++j)
        ss += f.get(x, 5 + r * cols + j) * f.get(x, 5 + r * cols + j);
      const double inv = 1.0 / std::sqrt(ss / cols + static_cast<double>(eps));
      for (uint64_t j = 0; j < cols; ++j) {
        const double want = f.get(x, 5 + r * cols + j) * inv * f.get(w, j);
        CHECK(close(f.get(y, r * cols + j), want, t));
      }
    }
  }
  // The default eps (1e-5) applies when the param word is absent.
  Fixture f;
  const uint32_t x = f.add("x", DType::f32, std::vector<float>{3e-3f, 4e-3f});
  const uint32_t w = f.add("w", DType::f32, std::vector<float>{1, 1});
  const uint32_t y = f.add("y", DType::f32, 2);
  f.run(make_ins(id(OpId::rmsnorm), 0, {{x, 0, 2}, {w, 0, 2}, {y, 0, 2}}));
  const double inv = 1.0 / std::sqrt((9e-6 + 16e-6) / 2 + static_cast<double>(1e-5f));
  CHECK(close(f.get(y, 0), static_cast<double>(3e-3f) * inv, DType::f32));
}

TEST_CASE("softmax per row of cols with scale, numerically stable") {
  for (DType t : kFloat) {
    CAPTURE(dtype_name(t));
    Fixture f;
    const uint64_t rows = 4, cols = 10;
    const uint32_t x = f.add("x", t, nonzero_floats(rows * cols, 9, -5, 5));
    const uint32_t y = f.add("y", t, rows * cols);
    f.run(make_ins(id(OpId::softmax), 0, {{x, 0, rows * cols}, {y, 0, rows * cols}},
                   {static_cast<uint32_t>(cols), f32_bits(0.5f)}));
    for (uint64_t r = 0; r < rows; ++r) {
      double sum = 0, total = 0;
      for (uint64_t j = 0; j < cols; ++j) sum += std::exp(0.5 * f.get(x, r * cols + j));
      for (uint64_t j = 0; j < cols; ++j) {
        CHECK(close(f.get(y, r * cols + j), std::exp(0.5 * f.get(x, r * cols + j)) / sum, t));
        total += f.get(y, r * cols + j);
      }
      CHECK(std::fabs(total - 1.0) < 10 * rel_tol(t));
    }
  }
  // cols 0 (default) is the whole extent, scale default 1; large inputs do not overflow.
  Fixture f;
  const uint32_t x = f.add("x", DType::f32, std::vector<float>{1000, 1001, 999, 1000});
  const uint32_t y = f.add("y", DType::f32, 4);
  f.run(make_ins(id(OpId::softmax), 0, {{x, 0, 4}, {y, 0, 4}}));
  const double s = 2 + std::exp(1.0) + std::exp(-1.0);
  CHECK(close(f.get(y, 0), 1 / s, DType::f32));
  CHECK(close(f.get(y, 1), std::exp(1.0) / s, DType::f32));
  CHECK(close(f.get(y, 2), std::exp(-1.0) / s, DType::f32));
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::softmax), 3, {{x, 0, 4}, {y, 0, 4}}, {3u, f32_bits(1)}));
        }) == "run.operand.shape");
}

TEST_CASE("gemv for every weight dtype, with and without residual") {
  const uint64_t rows = 37, k = 131;  // k not a multiple of the unroll
  for (DType wt : kFloat) {
    for (DType xt : {DType::f32, DType::bf16}) {
      for (bool residual : {false, true}) {
        CAPTURE(dtype_name(wt));
        CAPTURE(dtype_name(xt));
        CAPTURE(residual);
        Fixture f;
        const uint32_t w = f.add("w", wt, nonzero_floats(rows * k, 10));
        const uint32_t x = f.add("x", xt, nonzero_floats(k + 3, 11));
        const uint32_t y = f.add("y", DType::f32, rows);
        const uint32_t r = f.add("r", DType::f32, nonzero_floats(rows, 12));
        auto ins = make_ins(id(OpId::gemv), 0,
                            {{w, 0, static_cast<uint32_t>(rows * k)},
                             {x, 3, k},
                             {y, 0, rows},
                             residual ? OperandSpec{r, 0, rows} : OperandSpec{}});
        f.run(ins);
        for (uint64_t i = 0; i < rows; ++i) {
          double want = residual ? f.get(r, i) : 0.0;
          for (uint64_t j = 0; j < k; ++j) want += f.get(w, i * k + j) * f.get(x, 3 + j);
          CHECK(close(f.get(y, i), want, DType::f32, 1e-6));
        }
      }
    }
  }
}

TEST_CASE("gemv: y += W x with the residual aliasing y, f16 output") {
  Fixture f;
  const uint64_t rows = 8, k = 16;
  const uint32_t w = f.add("w", DType::bf16, nonzero_floats(rows * k, 13));
  const uint32_t x = f.add("x", DType::f32, nonzero_floats(k, 14));
  const uint32_t y = f.add("y", DType::f16, nonzero_floats(rows, 15));
  const auto old = f.all(y);
  f.run(make_ins(id(OpId::gemv), 0, {{w, 0, rows * k}, {x, 0, k}, {y, 0, rows}, {y, 0, rows}}));
  for (uint64_t i = 0; i < rows; ++i) {
    double want = old[i];
    for (uint64_t j = 0; j < k; ++j) want += f.get(w, i * k + j) * f.get(x, j);
    CHECK(f.get(y, i) == rounded(DType::f16, want));
  }
}

TEST_CASE("gemv 4096 x 4096 bf16 runs in reasonable time") {
  Fixture f;
  const uint64_t n = 4096;
  const uint32_t w = f.add("w", DType::bf16, n * n);
  const uint32_t x = f.add("x", DType::f32, nonzero_floats(n, 16));
  const uint32_t y = f.add("y", DType::f32, n);
  for (uint64_t i = 0; i < n * n; i += 97)
    store_element(f.host.data[w].data(), DType::bf16, i, 0.5);
  const auto t0 = std::chrono::steady_clock::now();
  f.run(make_ins(id(OpId::gemv), 0, {{w, 0, static_cast<uint32_t>(n * n)}, {x, 0, n}, {y, 0, n}}));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("gemv 4096x4096 bf16: " << ms << " ms");
  CHECK(ms < 5000);
  double want = 0;  // row 0: ones at columns 0, 97, 194, ...
  for (uint64_t j = 0; j < n; j += 97) want += 0.5 * f.get(x, j);
  CHECK(close(f.get(y, 0), want, DType::f32, 1e-6));
}

TEST_CASE("argmax: first maximum, NaN ignored, per row of extent(x)/extent(index)") {
  Fixture f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const uint32_t x =
      f.add("x", DType::f32,
            std::vector<float>{3, 1, 3, 2, nan, 1, 5, 5, nan, nan, nan, nan, -inf, -inf, -2, -inf});
  const uint32_t i32 = f.add("i", DType::i32, std::vector<float>{-1});
  f.run(make_ins(id(OpId::argmax), 0, {{x, 0, 4}, {i32, 0, 1}}));
  CHECK(f.get(i32, 0) == 0);
  f.run(make_ins(id(OpId::argmax), 0, {{x, 4, 4}, {i32, 0, 1}}));
  CHECK(f.get(i32, 0) == 2);
  f.run(make_ins(id(OpId::argmax), 0, {{x, 8, 4}, {i32, 0, 1}}));
  CHECK(f.get(i32, 0) == 0);  // all NaN
  f.run(make_ins(id(OpId::argmax), 0, {{x, 12, 4}, {i32, 0, 1}}));
  CHECK(f.get(i32, 0) == 2);
  const uint32_t i64 = f.add("j", DType::i64, 4);
  f.run(make_ins(id(OpId::argmax), 0, {{x, 0, 16}, {i64, 0, 4}}));
  CHECK(f.all(i64) == std::vector<double>{0, 2, 0, 2});
  // Random bf16 input against a straightforward scan.
  const uint32_t big = f.add("big", DType::bf16, nonzero_floats(1000, 17, -100, 100));
  const uint32_t u = f.add("u", DType::u32, 1);
  f.run(make_ins(id(OpId::argmax), 0, {{big, 0, 1000}, {u, 0, 1}}));
  uint64_t best = 0;
  for (uint64_t i = 1; i < 1000; ++i)
    if (f.get(big, i) > f.get(big, best)) best = i;
  CHECK(f.get(u, 0) == static_cast<double>(best));

  // Split: each of 8 slices of `big` (125 values) writes (base + its first maximum, the value);
  // one argmax over the values with the indices as index_map gives the whole argmax.
  const uint32_t pv = f.add("pv", DType::f32, 8);
  const uint32_t pi = f.add("pi", DType::i32, 8);
  for (uint32_t s = 0; s < 8; ++s)
    f.run(make_ins(id(OpId::argmax), 0, {{big, 125 * s, 125}, {pi, s, 1}, {pv, s, 1}}, {125 * s}));
  for (uint32_t s = 0; s < 8; ++s) {
    const double at = f.get(pi, s);
    CHECK(at >= 125.0 * s);
    CHECK(at < 125.0 * (s + 1));
    CHECK(f.get(pv, s) == f.get(big, static_cast<uint64_t>(at)));
  }
  const uint32_t w = f.add("w", DType::i64, std::vector<float>{-1});
  f.run(make_ins(id(OpId::argmax), 0, {{pv, 0, 8}, {w, 0, 1}, OperandSpec{}, {pi, 0, 8}}));
  CHECK(f.get(w, 0) == static_cast<double>(best));
  // An all-NaN slice: index base + 0, value NaN, and it never wins the final pick.
  f.run(make_ins(id(OpId::argmax), 0, {{x, 8, 4}, {pi, 0, 1}, {pv, 0, 1}}, {9}));
  CHECK(f.get(pi, 0) == 9);
  CHECK(std::isnan(f.get(pv, 0)));
  // Ties across slices go to the first one (the smaller index); index = base + index_map[i],
  // saturated to the index dtype.
  const uint32_t tv = f.add("tv", DType::f32, std::vector<float>{1, 4, 4, nan});
  const uint32_t tm = f.add("tm", DType::i32, std::vector<float>{7, 20, 10, 0});
  f.run(make_ins(id(OpId::argmax), 0, {{tv, 0, 4}, {i32, 0, 1}, OperandSpec{}, {tm, 0, 4}}, {100}));
  CHECK(f.get(i32, 0) == 120);
  const uint32_t neg = f.add("neg", DType::i32, std::vector<float>{-5, -5, -5, -5});
  f.run(make_ins(id(OpId::argmax), 0, {{tv, 0, 4}, {u, 0, 1}, OperandSpec{}, {neg, 0, 4}}, {2}));
  CHECK(f.get(u, 0) == 0);  // -5 + 2 saturates to u32's 0
}

TEST_CASE("embedding gathers rows and rejects out-of-range ids") {
  Fixture f;
  const uint64_t rows = 32000, dim = 2;
  const uint32_t table = f.add("table", DType::f32, nonzero_floats(rows * dim, 18));
  const uint32_t ids = f.add("ids", DType::i32, std::vector<float>{5, 31999, 0});
  const uint32_t y = f.add("y", DType::f32, 3 * dim);
  f.run(make_ins(id(OpId::embedding), 0, {{table, 0, rows * dim}, {ids, 0, 3}, {y, 0, 3 * dim}}));
  const uint64_t want_rows[] = {5, 31999, 0};
  for (uint64_t i = 0; i < 3; ++i)
    for (uint64_t j = 0; j < dim; ++j)
      CHECK(f.get(y, i * dim + j) == f.get(table, want_rows[i] * dim + j));
  // Converting gather into bf16, i64 ids.
  const uint32_t ids64 = f.add("ids64", DType::i64, std::vector<float>{7});
  const uint32_t yb = f.add("yb", DType::bf16, dim);
  f.run(make_ins(id(OpId::embedding), 1, {{table, 0, rows * dim}, {ids64, 0, 1}, {yb, 0, dim}}));
  for (uint64_t j = 0; j < dim; ++j)
    CHECK(f.get(yb, j) == rounded(DType::bf16, f.get(table, 7 * dim + j)));

  const uint32_t bad = f.add("bad", DType::u32, std::vector<float>{1, 70000});
  const auto before = f.all(y);
  const auto e = caught([&] {
    f.run(make_ins(id(OpId::embedding), 7, {{table, 0, rows * dim}, {bad, 0, 2}, {y, 0, 2 * dim}}));
  });
  REQUIRE(e);
  CHECK(e->code() == "run.embedding.id");
  CHECK(e->kind() == ErrorKind::program);
  CHECK(e->where() == "/instructions/7");
  CHECK(e->message().find("id 70000 outside [0, 32000)") != std::string::npos);
  CHECK(f.all(y) == before);  // nothing written
  const uint32_t neg = f.add("neg", DType::i64, std::vector<float>{-1});
  CHECK(
      error_code([&] {
        f.run(make_ins(id(OpId::embedding), 8, {{table, 0, rows * dim}, {neg, 0, 1}, {y, 0, dim}}));
      }) == "run.embedding.id");
}

TEST_CASE("copy converts float types, copies integers, refuses integer conversion") {
  Fixture f;
  const uint32_t x = f.add("x", DType::f32, std::vector<float>{1.0f + 0x1.0p-8f, 3.14159f, -2.5f});
  const uint32_t yb = f.add("yb", DType::bf16, 3);
  f.run(make_ins(id(OpId::copy), 0, {{x, 0, 3}, {yb, 0, 3}}));
  CHECK(values_of<uint16_t>(f.host.data[yb]) == std::vector<uint16_t>{0x3f80, 0x4049, 0xc020});
  const uint32_t h = f.add("h", DType::f16, std::vector<float>{0.1f, -3.0f});
  const uint32_t y32 = f.add("y32", DType::f32, 2);
  f.run(make_ins(id(OpId::copy), 1, {{h, 0, 2}, {y32, 0, 2}}));
  CHECK(f.get(y32, 0) == f16_to_f32(f32_to_f16(0.1f)));
  CHECK(f.get(y32, 1) == -3.0);
  const uint32_t i = f.add("i", DType::i64, std::vector<float>{-9, 1e9f});
  const uint32_t j = f.add("j", DType::i64, 2);
  f.run(make_ins(id(OpId::copy), 2, {{i, 0, 2}, {j, 0, 2}}));
  CHECK(values_of<int64_t>(f.host.data[j]) == std::vector<int64_t>{-9, 1000000000});
  const uint32_t u = f.add("u", DType::u32, 2);
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::copy), 3, {{i, 0, 2}, {u, 0, 2}}));
        }) == "run.operand.dtype");
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::copy), 4, {{x, 0, 3}, {yb, 0, 2}}));
        }) == "run.operand.shape");
}

TEST_CASE("fill and nop") {
  Fixture f;
  const uint32_t y = f.add("y", DType::f16, nonzero_floats(8, 19));
  const auto before = f.all(y);
  f.run(make_ins(id(OpId::fill), 0, {{y, 2, 4}}, {f32_bits(-0.3f)}));
  for (uint64_t i = 0; i < 8; ++i)
    CHECK(f.get(y, i) == (i >= 2 && i < 6 ? rounded(DType::f16, -0.3f) : before[i]));
  const uint32_t n = f.add("n", DType::i32, 3);
  f.run(make_ins(id(OpId::fill), 1, {{n, 0, 3}}, {f32_bits(7.0f)}));
  CHECK(values_of<int32_t>(f.host.data[n]) == std::vector<int32_t>{7, 7, 7});
  const auto snapshot = f.host.data;
  f.run(make_ins(id(OpId::nop), 2, {}));
  CHECK(f.host.data == snapshot);
}

TEST_CASE("custom ops, unknown ops and bad operands are refused with codes") {
  Fixture f;
  f.program.custom_ops.push_back(CustomOp{"my_rope", "", {"x"}, {}});
  const uint32_t x = f.add("x", DType::f32, nonzero_floats(8, 20));
  const uint32_t w = f.add("w", DType::i32, 8);
  const auto e = caught([&] { f.run(make_ins(kCustomOpBase, 4, {{x, 0, 8}})); });
  REQUIRE(e);
  CHECK(e->code() == "run.custom.no_reference");
  CHECK(e->where() == "/instructions/4");
  CHECK(e->message().find("my_rope") != std::string::npos);
  CHECK(error_code([&] { f.run(make_ins(50, 0, {})); }) == "run.op.unknown");
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::scale), 0, {{x, 4, 8}, {x, 0, 8}}, {f32_bits(1)}));
        }) == "run.operand.range");
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::scale), 0, {{9, 0, 8}, {x, 0, 8}}, {f32_bits(1)}));
        }) == "run.operand.buffer");
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::scale), 0, {{}, {x, 0, 8}}, {f32_bits(1)}));
        }) == "run.operand.missing");
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::scale), 0, {{x, 0, 8}, {x, 0, 8}}));
        }) == "run.param.missing");
  CHECK(error_code([&] {
          f.run(make_ins(id(OpId::gemv), 0, {{w, 0, 8}, {x, 0, 8}, {x, 0, 1}}));
        }) == "run.operand.dtype");
}
