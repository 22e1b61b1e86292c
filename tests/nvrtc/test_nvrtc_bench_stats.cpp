// The pure parts of `amk bench` (src/cuda/bench_stats.hpp): running statistics, the stopping
// rule, and the serial order one launch per instruction follows. Lives in the nvrtc tier only
// because it sits in src/cuda; it needs neither NVRTC nor a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/bench_stats.hpp"
#include "cuda/executor.hpp"

using namespace amk;
using namespace amk::bench;

namespace {

// Instructions with waits and signals only (the order does not look at ops or operands).
struct Queues {
  std::vector<amk_instruction_t> instructions;
  std::vector<std::vector<uint32_t>> queues;

  uint32_t add(std::vector<amk_wait_t> waits, std::vector<amk_signal_t> signals) {
    amk_instruction_t ins{};
    ins.index = static_cast<uint32_t>(instructions.size());
    ins.op = 1;
    ins.n_waits = static_cast<uint8_t>(waits.size());
    std::copy(waits.begin(), waits.end(), ins.waits);
    ins.n_signals = static_cast<uint8_t>(signals.size());
    std::copy(signals.begin(), signals.end(), ins.signals);
    instructions.push_back(ins);
    return ins.index;
  }

  std::vector<uint32_t> order(uint32_t n_counters) const {
    std::vector<uint32_t> offsets{0}, items;
    for (const auto& q : queues) {
      items.insert(items.end(), q.begin(), q.end());
      offsets.push_back(static_cast<uint32_t>(items.size()));
    }
    return serial_order(instructions, offsets, items, n_counters);
  }
};

size_t position(const std::vector<uint32_t>& order, uint32_t i) {
  return static_cast<size_t>(std::find(order.begin(), order.end(), i) - order.begin());
}

}  // namespace

TEST_CASE("running statistics agree with the batch summary") {
  const std::vector<double> xs = {1.25, 1.5, 1.0, 2.0, 1.75, 1.1, 1.3};
  RunningStats r;
  for (double x : xs) r.add(x);
  const ProfileStats s = summarize_samples(xs);
  CHECK(r.count() == xs.size());
  CHECK(r.mean() == doctest::Approx(s.mean_ms).epsilon(1e-12));
  CHECK(r.stddev() == doctest::Approx(s.stddev_ms).epsilon(1e-12));
  CHECK(r.rel_spread() == doctest::Approx(s.rel_spread).epsilon(1e-12));

  RunningStats one;
  one.add(3.0);
  CHECK(one.stddev() == 0.0);
  CHECK(one.rel_spread() == 0.0);
  CHECK(RunningStats{}.rel_spread() == 0.0);
}

TEST_CASE("stopping rule: samples and time first, then quiet noise, convergence or the limit") {
  StopRule rule;  // 10 samples, 0.5 s, 0.5 %, 10 s, window 16, 2 %
  auto arms_with = [](uint32_t n, double spread) {
    // Two values a and b alternating: relative spread about `spread` for any even n.
    std::vector<RunningStats> arms(3);
    for (auto& a : arms)
      for (uint32_t i = 0; i < n; ++i) a.add(1.0 + (i % 2 ? spread : -spread));
    return arms;
  };

  {  // quiet arms, but too few samples or too little time
    StopTracker t(rule);
    CHECK(t.update(arms_with(4, 1e-4), 5.0) == StopReason::none);
    StopTracker u(rule);
    CHECK(u.update(arms_with(20, 1e-4), 0.2) == StopReason::none);
  }
  {  // quiet arms with enough samples and time
    StopTracker t(rule);
    CHECK(t.update(arms_with(20, 1e-4), 0.6) == StopReason::noise);
  }
  {  // one noisy arm keeps it going until its noise stops moving
    StopTracker t(rule);
    std::vector<RunningStats> arms = arms_with(20, 1e-4);
    for (uint32_t i = 0; i < 20; ++i) arms[1].add(i % 2 ? 1.2 : 0.8);
    StopReason last = StopReason::none;
    uint32_t rounds = 0;
    for (; rounds < 15; ++rounds) {
      last = t.update(arms, 1.0);
      CHECK(last == StopReason::none);  // the window is not full yet
    }
    last = t.update(arms, 1.0);  // 16th identical reading: converged
    CHECK(last == StopReason::converged);
  }
  {  // noise that keeps moving never converges; the time limit ends it
    StopTracker t(rule);
    RunningStats a, b, c;
    StopReason last = StopReason::none;
    for (uint32_t i = 0; i < 200 && last == StopReason::none; ++i) {
      for (RunningStats* s : {&a, &b, &c}) s->add(1.0 + 0.5 * std::pow(-1.0, i) * (i + 1));
      const RunningStats arms[] = {a, b, c};
      last = t.update(arms, 0.1 * i);
    }
    CHECK(last == StopReason::time_limit);
  }
  {  // the limit wins even before the minimum sample count
    StopTracker t(rule);
    CHECK(t.update(arms_with(2, 0.3), 10.0) == StopReason::time_limit);
  }
  CHECK(stop_reason_name(StopReason::noise) == "noise_below_threshold");
  CHECK(stop_reason_name(StopReason::converged) == "noise_converged");
  CHECK(stop_reason_name(StopReason::time_limit) == "time_limit");
}

TEST_CASE("serial order: queue order and every wait's signals come first") {
  // Queue 0: p0 (signals c0), w1 (waits c1 >= 1). Queue 1: w0 (waits c0 >= 1, signals c1),
  // tail. Queue 2: j (waits c0 >= 1 and c1 >= 1: a join).
  Queues q;
  const uint32_t p0 = q.add({}, {{0, 1}});
  const uint32_t w1 = q.add({{1, 1}}, {});
  const uint32_t w0 = q.add({{0, 1}}, {{1, 1}});
  const uint32_t tail = q.add({}, {});
  const uint32_t j = q.add({{0, 1}, {1, 1}}, {});
  q.queues = {{p0, w1}, {w0, tail}, {j}};
  const std::vector<uint32_t> order = q.order(2);
  REQUIRE(order.size() == 5);
  CHECK(position(order, p0) < position(order, w1));    // queue order
  CHECK(position(order, w0) < position(order, tail));  // queue order
  CHECK(position(order, p0) < position(order, w0));    // c0
  CHECK(position(order, w0) < position(order, w1));    // c1
  CHECK(position(order, w0) < position(order, j));     // the join needs both
  CHECK(position(order, p0) < position(order, j));

  // A wait for two signals from different queues.
  Queues two;
  const uint32_t a = two.add({}, {{0, 1}});
  const uint32_t b = two.add({}, {{0, 1}});
  const uint32_t c = two.add({{0, 2}}, {});
  two.queues = {{c}, {a}, {b}};
  const std::vector<uint32_t> o2 = two.order(1);
  REQUIRE(o2.size() == 3);
  CHECK(o2.back() == c);
}

TEST_CASE("serial order: queues that cannot drain come back short") {
  Queues q;
  const uint32_t x = q.add({{0, 1}}, {{1, 1}});  // waits for y's signal
  const uint32_t y = q.add({{1, 1}}, {{0, 1}});  // waits for x's signal
  q.queues = {{x}, {y}};
  CHECK(q.order(2).empty());

  Queues bad;  // a counter past n_counters never holds
  bad.queues = {{bad.add({{5, 1}}, {})}};
  CHECK(bad.order(1).empty());

  CHECK(serial_order({}, {}, {}, 0).empty());
}
