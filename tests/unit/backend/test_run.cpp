// run_cpu over hand-built plans: a fork/join across blocks, deadlock detection, and counters
// across several passes of one launch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "core/numeric.hpp"
#include "ops/registry.hpp"

#include "helpers.hpp"

using namespace amk;
using namespace amk::test;

namespace {

Plan make_plan_by_hand(std::vector<amk_instruction_t> instructions,
                       const std::vector<std::vector<uint32_t>>& queues, uint32_t n_counters) {
  Plan plan;
  plan.instructions = std::move(instructions);
  plan.queue_offsets.push_back(0);
  for (const auto& q : queues) {
    plan.queue_items.insert(plan.queue_items.end(), q.begin(), q.end());
    plan.queue_offsets.push_back(static_cast<uint32_t>(plan.queue_items.size()));
  }
  plan.n_counters = n_counters;
  plan.grid = static_cast<uint32_t>(queues.size());
  return plan;
}

struct ForkJoin {
  Program program;
  HostBuffers host;
  std::vector<amk_instruction_t> ins;
  static constexpr uint64_t n = 16;

  ForkJoin() {
    for (const char* name : {"x", "t", "u1", "u2", "y"}) {
      program.buffers.push_back(make_buffer(name, DType::f32, {n}));
      host.data.emplace_back(n * 4);
    }
    program.counters = {{"t_ready"}, {"parts_ready"}};
    const auto x = nonzero_floats(n, 1);
    std::memcpy(host.data[0].data(), x.data(), n * 4);
    // 0 (block 0): t = 2x                      -> t_ready += 1
    // 1 (block 1): waits t_ready >= 1, u1 = t + x -> parts_ready += 1
    // 2 (block 2): waits t_ready >= 1, u2 = t * x -> parts_ready += 1
    // 3 (block 0): waits parts_ready >= 2, y = u1 + u2
    ins.push_back(
        make_ins(id(OpId::scale), 0, {{0, 0, n}, {1, 0, n}}, {f32_bits(2.0f)}, {}, {{0, 1}}));
    ins.push_back(
        make_ins(id(OpId::add), 1, {{1, 0, n}, {0, 0, n}, {2, 0, n}}, {}, {{0, 1}}, {{1, 1}}));
    ins.push_back(
        make_ins(id(OpId::mul), 2, {{1, 0, n}, {0, 0, n}, {3, 0, n}}, {}, {{0, 1}}, {{1, 1}}));
    ins.push_back(make_ins(id(OpId::add), 3, {{2, 0, n}, {3, 0, n}, {4, 0, n}}, {}, {{1, 2}}));
  }
  float x(uint64_t i) const { return values_of<float>(host.data[0])[i]; }
  float y(uint64_t i) const { return values_of<float>(host.data[4])[i]; }
};

}  // namespace

TEST_CASE("fork/join across three blocks") {
  // Orders: the join first in its block's queue order but behind the fork in time, and the
  // consumers placed in blocks that come before the producer.
  for (const auto& queues : std::vector<std::vector<std::vector<uint32_t>>>{
           {{0, 3}, {1}, {2}}, {{1}, {2}, {0, 3}}, {{2, 1}, {0}, {3}}, {{3}, {2}, {1}, {0}}}) {
    ForkJoin fj;
    const Plan plan = make_plan_by_hand(fj.ins, queues, 2);
    const CpuRunStats stats = run_cpu(fj.program, plan, fj.host);
    CHECK(stats.instructions_executed == 4);
    CHECK(stats.elapsed_ms >= 0.0);
    for (uint64_t i = 0; i < ForkJoin::n; ++i) {
      const float t = 2.0f * fj.x(i);
      CHECK(fj.y(i) == (t + fj.x(i)) + (t * fj.x(i)));
    }
  }
}

