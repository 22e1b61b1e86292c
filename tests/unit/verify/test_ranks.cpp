// Programs with ranks (verify/ranks.cpp): the expansion over the ranks, instruction by
// instruction, and the rank rules with their locations.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/program_builder.hpp"
#include "verify/ranks.hpp"
#include "verify/verify.hpp"

using namespace amk;
using namespace amk::test;

namespace {

// Two ranks: a scale into h on each, an all_reduce of h, rank 0 sending x to rank 1; in queues
// (one for the compute, one for the pair) when `queues`.
Program two_ranks(bool queues) {
  Builder b;
  b.p.launch.ranks = 2;
  const uint32_t x = b.buffer("x", DType::f32, 16), h = b.buffer("h", DType::f32, 16),
                 y = b.buffer("y", DType::f32, 16);
  const uint32_t c = b.counter("c");
  b.add("scale", {b.whole(x), b.whole(h)}, {}, {{c, 1}}, "scale");
  b.add("all_reduce", {b.whole(h)}, {{c, 1}}, {}, "sum");
  b.add("send", {b.whole(x)}, {}, {}, "out");
  b.last().ranks = {0};
  b.last().params = {1};
  b.add("recv", {b.whole(y)}, {}, {}, "in");
  b.last().ranks = {1};
  b.last().params = {0};
  if (queues) b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}, {2, 3}};
  return b.p;
}

std::vector<std::string> names(const Program& p) {
  std::vector<std::string> n;
  for (const Instruction& i : p.instructions) n.push_back(i.name);
  return n;
}

}  // namespace

TEST_CASE(
    "the expansion: each rank's buffers and counters, the comm ops as arrivals, sums, copies") {
  const RankExpansion x = expand_ranks(two_ranks(true));
  const Program& e = x.program;
  CHECK(e.launch.ranks == 1);
  CHECK(x.buffers_per_rank == 3);
  CHECK(e.buffers[4].name == "h.rank1");
  CHECK(e.counters[1].name == "c.rank1");
  CHECK(names(e) ==
        std::vector<std::string>{"scale.rank0", "scale.rank1",            // scale on each rank
                                 "sum.rank0.arrive", "sum.rank1.arrive",  // all_reduce
                                 "sum.rank0.sum1", "sum.rank0.copy1",     //   rank 0 sums, copies
                                 "sum.rank0.done", "sum.rank1.done",      //   each rank's signals
                                 "out.rank0.arrive", "out.rank0.done",    // send on rank 0
                                 "in.rank1.copy"});                       // recv on rank 1
  // The sum adds rank 1's h into rank 0's once both arrived; the copy takes it back to rank 1.
  const Instruction& sum = e.instructions[4];
  CHECK(sum.operands[0].buffer == 1);
  CHECK(sum.operands[1].buffer == 4);
  CHECK(sum.operands[2].buffer == 1);
  CHECK(e.counters[sum.waits[0].counter].name == "amk.all_reduce.1.arrived");
  CHECK(sum.waits[0].value == 2);
  CHECK(e.instructions[5].operands[1].buffer == 4);
  // The arrivals keep the ranks' own waits; the receiver copies rank 0's x into its y.
  CHECK(e.instructions[3].waits[0].counter == 1);  // c.rank1
  CHECK(e.instructions[10].operands[0].buffer == 0);
  CHECK(e.instructions[10].operands[1].buffer == 5);
  // Origins and queues: rank r's copy of each queue, the expansion's ops beside their own.
  CHECK(x.origin[6].instruction == 1);
  CHECK(x.origin[7].rank == 1);
  REQUIRE(e.queues);
  CHECK(*e.queues == std::vector<std::vector<uint32_t>>{{0, 2, 4, 5, 6}, {8, 9}, {1, 3, 7}, {10}});
  (void)verify(two_ranks(true));
  (void)verify(two_ranks(false));
}

TEST_CASE("the rank rules name the instruction and the field") {
  Program one = two_ranks(false);
  one.launch.ranks = 1;
  one.instructions.resize(2);
  CHECK_ERROR(check_ranks(one), "verify.ranks", "/instructions/1/op");

  Program partial = two_ranks(false);
  partial.instructions[1].ranks = {0};
  CHECK_ERROR(check_ranks(partial), "verify.ranks", "/instructions/1/ranks");

  Program everywhere = two_ranks(false);
  everywhere.instructions[2].ranks.clear();
  CHECK_ERROR(check_ranks(everywhere), "verify.ranks", "/instructions/2/ranks");

  Program self = two_ranks(false);
  self.instructions[3].params = {1};
  CHECK_ERROR(check_ranks(self), "verify.ranks", "/instructions/3/params/peer");

  Program lonely = two_ranks(false);
  lonely.instructions.pop_back();
  CHECK_ERROR(check_ranks(lonely), "verify.ranks", "/instructions/2");

  Program busy = two_ranks(false);
  busy.instructions[1].waits.assign(4, {0, 1, false});
  CHECK_ERROR(check_ranks(busy), "verify.ranks", "/instructions/1");

  // A hazard across ranks is reported at the program's instruction, with its rank: rank 1's y is
  // written by the recv and, unordered, by a fill.
  Program race = two_ranks(false);
  Instruction fill;
  fill.op = static_cast<uint16_t>(OpId::fill);
  fill.operands = {Operand{2, 0, 16}};
  fill.params = {0};
  fill.ranks = {1};
  race.instructions.push_back(fill);
  const auto e = error_of([&] { (void)verify(race); });
  REQUIRE(e);
  CHECK(e->code() == "verify.hazard");
  CHECK(e->where().rfind("/instructions/", 0) == 0);
  CHECK(e->message().find("(on rank 1)") != std::string::npos);
}
