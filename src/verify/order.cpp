// Order queries on a dependency graph: does every source of a set finish before a target starts?
//
// Up to kChunkedMaxInstructions instructions the answers come from ancestor bitsets: nodes are
// walked in topological order, each row the union of its predecessors' rows, restricted to a
// range of source ranks [r0, r1) that fits the memory budget (a node's row only holds ranks
// below its own, so rows are stored and merged only that long). When the whole graph fits, the
// bitsets are built at once and every question is answered as it is asked; otherwise the
// questions are gathered and answered range by range, one walk from r0 on each. Larger graphs
// (long chains, where questions are local) search backwards from the target per source, never
// below the source's rank.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "verify/detail.hpp"

namespace amk::detail {
namespace {

constexpr uint64_t kAncestorBudgetBytes = uint64_t{64} << 20;

}  // namespace

OrderOracle::OrderOracle(const DependencyGraph& graph) : g_(graph), rank_(graph.n_nodes) {
  for (uint32_t r = 0; r < graph.topo.size(); ++r) rank_[graph.topo[r]] = r;
  const uint64_t n = graph.n_nodes;
  if (n != 0 && graph.n_instructions <= kChunkedMaxInstructions &&
      row_offset(n, (n + 63) / 64) * 8 <= kAncestorBudgetBytes) {
    fill(0);
    eager_ = true;
  }
}

uint64_t OrderOracle::row_offset(uint64_t i, uint64_t words) {
  // Row j holds min(words, j / 64 + 1) words: ranks below its own only.
  const uint64_t full = 64 * words;  // rows from here on hold `words`
  const uint64_t k = std::min(i, full), q = k >> 6, rem = k & 63;
  return 64 * (q * (q + 1) / 2) + rem * (q + 1) + (i - k) * words;
}

void OrderOracle::fill(uint32_t r0) {
  const uint32_t n_nodes = g_.n_nodes;
  const uint64_t rows = n_nodes - r0;
  // The widest range of source ranks whose rows fit the budget (at least one word).
  uint64_t lo = 1, hi = (rows + 63) / 64;
  while (lo < hi) {
    const uint64_t mid = (lo + hi + 1) / 2;
    if (row_offset(rows, mid) * 8 <= kAncestorBudgetBytes)
      lo = mid;
    else
      hi = mid - 1;
  }
  words_ = lo;
  r0_ = r0;
  r1_ = static_cast<uint32_t>(std::min<uint64_t>(n_nodes, r0 + words_ * 64));
  bits_.assign(row_offset(rows, words_), 0);
  for (uint32_t r = r0; r < n_nodes; ++r) {
    const uint32_t v = g_.topo[r];
    uint64_t* row = &bits_[row_offset(r - r0, words_)];
    for (uint32_t e = g_.pred_offsets[v]; e < g_.pred_offsets[v + 1]; ++e) {
      const uint32_t p = g_.preds[e];
      const uint32_t rp = rank_[p];
      if (rp < r0) continue;
      const uint64_t used = std::min<uint64_t>(words_, ((rp - r0) >> 6) + 1);
      const uint64_t* prow = &bits_[row_offset(rp - r0, words_)];
      for (uint64_t w = 0; w < used; ++w) row[w] |= prow[w];
      if (rp < r1_ && p < g_.n_instructions) row[(rp - r0) >> 6] |= uint64_t{1} << ((rp - r0) & 63);
    }
  }
}

uint32_t OrderOracle::first_missing(const uint32_t* first, const uint32_t* last,
                                    uint32_t target) const {
  const uint32_t rt = rank_[target];
  first = std::partition_point(first, last, [&](uint32_t s) { return rank_[s] < r0_; });
  for (; first != last && rank_[*first] < r1_; ++first) {
    const uint32_t rs = rank_[*first];
    if (*first == target) continue;
    if (rt <= rs) return *first;
    const uint64_t word = bits_[row_offset(rt - r0_, words_) + ((rs - r0_) >> 6)];
    if (((word >> ((rs - r0_) & 63)) & 1) == 0) return *first;
  }
  return kNoIndex;
}

uint32_t OrderOracle::add_set(std::vector<uint32_t> sources) {
  std::sort(sources.begin(), sources.end(),
            [this](uint32_t a, uint32_t b) { return rank_[a] < rank_[b]; });
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  sources_.insert(sources_.end(), sources.begin(), sources.end());
  set_offsets_.push_back(static_cast<uint32_t>(sources_.size()));
  return static_cast<uint32_t>(set_offsets_.size() - 2);
}

size_t OrderOracle::ask(uint32_t set, uint32_t target) {
  if (eager_) {
    missing_.push_back(first_missing(sources_.data() + set_offsets_[set],
                                     sources_.data() + set_offsets_[set + 1], target));
  } else {
    targets_.push_back(target);
    from_.push_back(set);
    is_set_.push_back(1);
    missing_.push_back(kNoIndex);
  }
  return missing_.size() - 1;
}

size_t OrderOracle::ask_pair(uint32_t source, uint32_t target) {
  if (eager_) {
    missing_.push_back(first_missing(&source, &source + 1, target));
  } else {
    targets_.push_back(target);
    from_.push_back(source);
    is_set_.push_back(0);
    missing_.push_back(kNoIndex);
  }
  return missing_.size() - 1;
}

void OrderOracle::resolve(bool stop_early) {
  if (eager_ || targets_.empty()) return;
  if (g_.n_instructions <= kChunkedMaxInstructions)
    resolve_chunked();
  else
    resolve_searching(stop_early);
}

void OrderOracle::resolve_chunked() {
  const uint32_t n_nodes = g_.n_nodes;
  // Pair queries by their source's rank (CSR), set queries in a list, and which ranks are
  // sources at all.
  std::vector<uint32_t> pair_offsets(uint64_t{n_nodes} + 1, 0), set_queries;
  std::vector<uint8_t> is_source(n_nodes, 0);
  for (uint32_t q = 0; q < targets_.size(); ++q) {
    if (is_set_[q]) {
      set_queries.push_back(q);
    } else {
      ++pair_offsets[rank_[from_[q]] + 1];
      is_source[rank_[from_[q]]] = 1;
    }
  }
  for (uint32_t s : sources_) is_source[rank_[s]] = 1;
  for (uint32_t r = 0; r < n_nodes; ++r) pair_offsets[r + 1] += pair_offsets[r];
  std::vector<uint32_t> pairs(pair_offsets[n_nodes]);
  {
    std::vector<uint32_t> fill(pair_offsets.begin(), pair_offsets.end() - 1);
    for (uint32_t q = 0; q < targets_.size(); ++q)
      if (!is_set_[q]) pairs[fill[rank_[from_[q]]]++] = q;
  }
  for (uint32_t r0 = 0; r0 < n_nodes;) {
    if (!is_source[r0]) {
      ++r0;
      continue;
    }
    fill(r0);
    for (uint32_t k = pair_offsets[r0_]; k < pair_offsets[r1_]; ++k)
      missing_[pairs[k]] =
          first_missing(&from_[pairs[k]], &from_[pairs[k]] + 1, targets_[pairs[k]]);
    for (uint32_t q : set_queries)
      if (missing_[q] == kNoIndex)
        missing_[q] = first_missing(sources_.data() + set_offsets_[from_[q]],
                                    sources_.data() + set_offsets_[from_[q] + 1], targets_[q]);
    r0 = r1_;
  }
  bits_ = {};
}

void OrderOracle::resolve_searching(bool stop_early) {
  stamp_.assign(g_.n_nodes, 0);
  for (size_t q = 0; q < targets_.size(); ++q) {
    const uint32_t target = targets_[q];
    const uint32_t* first = is_set_[q] ? sources_.data() + set_offsets_[from_[q]] : &from_[q];
    const uint32_t* last = is_set_[q] ? sources_.data() + set_offsets_[from_[q] + 1] : first + 1;
    for (const uint32_t* it = first; it != last; ++it) {
      const uint32_t source = *it;
      if (source == target) continue;
      if (rank_[source] < rank_[target] && search(source, target)) continue;
      missing_[q] = source;
      break;
    }
    if (stop_early && missing_[q] != kNoIndex) return;
  }
}

bool OrderOracle::search(uint32_t from, uint32_t to) {
  if (++generation_ == 0) {  // wrapped: clear the stamps once
    std::fill(stamp_.begin(), stamp_.end(), 0);
    generation_ = 1;
  }
  const uint32_t floor = rank_[from];
  stack_.assign(1, to);
  stamp_[to] = generation_;
  while (!stack_.empty()) {
    const uint32_t v = stack_.back();
    stack_.pop_back();
    for (uint32_t e = g_.pred_offsets[v]; e < g_.pred_offsets[v + 1]; ++e) {
      const uint32_t p = g_.preds[e];
      if (p == from) return true;
      // Anything ranked at or below `from` cannot lie on a path from it.
      if (rank_[p] <= floor || stamp_[p] == generation_) continue;
      stamp_[p] = generation_;
      stack_.push_back(p);
    }
  }
  return false;
}

}  // namespace amk::detail
