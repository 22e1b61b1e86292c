// The pure parts of `amk bench` (cuda/bench.hpp): running statistics, the stopping rule, and the
// order in which one-launch-per-instruction runs a plan. Header-only and driver-free so the tests
// exercise them without a GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <vector>

#include "amk_abi.h"

namespace amk::bench {

// Mean and sample standard deviation, updated one sample at a time (Welford): the stopping rule
// looks at every arm after every round, so it must not re-sort the samples each time.
class RunningStats {
public:
  void add(double x) noexcept {
    ++n_;
    const double d = x - mean_;
    mean_ += d / static_cast<double>(n_);
    m2_ += d * (x - mean_);
  }
  [[nodiscard]] uint64_t count() const noexcept { return n_; }
  [[nodiscard]] double mean() const noexcept { return mean_; }
  [[nodiscard]] double stddev() const noexcept {
    return n_ > 1 ? std::sqrt(m2_ / static_cast<double>(n_ - 1)) : 0.0;
  }
  // stddev / mean; 0 with fewer than two samples or a zero mean.
  [[nodiscard]] double rel_spread() const noexcept { return mean_ > 0 ? stddev() / mean_ : 0.0; }

private:
  uint64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
};

// nvbench's rule (BENCH.md): keep sampling until every arm has min_samples samples, min_time_s
// of wall time has passed, and the noise settled -- every arm's relative standard deviation is
// under max_noise, or the worst arm's has stopped moving (it varied by less than
// convergence_tolerance of itself over the last convergence_window rounds: more samples would
// only measure the machine's own noise more precisely). time_limit_s ends it regardless.
struct StopRule {
  uint32_t min_samples = 10;
  double min_time_s = 0.5;
  double max_noise = 0.005;
  double time_limit_s = 10.0;
  uint32_t convergence_window = 16;
  double convergence_tolerance = 0.02;
};

enum class StopReason { none, noise, converged, time_limit };

[[nodiscard]] inline std::string_view stop_reason_name(StopReason r) noexcept {
  switch (r) {
    case StopReason::noise: return "noise_below_threshold";
    case StopReason::converged: return "noise_converged";
    case StopReason::time_limit: return "time_limit";
    default: return "running";
  }
}

// Call after every complete round (one sample of each arm, in the same order every round).
class StopTracker {
public:
  explicit StopTracker(StopRule rule) : rule_(rule) {}

  // The reason to stop now, or StopReason::none to run another round.
  [[nodiscard]] StopReason update(std::span<const RunningStats> arms, double elapsed_s) {
    double worst = 0;
    uint64_t fewest = arms.empty() ? 0 : UINT64_MAX;
    for (const RunningStats& a : arms) {
      worst = std::max(worst, a.rel_spread());
      fewest = std::min(fewest, a.count());
    }
    history_.push_back(worst);
    while (history_.size() > rule_.convergence_window) history_.pop_front();
    if (elapsed_s >= rule_.time_limit_s) return StopReason::time_limit;
    if (fewest < rule_.min_samples || elapsed_s < rule_.min_time_s) return StopReason::none;
    if (worst < rule_.max_noise) return StopReason::noise;
    if (rule_.convergence_window > 0 && history_.size() == rule_.convergence_window) {
      const auto [lo, hi] = std::minmax_element(history_.begin(), history_.end());
      if (*hi - *lo <= rule_.convergence_tolerance * worst) return StopReason::converged;
    }
    return StopReason::none;
  }

private:
  StopRule rule_;
  std::deque<double> history_;  // worst relative spread after each of the last rounds
};

// One legal serial order of a plan's instructions for iterations == 1: the queues merged by a
// greedy simulation of the VM (take any queue head whose waits the counters already meet, apply
// its signals), so every instruction comes after its queue predecessors and after the signals
// its waits need -- one of the interleavings the megakernel itself may run, hence the same
// results. Returns fewer than queue_items.size() indices when the queues cannot drain (a plan
// that did not pass the deadlock proof, or a counter index past n_counters).
[[nodiscard]] inline std::vector<uint32_t> serial_order(
    std::span<const amk_instruction_t> instructions, std::span<const uint32_t> queue_offsets,
    std::span<const uint32_t> queue_items, uint32_t n_counters) {
  std::vector<uint32_t> order;
  if (queue_offsets.size() < 2) return order;
  order.reserve(queue_items.size());
  const size_t n_queues = queue_offsets.size() - 1;
  std::vector<uint64_t> counters(n_counters, 0);
  std::vector<uint32_t> head(queue_offsets.begin(), queue_offsets.end() - 1);
  const auto ready = [&](const amk_instruction_t& ins) {
    for (uint32_t w = 0; w < ins.n_waits && w < AMK_MAX_WAITS; ++w) {
      const amk_wait_t& wait = ins.waits[w];
      if (wait.counter >= n_counters || counters[wait.counter] < wait.value) return false;
    }
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t q = 0; q < n_queues; ++q) {
      for (; head[q] < queue_offsets[q + 1] && head[q] < queue_items.size(); ++head[q]) {
        const uint32_t item = queue_items[head[q]];
        if (item >= instructions.size() || !ready(instructions[item])) break;
        const amk_instruction_t& ins = instructions[item];
        for (uint32_t s = 0; s < ins.n_signals && s < AMK_MAX_SIGNALS; ++s)
          if (ins.signals[s].counter < n_counters)
            counters[ins.signals[s].counter] += ins.signals[s].add;
        order.push_back(item);
        progress = true;
      }
    }
  }
  return order;
}

}  // namespace amk::bench
