// Verifier: per-instruction signature and shape rules, launch rules, TMA rules.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "verify/verify.hpp"

#include "common/program_builder.hpp"

using namespace amk;
using namespace amk::test;

namespace {

// y = gemv(w, x) + r over a small but valid program.
Builder gemv_program() {
  Builder b;
  const uint32_t w = b.buffer("w", DType::f16, 8 * 16);
  const uint32_t x = b.buffer("x", DType::f32, 16);
  const uint32_t y = b.buffer("y", DType::f32, 8);
  const uint32_t r = b.buffer("r", DType::bf16, 8);
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), b.whole(r), none(), none()}, {}, {}, "g");
  return b;
}

}  // namespace

TEST_CASE("a valid program verifies") {
  Builder b = gemv_program();
  CHECK_NOTHROW(verify(b.p));
  // The optional residual may be left out.
  b.p.instructions[0].operands[3] = none();
  CHECK_NOTHROW(verify(b.p));
}

TEST_CASE("operand rules") {
  SUBCASE("unknown op") {
    Builder b = gemv_program();
    b.p.instructions[0].op = 999;
    CHECK_ERROR(check_instruction(b.p, 0), "verify.op", "/instructions/0/op");
  }
  SUBCASE("retired op: its id stays reserved, and a program built in memory is refused too") {
    for (const RetiredOp& retired : retired_ops()) {
      CAPTURE(retired.name);
      Builder b = gemv_program();
      b.p.instructions[0].op = retired.id;
      CHECK_ERROR(check_instruction(b.p, 0), "op.retired", "/instructions/0/op");
      CHECK(find_op(retired.id) == nullptr);
      CHECK(find_op(retired.name) == nullptr);
      CHECK(find_retired_op(retired.name) == &retired);
      CHECK(retired.id < AMK_OP_ID_END);
    }
    CHECK(find_retired_op(uint16_t{9}) == nullptr);  // gemv
  }
  SUBCASE("operand count") {
    Builder b = gemv_program();
    b.p.instructions[0].operands.pop_back();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.count", "/instructions/0/operands");
  }
  SUBCASE("required operand missing") {
    Builder b = gemv_program();
    b.p.instructions[0].operands[1] = none();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.missing", "/instructions/0/operands/x");
  }
  SUBCASE("buffer index") {
    Builder b = gemv_program();
    b.p.instructions[0].operands[2].buffer = 9;
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.buffer",
                "/instructions/0/operands/y/buffer");
  }
  SUBCASE("dtype outside the slot's set") {
    Builder b;
    const uint32_t a = b.buffer("a", DType::i32, 4);
    const uint32_t y = b.buffer("y", DType::f32, 4);
    b.add("add", {b.whole(a), b.whole(y), b.whole(y)});
    CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/a");
  }
  SUBCASE("extent zero, too large, out of bounds, overflowing") {
    Builder b;
    const uint32_t big = b.buffer("big", DType::u8, (uint64_t{1} << 32) + 8);
    const uint32_t y = b.buffer("y", DType::u8, 16);
    b.add("copy", {slice(big, 0, 0), b.whole(y)});
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.extent",
                "/instructions/0/operands/x/extent");
    b.p.instructions[0].operands[0] = slice(big, 0, uint64_t{1} << 32);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.extent",
                "/instructions/0/operands/x/extent");
    b.p.instructions[0].operands[0] = slice(y, 8, 16);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.bounds", "/instructions/0/operands/x");
    b.p.instructions[0].operands[0] = slice(y, UINT64_MAX - 4, 16);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.bounds", "/instructions/0/operands/x");
    b.p.instructions[0].operands[0] = slice(big, (uint64_t{1} << 32) - 8, 16);
    CHECK_NOTHROW(check_instruction(b.p, 0));
  }
  SUBCASE("params count") {
    Builder b;
    const uint32_t y = b.buffer("y", DType::f32, 4);
    b.add("fill", {b.whole(y)});
    b.last().params.clear();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.params.count", "/instructions/0/params");
  }
  SUBCASE("waits and signals") {
    Builder b;
    const uint32_t c = b.counter("c");
    b.add("nop", {}, {{c, 1}}, {{c, 1}});
    CHECK_NOTHROW(check_instruction(b.p, 0));
    b.last().waits[0].counter = 5;
    CHECK_ERROR(check_instruction(b.p, 0), "verify.counter", "/instructions/0/waits/0/counter");
    b.last().waits[0] = {c, 0};
    CHECK_ERROR(check_instruction(b.p, 0), "verify.wait.value", "/instructions/0/waits/0/value");
    b.last().waits.clear();
    b.last().signals.push_back({7, 1});
    CHECK_ERROR(check_instruction(b.p, 0), "verify.counter", "/instructions/0/signals/1/counter");
    b.last().signals[1] = {c, 0};
    CHECK_ERROR(check_instruction(b.p, 0), "verify.signal.add", "/instructions/0/signals/1/add");
  }
  SUBCASE("capacity") {
    Builder b;
    const uint32_t c = b.counter("c");
    b.add("nop", {}, {{c, 1}, {c, 1}, {c, 1}, {c, 1}, {c, 1}});
    CHECK_ERROR(check_instruction(b.p, 0), "verify.capacity", "/instructions/0/waits");
  }
  SUBCASE("custom ops: slots must exist, no shape rules") {
    Builder b;
    const uint32_t x = b.buffer("x", DType::i64, 3);
    const uint32_t y = b.buffer("y", DType::f16, 5);
    b.p.custom_ops.push_back({"mine", "", {"in", "out"}, {"k"}});
    Instruction ins;
    ins.op = kCustomOpBase;
    ins.operands = {b.whole(x), b.whole(y)};
    ins.params = {3};
    b.p.instructions.push_back(ins);
    CHECK_NOTHROW(check_instruction(b.p, 0));
    b.p.instructions[0].operands[1] = none();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.missing",
                "/instructions/0/operands/out");
    b.p.instructions[0].operands[1] = b.whole(y);
    b.p.instructions[0].params.clear();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.params.count", "/instructions/0/params");
    b.p.instructions[0].op = kCustomOpBase + 1;
    CHECK_ERROR(check_instruction(b.p, 0), "verify.op", "/instructions/0/op");
  }
}

