// Planner: ABI encoding, queue building, make_plan.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "plan/plan.hpp"
#include "verify/verify.hpp"

#include "common/program_builder.hpp"

using namespace amk;
using namespace amk::test;

TEST_CASE("encode and decode an instruction") {
  Builder b;
  const uint32_t w = b.buffer("w", DType::f16, 8 * 16);
  const uint32_t x = b.buffer("x", DType::f32, 16);
  const uint32_t y = b.buffer("y", DType::f32, 64);
  const uint32_t c0 = b.counter("c0");
  const uint32_t c1 = b.counter("c1");
  b.add("gemv", {slice(w, 16, 96), b.whole(x), slice(y, 40, 6), none(), none(), none()},
        {{c0, 3}, {c1, 1}}, {{c1, 2}});
  const Instruction& in = b.p.instructions[0];

  const amk_instruction_t e = encode_instruction(in, 7);
  CHECK(e.op == static_cast<uint16_t>(OpId::gemv));
  CHECK(e.index == 7);
  CHECK(e.n_operands == 6);
  CHECK(e.n_waits == 2);
  CHECK(e.n_signals == 1);
  CHECK(e.n_params == 3);
  CHECK(e.params[0] == f32_bits(1e-5f));  // eps, default
  CHECK(e.params[1] == 0);                // head_dim, heads: no merge
  CHECK(e.params[2] == 0);
  CHECK(e.flags == 0);
  CHECK(e.reserved0 == 0);
  CHECK(e.operands[0].offset == 16);
  CHECK(e.operands[0].extent == 96);
  CHECK(e.operands[0].buffer == w);
  CHECK(e.operands[2].offset == 40);
  // The absent optional slots (residual, norm, w2) are {0, 0, none}.
  for (int s : {3, 4, 5}) {
    CHECK(e.operands[s].offset == 0);
    CHECK(e.operands[s].extent == 0);
    CHECK(e.operands[s].buffer == AMK_NO_BUFFER);
  }
  CHECK(e.waits[0].counter == c0);
  CHECK(e.waits[0].value == 3);
  CHECK(e.waits[2].counter == 0);
  CHECK(e.waits[2].value == 0);
  CHECK(e.signals[0].add == 2);
  CHECK(e.signals[1].add == 0);
  // Slot 6 is empty: it is not stored (the bytes of programs from before the slot).
  const auto* six = reinterpret_cast<const unsigned char*>(&e.operand6);
  CHECK(std::all_of(six, six + sizeof e.operand6, [](unsigned char c) { return c == 0; }));

  // Encoding is deterministic to the byte (padding included): files and uploads compare equal.
  const amk_instruction_t again = encode_instruction(in, 7);
  CHECK(std::memcmp(&e, &again, sizeof(e)) == 0);

  Instruction back = decode_instruction(e);
  back.name = in.name;
  CHECK(back == in);

  b.add("fill", {b.whole(y)});
  b.last().params = {f32_bits(2.5f)};
  const amk_instruction_t f = encode_instruction(b.last(), 1);
  CHECK(f.n_params == 1);
  CHECK(f.params[0] == f32_bits(2.5f));
  CHECK(f.params[1] == 0);
  CHECK(decode_instruction(f) == b.last());
}

