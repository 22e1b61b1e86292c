// Planner: weight streams (which gemv steps stream their weights, their tiling, per queue).
#include <doctest/doctest.h>

#include "plan/plan.hpp"
#include "test_verify_support.hpp"

using namespace amk;
using namespace amk::test;

namespace {

// One gemv of `rows` x `k` weights of dtype `wt` on a single queue; the plan of it.
Plan plan_one(DType wt, uint64_t rows, uint64_t k, uint64_t w_offset = 0) {
  Builder b;
  const uint32_t w = b.buffer("w", wt, w_offset + rows * k);
  const uint32_t x = b.buffer("x", DType::f32, k);
  const uint32_t y = b.buffer("y", DType::f32, rows);
  b.add("gemv", {slice(w, w_offset, rows * k), b.whole(x), b.whole(y), none(), none(), none()});
  b.p.launch.grid = 1;
  return make_plan(b.p);
}

}  // namespace

TEST_CASE("weight streams: tiles of whole rows, or chunks of rows longer than a slot") {
  struct Case {
    DType wt;
    uint64_t rows, k;
    uint32_t row_bytes, rows_per_tile, chunks_per_row, chunk_bytes, tiles;
  };
  const Case cases[] = {
      {DType::bf16, 40, 2048, 4096, 4, 1, 4096, 10},      // 4 rows a 16 KiB slot
      {DType::bf16, 2, 2048, 4096, 2, 1, 4096, 1},        // fewer rows than a slot holds
      {DType::bf16, 70, 136, 272, 60, 1, 272, 2},         // 60 rows, then 10
      {DType::f32, 9, 3000, 12000, 1, 1, 12000, 9},       // one row a slot
      {DType::bf16, 6, 16384, 32768, 1, 2, 16384, 12},    // two full chunks a row
      {DType::bf16, 5, 12288, 24576, 1, 2, 12288, 10},    // two equal chunks
      {DType::f32, 3, 5000, 20000, 1, 2, 10000, 6},       // 20000 B: chunks of 10000
      {DType::bf16, 1, 24584, 49168, 1, 4, 12304, 4},     // uneven: 3 x 12304 + 12256
  };
  for (const Case& c : cases) {
    CAPTURE(c.rows);
    CAPTURE(c.k);
    const Plan plan = plan_one(c.wt, c.rows, c.k);
    REQUIRE(plan.has_streams());
    REQUIRE(plan.stream_entries.size() == 1);
    REQUIRE(plan.stream_offsets == std::vector<uint32_t>{0, 1});
    const amk_stream_entry_t& e = plan.stream_entries[0];
    CHECK(e.rows == c.rows);
    CHECK(e.row_bytes == c.row_bytes);
    CHECK(e.rows_per_tile == c.rows_per_tile);
    CHECK(e.chunks_per_row == c.chunks_per_row);
    CHECK(e.chunk_bytes == c.chunk_bytes);
    CHECK(e.tiles == c.tiles);
    CHECK(e.chunk_bytes % 16 == 0);
    if (e.chunks_per_row == 1) CHECK(uint64_t{e.rows_per_tile} * e.row_bytes <= AMK_STREAM_SLOT_BYTES);
    CHECK(e.chunk_bytes <= AMK_STREAM_SLOT_BYTES);
    // The chunks of a row cover it exactly once.
    CHECK(uint64_t{e.chunk_bytes} * (e.chunks_per_row - 1) < e.row_bytes);
    CHECK(uint64_t{e.chunk_bytes} * e.chunks_per_row >= e.row_bytes);
    CHECK(e.w == 0);
    CHECK(e.w2_buffer == AMK_NO_BUFFER);
    CHECK(e.item == 0);
    CHECK(e.step == 0);
  }
}

