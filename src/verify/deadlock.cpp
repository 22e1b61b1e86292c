// The deadlock proof. Counters only grow, so running any runnable queue head never disables
// another: a greedy simulation (run heads whose waits hold until none can run) drains exactly
// when some real execution drains. Waiters park on the first counter they lack, in a min-heap
// keyed by the value they need, so every signal wakes only those it satisfies: the whole
// simulation costs O((instructions + waits + signals) log) however the program is shaped.
// A carried wait (on the previous pass's signals) holds in the first pass, which is the pass
// these proofs model; several passes are proven on an unrolled program (passes.cpp).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/detail.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace detail {

std::string counter_label(const Program& program, uint32_t c) {
  std::string s = "counter " + std::to_string(c);
  if (c < program.counters.size() && !program.counters[c].name.empty())
    s = "counter '" + program.counters[c].name + "'";
  return s;
}

std::string instruction_label(const Program& program, uint32_t i) {
  std::string s = "instruction " + std::to_string(i);
  const Instruction& ins = program.instructions[i];
  if (!ins.name.empty()) s += " '" + ins.name + "'";
  s += " (" + op_name(program, ins.op) + ")";
  return s;
}

}  // namespace detail

namespace {

using detail::counter_label;
using detail::instruction_label;
using Parked = std::pair<uint64_t, uint32_t>;  // (value needed, queue or instruction)
using ParkHeap = std::priority_queue<Parked, std::vector<Parked>, std::greater<Parked>>;

// Counter state plus the parked waiters of each counter. Counters are uint64 so that many
// 32-bit signals cannot wrap.
class CounterBoard {
public:
  explicit CounterBoard(const Program& program)
      : program_(program), values_(program.counters.size(), 0), parked_(program.counters.size()) {}

  uint64_t value(uint32_t c) const { return values_[c]; }

  // Index of the first wait of `ins` (from `from`) that does not hold, or waits.size().
  size_t first_unmet(const Instruction& ins, size_t from) const {
    for (size_t w = from; w < ins.waits.size(); ++w)
      if (!ins.waits[w].carried && values_[ins.waits[w].counter] < ins.waits[w].value) return w;
    return ins.waits.size();
  }

  void park(uint32_t counter, uint64_t need, uint32_t who) { parked_[counter].push({need, who}); }

  // Applies the instruction's signals and hands every waiter they satisfy to `wake`.
  template <class Wake>
  void signal(const Instruction& ins, Wake&& wake) {
    for (const Signal& s : ins.signals) {
      values_[s.counter] += s.add;
      ParkHeap& heap = parked_[s.counter];
      while (!heap.empty() && heap.top().first <= values_[s.counter]) {
        wake(heap.top().second);
        heap.pop();
      }
    }
  }

  // The simulation indexes counters directly: refuse out-of-range ones before it starts
  // (verify checks them per instruction first; this guards direct callers).
  void check_indices() const {
    for (size_t i = 0; i < program_.instructions.size(); ++i) {
      const Instruction& ins = program_.instructions[i];
      for (size_t w = 0; w < ins.waits.size(); ++w)
        if (ins.waits[w].counter >= values_.size())
          throw_program_error("verify.counter",
                              "/instructions/" + std::to_string(i) + "/waits/" + std::to_string(w) +
                                  "/counter",
                              "counter index out of range");
      for (size_t g = 0; g < ins.signals.size(); ++g)
        if (ins.signals[g].counter >= values_.size())
          throw_program_error("verify.counter",
                              "/instructions/" + std::to_string(i) + "/signals/" +
                                  std::to_string(g) + "/counter",
                              "counter index out of range");
    }
  }

private:
  const Program& program_;
  std::vector<uint64_t> values_;
  std::vector<ParkHeap> parked_;
};

void check_queue_items(const Program& program, const std::vector<std::vector<uint32_t>>& queues) {
  for (size_t q = 0; q < queues.size(); ++q)
    for (size_t p = 0; p < queues[q].size(); ++p)
      if (queues[q][p] >= program.instructions.size())
        throw_program_error("verify.queue.index",
                            "/queues/" + std::to_string(q) + "/" + std::to_string(p),
                            "queue " + std::to_string(q) + " position " + std::to_string(p) +
                                " names instruction " + std::to_string(queues[q][p]) + " of " +
                                std::to_string(program.instructions.size()));
}

}  // namespace

