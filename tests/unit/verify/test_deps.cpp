// Verifier: queue structure, the deadlock proof, the dependency graph and hazards.
#include <doctest/doctest.h>

#include <string>

#include "verify/verify.hpp"

#include "common/program_builder.hpp"
#include "common/files.hpp"

using namespace amk;
using amk_test::contains;
using namespace amk::test;

namespace {

// Two blocks, each waiting first for a signal the other sends only later.
Builder crossed_program() {
  Builder b;
  const uint32_t c0 = b.counter("c0");
  const uint32_t c1 = b.counter("c1");
  b.add("nop", {}, {{c1, 1}}, {}, "a0");  // 0
  b.add("nop", {}, {}, {{c0, 1}}, "a1");  // 1
  b.add("nop", {}, {{c0, 1}}, {}, "b0");  // 2
  b.add("nop", {}, {}, {{c1, 1}}, "b1");  // 3
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}, {2, 3}};
  return b;
}

}  // namespace

TEST_CASE("queue structure") {
  Builder b = crossed_program();
  auto& q = *b.p.queues;
  q = {{1, 0}, {3, 2}};  // the drainable order
  CHECK_NOTHROW(verify(b.p));

  SUBCASE("count must match launch.grid") {
    b.p.launch.grid = 3;
    CHECK_ERROR(verify(b.p), "verify.queue.count", "/queues");
    b.p.launch.grid = 2;
    CHECK_NOTHROW(verify(b.p));
  }
  SUBCASE("duplicate names both places") {
    q = {{1, 0}, {3, 2, 0}};
    auto e = error_of([&] { verify(b.p); });
    REQUIRE(e);
    CHECK(e->code() == "verify.queue.duplicate");
    CHECK(e->where() == "/queues/1/2");
    CHECK(contains(e->message(), "'a0'"));
    CHECK(contains(e->message(), "queue 0 position 1"));
    CHECK(contains(e->message(), "queue 1 position 2"));
  }
  SUBCASE("missing") {
    q = {{1, 0}, {3}};
    auto e = error_of([&] { verify(b.p); });
    REQUIRE(e);
    CHECK(e->code() == "verify.queue.missing");
    CHECK(e->where() == "/instructions/2");
    CHECK(contains(e->message(), "'b0'"));
  }
  SUBCASE("item out of range") {
    q = {{1, 0}, {3, 2, 4}};
    CHECK_ERROR(verify(b.p), "verify.queue.index", "/queues/1/2");
  }
  SUBCASE("no queues at all") {
    q.clear();
    CHECK_ERROR(verify(b.p), "verify.queue.count", "/queues");
  }
}

TEST_CASE("unsatisfiable wait names the counter, the need and the total") {
  Builder b;
  const uint32_t c = b.counter("ready");
  b.add("nop", {}, {}, {{c, 2}});
  b.add("nop", {}, {}, {{c, 1}});
  b.add("nop", {}, {{c, 4}});
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.wait.unsatisfiable");
  CHECK(e->where() == "/instructions/2/waits/0/value");
  CHECK(contains(e->message(), "'ready' >= 4"));
  CHECK(contains(e->message(), "add up to 3"));
  b.p.instructions[2].waits[0].value = 3;
  CHECK_NOTHROW(verify(b.p));
}

TEST_CASE("a counter the signals of one pass take past 32 bits is refused") {
  Builder b;
  const uint32_t c = b.counter("big");
  b.add("nop", {}, {}, {{c, UINT32_MAX}}, "first");
  b.add("nop", {}, {{c, UINT32_MAX}}, {}, "waiter");
  CHECK_NOTHROW(verify(b.p));  // 2^32 - 1 in all: the device's counter holds it

  b.add("nop", {}, {}, {{c, 1}}, "over");
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}, {2}};
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.counter.overflow");
  CHECK(e->where() == "/instructions/2/signals/0/add");
  CHECK(contains(e->message(), "counter 'big' reaches 4294967296"));
  CHECK(contains(e->message(), "'over'"));

  b.p.queues.reset();  // the pool path checks it too
  CHECK_ERROR(verify(b.p), "verify.counter.overflow", "/instructions/2/signals/0/add");
}

