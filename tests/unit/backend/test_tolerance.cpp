// The tolerances of `amk run --check`: an output's own dtype's, loosened to a coarser float
// dtype's only where what writes it follows a store of that dtype through the counters.
#include <doctest/doctest.h>

#include <string>

#include "backend/tolerance.hpp"
#include "io/load.hpp"

using namespace amk;

namespace {

// x -> mid (bf16, or `mid_dtype`) -> a -> b, each step waiting for the one before; `side` (bf16)
// is stored from x with nothing waiting for it; `free` and `after_f32` (f32) follow only f32 stores.
Program chain(const std::string& mid_dtype) {
  const std::string text = R"({
  "format": "amk.program", "version": 1, "name": "tolerance_chain",
  "buffers": [
    {"name": "x", "dtype": "f32", "shape": [64], "init": {"kind": "random", "seed": 3}},
    {"name": "mid", "dtype": ")" +
                           mid_dtype + R"(", "shape": [64]},
    {"name": "a", "dtype": "f32", "shape": [64], "output": true},
    {"name": "b", "dtype": "f32", "shape": [64], "output": true},
    {"name": "side", "dtype": "bf16", "shape": [64], "output": true},
    {"name": "free", "dtype": "f32", "shape": [64], "output": true},
    {"name": "f32_mid", "dtype": "f32", "shape": [64]},
    {"name": "after_f32", "dtype": "f32", "shape": [64], "output": true}
  ],
  "counters": ["m", "n", "p"],
  "instructions": [
    {"name": "to_mid", "op": "copy", "operands": {"x": "x", "y": "mid"}, "signals": [{"counter": "m"}]},
    {"name": "to_a", "op": "scale", "operands": {"x": "mid", "y": "a"}, "params": {"alpha": 2},
     "waits": [{"counter": "m", "value": 1}], "signals": [{"counter": "n"}]},
    {"name": "to_b", "op": "copy", "operands": {"x": "a", "y": "b"}, "waits": [{"counter": "n", "value": 1}]},
    {"name": "to_side", "op": "copy", "operands": {"x": "x", "y": "side"}},
    {"name": "to_free", "op": "copy", "operands": {"x": "x", "y": "free"}},
    {"name": "to_f32_mid", "op": "copy", "operands": {"x": "x", "y": "f32_mid"}, "signals": [{"counter": "p"}]},
    {"name": "to_after", "op": "copy", "operands": {"x": "f32_mid", "y": "after_f32"},
     "waits": [{"counter": "p", "value": 1}]}
  ]
})";
  return parse_json_program(text);
}

}  // namespace

TEST_CASE("per-dtype tolerances") {
  CHECK(check_tolerance(DType::f32) == doctest::Approx(1e-4));
  CHECK(check_tolerance(DType::f16) == doctest::Approx(2e-3));
  CHECK(check_tolerance(DType::bf16) == doctest::Approx(1e-2));
  CHECK(check_tolerance(DType::i32) == 0.0);
}

TEST_CASE("a bf16 store loosens what follows it through the counters, and nothing else") {
  const Program p = chain("bf16");
  const auto t = check_tolerances(p);
  REQUIRE(t.size() == p.buffers.size());
  CHECK(t[2] == doctest::Approx(1e-2));  // a: written right after the bf16 store
  CHECK(t[3] == doctest::Approx(1e-2));  // b: two steps after it
  CHECK(t[4] == doctest::Approx(1e-2));  // side: bf16 itself
  CHECK(t[5] == doctest::Approx(1e-4));  // free: waits for nothing
  CHECK(t[7] == doctest::Approx(1e-4));  // after_f32: follows an f32 store only
}

TEST_CASE("an f16 intermediate gives f16's tolerance; an f32 one changes nothing") {
  const auto h = check_tolerances(chain("f16"));
  CHECK(h[2] == doctest::Approx(2e-3));
  CHECK(h[3] == doctest::Approx(2e-3));
  const auto f = check_tolerances(chain("f32"));
  CHECK(f[2] == doctest::Approx(1e-4));
  CHECK(f[3] == doctest::Approx(1e-4));
}