TEST_CASE("shape rules of the built-in ops") {
  Builder b;
  const uint32_t f = b.buffer("f", DType::f32, 4096);
  const uint32_t h = b.buffer("h", DType::f16, 4096);
  const uint32_t i32 = b.buffer("i", DType::i32, 64);
  const uint32_t u32 = b.buffer("u", DType::u32, 64);
  auto one = [&](const std::string& op, std::vector<Operand> ops) {
    b.p.instructions.clear();
    b.add(op, std::move(ops));
    check_instruction(b.p, 0);
  };

  SUBCASE("copy") {
    CHECK_NOTHROW(one("copy", {slice(h, 0, 8), slice(f, 0, 8)}));  // float to float converts
    CHECK_NOTHROW(one("copy", {slice(i32, 0, 8), slice(i32, 8, 8)}));
    CHECK_ERROR(one("copy", {slice(f, 0, 8), slice(f, 8, 9)}), "verify.shape",
                "/instructions/0/operands/y");
    CHECK_ERROR(one("copy", {slice(i32, 0, 8), slice(f, 0, 8)}), "verify.dtype",
                "/instructions/0/operands/y");
    CHECK_ERROR(one("copy", {slice(i32, 0, 8), slice(u32, 0, 8)}), "verify.dtype",
                "/instructions/0/operands/y");
  }
  SUBCASE("add, mul, silu_mul, scale") {
    CHECK_NOTHROW(one("add", {slice(f, 0, 8), slice(h, 0, 8), slice(f, 8, 8)}));
    CHECK_ERROR(one("mul", {slice(f, 0, 8), slice(h, 0, 7), slice(f, 8, 8)}), "verify.shape",
                "/instructions/0/operands/b");
    CHECK_ERROR(one("silu_mul", {slice(f, 0, 8), slice(h, 0, 8), slice(f, 8, 4)}), "verify.shape",
                "/instructions/0/operands/y");
    CHECK_ERROR(one("scale", {slice(f, 0, 8), slice(f, 8, 4)}), "verify.shape",
                "/instructions/0/operands/y");
  }
  SUBCASE("rmsnorm") {
    CHECK_NOTHROW(one("rmsnorm", {slice(f, 0, 64), slice(h, 0, 16), slice(f, 64, 64)}));
    CHECK_ERROR(one("rmsnorm", {slice(f, 0, 64), slice(h, 0, 24), slice(f, 64, 64)}),
                "verify.shape", "/instructions/0/operands/weight");
    CHECK_ERROR(one("rmsnorm", {slice(f, 0, 64), slice(h, 0, 16), slice(f, 64, 32)}),
                "verify.shape", "/instructions/0/operands/y");
  }
  SUBCASE("softmax") {
    b.p.instructions.clear();
    b.add("softmax", {slice(f, 0, 64), slice(f, 64, 64)});
    b.last().params[0] = 16;
    CHECK_NOTHROW(check_instruction(b.p, 0));
    b.last().params[0] = 0;  // whole extent
    CHECK_NOTHROW(check_instruction(b.p, 0));
    b.last().params[0] = 24;
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/params/cols");
    b.last().params[0] = 16;
    b.last().operands[1].extent = 32;
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/y");
  }
  SUBCASE("gemv") {
    // w is rows 2..5 of a [*, 64] matrix.
    CHECK_NOTHROW(one(
        "gemv", {slice(h, 128, 256), slice(f, 0, 64), slice(f, 64, 4), none(), none(), none()}));
    CHECK_NOTHROW(one("gemv", {slice(h, 128, 256), slice(f, 0, 64), slice(f, 64, 4),
                               slice(f, 80, 4), none(), none()}));
    CHECK_ERROR(
        one("gemv", {slice(h, 128, 250), slice(f, 0, 64), slice(f, 64, 4), none(), none(), none()}),
        "verify.shape", "/instructions/0/operands/w");
    CHECK_ERROR(
        one("gemv", {slice(h, 100, 256), slice(f, 0, 64), slice(f, 64, 4), none(), none(), none()}),
        "verify.shape", "/instructions/0/operands/w/offset");
    CHECK_ERROR(
        one("gemv", {slice(h, 128, 256), slice(f, 0, 64), slice(f, 64, 5), none(), none(), none()}),
        "verify.shape", "/instructions/0/operands/y");
    CHECK_ERROR(one("gemv", {slice(h, 128, 256), slice(f, 0, 64), slice(f, 64, 4), slice(f, 80, 3),
                             none(), none()}),
                "verify.shape", "/instructions/0/operands/residual");
  }
  SUBCASE("gemv fusions: norm and w2") {
    // w: rows 2..5 of a [*, 64] f16 matrix; w2: rows 10..13 of the same buffer; norm: 64 f32.
    const Operand w = slice(h, 128, 256), x = slice(f, 0, 64), y = slice(f, 64, 4);
    const Operand res = slice(f, 80, 4), norm = slice(f, 128, 64), w2 = slice(h, 640, 256);
    CHECK_NOTHROW(one("gemv", {w, x, y, res, norm, w2}));
    CHECK_NOTHROW(one("gemv", {w, x, y, none(), norm, none()}));
    CHECK_NOTHROW(one("gemv", {w, x, y, none(), none(), w2}));
    CHECK_NOTHROW(one("gemv", {w, x, y, res, slice(h, 0, 64), w2}));  // norm in another dtype
    auto err = [&](std::vector<Operand> ops) { return error_of([&] { one("gemv", ops); }); };
    // norm: one weight per column of w.
    auto e = err({w, x, y, res, slice(f, 128, 63), w2});
    REQUIRE(e);
    CHECK(e->code() == "verify.shape");
    CHECK(e->where() == "/instructions/0/operands/norm");
    CHECK(e->message().find("extent(norm) = 63 must equal K = extent(x) = 64") !=
          std::string::npos);
    // w2: the same number of rows as w...
    e = err({w, x, y, res, norm, slice(h, 640, 192)});
    REQUIRE(e);
    CHECK(e->code() == "verify.shape");
    CHECK(e->where() == "/instructions/0/operands/w2");
    CHECK(e->message().find("extent(w2) = 192 must equal extent(w) = 256") != std::string::npos);
    // ...starting on a row boundary...
    e = err({w, x, y, res, norm, slice(h, 650, 256)});
    REQUIRE(e);
    CHECK(e->code() == "verify.shape");
    CHECK(e->where() == "/instructions/0/operands/w2/offset");
    CHECK(e->message().find("offset(w2) = 650 is not a multiple of K = 64") != std::string::npos);
    // ...and of w's dtype.
    e = err({w, x, y, res, norm, slice(f, 1024, 256)});
    REQUIRE(e);
    CHECK(e->code() == "verify.dtype");
    CHECK(e->where() == "/instructions/0/operands/w2");
    CHECK(e->message().find("dtype(w2) = f32 must equal dtype(w) = f16") != std::string::npos);
    // eps: finite and > 0 when norm is present, ignored without it.
    for (float bad : {0.0f, -1e-5f, std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      CAPTURE(bad);
      b.p.instructions.clear();
      b.add("gemv", {w, x, y, res, norm, w2});
      b.last().params[0] = f32_bits(bad);
      CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/eps");
      b.last().operands[4] = none();
      CHECK_NOTHROW(check_instruction(b.p, 0));
    }
    // Only the fused forms take the slots: an operand missing from the count is refused.
    b.p.instructions.clear();
    b.add("gemv", {w, x, y, res});
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.count", "/instructions/0/operands");
  }
  SUBCASE("argmax") {
    CHECK_NOTHROW(one("argmax", {slice(f, 0, 100), slice(i32, 3, 1), none(), none()}));
    CHECK_ERROR(one("argmax", {slice(f, 0, 100), slice(i32, 3, 2), none(), none()}), "verify.shape",
                "/instructions/0/operands/index");
    CHECK_ERROR(one("argmax", {slice(f, 0, 100), slice(h, 3, 1), none(), none()}), "verify.dtype",
                "/instructions/0/operands/index");
    // The split form: a slice's (index, value), and the final pick through index_map.
    CHECK_NOTHROW(one("argmax", {slice(f, 0, 100), slice(i32, 3, 1), slice(f, 200, 1), none()}));
    CHECK_NOTHROW(one("argmax", {slice(f, 0, 8), slice(i32, 3, 1), none(), slice(i32, 8, 8)}));
    CHECK_ERROR(one("argmax", {slice(f, 0, 100), slice(i32, 3, 1), slice(f, 200, 2), none()}),
                "verify.shape", "/instructions/0/operands/value");
    CHECK_ERROR(one("argmax", {slice(f, 0, 100), slice(i32, 3, 1), slice(i32, 200, 1), none()}),
                "verify.dtype", "/instructions/0/operands/value");
    CHECK_ERROR(one("argmax", {slice(f, 0, 8), slice(i32, 3, 1), none(), slice(i32, 8, 7)}),
                "verify.shape", "/instructions/0/operands/index_map");
    CHECK_ERROR(one("argmax", {slice(f, 0, 8), slice(i32, 3, 1), none(), slice(f, 8, 8)}),
                "verify.dtype", "/instructions/0/operands/index_map");
    // Written before the 2026-11-30 slots existed: two operands are refused in memory (the
    // readers fill left-out optional slots).
    CHECK_ERROR(one("argmax", {slice(f, 0, 100), slice(i32, 3, 1)}), "verify.operand.count",
                "/instructions/0/operands");
  }
  SUBCASE("embedding") {
    // 3 ids, D = 32, table of 10 rows.
    CHECK_NOTHROW(one("embedding", {slice(h, 0, 320), slice(i32, 0, 3), slice(f, 0, 96)}));
    CHECK_ERROR(one("embedding", {slice(h, 0, 320), slice(i32, 0, 3), slice(f, 0, 97)}),
                "verify.shape", "/instructions/0/operands/y");
    CHECK_ERROR(one("embedding", {slice(h, 0, 330), slice(i32, 0, 3), slice(f, 0, 96)}),
                "verify.shape", "/instructions/0/operands/table");
  }
}

TEST_CASE("gemv's norm and w2 are reads: a fused gemv races with an unordered writer of them") {
  Builder b;
  const uint32_t w = b.buffer("w", DType::bf16, 8 * 64);
  const uint32_t w2 = b.buffer("w2", DType::bf16, 8 * 64);
  const uint32_t x = b.buffer("x", DType::f32, 64);
  const uint32_t norm = b.buffer("norm", DType::bf16, 64);
  const uint32_t y = b.buffer("y", DType::f32, 8);
  const uint32_t y2 = b.buffer("y2", DType::f32, 8);
  b.add("gemv", {b.whole(w), b.whole(x), b.whole(y), none(), b.whole(norm), b.whole(w2)}, {}, {},
        "fused");
  // Another reader of norm and w2 is fine.
  b.add("gemv", {b.whole(w2), b.whole(x), b.whole(y2), none(), b.whole(norm), b.whole(w)});
  CHECK_NOTHROW(verify(b.p));
  b.add("fill", {slice(norm, 8, 4)}, {}, {}, "norm_writer");
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.hazard");
  CHECK(e->where() == "/instructions/2/operands/y");
  CHECK(e->message().find("(gemv) reads and instruction 2 'norm_writer' (fill) writes buffer "
                          "'norm' elements [8, 12)") != std::string::npos);
  b.p.instructions.back().operands[0] = slice(w2, 64, 4);
  e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->where() == "/instructions/2/operands/y");
  CHECK(e->message().find("(gemv) reads and instruction 2 'norm_writer' (fill) writes buffer "
                          "'w2' elements [64, 68)") != std::string::npos);
  b.p.instructions.pop_back();
  // The fused gemv's y is its only write: y2 written by the second one does not conflict.
  CHECK_NOTHROW(verify(b.p));
}