TEST_CASE("operand slot 6 and carried waits encode and decode") {
  Builder b;
  const uint32_t q = b.buffer("q", DType::f32, 64);
  const uint32_t kv = b.buffer("kv", DType::bf16, 4 * 64);
  const uint32_t out = b.buffer("out", DType::f32, 66);
  const uint32_t pos = b.buffer("pos", DType::u32, 1);
  const uint32_t c0 = b.counter("c0");
  const uint32_t c1 = b.counter("c1");
  b.add("attention_decode",
        {b.whole(q), slice(kv, 0, 128), slice(kv, 128, 128), b.whole(out), none(), none(),
         b.whole(pos)},
        {{c0, 2, true}, {c1, 1}}, {{c1, 1}});
  b.last().params = {64};
  const amk_instruction_t e = encode_instruction(b.last(), 0);
  CHECK(e.n_operands == 7);
  CHECK(e.operand6.buffer == pos);
  CHECK(e.operand6.extent == 1);
  CHECK(amk_ins_operand(e, 6).buffer == pos);
  CHECK(amk_ins_operand(e, 1).extent == 128);
  CHECK(e.waits[0].counter == (c0 | AMK_WAIT_CARRIED));
  CHECK(e.waits[1].counter == c1);
  const Instruction back = decode_instruction(e);
  REQUIRE(back.operands.size() == 7);
  CHECK(back.operands[6].buffer == pos);
  CHECK(back.waits[0].carried);
  CHECK(back.waits[0].counter == c0);
  CHECK_FALSE(back.waits[1].carried);

  // Without the position operand the instruction has the six slots it always had.
  b.last().operands[6] = none();
  const amk_instruction_t f = encode_instruction(b.last(), 0);
  CHECK(f.n_operands == 6);
  CHECK(f.operand6.buffer == 0);
}

TEST_CASE("encode and decode refuse what the ABI cannot hold") {
  Builder b;
  const uint32_t c = b.counter("c");
  b.add("nop", {}, {{c, 1}, {c, 1}, {c, 1}, {c, 1}, {c, 1}});
  CHECK_ERROR(encode_instruction(b.last(), 3), "plan.capacity", "/instructions/3/waits");
  b.last().waits.clear();
  b.last().operands.assign(8, Operand{});
  CHECK_ERROR(encode_instruction(b.last(), 3), "plan.capacity", "/instructions/3/operands");

  amk_instruction_t raw;
  std::memset(&raw, 0, sizeof(raw));
  raw.index = 9;
  raw.n_signals = 5;
  CHECK_ERROR(decode_instruction(raw), "plan.capacity", "/instructions/9");
}

namespace {

// A random DAG of data-carrying instructions: instruction i writes its own slice of `data`;
// it may read the slices of up to two earlier producers, waiting for their counters. Extra
// signals to a shared "noise" counter give waits that need only some of their signalers.
Builder random_dag(uint32_t seed) {
  std::mt19937 rng(seed);
  Builder b;
  const uint32_t n = 20 + rng() % 120;
  const uint32_t width = 8;
  const uint32_t data = b.buffer("data", DType::f32, uint64_t{n} * width);
  const uint32_t noise = b.counter("noise");
  std::vector<uint32_t> add(n);
  uint64_t noise_total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t own = b.counter("c" + std::to_string(i));
    add[i] = 1 + rng() % 3;
    std::vector<Wait> waits;
    std::vector<Signal> signals = {{own, add[i]}};
    std::vector<uint32_t> deps;
    if (i > 0) {
      const uint32_t n_deps = rng() % 3;
      for (uint32_t d = 0; d < n_deps; ++d) {
        // Mostly nearby producers, sometimes far ones: both chains and wide fan-in.
        const uint32_t back = (rng() % 4 == 0) ? 1 + rng() % i : 1 + rng() % std::min(i, 5u);
        const uint32_t p = i - back;
        if (std::find(deps.begin(), deps.end(), p) != deps.end()) continue;
        deps.push_back(p);
        waits.push_back({own - back, add[p]});  // counter of instruction p
      }
    }
    if (noise_total > 0 && rng() % 5 == 0)
      waits.push_back({noise, static_cast<uint32_t>(1 + rng() % noise_total)});
    if (rng() % 3 == 0) {
      signals.push_back({noise, 1});
      ++noise_total;
    }
    const Operand out = slice(data, uint64_t{i} * width, width);
    if (deps.empty()) {
      b.add("fill", {out}, waits, signals);
    } else {
      const Operand a = slice(data, uint64_t{deps[0]} * width, width);
      const Operand c = slice(data, uint64_t{deps.back()} * width, width);
      b.add("add", {a, c, out}, waits, signals);
    }
  }
  return b;
}