std::vector<StuckHead> simulate_queues(const Program& program,
                                       const std::vector<std::vector<uint32_t>>& queues) {
  check_queue_items(program, queues);
  CounterBoard board(program);
  board.check_indices();

  std::vector<uint32_t> head(queues.size(), 0);
  std::vector<uint32_t> wait_cursor(queues.size(), 0);  // waits before it are known to hold
  std::vector<uint32_t> runnable;
  for (uint32_t q = 0; q < queues.size(); ++q)
    if (!queues[q].empty()) runnable.push_back(q);

  auto wake = [&](uint32_t q) { runnable.push_back(q); };
  while (!runnable.empty()) {
    const uint32_t q = runnable.back();
    runnable.pop_back();
    // Run this queue as far as it goes; park it on the first counter it lacks.
    while (head[q] < queues[q].size()) {
      const Instruction& ins = program.instructions[queues[q][head[q]]];
      const size_t w = board.first_unmet(ins, wait_cursor[q]);
      wait_cursor[q] = static_cast<uint32_t>(w);
      if (w < ins.waits.size()) {
        board.park(ins.waits[w].counter, ins.waits[w].value, q);
        break;
      }
      board.signal(ins, wake);
      ++head[q];
      wait_cursor[q] = 0;
    }
  }

  std::vector<StuckHead> stuck;
  for (uint32_t q = 0; q < queues.size(); ++q) {
    if (head[q] >= queues[q].size()) continue;
    const uint32_t i = queues[q][head[q]];
    const Instruction& ins = program.instructions[i];
    const size_t w = board.first_unmet(ins, 0);
    StuckHead h{q, head[q], i, op_name(program, ins.op), 0, 0, 0};
    if (w < ins.waits.size()) {
      h.counter = ins.waits[w].counter;
      h.have = board.value(h.counter);
      h.need = ins.waits[w].value;
    }
    stuck.push_back(std::move(h));
  }
  return stuck;
}

void check_waits_satisfiable(const Program& program) {
  std::vector<uint64_t> total(program.counters.size(), 0);
  for (const Instruction& ins : program.instructions)
    for (const Signal& s : ins.signals)
      if (s.counter < total.size()) total[s.counter] += s.add;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    for (size_t w = 0; w < ins.waits.size(); ++w) {
      const Wait& wait = ins.waits[w];
      if (wait.counter >= total.size() || total[wait.counter] >= wait.value) continue;
      throw_program_error(
          "verify.wait.unsatisfiable",
          "/instructions/" + std::to_string(i) + "/waits/" + std::to_string(w) + "/value",
          instruction_label(program, static_cast<uint32_t>(i)) + " waits for " +
              counter_label(program, wait.counter) + " >= " + std::to_string(wait.value) +
              " but all signals to it add up to " + std::to_string(total[wait.counter]));
    }
  }
}

void check_counter_range(const Program& program) {
  std::vector<uint64_t> total(program.counters.size(), 0);
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    for (size_t g = 0; g < ins.signals.size(); ++g) {
      const Signal& s = ins.signals[g];
      if (s.counter >= total.size()) continue;  // check_instruction names it
      total[s.counter] += s.add;  // at most 2^22 instructions x 4 signals x 2^32: no wrap
      if (total[s.counter] <= kMaxCounterValue) continue;
      throw_program_error(
          "verify.counter.overflow",
          "/instructions/" + std::to_string(i) + "/signals/" + std::to_string(g) + "/add",
          counter_label(program, s.counter) + " reaches " + std::to_string(total[s.counter]) +
              " in one pass with this signal of " +
              instruction_label(program, static_cast<uint32_t>(i)) +
              "; device counters are 32-bit (at most " + std::to_string(kMaxCounterValue) + ")");
    }
  }
}

void check_queues(const Program& program, const std::vector<std::vector<uint32_t>>& queues) {
  const uint32_t grid = program.launch.grid;
  if (queues.empty())
    throw_program_error("verify.queue.count", "/queues", "the program has no queues (grid 0)");
  if (grid != 0 && queues.size() != grid)
    throw_program_error("verify.queue.count", "/queues",
                        std::to_string(queues.size()) + " queues but launch.grid is " +
                            std::to_string(grid) + " (one queue per block)");
  check_queue_items(program, queues);

  // Every instruction exactly once: remember where each was first seen.
  constexpr uint64_t kUnseen = UINT64_MAX;
  std::vector<uint64_t> seen(program.instructions.size(), kUnseen);  // (queue << 32) | position
  for (size_t q = 0; q < queues.size(); ++q) {
    for (size_t p = 0; p < queues[q].size(); ++p) {
      const uint32_t i = queues[q][p];
      if (seen[i] != kUnseen) {
        const uint64_t fq = seen[i] >> 32, fp = seen[i] & 0xFFFFFFFFu;
        throw_program_error(
            "verify.queue.duplicate", "/queues/" + std::to_string(q) + "/" + std::to_string(p),
            instruction_label(program, i) + " is queued twice: queue " + std::to_string(fq) +
                " position " + std::to_string(fp) + " and queue " + std::to_string(q) +
                " position " + std::to_string(p));
      }
      seen[i] = (uint64_t{q} << 32) | p;
    }
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] == kUnseen)
      throw_program_error("verify.queue.missing", "/instructions/" + std::to_string(i),
                          instruction_label(program, static_cast<uint32_t>(i)) +
                              " is in no queue (" + std::to_string(queues.size()) + " queues)");

  // A wait no signal total can meet gets its own, more precise complaint than a deadlock.
  check_waits_satisfiable(program);
  const std::vector<StuckHead> stuck = simulate_queues(program, queues);
  if (stuck.empty()) return;

  std::string detail = "stuck queue heads (block, position, instruction, op, counter, have, need):";
  for (const StuckHead& h : stuck) {
    detail += "\n  block " + std::to_string(h.block) + " position " + std::to_string(h.position) +
              ": " + instruction_label(program, h.instruction) + " waits for " +
              counter_label(program, h.counter) + " have " + std::to_string(h.have) + ", need " +
              std::to_string(h.need);
  }
  const StuckHead& first = stuck.front();
  std::string message =
      "queues cannot drain: block " + std::to_string(first.block) + " is stuck at position " +
      std::to_string(first.position) + " on " + instruction_label(program, first.instruction) +
      " waiting for " + counter_label(program, first.counter) +
      " >= " + std::to_string(first.need) + " (have " + std::to_string(first.have) + "); " +
      std::to_string(stuck.size()) + " block(s) stuck";
  throw Error(ErrorKind::program, "verify.deadlock",
              "/queues/" + std::to_string(first.block) + "/" + std::to_string(first.position),
              std::move(message))
      .with_detail(std::move(detail));
}

