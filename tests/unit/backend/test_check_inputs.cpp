// What `amk run --check` does to the initial data: which outputs start poisoned (those whose
// zeros nothing reads before it is written), the poison itself, the comparison that catches an
// element the run never wrote, clearing what neither run wrote, and --reseed.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "backend/check_inputs.hpp"
#include "backend/cpu_backend.hpp"
#include "io/load.hpp"
#include "plan/plan.hpp"

using namespace amk;

namespace {

// Buffer order: 0 x, 1 full, 2 after, 3 half, 4 after_half, 5 consts, 6 bytes_in, 7 bytes,
// 8 idx, 9 wk, 10 acc, 11 custom, 12 plain (not an output), 13 x8, 14 cache.
Program sample(bool with_custom) {
  std::string text = R"({
  "format": "amk.program", "version": 1, "name": "poison_rules",
  "launch": {"grid": 2, "block": 128},
  "buffers": [
    {"name": "x", "dtype": "f32", "shape": [64], "init": {"kind": "random", "seed": 11, "low": 0.5, "high": 2}},
    {"name": "full", "dtype": "f32", "shape": [64], "output": true},
    {"name": "after", "dtype": "bf16", "shape": [64], "output": true},
    {"name": "half", "dtype": "f32", "shape": [64], "output": true},
    {"name": "after_half", "dtype": "f32", "shape": [64], "output": true},
    {"name": "consts", "dtype": "f32", "shape": [64], "init": {"kind": "constant", "value": 3}, "output": true},
    {"name": "bytes_in", "dtype": "u8", "shape": [16], "init": {"kind": "random", "seed": 12, "low": 1, "high": 200}},
    {"name": "bytes", "dtype": "u8", "shape": [16], "output": true},
    {"name": "idx", "dtype": "i32", "shape": [1], "output": true},
    {"name": "wk", "dtype": "f32", "shape": [32], "init": {"kind": "random", "seed": 13}},
    {"name": "acc", "dtype": "f32", "shape": [4], "output": true},
    {"name": "custom", "dtype": "f32", "shape": [64], "output": true},
    {"name": "plain", "dtype": "f32", "shape": [64]},
    {"name": "x8", "dtype": "f32", "shape": [8], "init": {"kind": "random", "seed": 14}},
    {"name": "cache", "dtype": "f32", "shape": [2, 3, 4], "output": true}
  ],
  "counters": ["m", "n"],)";
  if (with_custom)
    text += R"(
  "custom_ops": [{"name": "my_op", "operands": ["a", "out"], "params": [], "source": "__device__ void my_op() {}\n"}],)";
  text += R"(
  "instructions": [
    {"name": "to_full", "op": "copy", "operands": {"x": "x", "y": "full"}, "signals": [{"counter": "m"}]},
    {"name": "from_full", "op": "scale", "operands": {"x": "full", "y": "after"}, "params": {"alpha": 2},
     "waits": [{"counter": "m", "value": 1}]},
    {"name": "to_half", "op": "copy", "operands": {"x": {"buffer": "x", "offset": 0, "extent": 32},
     "y": {"buffer": "half", "offset": 0, "extent": 32}}, "signals": [{"counter": "n"}]},
    {"name": "from_half", "op": "copy", "operands": {"x": "half", "y": "after_half"},
     "waits": [{"counter": "n", "value": 1}]},
    {"name": "to_consts", "op": "copy", "operands": {"x": {"buffer": "x", "offset": 0, "extent": 8},
     "y": {"buffer": "consts", "offset": 0, "extent": 8}}},
    {"name": "to_bytes", "op": "copy", "operands": {"x": "bytes_in", "y": "bytes"}},
    {"name": "pick", "op": "argmax", "operands": {"x": "x", "index": "idx"}},
    {"name": "proj", "op": "gemv", "operands": {"w": "wk", "x": "x8", "y": "acc"}},
    {"name": "to_plain", "op": "copy", "operands": {"x": "x", "y": "plain"}},
    {"name": "append", "op": "kv_append", "operands": {"x": {"buffer": "x", "offset": 0, "extent": 8},
     "cache": "cache"}, "params": {"head_dim": 4, "position": 1, "max_len": 3}})";
  if (with_custom)
    text += R"(,
    {"name": "mine", "op": "my_op", "operands": {"a": "x", "out": "custom"}})";
  text += R"(
  ]
})";
  LoadOptions o;
  o.trust_custom_ops = true;
  return parse_json_program(text, o);
}

HostBuffers run(const Program& p, HostBuffers data) {
  PlanOptions po;
  po.grid_hint = 2;
  (void)run_cpu(p, make_plan(p, po), data);
  return data;
}

}  // namespace