TEST_CASE("a plan that cannot drain throws run.deadlock naming the stuck heads") {
  ForkJoin fj;
  // The join sits in front of the fork in block 0: nothing can ever signal parts_ready.
  const Plan plan = make_plan_by_hand(fj.ins, {{3, 0}, {1}, {2}}, 2);
  const auto e = caught([&] { (void)run_cpu(fj.program, plan, fj.host); });
  REQUIRE(e);
  CHECK(e->code() == "run.deadlock");
  CHECK(e->kind() == ErrorKind::program);
  CHECK(e->message().find("3 stuck") != std::string::npos);
  CHECK(e->message().find("block 0 position 0 (pass 1): instruction 3 (add) waits counter 1 "
                          "'parts_ready' >= 2, has 0") != std::string::npos);
  CHECK(e->message().find("block 1 position 0 (pass 1): instruction 1 (add) waits counter 0 "
                          "'t_ready' >= 1, has 0") != std::string::npos);
  // detail lists every stuck head, one a line.
  CHECK(std::count(e->detail().begin(), e->detail().end(), '\n') == 3);
  // Nothing ran: y is still zero.
  CHECK(fj.y(0) == 0.0f);
}

TEST_CASE("deadlock after partial progress reports the counter's current value") {
  ForkJoin fj;
  fj.ins[3].waits[0].value = 3;  // only two parts are ever signaled
  const Plan plan = make_plan_by_hand(fj.ins, {{0, 3}, {1}, {2}}, 2);
  const auto e = caught([&] { (void)run_cpu(fj.program, plan, fj.host); });
  REQUIRE(e);
  CHECK(e->code() == "run.deadlock");
  CHECK(e->message().find("1 stuck") != std::string::npos);
  CHECK(e->message().find("instruction 3 (add) waits counter 1 'parts_ready' >= 3, has 2") !=
        std::string::npos);
}

TEST_CASE("several passes: waits compare value * pass, counters grow across passes") {
  Program program;
  HostBuffers host;
  for (const char* name : {"acc", "one", "out"}) {
    program.buffers.push_back(make_buffer(name, DType::f32, {1}));
    host.data.emplace_back(4);
  }
  const float one = 1.0f;
  std::memcpy(host.data[1].data(), &one, 4);
  // Block 0: acc += one -> c0; then a nop waiting c1 >= pass (block 1 finished this pass).
  // Block 1: waits c0 >= pass, out += acc -> c1.
  std::vector<amk_instruction_t> ins = {
      make_ins(id(OpId::add), 0, {{0, 0, 1}, {1, 0, 1}, {0, 0, 1}}, {}, {}, {{0, 1}}),
      make_ins(id(OpId::nop), 1, {}, {}, {{1, 1}}),
      make_ins(id(OpId::add), 2, {{2, 0, 1}, {0, 0, 1}, {2, 0, 1}}, {}, {{0, 1}}, {{1, 1}}),
  };
  const Plan plan = make_plan_by_hand(ins, {{0, 1}, {2}}, 2);
  const CpuRunStats stats = run_cpu(program, plan, host, CpuRunOptions{4});
  CHECK(stats.instructions_executed == 12);
  CHECK(values_of<float>(host.data[0])[0] == 4.0f);
  CHECK(values_of<float>(host.data[2])[0] == 1.0f + 2.0f + 3.0f + 4.0f);

  // A wait that holds in pass 1 but not in pass 2 (the counter is only signaled once per
  // pass by a block whose later passes need something that never comes).
  std::vector<amk_instruction_t> ins2 = {
      make_ins(id(OpId::nop), 0, {}, {}, {{1, 1}}, {{0, 1}}),
      make_ins(id(OpId::nop), 1, {}, {}, {}, {{1, 1}}),
      make_ins(id(OpId::nop), 2, {}, {}, {{0, 2}}),
  };
  const Plan plan2 = make_plan_by_hand(ins2, {{1, 0}, {2}}, 2);
  // Pass 1: c1 = 1, c0 = 1, block 1 needs c0 >= 2: stuck.
  const auto e = caught([&] { (void)run_cpu(program, plan2, host, CpuRunOptions{1}); });
  REQUIRE(e);
  CHECK(e->code() == "run.deadlock");
  // With two passes block 1 still needs c0 >= 4 in its pass 2 while block 0 can only reach 2.
  const auto e2 = caught([&] { (void)run_cpu(program, plan2, host, CpuRunOptions{2}); });
  REQUIRE(e2);
  CHECK(e2->message().find("(pass 1): instruction 2 (nop) waits counter 0 >= 2, has 2") ==
        std::string::npos);
  CHECK(e2->message().find("waits counter 0 >= 4, has 2") != std::string::npos);
}