TEST_CASE("weight streams: offsets are bytes into the buffer, steps are queue positions") {
  Builder b;
  const uint32_t w = b.buffer("w", DType::bf16, 64 * 2048);
  const uint32_t w2 = b.buffer("w2", DType::bf16, 64 * 2048);
  const uint32_t x = b.buffer("x", DType::f32, 2048);
  const uint32_t norm = b.buffer("norm", DType::bf16, 2048);
  const uint32_t y = b.buffer("y", DType::f32, 64);
  const uint32_t t = b.buffer("t", DType::f32, 64);
  const uint32_t c = b.counter("c");
  b.add("fill", {b.whole(t)}, {}, {{c, 1}});                                          // 0
  b.add("gemv", {slice(w, 0, 32 * 2048), b.whole(x), slice(y, 0, 32), none(), none(), none()},
        {{c, 1}});                                                                    // 1
  b.add("gemv", {slice(w, 32 * 2048, 32 * 2048), b.whole(x), slice(y, 32, 32), none(),
                 b.whole(norm), slice(w2, 32 * 2048, 32 * 2048)});                    // 2
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}, {2}};
  const Plan plan = make_plan(b.p);
  REQUIRE(plan.stream_entries.size() == 2);
  CHECK(plan.stream_offsets == std::vector<uint32_t>{0, 1, 2});
  const amk_stream_entry_t& a = plan.stream_entries[0];
  CHECK(a.item == 1);
  CHECK(a.step == 1);  // after the fill in queue 0
  CHECK(a.w == 0);
  CHECK(a.w_buffer == w);
  CHECK(a.w2_buffer == AMK_NO_BUFFER);
  const amk_stream_entry_t& g = plan.stream_entries[1];
  CHECK(g.item == 2);
  CHECK(g.step == 0);
  CHECK(g.w == 32 * 2048 * 2);
  CHECK(g.w2 == 32 * 2048 * 2);
  CHECK(g.w_buffer == w);
  CHECK(g.w2_buffer == w2);
  CHECK(g.tiles == 8);
}

TEST_CASE("weight streams: only weights nothing writes, aligned, within the row limit") {
  SUBCASE("weights an instruction writes stay on the plain path") {
    Builder b;
    const uint32_t w = b.buffer("w", DType::f32, 8 * 256);
    const uint32_t x = b.buffer("x", DType::f32, 256);
    const uint32_t y = b.buffer("y", DType::f32, 8);
    const uint32_t c = b.counter("c");
    b.add("fill", {slice(w, 0, 256)}, {}, {{c, 1}});
    b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), none()}, {{c, 1}});
    b.p.launch.grid = 1;
    const Plan plan = make_plan(b.p);
    CHECK_FALSE(plan.has_streams());
    CHECK(plan.stream_offsets.empty());
  }
  SUBCASE("a GLU whose second matrix is written does not stream") {
    Builder b;
    const uint32_t w = b.buffer("w", DType::f32, 8 * 256);
    const uint32_t w2 = b.buffer("w2", DType::f32, 8 * 256);
    const uint32_t x = b.buffer("x", DType::f32, 256);
    const uint32_t y = b.buffer("y", DType::f32, 8);
    const uint32_t c = b.counter("c");
    b.add("fill", {slice(w2, 0, 256)}, {}, {{c, 1}});
    b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), b.whole(w2)}, {{c, 1}});
    b.p.launch.grid = 1;
    CHECK_FALSE(make_plan(b.p).has_streams());
  }
  SUBCASE("rows that are not whole 16-byte units, or start off a 16-byte boundary") {
    CHECK_FALSE(plan_one(DType::bf16, 24, 140).has_streams());       // 280-byte rows
    CHECK_FALSE(plan_one(DType::bf16, 4, 256, 4).has_streams());     // starts 8 bytes in
    CHECK(plan_one(DType::bf16, 4, 256, 8).has_streams());           // 16 bytes in
  }
  SUBCASE("more rows than the row sums hold") {
    CHECK(plan_one(DType::bf16, AMK_STREAM_MAX_ROWS, 64).has_streams());
    CHECK_FALSE(plan_one(DType::bf16, AMK_STREAM_MAX_ROWS + 1, 64).has_streams());
  }
  SUBCASE("programs with TMA specs or their own dynamic shared memory") {
    Builder b;
    const uint32_t w = b.buffer("w", DType::bf16, 8 * 256);
    const uint32_t x = b.buffer("x", DType::f32, 256);
    const uint32_t y = b.buffer("y", DType::f32, 8);
    b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), none()});
    b.p.launch.grid = 1;
    CHECK(make_plan(b.p).has_streams());
    Program smem = b.p;
    smem.launch.dynamic_smem = 1024;
    CHECK_FALSE(make_plan(smem).has_streams());
    Program tma = b.p;
    TmaSpec t;
    t.name = "w_tiles";
    t.buffer = w;
    t.dims = {256, 8};
    t.box = {64, 8};
    tma.tma.push_back(t);
    CHECK_FALSE(make_plan(tma).has_streams());
  }
}