TEST_CASE("deadlock between two blocks names both stuck heads") {
  Builder b = crossed_program();
  const auto stuck = simulate_queues(b.p, *b.p.queues);
  REQUIRE(stuck.size() == 2);
  CHECK(stuck[0].block == 0);
  CHECK(stuck[0].position == 0);
  CHECK(stuck[0].instruction == 0);
  CHECK(stuck[0].op == "nop");
  CHECK(stuck[0].counter == 1);
  CHECK(stuck[0].have == 0);
  CHECK(stuck[0].need == 1);
  CHECK(stuck[1].block == 1);
  CHECK(stuck[1].instruction == 2);
  CHECK(stuck[1].counter == 0);

  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.deadlock");
  CHECK(e->where() == "/queues/0/0");
  CHECK(contains(e->message(), "block 0"));
  CHECK(contains(e->message(), "'a0'"));
  CHECK(e->message().find('\n') == std::string::npos);  // one line
  CHECK(contains(
      e->detail(),
      "block 0 position 0: instruction 0 'a0' (nop) waits for counter 'c1' have 0, need 1"));
  CHECK(contains(
      e->detail(),
      "block 1 position 0: instruction 2 'b0' (nop) waits for counter 'c0' have 0, need 1"));
}

TEST_CASE("a partial deadlock reports the counter value reached") {
  Builder b;
  const uint32_t c = b.counter("c");
  b.add("nop", {}, {}, {{c, 1}});  // 0
  b.add("nop", {}, {{c, 2}}, {});  // 1: needs 2 but only block 1 can give the second
  b.add("nop", {}, {{c, 3}}, {});  // 2: block 1 waits first
  b.add("nop", {}, {}, {{c, 2}});  // 3
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}, {2, 3}};
  const auto stuck = simulate_queues(b.p, *b.p.queues);
  REQUIRE(stuck.size() == 2);
  CHECK(stuck[0].position == 1);
  CHECK(stuck[0].have == 1);
  CHECK(stuck[0].need == 2);
  CHECK(stuck[1].position == 0);
  CHECK(stuck[1].need == 3);
  (*b.p.queues)[1] = {3, 2};
  CHECK(simulate_queues(b.p, *b.p.queues).empty());
  CHECK_NOTHROW(verify(b.p));
}

TEST_CASE("cyclic waits without queues have no legal order") {
  Builder b;
  const uint32_t c0 = b.counter("c0");
  const uint32_t c1 = b.counter("c1");
  const uint32_t c2 = b.counter("c2");
  b.add("nop", {}, {}, {{c2, 1}}, "free");
  b.add("nop", {}, {{c1, 1}}, {{c0, 1}}, "p");
  b.add("nop", {}, {{c0, 1}}, {{c1, 1}}, "q");
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.deadlock");
  CHECK(e->where() == "/instructions/1");
  CHECK(contains(e->message(), "2 instruction(s)"));
  CHECK(contains(e->detail(), "instruction 1 'p' (nop) waits for counter 'c1' have 0, need 1"));
  CHECK(contains(e->detail(), "instruction 2 'q' (nop) waits for counter 'c0' have 0, need 1"));
  CHECK(!contains(e->detail(), "'free'"));
}