TEST_CASE("launch rules") {
  Builder b = gemv_program();
  CHECK_NOTHROW(check_launch(b.p));
  SUBCASE("block") {
    for (uint32_t bad : {0u, 16u, 48u, 1056u}) {
      b.p.launch.block = bad;
      CHECK_ERROR(check_launch(b.p), "launch.block", "/launch/block");
    }
    b.p.launch.block = 1024;
    CHECK_NOTHROW(check_launch(b.p));
  }
  SUBCASE("grid: at most kMaxQueues blocks (a persistent grid is co-resident)") {
    b.p.launch.grid = kMaxQueues;
    CHECK_NOTHROW(check_launch(b.p));
    for (uint32_t bad : {uint32_t{kMaxQueues + 1}, 100'000'000u, UINT32_MAX}) {
      b.p.launch.grid = bad;
      CHECK_ERROR(check_launch(b.p), "launch.grid", "/launch/grid");
    }
    b.p.launch.grid = 0;
    b.p.queues = std::vector<std::vector<uint32_t>>(kMaxQueues + 1);
    CHECK_ERROR(check_launch(b.p), "limit.queues", "/queues");
  }
  SUBCASE("cooperative mode takes no cluster") {
    b.p.launch.cluster[0] = 2;
    CHECK_ERROR(check_launch(b.p), "launch.cluster", "/launch/cluster");
  }
  SUBCASE("cluster mode") {
    b.p.launch.mode = LaunchMode::cluster;
    b.p.launch.cluster[0] = 2;
    b.p.launch.cluster[1] = 2;
    b.p.launch.grid = 8;
    CHECK_NOTHROW(check_launch(b.p));
    b.p.launch.grid = 6;
    CHECK_ERROR(check_launch(b.p), "launch.grid", "/launch/grid");
    b.p.launch.grid = 0;  // auto: queues decide
    b.p.queues = std::vector<std::vector<uint32_t>>(6);
    CHECK_ERROR(check_launch(b.p), "launch.grid", "/queues");
    b.p.queues.reset();
    CHECK_NOTHROW(check_launch(b.p));
    b.p.launch.cluster[1] = 0;
    CHECK_ERROR(check_launch(b.p), "launch.cluster", "/launch/cluster/1");
    b.p.launch.cluster[1] = 16;
    CHECK_ERROR(check_launch(b.p), "launch.cluster", "/launch/cluster");
  }
  SUBCASE("shared memory") {
    b.p.launch.dynamic_smem = 232448;
    CHECK_NOTHROW(check_launch(b.p));
    b.p.launch.dynamic_smem = 232449;
    CHECK_ERROR(check_launch(b.p), "launch.smem", "/launch/dynamic_smem");
    CHECK_ERROR(verify(b.p), "launch.smem", "/launch/dynamic_smem");
  }
}

