// Planner: the const-weights flag (plan/const_weights.cpp): which gemv and attention_decode
// steps may load their weights or cached K and V before their waits are met.
#include <doctest/doctest.h>

#include "plan/plan.hpp"

#include "common/program_builder.hpp"

using namespace amk;
using namespace amk::test;

TEST_CASE("const-weights flag: gemvs whose w (and w2) nothing writes, whatever their layout") {
  Builder b;
  const uint32_t w = b.buffer("w", DType::bf16, 8 * 256);
  const uint32_t w2 = b.buffer("w2", DType::bf16, 8 * 256);
  const uint32_t wt = b.buffer("w_written", DType::f32, 8 * 256);
  const uint32_t odd = b.buffer("w_odd", DType::bf16, 24 * 140);  // 280-byte rows
  const uint32_t x = b.buffer("x", DType::f32, 256);
  const uint32_t x2 = b.buffer("x2", DType::f32, 140);
  const uint32_t y = b.buffer("y", DType::f32, 8);
  const uint32_t y2 = b.buffer("y2", DType::f32, 24);
  const uint32_t c = b.counter("c");
  b.add("fill", {slice(wt, 0, 256)}, {}, {{c, 1}});                                            // 0
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), none()}, {{c, 1}});       // 1
  b.add("gemv", {b.whole(wt), b.whole(x), b.whole(y), none(), none(), none()}, {{c, 1}});      // 2
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), b.whole(w2)}, {{c, 1}});  // 3
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), b.whole(wt)}, {{c, 1}});  // 4
  b.add("gemv", {b.whole(odd), b.whole(x2), b.whole(y2), none(), none(), none()}, {{c, 1}});   // 5
  b.add("fill", {b.whole(x)}, {}, {{c, 1}});                                                   // 6
  b.p.launch.grid = 1;
  const Plan plan = make_plan(b.p);
  auto flagged = [&](uint32_t i) {
    return (plan.instructions[i].flags & AMK_INS_CONST_WEIGHTS) != 0;
  };
  CHECK_FALSE(flagged(0));  // not a gemv
  CHECK(flagged(1));
  CHECK_FALSE(flagged(2));  // w written by the fill
  CHECK(flagged(3));        // GLU, both matrices read only
  CHECK_FALSE(flagged(4));  // its w2 is written
  CHECK(flagged(5));        // rows of any length
  CHECK_FALSE(flagged(6));
  // The flag lives in the plan only: the program's instructions (and files) hold none.
  CHECK(encode_instruction(b.p.instructions[1], 1).flags == 0);
}

TEST_CASE("const-weights flag: attention_decode whose K and V views no written range overlaps") {
  constexpr uint64_t hd = 8, rows = 16;  // two kv heads of 16 cache rows
  Builder b;
  const uint32_t kc = b.buffer("k_cache", DType::bf16, 2 * rows * hd);
  const uint32_t vc = b.buffer("v_cache", DType::bf16, 2 * rows * hd);
  const uint32_t q = b.buffer("q", DType::f32, hd);
  const uint32_t kn = b.buffer("k_new", DType::f32, hd);
  const uint32_t out = b.buffer("out", DType::f32, 6 * (hd + 2));
  const uint32_t c = b.counter("c");
  // The new token's row of head 0 (position 15) appended to both caches, as a decode step does.
  b.add("copy", {b.whole(kn), slice(kc, 15 * hd, hd)}, {}, {{c, 1}});  // 0
  b.add("copy", {b.whole(kn), slice(vc, 15 * hd, hd)}, {}, {{c, 1}});  // 1
  // One element of head 1's V written.
  b.add("fill", {slice(vc, rows * hd + 3 * hd + 5, 1)}, {}, {{c, 1}});  // 2
  auto attn = [&](uint64_t first_row, uint64_t n, uint32_t slot) {
    return b.add("attention_decode",
                 {b.whole(q), slice(kc, first_row * hd, n * hd), slice(vc, first_row * hd, n * hd),
                  slice(out, slot * (hd + 2), hd + 2), none(), none()},
                 {{c, 3}});
  };
  const uint32_t a0 = attn(0, 8, 0);          // head 0, rows 0-7
  const uint32_t a1 = attn(8, 7, 1);          // rows 8-14: the appended row 15 just past the end
  const uint32_t a2 = attn(8, 8, 2);          // rows 8-15: overlaps the appended row
  const uint32_t a3 = attn(rows, 3, 3);       // head 1, rows 0-2: before the filled element
  const uint32_t a4 = attn(rows, 4, 4);       // head 1, rows 0-3: V overlaps it
  const uint32_t a5 = attn(rows + 4, 12, 5);  // head 1, rows 4-15: after it
  for (Instruction& in : b.p.instructions)
    if (in.op == static_cast<uint16_t>(OpId::attention_decode)) in.params[0] = hd;  // head_dim
  b.p.launch.grid = 1;
  const Plan plan = make_plan(b.p);
  auto flagged = [&](uint32_t i) {
    return (plan.instructions[i].flags & AMK_INS_CONST_WEIGHTS) != 0;
  };
  CHECK(flagged(a0));
  CHECK(flagged(a1));
  CHECK_FALSE(flagged(a2));
  CHECK(flagged(a3));
  CHECK_FALSE(flagged(a4));
  CHECK(flagged(a5));
  CHECK_FALSE(flagged(0));
  CHECK_FALSE(flagged(2));
}