void check_schedule(const Program& program, const std::vector<std::vector<uint32_t>>& queues,
                    uint32_t grid) {
  REQUIRE(queues.size() == grid);
  std::vector<int> seen(program.instructions.size(), 0);
  for (const auto& q : queues)
    for (uint32_t i : q) ++seen[i];
  CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  CHECK(simulate_queues(program, queues).empty());
}

}  // namespace

TEST_CASE("built queues pass the deadlock proof on random DAGs") {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    Builder b = random_dag(seed);
    CAPTURE(seed);
    REQUIRE_NOTHROW(verify(b.p));  // the pool itself is legal and hazard free
    for (uint32_t grid = 1; grid <= 16; ++grid) {
      CAPTURE(grid);
      const auto queues = build_queues(b.p, grid);
      check_schedule(b.p, queues, grid);
      Program with = b.p;
      with.queues = queues;
      with.launch.grid = grid;
      CHECK_NOTHROW(verify(with));
    }
  }
}

TEST_CASE("the schedule spreads independent work and follows the critical path") {
  Builder b;
  const uint32_t y = b.buffer("y", DType::f32, 8 * 1024);
  for (uint32_t i = 0; i < 8; ++i) b.add("fill", {slice(y, uint64_t{i} * 1024, 1024)});
  const auto queues = build_queues(b.p, 4);
  for (const auto& q : queues) CHECK(q.size() == 2);

  // A long chain and independent stragglers: the chain's head is scheduled first.
  Builder c;
  const uint32_t x = c.buffer("x", DType::f32, 64);
  const uint32_t z = c.buffer("z", DType::f32, 64);
  c.add("fill", {slice(z, 0, 8)}, {}, {}, "straggler");
  for (uint32_t i = 0; i < 5; ++i) {
    const uint32_t k = c.counter("k" + std::to_string(i));
    std::vector<Wait> waits;
    if (i > 0) waits.push_back({k - 1, 1});
    c.add("scale", {c.whole(x), c.whole(x)}, waits, {{k, 1}});
  }
  const auto one = build_queues(c.p, 1);
  REQUIRE(one[0].size() == 6);
  CHECK(one[0][0] == 1);  // chain head before the straggler
}

TEST_CASE("build_queues edge cases") {
  Builder b;
  const uint32_t c = b.counter("c");
  b.add("nop", {}, {}, {{c, 1}});
  b.add("nop", {}, {{c, 1}});
  const auto wide = build_queues(b.p, 5);  // more blocks than instructions
  check_schedule(b.p, wide, 5);
  CHECK(std::count_if(wide.begin(), wide.end(), [](const auto& q) { return q.empty(); }) >= 3);
  CHECK_ERROR(build_queues(b.p, 0), "plan.grid", "/launch/grid");

  b.p.instructions[0].waits.push_back({c, 1});  // waits for its own signal: no legal order
  CHECK_ERROR(build_queues(b.p, 2), "verify.deadlock", "/instructions/0");

  Builder empty;
  const auto none_q = build_queues(empty.p, 3);
  CHECK(none_q.size() == 3);
}

TEST_CASE("on a grid wider than the program, blocks past the instructions stay empty") {
  Builder b;
  const uint32_t c = b.counter("c");
  for (int i = 0; i < 6; ++i) b.add("nop", {}, {}, {{c, 1}});
  b.add("nop", {}, {{c, 6}});
  b.add("nop", {}, {{c, 6}});
  const auto narrow = build_queues(b.p, 8);
  const auto wide = build_queues(b.p, kMaxQueues);
  REQUIRE(wide.size() == kMaxQueues);
  check_schedule(b.p, wide, kMaxQueues);
  // The same schedule as on as many blocks as instructions; the rest get nothing.
  CHECK(std::equal(narrow.begin(), narrow.end(), wide.begin()));
  CHECK(std::all_of(wide.begin() + 8, wide.end(), [](const auto& q) { return q.empty(); }));
}

