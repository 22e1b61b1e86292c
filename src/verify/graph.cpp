// The dependency graph: what forces one instruction to finish before another starts.
//   - queue order: A before B in the same queue;
//   - needed signals: B waits for c >= v and the signals to c from everyone but A add up to
//     less than v, so B cannot start until A has signalled.
// For a wait (c, v) the needed signalers are exactly those whose contribution s exceeds
// total(c) - v: with signalers sorted by contribution that is a prefix of length k. Waits on
// the same counter share join nodes J(c, k), and J(c, k2) hangs off J(c, k1) for k1 < k2, so
// a barrier of m signalers and m waiters costs O(m) edges instead of m^2.
// A carried wait orders nothing within a pass (it holds in the first); passes.cpp orders the
// passes of an unrolled program, where it becomes a wait on the previous pass's counter.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

struct Contribution {
  uint32_t instruction;
  uint64_t add;
};

struct WaitNeed {
  uint32_t counter;
  uint32_t k;  // number of needed signalers (prefix length)
  uint32_t waiter;
};

}  // namespace

DependencyGraph build_dependency_graph(const Program& program,
                                       const std::vector<std::vector<uint32_t>>* queues) {
  const size_t n = program.instructions.size();
  const size_t n_counters = program.counters.size();
  DependencyGraph g;
  g.n_instructions = static_cast<uint32_t>(n);

  // Signalers per counter, one entry per (instruction, counter) with its total contribution.
  std::vector<uint32_t> offsets(n_counters + 1, 0);
  for (const Instruction& ins : program.instructions)
    for (const Signal& s : ins.signals)
      if (s.counter < n_counters) ++offsets[s.counter + 1];
  for (size_t c = 0; c < n_counters; ++c) offsets[c + 1] += offsets[c];
  std::vector<Contribution> signalers(offsets[n_counters]);
  {
    std::vector<uint32_t> fill(offsets.begin(), offsets.end() - 1);
    for (uint32_t i = 0; i < n; ++i)
      for (const Signal& s : program.instructions[i].signals)
        if (s.counter < n_counters) signalers[fill[s.counter]++] = {i, s.add};
  }
  std::vector<uint64_t> total(n_counters, 0);
  std::vector<uint32_t> count(n_counters, 0);  // distinct signalers after merging
  for (size_t c = 0; c < n_counters; ++c) {
    // Entries of one instruction are adjacent (filled in instruction order): merge them.
    uint32_t out = offsets[c];
    for (uint32_t e = offsets[c]; e < offsets[c + 1]; ++e) {
      total[c] += signalers[e].add;
      if (out > offsets[c] && signalers[out - 1].instruction == signalers[e].instruction)
        signalers[out - 1].add += signalers[e].add;
      else
        signalers[out++] = signalers[e];
    }
    count[c] = out - offsets[c];
    std::stable_sort(signalers.begin() + offsets[c], signalers.begin() + out,
                     [](const Contribution& a, const Contribution& b) { return a.add > b.add; });
  }

  // Needed prefix per wait, bucketed by counter (counting sort), then by k within a bucket.
  std::vector<WaitNeed> unsorted;
  std::vector<uint32_t> need_offsets(n_counters + 1, 0);
  for (uint32_t i = 0; i < n; ++i) {
    for (const Wait& w : program.instructions[i].waits) {
      if (w.carried) continue;
      if (w.counter >= n_counters || total[w.counter] < w.value) continue;  // checked elsewhere
      const uint64_t slack = total[w.counter] - w.value;  // what the others may fall short
      const auto first = signalers.begin() + offsets[w.counter];
      const auto last = first + count[w.counter];
      const auto end = std::partition_point(
          first, last, [slack](const Contribution& c) { return c.add > slack; });
      const auto k = static_cast<uint32_t>(end - first);
      if (k == 0) continue;
      unsorted.push_back({w.counter, k, i});
      ++need_offsets[w.counter + 1];
      g.instruction_edges += k;
    }
  }
  for (size_t c = 0; c < n_counters; ++c) need_offsets[c + 1] += need_offsets[c];
  std::vector<WaitNeed> needs(unsorted.size());
  {
    std::vector<uint32_t> fill(need_offsets.begin(), need_offsets.end() - 1);
    for (const WaitNeed& w : unsorted) needs[fill[w.counter]++] = w;
  }
  unsorted.clear();
  unsorted.shrink_to_fit();
  for (size_t c = 0; c < n_counters; ++c)
    if (need_offsets[c + 1] - need_offsets[c] > 1)
      std::stable_sort(needs.begin() + need_offsets[c], needs.begin() + need_offsets[c + 1],
                       [](const WaitNeed& a, const WaitNeed& b) { return a.k < b.k; });

  // Edges as (node, pred); join node ids follow the instructions in creation order.
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  uint32_t next_node = static_cast<uint32_t>(n);
  for (size_t a = 0; a < needs.size();) {
    const uint32_t c = needs[a].counter;
    uint32_t prev_join = UINT32_MAX, prev_k = 0;
    for (; a < needs.size() && needs[a].counter == c;) {
      const uint32_t k = needs[a].k;
      const uint32_t join = next_node++;
      if (prev_join != UINT32_MAX) edges.emplace_back(join, prev_join);
      for (uint32_t e = prev_k; e < k; ++e)
        edges.emplace_back(join, signalers[offsets[c] + e].instruction);
      for (; a < needs.size() && needs[a].counter == c && needs[a].k == k; ++a)
        edges.emplace_back(needs[a].waiter, join);
      prev_join = join;
      prev_k = k;
    }
  }
  if (queues != nullptr) {
    for (const auto& q : *queues)
      for (size_t p = 1; p < q.size(); ++p) {
        edges.emplace_back(q[p], q[p - 1]);
        ++g.instruction_edges;
      }
  }
  g.n_nodes = next_node;

  // CSR of predecessors, and successor counts for Kahn's algorithm.
  g.pred_offsets.assign(g.n_nodes + 1, 0);
  for (const auto& [node, pred] : edges) ++g.pred_offsets[node + 1];
  for (uint32_t v = 0; v < g.n_nodes; ++v) g.pred_offsets[v + 1] += g.pred_offsets[v];
  g.preds.resize(edges.size());
  std::vector<uint32_t> succ_offsets(g.n_nodes + 1, 0);
  {
    std::vector<uint32_t> fill(g.pred_offsets.begin(), g.pred_offsets.end() - 1);
    for (const auto& [node, pred] : edges) {
      g.preds[fill[node]++] = pred;
      ++succ_offsets[pred + 1];
    }
  }
  for (uint32_t v = 0; v < g.n_nodes; ++v) succ_offsets[v + 1] += succ_offsets[v];
  std::vector<uint32_t> succs(edges.size());
  {
    std::vector<uint32_t> fill(succ_offsets.begin(), succ_offsets.end() - 1);
    for (const auto& [node, pred] : edges) succs[fill[pred]++] = node;
  }
  edges.clear();
  edges.shrink_to_fit();

  std::vector<uint32_t> indegree(g.n_nodes);
  for (uint32_t v = 0; v < g.n_nodes; ++v) indegree[v] = g.pred_offsets[v + 1] - g.pred_offsets[v];
  g.topo.reserve(g.n_nodes);
  for (uint32_t v = 0; v < g.n_nodes; ++v)
    if (indegree[v] == 0) g.topo.push_back(v);
  for (size_t head = 0; head < g.topo.size(); ++head) {
    const uint32_t v = g.topo[head];
    for (uint32_t e = succ_offsets[v]; e < succ_offsets[v + 1]; ++e)
      if (--indegree[succs[e]] == 0) g.topo.push_back(succs[e]);
  }
  // A cycle here means a caller skipped the deadlock proof: a bug, not a user error.
  if (g.topo.size() != g.n_nodes)
    throw Error(ErrorKind::internal, "verify.graph.cycle", "",
                "dependency graph has a cycle; the deadlock proof must run first");
  return g;
}

uint64_t critical_path(const DependencyGraph& g) {
  std::vector<uint64_t> depth(g.n_nodes, 0);
  uint64_t best = 0;
  for (uint32_t v : g.topo) {
    uint64_t d = 0;
    for (uint32_t e = g.pred_offsets[v]; e < g.pred_offsets[v + 1]; ++e)
      d = std::max(d, depth[g.preds[e]]);
    depth[v] = d + (v < g.n_instructions ? 1 : 0);  // join nodes are free
    best = std::max(best, depth[v]);
  }
  return best;
}

}  // namespace amk