namespace {

// A 2-D f16 tensor of 128 rows x 64 columns, tiles of 32 rows x 64 columns (128 B rows).
Builder tma_program() {
  Builder b;
  b.buffer("w", DType::f16, 64 * 128 + 64);
  TmaSpec t;
  t.name = "w_tiles";
  t.buffer = 0;
  t.offset = 64;  // 128 bytes in: aligned
  t.dims = {64, 128};
  t.box = {64, 32};
  t.swizzle = TmaSwizzle::b128;
  b.p.tma.push_back(t);
  return b;
}

}  // namespace

TEST_CASE("TMA rules") {
  Builder b = tma_program();
  TmaSpec& t = b.p.tma[0];
  CHECK_NOTHROW(check_tma(b.p, 0));
  CHECK_NOTHROW(verify(b.p));

  SUBCASE("explicit strides and element strides") {
    t.strides = {128};
    t.element_strides = {1, 2};
    CHECK_NOTHROW(check_tma(b.p, 0));
  }
  SUBCASE("buffer") {
    t.buffer = 3;
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.buffer", "/tma/0/buffer");
  }
  SUBCASE("rank") {
    t.dims = {};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.rank", "/tma/0/dims");
    t.dims = {64, 2, 2, 2, 2, 2};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.rank", "/tma/0/dims");
    t.dims = {64, 128};
    t.interleave = TmaInterleave::b16;  // interleaved layouts need rank >= 3
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.rank", "/tma/0/dims");
  }
  SUBCASE("lengths") {
    t.box = {64};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.box", "/tma/0/box");
    t.box = {64, 32};
    t.strides = {128, 128};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.strides", "/tma/0/strides");
    t.strides = {};
    t.element_strides = {1};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.element_strides", "/tma/0/element_strides");
  }
  SUBCASE("alignment of base and strides") {
    t.offset = 4;  // 8 bytes
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.align", "/tma/0/offset");
    t.offset = 0;
    t.strides = {120};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.strides", "/tma/0/strides/0");
    t.strides = {uint64_t{1} << 40};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.strides", "/tma/0/strides/0");
    // Derived stride of 60 f16 = 120 bytes is not a multiple of 16.
    t.strides = {};
    t.dims = {60, 128};
    t.box = {56, 32};
    t.swizzle = TmaSwizzle::none;
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.strides", "/tma/0/dims/0");
  }
  SUBCASE("box") {
    t.box = {64, 0};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.box", "/tma/0/box/1");
    t.box = {64, 257};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.box", "/tma/0/box/1");
    t.dims = {64, 16};
    t.box = {64, 32};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.box", "/tma/0/box/1");
    t.dims = {64, 128};
    t.box = {60, 32};  // 120 bytes: not whole 16-byte units
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.box", "/tma/0/box/0");
  }
  SUBCASE("element strides") {
    t.element_strides = {1, 9};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.element_strides", "/tma/0/element_strides/1");
    t.element_strides = {0, 1};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.element_strides", "/tma/0/element_strides/0");
  }
  SUBCASE("swizzle span") {
    t.swizzle = TmaSwizzle::b64;  // 128-byte rows do not fit a 64-byte swizzle
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.swizzle", "/tma/0/swizzle");
    t.box = {32, 32};
    CHECK_NOTHROW(check_tma(b.p, 0));
  }
  SUBCASE("interleave 32B") {
    t.dims = {64, 8, 16};
    t.box = {64, 8, 4};
    t.interleave = TmaInterleave::b32;
    t.swizzle = TmaSwizzle::none;
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.swizzle", "/tma/0/swizzle");
    t.swizzle = TmaSwizzle::b32;
    CHECK_NOTHROW(check_tma(b.p, 0));
    t.offset = 8;  // 16 bytes: enough without interleave, not with 32B
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.align", "/tma/0/offset");
  }
  SUBCASE("NaN fill needs floats") {
    b.p.buffers[0].dtype = DType::i32;
    t.box = {32, 32};
    CHECK_NOTHROW(check_tma(b.p, 0));
    t.oob_fill = TmaOobFill::nan;
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.oob_fill", "/tma/0/oob_fill");
  }
  SUBCASE("footprint inside the buffer") {
    t.offset = 128;  // 64 elements past the end
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.bounds", "/tma/0");
    t.offset = 64;
    t.strides = {256};  // rows twice as far apart
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.bounds", "/tma/0");
    t.strides = {};
    CHECK_NOTHROW(check_tma(b.p, 0));
    t.dims = {64, uint64_t{1} << 32};
    t.strides = {(uint64_t{1} << 40) - 16};
    CHECK_ERROR(check_tma(b.p, 0), "verify.tma.bounds", "/tma/0");
  }
  SUBCASE("verify checks every spec") {
    b.p.tma.push_back(t);
    b.p.tma[1].box = {64, 300};
    CHECK_ERROR(verify(b.p), "verify.tma.box", "/tma/1/box/1");
  }
}