TEST_CASE("const-weights flag: gemvs whose w (and w2) nothing writes, whatever their layout") {
  Builder b;
  const uint32_t w = b.buffer("w", DType::bf16, 8 * 256);
  const uint32_t w2 = b.buffer("w2", DType::bf16, 8 * 256);
  const uint32_t wt = b.buffer("w_written", DType::f32, 8 * 256);
  const uint32_t odd = b.buffer("w_odd", DType::bf16, 24 * 140);  // 280-byte rows: no stream
  const uint32_t x = b.buffer("x", DType::f32, 256);
  const uint32_t x2 = b.buffer("x2", DType::f32, 140);
  const uint32_t y = b.buffer("y", DType::f32, 8);
  const uint32_t y2 = b.buffer("y2", DType::f32, 24);
  const uint32_t c = b.counter("c");
  b.add("fill", {slice(wt, 0, 256)}, {}, {{c, 1}});                                           // 0
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), none()}, {{c, 1}});      // 1
  b.add("gemv", {b.whole(wt), b.whole(x), b.whole(y), none(), none(), none()}, {{c, 1}});     // 2
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), b.whole(w2)}, {{c, 1}}); // 3
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), none(), b.whole(wt)}, {{c, 1}}); // 4
  b.add("gemv", {b.whole(odd), b.whole(x2), b.whole(y2), none(), none(), none()}, {{c, 1}});  // 5
  b.add("fill", {b.whole(x)}, {}, {{c, 1}});                                                  // 6
  b.p.launch.grid = 1;
  const Plan plan = make_plan(b.p);
  auto flagged = [&](uint32_t i) { return (plan.instructions[i].flags & AMK_INS_CONST_WEIGHTS) != 0; };
  CHECK_FALSE(flagged(0));  // not a gemv
  CHECK(flagged(1));
  CHECK_FALSE(flagged(2));  // w written by the fill
  CHECK(flagged(3));        // GLU, both matrices read only
  CHECK_FALSE(flagged(4));  // its w2 is written
  CHECK(flagged(5));        // does not stream, still never written
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
  const uint32_t a0 = attn(0, 8, 0);        // head 0, rows 0-7
  const uint32_t a1 = attn(8, 7, 1);        // rows 8-14: the appended row 15 just past the end
  const uint32_t a2 = attn(8, 8, 2);        // rows 8-15: overlaps the appended row
  const uint32_t a3 = attn(rows, 3, 3);     // head 1, rows 0-2: before the filled element
  const uint32_t a4 = attn(rows, 4, 4);     // head 1, rows 0-3: V overlaps it
  const uint32_t a5 = attn(rows + 4, 12, 5);  // head 1, rows 4-15: after it
  for (Instruction& in : b.p.instructions)
    if (in.op == static_cast<uint16_t>(OpId::attention_decode)) in.params[0] = hd;  // head_dim
  b.p.launch.grid = 1;
  const Plan plan = make_plan(b.p);
  auto flagged = [&](uint32_t i) { return (plan.instructions[i].flags & AMK_INS_CONST_WEIGHTS) != 0; };
  CHECK(flagged(a0));
  CHECK(flagged(a1));
  CHECK_FALSE(flagged(a2));
  CHECK(flagged(a3));
  CHECK_FALSE(flagged(a4));
  CHECK(flagged(a5));
  CHECK_FALSE(flagged(0));
  CHECK_FALSE(flagged(2));
}