std::vector<uint32_t> pool_order(const Program& program, const std::vector<double>* priority) {
  const size_t n = program.instructions.size();
  if (priority != nullptr && priority->size() != n)
    throw Error(ErrorKind::internal, "verify.priority", "",
                "pool_order: one priority per instruction expected");
  CounterBoard board(program);
  board.check_indices();

  // Ready set: a stack when any order will do, a heap when the caller ranks instructions.
  std::vector<uint32_t> stack;
  auto by_priority = [priority](uint32_t a, uint32_t b) {
    const double pa = (*priority)[a], pb = (*priority)[b];
    return pa != pb ? pa < pb : a > b;  // max-heap: highest priority, then lowest index
  };
  std::vector<uint32_t> heap;
  auto push_ready = [&](uint32_t i) {
    if (priority == nullptr) {
      stack.push_back(i);
    } else {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), by_priority);
    }
  };
  auto pop_ready = [&](uint32_t& i) {
    if (priority == nullptr) {
      if (stack.empty()) return false;
      i = stack.back();
      stack.pop_back();
      return true;
    }
    if (heap.empty()) return false;
    std::pop_heap(heap.begin(), heap.end(), by_priority);
    i = heap.back();
    heap.pop_back();
    return true;
  };

  // An instruction is parked on one counter at a time; when woken it re-checks its remaining
  // waits (satisfied ones stay satisfied) and either becomes ready or parks again.
  std::vector<uint8_t> cursor(n, 0);
  auto consider = [&](uint32_t i) {
    const Instruction& ins = program.instructions[i];
    const size_t w = board.first_unmet(ins, cursor[i]);
    cursor[i] = static_cast<uint8_t>(std::min<size_t>(w, 255));
    if (w < ins.waits.size())
      board.park(ins.waits[w].counter, ins.waits[w].value, i);
    else
      push_ready(i);
  };
  for (uint32_t i = 0; i < n; ++i) consider(i);

  std::vector<uint32_t> order;
  order.reserve(n);
  std::vector<uint32_t> woken;
  uint32_t i = 0;
  while (pop_ready(i)) {
    order.push_back(i);
    woken.clear();
    board.signal(program.instructions[i], [&](uint32_t j) { woken.push_back(j); });
    for (uint32_t j : woken) consider(j);
  }
  if (order.size() == n) return order;

  std::vector<uint8_t> ran(n, 0);
  for (uint32_t j : order) ran[j] = 1;
  std::string detail =
      "instructions that never became ready (instruction, op, counter, have, need):";
  uint32_t first = UINT32_MAX;
  size_t n_stuck = 0;
  for (uint32_t j = 0; j < n; ++j) {
    if (ran[j]) continue;
    ++n_stuck;
    if (first == UINT32_MAX) first = j;
    const Instruction& ins = program.instructions[j];
    const size_t w = board.first_unmet(ins, 0);
    detail += "\n  " + instruction_label(program, j);
    if (w < ins.waits.size())
      detail += " waits for " + counter_label(program, ins.waits[w].counter) + " have " +
                std::to_string(board.value(ins.waits[w].counter)) + ", need " +
                std::to_string(ins.waits[w].value);
  }
  const Instruction& fi = program.instructions[first];
  const size_t fw = board.first_unmet(fi, 0);
  std::string message = "no legal execution order: " + std::to_string(n_stuck) +
                        " instruction(s) never become ready, first " +
                        instruction_label(program, first);
  if (fw < fi.waits.size())
    message += " waiting for " + counter_label(program, fi.waits[fw].counter) +
               " >= " + std::to_string(fi.waits[fw].value) + " (have " +
               std::to_string(board.value(fi.waits[fw].counter)) + ")";
  throw Error(ErrorKind::program, "verify.deadlock", "/instructions/" + std::to_string(first),
              std::move(message))
      .with_detail(std::move(detail));
}

}  // namespace amk