TEST_CASE("hazards") {
  Builder b;
  const uint32_t y = b.buffer("y", DType::f32, 32);
  const uint32_t z = b.buffer("z", DType::f32, 32);
  const uint32_t c = b.counter("c");

  SUBCASE("two unordered writers") {
    b.add("fill", {slice(y, 0, 16)}, {}, {}, "w1");
    b.add("fill", {slice(y, 8, 16)}, {}, {}, "w2");
    auto e = error_of([&] { verify(b.p); });
    REQUIRE(e);
    CHECK(e->code() == "verify.hazard");
    CHECK(e->where() == "/instructions/1/operands/y");
    CHECK(contains(e->message(), "'w1'"));
    CHECK(contains(e->message(), "'w2'"));
    CHECK(contains(e->message(), "buffer 'y' elements [8, 16)"));
    VerifyOptions off;
    off.check_hazards = false;
    CHECK_NOTHROW(verify(b.p, off));
  }
  SUBCASE("disjoint writers are fine") {
    b.add("fill", {slice(y, 0, 16)});
    b.add("fill", {slice(y, 16, 16)});
    CHECK_NOTHROW(verify(b.p));
  }
  SUBCASE("readers do not conflict with each other") {
    b.add("copy", {b.whole(y), b.whole(z)}, {}, {{c, 1}});
    b.add("scale", {slice(y, 0, 8), slice(y, 8, 8)}, {{c, 1}});
    b.add("scale", {slice(y, 0, 8), slice(y, 16, 8)}, {{c, 1}});
    CHECK_NOTHROW(verify(b.p));
  }
  SUBCASE("ordered through a counter") {
    b.add("fill", {b.whole(y)}, {}, {{c, 1}}, "producer");
    b.add("copy", {b.whole(y), b.whole(z)}, {{c, 1}}, {}, "consumer");
    b.add("fill", {b.whole(y)}, {{c, 1}}, {}, "overwriter");  // races with the consumer's read
    auto e = error_of([&] { verify(b.p); });
    REQUIRE(e);
    CHECK(e->code() == "verify.hazard");
    CHECK(contains(e->message(), "'consumer' (copy) reads"));
    CHECK(contains(e->message(), "'overwriter' (fill) writes"));
    b.p.instructions.pop_back();
    const VerifySummary s = verify(b.p);
    CHECK(s.critical_path == 2);
    CHECK(s.dependency_edges == 1);
    CHECK(s.hazard_pairs_checked == 1);
  }
  SUBCASE("a signal that is not needed does not order") {
    // Two producers add 1 each, the consumer needs 1: either alone suffices.
    b.add("fill", {b.whole(z)}, {}, {{c, 1}}, "p1");
    b.add("fill", {b.whole(y)}, {}, {{c, 1}}, "p2");
    b.add("copy", {b.whole(y), b.whole(z)}, {{c, 1}}, {}, "r");
    CHECK_ERROR(verify(b.p), "verify.hazard", "/instructions/2/operands/x");
    b.p.instructions[2].waits[0].value = 2;  // now both are needed
    CHECK_NOTHROW(verify(b.p));
  }
  SUBCASE("queue order orders; different queues do not") {
    b.add("fill", {b.whole(y)});
    b.add("scale", {b.whole(y), b.whole(y)});  // in place
    b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}};
    CHECK_NOTHROW(verify(b.p));
    b.p.queues = std::vector<std::vector<uint32_t>>{{0}, {1}};
    CHECK_ERROR(verify(b.p), "verify.hazard", "/instructions/1/operands/x");
  }
  SUBCASE("ordering is transitive") {
    const uint32_t d = b.counter("d");
    b.add("fill", {b.whole(y)}, {}, {{c, 1}});
    b.add("nop", {}, {{c, 1}}, {{d, 1}});
    b.add("copy", {b.whole(y), b.whole(z)}, {{d, 1}});
    CHECK(verify(b.p).critical_path == 3);
  }
}

TEST_CASE("diamond fork/join across 4 blocks") {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, 64);
  const uint32_t y1 = b.buffer("y1", DType::f32, 64);
  const uint32_t y2 = b.buffer("y2", DType::f32, 64);
  const uint32_t z = b.buffer("z", DType::f32, 64);
  const uint32_t root = b.counter("root");
  const uint32_t join = b.counter("join");
  b.add("fill", {b.whole(x)}, {}, {{root, 1}}, "root");
  b.add("scale", {b.whole(x), b.whole(y1)}, {{root, 1}}, {{join, 1}}, "left");
  b.add("scale", {b.whole(x), b.whole(y2)}, {{root, 1}}, {{join, 1}}, "right");
  b.add("add", {b.whole(y1), b.whole(y2), b.whole(z)}, {{join, 2}}, {}, "join");
  b.p.launch.grid = 4;
  b.p.queues = std::vector<std::vector<uint32_t>>{{0}, {1}, {2}, {3}};
  const VerifySummary s = verify(b.p);
  CHECK(s.critical_path == 3);
  CHECK(s.dependency_edges == 4);
  CHECK(s.hazard_pairs_checked == 4);
  // The join must wait for both branches: with join >= 1 nothing orders it after either
  // (no single branch is needed), so its read of y1 races with the left branch's write.
  b.p.instructions[3].waits[0].value = 1;
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.hazard");
  CHECK(contains(e->message(), "'join' (add) reads"));
  CHECK(contains(e->message(), "'left' (scale) writes buffer 'y1'"));
}