TEST_CASE("make_plan") {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, 64);
  const uint32_t y = b.buffer("y", DType::bf16, 64);
  b.p.buffers[y].output = true;
  const uint32_t c = b.counter("c");
  b.add("fill", {b.whole(x)}, {}, {{c, 1}});
  b.add("copy", {b.whole(x), b.whole(y)}, {{c, 1}});
  b.add("nop", {}, {{c, 1}});

  SUBCASE("auto grid builds queues from the hint") {
    PlanOptions options;
    options.grid_hint = 3;
    const Plan plan = make_plan(b.p, options);
    CHECK(plan.grid == 3);
    CHECK(plan.n_queues() == 3);
    CHECK(plan.queues_built);
    CHECK(plan.queue_offsets.front() == 0);
    CHECK(plan.queue_offsets.back() == 3);
    CHECK(plan.queue_items.size() == 3);
    CHECK(plan.instructions.size() == 3);
    for (uint32_t i = 0; i < 3; ++i) CHECK(plan.instructions[i].index == i);
    REQUIRE(plan.buffers.size() == 2);
    CHECK(plan.buffers[1].address == 0);
    CHECK(plan.buffers[1].elements == 64);
    CHECK(plan.buffers[1].bytes == 128);
    CHECK(plan.buffers[1].dtype == AMK_DTYPE_BF16);
    CHECK(plan.buffers[1].flags == AMK_BUFFER_OUTPUT);
    CHECK(plan.buffers[0].flags == 0);
    CHECK(plan.n_counters == 1);
    CHECK(plan.block == 256);
    CHECK(plan.ops_used == std::vector<uint16_t>{0, 1, 2});
    std::vector<std::vector<uint32_t>> q;
    for (uint32_t k = 0; k < plan.n_queues(); ++k)
      q.emplace_back(plan.queue_items.begin() + plan.queue_offsets[k],
                     plan.queue_items.begin() + plan.queue_offsets[k + 1]);
    CHECK(simulate_queues(b.p, q).empty());
  }
  SUBCASE("launch.grid wins over the hint") {
    b.p.launch.grid = 2;
    const Plan plan = make_plan(b.p);
    CHECK(plan.grid == 2);
    CHECK(plan.n_queues() == 2);
  }
  SUBCASE("the program's queues are kept") {
    b.p.queues = std::vector<std::vector<uint32_t>>{{0, 2}, {1}};
    const Plan plan = make_plan(b.p);
    CHECK(plan.grid == 2);
    CHECK(!plan.queues_built);
    CHECK(plan.queue_offsets == std::vector<uint32_t>{0, 2, 3});
    CHECK(plan.queue_items == std::vector<uint32_t>{0, 2, 1});
  }
  SUBCASE("cluster mode rounds the hint down to whole clusters") {
    b.p.launch.mode = LaunchMode::cluster;
    b.p.launch.cluster[0] = 4;
    PlanOptions options;
    options.grid_hint = 10;
    CHECK(make_plan(b.p, options).grid == 8);
    options.grid_hint = 3;
    CHECK_ERROR(make_plan(b.p, options), "plan.grid", "/launch/grid");
  }
  SUBCASE("a zero hint is refused") {
    PlanOptions options;
    options.grid_hint = 0;
    CHECK_ERROR(make_plan(b.p, options), "plan.grid", "/launch/grid");
  }
}