TEST_CASE("run_cpu refuses passes that take a counter past the device's 32 bits") {
  Program program;
  program.counters = {{"c0"}};
  HostBuffers host;
  const uint32_t half = 1u << 31;
  const Plan plan = make_plan_by_hand({make_ins(id(OpId::nop), 0, {}, {}, {}, {{0, half}}),
                                       make_ins(id(OpId::nop), 1, {}, {}, {{0, half}})},
                                      {{0, 1}}, 1);
  CHECK(run_cpu(program, plan, host, CpuRunOptions{1}).instructions_executed == 2);
  const auto e = caught([&] { (void)run_cpu(program, plan, host, CpuRunOptions{2}); });
  REQUIRE(e);
  CHECK(e->code() == "plan.counter.overflow");
  CHECK(e->where() == "/counters/0");
  CHECK(e->message().find("counter 'c0' gains 2147483648 per pass x 2 passes") !=
        std::string::npos);
}

TEST_CASE("run_cpu refuses bad plans and propagates op faults") {
  ForkJoin fj;
  Plan plan = make_plan_by_hand(fj.ins, {{0, 3}, {1}, {2}}, 2);
  CHECK(error_code([&] { (void)run_cpu(fj.program, plan, fj.host, CpuRunOptions{0}); }) ==
        "run.iterations");
  Plan bad_item = plan;
  bad_item.queue_items[0] = 99;
  CHECK(error_code([&] { (void)run_cpu(fj.program, bad_item, fj.host); }) == "run.plan");
  Plan bad_counter = plan;
  bad_counter.n_counters = 1;
  CHECK(error_code([&] { (void)run_cpu(fj.program, bad_counter, fj.host); }) == "run.plan");
  Plan bad_offsets = plan;
  bad_offsets.queue_offsets.back() = 2;
  CHECK(error_code([&] { (void)run_cpu(fj.program, bad_offsets, fj.host); }) == "run.plan");

  // An embedding fault inside a run surfaces with the instruction's pointer.
  Program p;
  HostBuffers h;
  p.buffers = {make_buffer("table", DType::f32, {8}), make_buffer("ids", DType::i32, {1}),
               make_buffer("y", DType::f32, {2})};
  h.data = {std::vector<std::byte>(32), std::vector<std::byte>(4), std::vector<std::byte>(8)};
  const int32_t bad_id = 4;
  std::memcpy(h.data[1].data(), &bad_id, 4);
  const Plan ep =
      make_plan_by_hand({make_ins(id(OpId::nop), 0, {}),
                         make_ins(id(OpId::embedding), 1, {{0, 0, 8}, {1, 0, 1}, {2, 0, 2}})},
                        {{0}, {1}}, 0);
  const auto e = caught([&] { (void)run_cpu(p, ep, h); });
  REQUIRE(e);
  CHECK(e->code() == "run.embedding.id");
  CHECK(e->where() == "/instructions/1");
}

TEST_CASE("empty queues and a plan with no instructions") {
  Program p;
  HostBuffers h;
  const Plan plan = make_plan_by_hand({}, {{}, {}}, 0);
  CHECK(run_cpu(p, plan, h).instructions_executed == 0);
}
