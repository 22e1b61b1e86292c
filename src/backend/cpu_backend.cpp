// run_cpu: a sequential simulation of the persistent launch. Each block walks its queue
// `iterations` times; a head runs once its waits hold (counter >= value * pass, pass counted per
// block from 1, a carried wait value * (pass - 1); counters zeroed once per launch); its signals
// apply after it completes. As on the device, a block about to start pass q ends instead when
// the stop word (feed_token's eos) holds a pass at most q - 2. Blocks
// take turns (one instruction per turn, round robin) to mimic concurrency, and a block whose
// head is blocked sleeps on the counter it waits for until that counter is signaled, so the
// cost is linear in instructions + signals rather than instructions x blocks.
#include <algorithm>
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "core/error.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

[[noreturn]] void plan_error(const std::string& message) {
  throw Error(ErrorKind::internal, "run.plan", "", "inconsistent plan: " + message);
}

void check_plan(const Plan& plan) {
  if (plan.queue_offsets.empty()) plan_error("no queue offsets");
  if (plan.queue_offsets.front() != 0 || plan.queue_offsets.back() != plan.queue_items.size())
    plan_error("queue offsets do not span the queue items");
  for (size_t q = 0; q + 1 < plan.queue_offsets.size(); ++q)
    if (plan.queue_offsets[q] > plan.queue_offsets[q + 1]) plan_error("queue offsets decrease");
  for (uint32_t item : plan.queue_items)
    if (item >= plan.instructions.size())
      plan_error("queue item " + std::to_string(item) + " is not an instruction");
  for (const amk_instruction_t& ins : plan.instructions) {
    if (ins.n_waits > AMK_MAX_WAITS || ins.n_signals > AMK_MAX_SIGNALS ||
        ins.n_operands > AMK_MAX_OPERANDS || ins.n_params > AMK_MAX_PARAMS)
      plan_error("instruction " + std::to_string(ins.index) + " exceeds the ABI's slots");
    for (uint32_t w = 0; w < ins.n_waits; ++w)
      if ((ins.waits[w].counter & ~AMK_WAIT_CARRIED) >= plan.n_counters)
        plan_error("instruction " + std::to_string(ins.index) + " waits on counter " +
                   std::to_string(ins.waits[w].counter & ~AMK_WAIT_CARRIED) + " of " +
                   std::to_string(plan.n_counters));
    for (uint32_t s = 0; s < ins.n_signals; ++s)
      if (ins.signals[s].counter >= plan.n_counters)
        plan_error("instruction " + std::to_string(ins.index) + " signals counter " +
                   std::to_string(ins.signals[s].counter) + " of " +
                   std::to_string(plan.n_counters));
  }
}

struct BlockState {
  uint32_t pass = 1;  // 1-based pass this block is in
  uint32_t pos = 0;   // position in its queue
  bool done = false;
};

std::string counter_label(const Program& program, uint32_t c) {
  std::string s = "counter " + std::to_string(c);
  if (c < program.counters.size() && !program.counters[c].name.empty())
    s += " '" + program.counters[c].name + "'";
  return s;
}

}  // namespace

CpuRunStats run_cpu(const Program& program, const Plan& plan, HostBuffers& buffers,
                    const CpuRunOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.iterations == 0)
    throw Error(ErrorKind::usage, "run.iterations", "", "iterations must be >= 1");
  check_plan(plan);
  check_passes(program, plan, options.iterations);  // the device's 32-bit counters and steps

  const uint32_t n_queues = plan.n_queues();
  std::vector<uint64_t> counters(plan.n_counters, 0);  // zeroed once per launch
  std::vector<std::vector<uint32_t>> sleepers(plan.n_counters);
  std::vector<BlockState> blocks(n_queues);
  std::deque<uint32_t> ready;
  uint32_t active = 0;
  for (uint32_t b = 0; b < n_queues; ++b) {
    if (plan.queue_offsets[b] == plan.queue_offsets[b + 1]) {
      blocks[b].done = true;
    } else {
      ready.push_back(b);
      ++active;
    }
  }

  auto head_of = [&](uint32_t b) -> const amk_instruction_t& {
    return plan.instructions[plan.queue_items[plan.queue_offsets[b] + blocks[b].pos]];
  };
  // A wait's counter and the value it needs in block b's pass (a carried wait: the pass before).
  auto counter_of = [](const amk_wait_t& w) { return w.counter & ~AMK_WAIT_CARRIED; };
  auto need_of = [&](const amk_wait_t& w, uint32_t b) {
    const uint32_t pass = blocks[b].pass - ((w.counter & AMK_WAIT_CARRIED) != 0 ? 1 : 0);
    return static_cast<uint64_t>(w.value) * pass;
  };
  // First wait of the head that does not hold, or -1.
  auto blocking_wait = [&](uint32_t b) -> int {
    const amk_instruction_t& ins = head_of(b);
    for (uint32_t w = 0; w < ins.n_waits; ++w)
      if (counters[counter_of(ins.waits[w])] < need_of(ins.waits[w], b)) return static_cast<int>(w);
    return -1;
  };

  CpuRunStats stats;
  uint32_t stop_word = 0;
  while (active > 0) {
    if (ready.empty()) {
      // Every remaining head waits on a counter nobody can still signal.
      std::string detail, summary;
      uint32_t stuck = 0;
      for (uint32_t b = 0; b < n_queues; ++b) {
        if (blocks[b].done) continue;
        const amk_instruction_t& ins = head_of(b);
        const int w = blocking_wait(b);
        const amk_wait_t& wait = ins.waits[w < 0 ? 0 : w];
        const std::string line =
            "block " + std::to_string(b) + " position " + std::to_string(blocks[b].pos) +
            " (pass " + std::to_string(blocks[b].pass) + "): instruction " +
            std::to_string(ins.index) + " (" + op_name(program, ins.op) + ") waits " +
            counter_label(program, counter_of(wait)) + " >= " + std::to_string(need_of(wait, b)) +
            ", has " + std::to_string(counters[counter_of(wait)]);
        detail += line + "\n";
        if (stuck++ < 4) summary += (summary.empty() ? "" : "; ") + line;
      }
      if (stuck > 4) summary += "; and " + std::to_string(stuck - 4) + " more";
      throw Error(ErrorKind::program, "run.deadlock", "/queues",
                  "no queue head can run (" + std::to_string(stuck) + " stuck): " + summary)
          .with_detail(detail);
    }
    const uint32_t b = ready.front();
    ready.pop_front();
    const int w = blocking_wait(b);
    if (w >= 0) {  // sleep until that counter moves
      sleepers[counter_of(head_of(b).waits[w])].push_back(b);
      continue;
    }
    const amk_instruction_t& ins = head_of(b);
    cpu_execute_instruction(program, ins, buffers, blocks[b].pass, &stop_word);
    ++stats.instructions_executed;
    stats.passes_run = std::max(stats.passes_run, blocks[b].pass);
    for (uint32_t s = 0; s < ins.n_signals; ++s) {
      const uint32_t c = ins.signals[s].counter;
      counters[c] += ins.signals[s].add;
      for (uint32_t sleeper : sleepers[c]) ready.push_back(sleeper);
      sleepers[c].clear();
    }
    BlockState& st = blocks[b];
    if (++st.pos == plan.queue_offsets[b + 1] - plan.queue_offsets[b]) {
      st.pos = 0;
      ++st.pass;
      if (st.pass > options.iterations || (stop_word != 0 && stop_word + 2 <= st.pass)) {
        st.done = true;
        --active;
        continue;
      }
    }
    ready.push_back(b);
  }
  stats.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace amk