TEST_CASE("check_passes: counters, waits and queue steps stay within 32 bits over the passes") {
  Builder b;
  const uint32_t c = b.counter("c");
  b.add("nop", {}, {}, {{c, 1u << 30}});
  b.add("nop", {}, {{c, 1u << 30}});
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}};
  PlanOptions options;
  options.elide_ordered_syncs = false;
  Plan plan = make_plan(b.p, options);
  CHECK_NOTHROW(check_passes(b.p, plan, 1));
  CHECK_NOTHROW(check_passes(b.p, plan, 3));  // 3 * 2^30 fits
  auto e = error_of([&] { check_passes(b.p, plan, 4); });
  REQUIRE(e);
  CHECK(e->code() == "plan.counter.overflow");
  CHECK(e->where() == "/counters/0");
  CHECK(e->message().find("counter 'c' gains 1073741824 per pass x 4 passes") != std::string::npos);
  CHECK(e->message().find("= 4294967296") != std::string::npos);

  // A wait past what the signals add (only a hand-made plan has one) is named at its value.
  plan.instructions[1].waits[0].value = UINT32_MAX;
  CHECK_ERROR(check_passes(b.p, plan, 2), "plan.counter.overflow", "/instructions/1/waits/0/value");

  // Queue steps: len * passes must fit 32 bits.
  Builder q;
  q.add("nop", {});
  q.add("nop", {});
  q.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}};
  const Plan qplan = make_plan(q.p);
  CHECK_NOTHROW(check_passes(q.p, qplan, UINT32_MAX / 2));
  CHECK_ERROR(check_passes(q.p, qplan, UINT32_MAX / 2 + 1), "plan.queue.overflow", "/queues/0");
}

TEST_CASE("a single producer's consumer follows it on its block; the plan drops the wait") {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, 4 * 64);
  const uint32_t y = b.buffer("y", DType::f32, 4 * 64);
  const uint32_t all = b.counter("all");
  std::vector<uint32_t> producer(4), consumer(4);
  for (uint32_t i = 0; i < 4; ++i) {
    const uint32_t c = b.counter("c" + std::to_string(i));
    producer[i] = b.add("fill", {slice(x, 64ull * i, 64)}, {}, {{c, 1}});
    // Waits for its producer (one signaler) and for all four (no single one is needed).
    consumer[i] =
        b.add("scale", {slice(x, 64ull * i, 64), slice(y, 64ull * i, 64)}, {{c, 1}}, {{all, 1}});
  }
  b.add("nop", {}, {{all, 4}});
  // Five blocks for four producers: the fifth is free earliest when the consumers are placed,
  // so only the follow rule keeps each consumer on its producer's block.
  const auto queues = build_queues(b.p, 5);
  check_schedule(b.p, queues, 5);
  std::vector<uint32_t> block_of(b.p.instructions.size());
  for (uint32_t q = 0; q < queues.size(); ++q)
    for (uint32_t i : queues[q]) block_of[i] = q;
  for (uint32_t i = 0; i < 4; ++i) CHECK(block_of[consumer[i]] == block_of[producer[i]]);

  PlanOptions options;
  options.grid_hint = 5;
  const Plan plan = make_plan(b.p, options);
  CHECK(plan.elided_waits == 4);
  CHECK(plan.elided_signals == 4);  // c0..c3 have no waiter left; `all` keeps its signals
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(plan.instructions[consumer[i]].n_waits == 0);
    CHECK(plan.instructions[consumer[i]].n_signals == 1);
    CHECK(plan.instructions[producer[i]].n_signals == 0);
  }
  CHECK(plan.instructions.back().n_waits == 1);  // four blocks signal `all`: kept

  options.elide_ordered_syncs = false;
  const Plan kept = make_plan(b.p, options);
  CHECK(kept.elided_waits == 0);
  CHECK(kept.instructions[consumer[0]].n_waits == 1);

  SUBCASE("a wait that needs another queue's signal too is kept") {
    b.p.queues = std::vector<std::vector<uint32_t>>{
        {producer[0], producer[1], consumer[0]},
        {consumer[1], producer[2], consumer[2], producer[3], consumer[3], 8}};
    b.p.instructions[consumer[0]].waits = {{b.p.instructions[producer[0]].signals[0].counter, 1}};
    // consumer[1] waits for producer[1], which runs in the other queue.
    const Plan p2 = make_plan(b.p);
    CHECK(p2.instructions[consumer[0]].n_waits == 0);
    CHECK(p2.instructions[consumer[1]].n_waits == 1);
    CHECK(p2.instructions[consumer[2]].n_waits == 0);
    CHECK(p2.instructions[producer[1]].n_signals == 1);  // consumer[1] still waits for it
  }
}