TEST_CASE("a barrier of many signalers and waiters stays linear") {
  Builder b;
  const uint32_t c = b.counter("barrier");
  const uint32_t n = 2000;
  for (uint32_t i = 0; i < n; ++i) b.add("nop", {}, {}, {{c, 1}});
  for (uint32_t i = 0; i < n; ++i) b.add("nop", {}, {{c, n}});
  const DependencyGraph g = build_dependency_graph(b.p, nullptr);
  CHECK(g.instruction_edges == uint64_t{n} * n);  // logical producer -> consumer relations
  CHECK(g.preds.size() == 2 * n);                 // but one join node carries them
  CHECK(critical_path(g) == 2);
  CHECK(verify(b.p).critical_path == 2);
}

namespace {

// A chain of `n` in-place scales of one buffer, each waiting for the previous one's counter,
// spread round-robin over `blocks` queues (or none when blocks == 0).
Builder chain(uint32_t n, uint32_t blocks) {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, 256);
  for (uint32_t i = 0; i < n; ++i) b.counter("c" + std::to_string(i));
  b.p.instructions.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<Wait> waits;
    if (i > 0) waits.push_back({i - 1, 1});
    b.add("scale", {b.whole(x), b.whole(x)}, waits, {{i, 1}});
  }
  if (blocks > 0) {
    std::vector<std::vector<uint32_t>> q(blocks);
    for (uint32_t i = 0; i < n; ++i) q[i % blocks].push_back(i);
    b.p.queues = std::move(q);
  }
  return b;
}

}  // namespace

TEST_CASE("large programs: search-based ordering finds hazards and proves order") {
  // Above 65536 instructions (OrderOracle::kChunkedMaxInstructions) the hazard check searches
  // the graph per pair.
  Builder b = chain(70000, 8);
  CHECK(verify(b.p).critical_path == 70000);
  // A rogue writer on its own block that nothing orders.
  const uint32_t x = 0;
  b.add("fill", {slice(x, 100, 4)}, {}, {}, "rogue");
  b.p.queues->push_back({70000});
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.hazard");
  CHECK(contains(e->message(), "'rogue'"));
  CHECK(contains(e->message(), "elements [100, 104)"));
}

TEST_CASE("mid-size programs: ancestor bitsets in ranges of ranks agree") {
  // 30000 instructions: more than one range of source ranks fits the bitset budget.
  Builder b = chain(30000, 8);
  CHECK(verify(b.p).critical_path == 30000);
  b.add("fill", {slice(0, 100, 4)}, {}, {}, "rogue");
  b.p.queues->push_back({30000});
  CHECK_ERROR(verify(b.p), "verify.hazard", "/instructions/30000/operands/y");
}

TEST_CASE("small programs: bitset ordering agrees") {
  Builder b = chain(500, 3);
  CHECK(verify(b.p).critical_path == 500);
  b.add("fill", {slice(0, 100, 4)}, {}, {}, "rogue");
  b.p.queues->push_back({500});
  CHECK_ERROR(verify(b.p), "verify.hazard", "/instructions/500/operands/y");
}

TEST_CASE("a 200k-instruction chain verifies") {
  Builder queued = chain(200000, 16);
  const VerifySummary s = verify(queued.p);
  CHECK(s.critical_path == 200000);
  Builder pooled = chain(200000, 0);
  CHECK(verify(pooled.p).critical_path == 200000);
}