TEST_CASE("the outputs --check poisons: only where the initial zeros cannot reach a result") {
  const Program p = sample(true);
  const std::vector<bool> w = poisonable_outputs(p);
  REQUIRE(w.size() == p.buffers.size());
  CHECK(w[1]);         // full: written, then read only after the write that covers it
  CHECK(w[2]);         // after: written only
  CHECK_FALSE(w[3]);   // half: read whole after a write of its first half: the zeros show
  CHECK(w[4]);         // after_half
  CHECK_FALSE(w[5]);   // consts: initialized by the program
  CHECK_FALSE(w[7]);   // bytes: u8, no value to spare for the poison
  CHECK(w[8]);         // idx (i32)
  CHECK(w[10]);        // acc: written by a gemv, never read
  CHECK_FALSE(w[11]);  // custom: a custom op declares no access
  CHECK_FALSE(w[12]);  // plain: not an output
  CHECK_FALSE(w[14]);  // cache: kv_append writes one position and keeps the others
  CHECK_FALSE(w[0]);
  CHECK(buffer_names(p, w) == "full, after, after_half, idx, acc");
}

TEST_CASE("poison, the comparison that catches an unwritten element, and clearing") {
  const Program p = sample(false);
  const std::vector<bool> w = poisonable_outputs(p);
  const HostBuffers zeros = materialize_all(p);
  HostBuffers poisoned = copy_host_buffers(zeros);
  poison_buffers(p, w, poisoned);
  for (uint64_t i = 0; i < 64; ++i) {
    CHECK(is_poison(DType::f32, poisoned.data[1].data(), i));
    CHECK(is_poison(DType::bf16, poisoned.data[2].data(), i));
    CHECK_FALSE(is_poison(DType::f32, poisoned.data[3].data(), i));  // half: kept at zero
  }
  CHECK(is_poison(DType::i32, poisoned.data[8].data(), 0));
  CHECK(poisoned.data[0] == zeros.data[0]);  // inputs untouched

  // Two runs from the poison (the reference and "the GPU"): every written element agrees.
  const HostBuffers ref = run(p, copy_host_buffers(poisoned));
  HostBuffers got = run(p, copy_host_buffers(poisoned));
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (!w[b]) continue;
    const PoisonDiff d =
        compare_poison(p.buffers[b].dtype, got.data[b], ref.data[b], p.buffers[b].elements());
    CHECK(d.unwritten == 0);
    CHECK(d.extra == 0);
  }
  // A run that skipped element 5 of `full` and element 0 of `idx`: caught, whatever value the
  // reference holds there.
  std::memcpy(got.data[1].data() + 5 * 4, poisoned.data[1].data(), 4);
  std::memcpy(got.data[8].data(), poisoned.data[8].data(), 4);
  PoisonDiff d = compare_poison(DType::f32, got.data[1], ref.data[1], 64);
  CHECK(d.unwritten == 1);
  CHECK(d.extra == 0);
  CHECK(d.first == 5);
  d = compare_poison(DType::i32, got.data[8], ref.data[8], 1);
  CHECK(d.unwritten == 1);
  // ... and an element written only by the run.
  d = compare_poison(DType::f32, ref.data[1], got.data[1], 64);
  CHECK(d.extra == 1);
  CHECK(d.unwritten == 0);

  // Cleared, a poisoned run's outputs are byte for byte a run from zeros.
  HostBuffers cleared = run(p, copy_host_buffers(poisoned));
  CHECK(w[11]);  // custom, here an output no instruction names: poisoned, then cleared
  CHECK(clear_poison(p, w, cleared) == 64);
  const HostBuffers plain = run(p, copy_host_buffers(zeros));
  for (size_t b = 0; b < p.buffers.size(); ++b) CHECK(cleared.data[b] == plain.data[b]);
  // Where nothing writes, clearing restores the zeros.
  HostBuffers untouched = copy_host_buffers(poisoned);
  CHECK(clear_poison(p, w, untouched) == 4 * 64 + 1 + 4);
  for (size_t b = 0; b < p.buffers.size(); ++b) CHECK(untouched.data[b] == zeros.data[b]);
}

TEST_CASE("--reseed draws every random init from another seed, and nothing else") {
  Program p = sample(false);
  const Program before = p;
  CHECK(reseed_random_inits(p, 7) == 4);
  Program q = before;
  CHECK(reseed_random_inits(q, 7) == 4);
  CHECK(p == q);  // a pure function of (reseed, seed)
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const bool random = before.buffers[b].init.kind == InitKind::random;
    CHECK((p.buffers[b].init.seed != before.buffers[b].init.seed) == random);
    CHECK(p.buffers[b].init.kind == before.buffers[b].init.kind);
  }
  CHECK(materialize_buffer(p, 0) != materialize_buffer(before, 0));
  CHECK(materialize_buffer(p, 5) == materialize_buffer(before, 5));  // a constant
  Program r = before;
  (void)reseed_random_inits(r, 8);
  CHECK(materialize_buffer(r, 0) != materialize_buffer(p, 0));
}
