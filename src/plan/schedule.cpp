// Queue building for programs that leave scheduling to amk: a list schedule.
//
// 1. A legal global order of the pool, preferring instructions on the longest remaining
//    dependency path (bottom level over the dependency graph, weighted by estimated cost).
// 2. Walking that order, each instruction goes to the block that becomes free earliest; it
//    starts no earlier than its producers finish. Exception: an instruction whose single needed
//    signaler for some wait is the last instruction placed on its block follows it on that
//    block. It starts there as early as anywhere (the block frees when the producer finishes),
//    without the hop of a signal to another block, and the planner then leaves the wait out
//    (plan.cpp, elide_ordered_syncs).
// Every queue is then a subsequence of one legal order, which always drains: the earliest
// instruction of that order not yet run is at the head of its queue (everything before it in
// its queue came earlier) and its waits hold (everything before it in the order has run, and
// counters only grow). So the result passes the deadlock proof by construction.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "plan/plan.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

// Cost model in nanoseconds-ish units: a fixed dispatch (fetch the instruction, wait, signal)
// plus bytes moved at one SM's share of HBM bandwidth (~4.8 TB/s over 132 SMs ~ 36 B/ns).
constexpr double kDispatchCost = 500.0;
constexpr double kBytesPerUnit = 36.0;

double instruction_cost(const Program& program, const Instruction& ins) {
  double bytes = 0.0;
  for (const Operand& o : ins.operands)
    if (o.buffer != AMK_NO_BUFFER && o.buffer < program.buffers.size())
      bytes += static_cast<double>(o.extent) *
               static_cast<double>(dtype_size(program.buffers[o.buffer].dtype));
  return kDispatchCost + bytes / kBytesPerUnit;
}

}  // namespace

std::vector<std::vector<uint32_t>> build_queues(const Program& program, uint32_t grid) {
  if (grid == 0) throw_program_error("plan.grid", "/launch/grid", "cannot schedule onto 0 blocks");
  std::vector<std::vector<uint32_t>> queues(grid);
  const size_t n = program.instructions.size();
  if (n == 0) return queues;

  // Proves a legal order exists (verify.deadlock otherwise) before the graph is trusted.
  (void)pool_order(program);
  const DependencyGraph g = build_dependency_graph(program, nullptr);

  std::vector<double> cost(g.n_nodes, 0.0);  // join nodes cost nothing
  for (uint32_t i = 0; i < n; ++i) cost[i] = instruction_cost(program, program.instructions[i]);

  // Bottom level: cost of the longest path from a node to the end, in reverse topo order.
  std::vector<double> best_succ(g.n_nodes, 0.0), level(g.n_nodes, 0.0);
  for (auto it = g.topo.rbegin(); it != g.topo.rend(); ++it) {
    const uint32_t v = *it;
    level[v] = cost[v] + best_succ[v];
    for (uint32_t e = g.pred_offsets[v]; e < g.pred_offsets[v + 1]; ++e)
      best_succ[g.preds[e]] = std::max(best_succ[g.preds[e]], level[v]);
  }
  std::vector<double> priority(level.begin(), level.begin() + static_cast<ptrdiff_t>(n));
  const std::vector<uint32_t> order = pool_order(program, &priority);

  // Finish times; a join node finishes when its last predecessor does (computed on demand:
  // all of a join's predecessors precede its first consumer in `order`).
  std::vector<double> finish(g.n_nodes, -1.0);
  std::vector<uint32_t> stack;
  auto finish_of = [&](uint32_t v) {
    if (finish[v] >= 0.0) return finish[v];
    stack.assign(1, v);
    while (!stack.empty()) {
      const uint32_t u = stack.back();
      double t = 0.0;
      bool ready = true;
      for (uint32_t e = g.pred_offsets[u]; e < g.pred_offsets[u + 1]; ++e) {
        const uint32_t p = g.preds[e];
        if (finish[p] < 0.0) {
          ready = false;
          stack.push_back(p);  // always a join: instructions are finished before use
        } else {
          t = std::max(t, finish[p]);
        }
      }
      if (ready) {
        finish[u] = t;
        stack.pop_back();
      }
    }
    return finish[v];
  };

  // Free blocks, earliest first; an entry is stale once its block got later work (free_at grows
  // with every placement: costs are positive).
  // Only blocks 0..n-1 can get work: an idle block (free at 0, before any busy one) is always
  // among them and the lowest idle one is taken. So the state is sized by the instructions, not
  // by the grid; the blocks past them keep empty queues.
  const uint32_t candidates = static_cast<uint32_t>(std::min<size_t>(grid, n));
  using Free = std::pair<double, uint32_t>;  // (time the block becomes free, block)
  std::priority_queue<Free, std::vector<Free>, std::greater<Free>> blocks;
  std::vector<double> free_at(candidates, 0.0);
  std::vector<uint32_t> last(candidates, UINT32_MAX);  // last instruction placed on each block
  std::vector<uint32_t> block_of(n, UINT32_MAX);
  for (uint32_t b = 0; b < candidates; ++b) blocks.push({0.0, b});
  // The instruction behind predecessor node p when it is one (directly, or as the only
  // predecessor of a join node: a wait on a counter with one needed signaler).
  auto producer = [&](uint32_t p) -> uint32_t {
    if (p < n) return p;
    if (g.pred_offsets[p + 1] - g.pred_offsets[p] == 1 && g.preds[g.pred_offsets[p]] < n)
      return g.preds[g.pred_offsets[p]];
    return UINT32_MAX;
  };
  for (uint32_t i : order) {
    double ready = 0.0;
    uint32_t block = UINT32_MAX;
    for (uint32_t e = g.pred_offsets[i]; e < g.pred_offsets[i + 1]; ++e) {
      ready = std::max(ready, finish_of(g.preds[e]));
      const uint32_t src = producer(g.preds[e]);
      if (block == UINT32_MAX && src != UINT32_MAX && block_of[src] != UINT32_MAX &&
          last[block_of[src]] == src)
        block = block_of[src];
    }
    if (block == UINT32_MAX) {
      while (blocks.top().first != free_at[blocks.top().second]) blocks.pop();
      block = blocks.top().second;
      blocks.pop();
    }
    finish[i] = std::max(free_at[block], ready) + cost[i];
    free_at[block] = finish[i];
    last[block] = i;
    block_of[i] = block;
    queues[block].push_back(i);
    blocks.push({finish[i], block});
  }
  return queues;
}

}  // namespace amk
