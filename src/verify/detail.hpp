// What the verifier's files share and its interface does not show: message labels, operand
// access, the position operand, order queries on a dependency graph, and the hazard pairs of a
// program or of a program unrolled over two passes (passes.cpp builds that one).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "program/program.hpp"
#include "verify/verify.hpp"

namespace amk::detail {

inline constexpr uint32_t kNoIndex = UINT32_MAX;

// "instruction 5 'name' (op)" and "counter 'name'" (or "counter 3" when unnamed).
[[nodiscard]] std::string instruction_label(const Program& program, uint32_t i);
[[nodiscard]] std::string counter_label(const Program& program, uint32_t c);

// Access of an operand slot. Custom ops do not declare access, so each of their slots counts as
// both read and written (conservative).
struct SlotAccess {
  std::string_view name;
  bool reads;
  bool writes;
};
[[nodiscard]] SlotAccess slot_access(const Program& program, const Instruction& ins, size_t slot);

// The slot of the instruction's position operand (rope, kv_append, attention_decode) when it is
// filled, else kNoIndex. The op's position is then position[0] + pass - 1.
[[nodiscard]] uint32_t position_slot(const Instruction& ins);

// Order queries on a dependency graph: "does every source of this set finish before the target
// starts?" Up to kChunkedMaxInstructions instructions the answers come from ancestor bitsets over
// topological rank ranges, as many sources a range as fit a memory budget (at once when the whole
// graph fits, else one walk over the graph per range after all questions are in); above that,
// from a backward search per source that never descends below the source's rank. Answers are
// read after resolve().
class OrderOracle {
public:
  static constexpr uint32_t kChunkedMaxInstructions = 1u << 16;

  explicit OrderOracle(const DependencyGraph& graph);

  // A set of instruction nodes; queries refer to it by the returned id.
  uint32_t add_set(std::vector<uint32_t> sources);
  // Asks whether every source of `set` (other than `target` itself) precedes `target`.
  size_t ask(uint32_t set, uint32_t target);
  // Asks whether `source` precedes `target`.
  size_t ask_pair(uint32_t source, uint32_t target);
  // Whether questions are answered as they are asked: then precedes() may be called at once.
  [[nodiscard]] bool eager() const { return eager_; }
  [[nodiscard]] bool precedes(uint32_t source, uint32_t target) const {
    return first_missing(&source, &source + 1, target) == kNoIndex;
  }

  // Answers the queries. With stop_early the searching mode may stop at the first query that
  // fails (later ones are then left as passing); the ancestor mode answers all of them.
  void resolve(bool stop_early);
  // The first source of the query's set that does not precede its target, or kNoIndex.
  [[nodiscard]] uint32_t missing(size_t query) const { return missing_[query]; }
  [[nodiscard]] size_t queries() const { return missing_.size(); }
  [[nodiscard]] uint32_t rank(uint32_t node) const { return rank_[node]; }

private:
  // Ancestor rows of ranks r0.. holding the source ranks [r0, r1).
  void fill(uint32_t r0);
  // Where row i (rank r0 + i) starts in bits_, rows holding at most `words` words.
  [[nodiscard]] static uint64_t row_offset(uint64_t i, uint64_t words);
  // The first of the sources (sorted by rank) within [r0, r1) that does not precede `target`.
  [[nodiscard]] uint32_t first_missing(const uint32_t* first, const uint32_t* last,
                                       uint32_t target) const;
  void resolve_chunked();
  void resolve_searching(bool stop_early);
  bool search(uint32_t from, uint32_t to);

  const DependencyGraph& g_;
  std::vector<uint32_t> rank_;
  bool eager_ = false;  // the whole graph's bitsets fit: answer as asked
  std::vector<uint64_t> bits_;
  uint64_t words_ = 0;
  uint32_t r0_ = 0, r1_ = 0;
  std::vector<uint32_t> set_offsets_{0};  // CSR: set s is sources_[set_offsets_[s], [s + 1])
  std::vector<uint32_t> sources_;         // each set sorted by rank
  // Per query waiting for resolve(): its target, and its source (a pair) or set (is_set_).
  std::vector<uint32_t> targets_;
  std::vector<uint32_t> from_;
  std::vector<uint8_t> is_set_;
  std::vector<uint32_t> missing_;
  std::vector<uint32_t> stamp_;
  std::vector<uint32_t> stack_;
  uint32_t generation_ = 0;
};

// The hazard pairs of a program: accesses to the same elements, one of them a write, that the
// graph must order. With per_pass != 0 the program is unrolled: instruction i is the pass
// (i / per_pass + 1) copy of instruction i % per_pass, which messages and locations name.
// Collects its questions into `oracle`; after oracle.resolve(), throw_first throws
// verify.hazard for the first pair (in sweep order) left unordered.
class HazardPairs {
public:
  HazardPairs(const Program& program, const DependencyGraph& graph, OrderOracle& oracle,
              uint32_t per_pass);
  [[nodiscard]] uint64_t pairs() const { return n_pairs_; }
  void throw_first() const;

  struct Access {
    uint32_t instruction;
    uint32_t slot;
    bool writes;
  };

private:
  void sweep(const DependencyGraph& graph);
  void position_writes();
  void order(Access earlier, Access later, bool position_rule);
  [[nodiscard]] bool exempt(uint32_t write, uint32_t read, uint32_t read_slot) const;
  [[nodiscard]] std::string label(uint32_t i) const;

  const Program& program_;
  OrderOracle& oracle_;
  uint32_t per_pass_;
  // Per instruction: 1 or 2 where its cache write is checked pairwise (a kv_append at a position
  // operand); 2 where some instruction writes that position, so no read is exempt.
  std::vector<uint8_t> position_write_;
  std::vector<uint32_t> checked_by_;  // last later-instruction each earlier one was paired with
  // The pairs asked, in order: pair k is the oracle's query first_query_ + k. An eager oracle
  // answers at once: then only the first unordered pair is kept.
  struct Pair {
    uint32_t earlier, later;
    uint8_t earlier_slot, later_slot;
    uint8_t flags;  // kEarlierWrites | kLaterWrites | kPositionRule
  };
  static constexpr uint8_t kEarlierWrites = 1, kLaterWrites = 2, kPositionRule = 4;
  size_t first_query_ = 0;
  std::vector<Pair> pairs_;
  uint64_t n_pairs_ = 0;
};

}  // namespace amk::detail
