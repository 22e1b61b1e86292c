// Data hazards: two instructions that the dependency graph leaves unordered must not touch the
// same elements when at least one of them writes.
//
// Rather than testing every overlapping pair (quadratic for a buffer updated in place a
// million times), the sweep walks instructions in a topological order and keeps, per element
// range of each written buffer, the last writer and the readers since it (the classic
// vector-clock race check). A write must be ordered after the last writer and those readers; a
// read after the last writer. If all of those hold, every conflicting pair is ordered by
// transitivity, so this finds a hazard exactly when one exists.
//
// Order tests: ancestor bitsets when the graph is small enough, otherwise a backward search
// from the later instruction that never descends below the earlier one's topological rank.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint64_t kBitsetBudgetBytes = uint64_t{64} << 20;
constexpr uint32_t kBitsetMaxInstructions = 20000;

class Reachability {
public:
  explicit Reachability(const DependencyGraph& g) : g_(g), rank_(g.n_nodes) {
    for (uint32_t r = 0; r < g.topo.size(); ++r) rank_[g.topo[r]] = r;
    const uint64_t words = (uint64_t{g.n_instructions} + 63) / 64;
    if (g.n_instructions <= kBitsetMaxInstructions &&
        uint64_t{g.n_nodes} * words * 8 <= kBitsetBudgetBytes) {
      build_bitsets(words);
    } else {
      stamp_.assign(g.n_nodes, 0);
    }
  }

  // True when `from` must finish before `to` starts. Requires rank(from) < rank(to).
  [[nodiscard]] bool reaches(uint32_t from, uint32_t to) {
    if (words_ != 0) return (bits_[uint64_t{to} * words_ + from / 64] >> (from % 64)) & 1u;
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

  [[nodiscard]] uint32_t rank(uint32_t v) const { return rank_[v]; }

private:
  void build_bitsets(uint64_t words) {
    words_ = words;
    bits_.assign(uint64_t{g_.n_nodes} * words, 0);
    for (uint32_t v : g_.topo) {
      uint64_t* row = &bits_[uint64_t{v} * words];
      for (uint32_t e = g_.pred_offsets[v]; e < g_.pred_offsets[v + 1]; ++e) {
        const uint32_t p = g_.preds[e];
        const uint64_t* prow = &bits_[uint64_t{p} * words];
        for (uint64_t w = 0; w < words; ++w) row[w] |= prow[w];
        if (p < g_.n_instructions) row[p / 64] |= uint64_t{1} << (p % 64);
      }
    }
  }

  const DependencyGraph& g_;
  std::vector<uint32_t> rank_;
  uint64_t words_ = 0;
  std::vector<uint64_t> bits_;
  std::vector<uint32_t> stamp_;
  std::vector<uint32_t> stack_;
  uint32_t generation_ = 0;
};

struct Acc {
  uint32_t instruction = kNone;
  uint32_t slot = 0;
};

struct Segment {
  uint64_t end;
  Acc writer;
  std::vector<Acc> readers;  // since the last write
};

using SegmentMap = std::map<uint64_t, Segment>;  // keyed by start; covers the whole buffer

// Makes `at` a segment boundary.
void split(SegmentMap& map, uint64_t at) {
  auto it = map.upper_bound(at);
  if (it == map.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Segment tail{it->second.end, it->second.writer, it->second.readers};
  it->second.end = at;
  map.emplace_hint(std::next(it), at, std::move(tail));
}

struct SlotInfo {
  std::string_view name;
  bool reads;
  bool writes;
};

// Access of each operand slot. Custom ops do not declare access, so each slot counts as both
// read and written (conservative: it may report a hazard the source would not have).
SlotInfo slot_info(const Program& program, const Instruction& ins, size_t slot) {
  if (const OpSig* sig = find_op(ins.op)) {
    const OperandSig& o = sig->operands[slot];
    return {o.name, o.access != Access::write, o.access != Access::read};
  }
  const CustomOp& custom = program.custom_ops[ins.op - kCustomOpBase];
  return {custom.operands[slot], true, true};
}

class HazardSweep {
public:
  HazardSweep(const Program& program, const DependencyGraph& g)
      : program_(program), reach_(g), checked_by_(g.n_instructions, kNone) {
    // Only buffers that someone writes can have hazards.
    maps_.resize(program.buffers.size());
    written_.assign(program.buffers.size(), 0);
    for (const Instruction& ins : program.instructions)
      for (size_t s = 0; s < ins.operands.size(); ++s)
        if (ins.operands[s].buffer != AMK_NO_BUFFER && slot_info(program, ins, s).writes)
          written_[ins.operands[s].buffer] = 1;
    for (size_t b = 0; b < program.buffers.size(); ++b)
      if (written_[b]) maps_[b].emplace(0, Segment{program.buffers[b].elements(), {}, {}});
  }

  uint64_t run(const DependencyGraph& g) {
    for (uint32_t v : g.topo) {
      if (v >= g.n_instructions) continue;
      const Instruction& ins = program_.instructions[v];
      for (int pass = 0; pass < 2; ++pass) {  // reads first, so an in-place update is one step
        for (uint32_t s = 0; s < ins.operands.size(); ++s) {
          const Operand& o = ins.operands[s];
          if (o.buffer == AMK_NO_BUFFER || !written_[o.buffer]) continue;
          const SlotInfo info = slot_info(program_, ins, s);
          if (pass == 0 && info.reads) read(o, {v, s});
          if (pass == 1 && info.writes) write(o, {v, s});
        }
      }
    }
    return pairs_;
  }

private:
  // A read comes after the last write.
  void read(const Operand& o, Acc x) {
    SegmentMap& map = maps_[o.buffer];
    split(map, o.offset);
    split(map, o.offset + o.extent);
    for (auto it = map.find(o.offset); it != map.end() && it->first < o.offset + o.extent; ++it) {
      if (it->second.writer.instruction != kNone) order(it->second.writer, false, x, false);
      auto& readers = it->second.readers;
      if (readers.empty() || readers.back().instruction != x.instruction) readers.push_back(x);
    }
  }

  // A write comes after the last write and every read since.
  void write(const Operand& o, Acc x) {
    SegmentMap& map = maps_[o.buffer];
    const uint64_t lo = o.offset, hi = o.offset + o.extent;
    split(map, lo);
    split(map, hi);
    auto first = map.find(lo);
    auto it = first;
    for (; it != map.end() && it->first < hi; ++it) {
      if (it->second.writer.instruction != kNone) order(it->second.writer, true, x, true);
      for (const Acc& r : it->second.readers) order(r, false, x, true);
    }
    map.erase(first, it);
    map.emplace(lo, Segment{hi, x, {}});
  }

  // `earlier` comes before `later` in the sweep; they conflict, so the graph must order them.
  void order(Acc earlier, bool earlier_writes, Acc later, bool later_writes) {
    if (earlier.instruction == later.instruction) return;
    if (checked_by_[earlier.instruction] == later.instruction) return;  // already proven
    checked_by_[earlier.instruction] = later.instruction;
    ++pairs_;
    if (reach_.reaches(earlier.instruction, later.instruction)) return;
    report(earlier, earlier_writes, later, later_writes);
  }

  std::string label(uint32_t i) const {
    const Instruction& ins = program_.instructions[i];
    std::string s = "instruction " + std::to_string(i);
    if (!ins.name.empty()) s += " '" + ins.name + "'";
    return s + " (" + op_name(program_, ins.op) + ")";
  }

  [[noreturn]] void report(Acc a, bool a_writes, Acc b, bool b_writes) {
    const Instruction& ia = program_.instructions[a.instruction];
    const Instruction& ib = program_.instructions[b.instruction];
    const Operand& oa = ia.operands[a.slot];
    const Operand& ob = ib.operands[b.slot];
    const uint64_t lo = std::max(oa.offset, ob.offset);
    const uint64_t hi = std::min(oa.offset + oa.extent, ob.offset + ob.extent);
    const std::string_view slot_b = slot_info(program_, ib, b.slot).name;
    std::string message = label(a.instruction) + (a_writes ? " writes" : " reads") + " and " +
                          label(b.instruction) + (b_writes ? " writes" : " reads") + " buffer '" +
                          program_.buffers[ob.buffer].name + "' elements [" + std::to_string(lo) +
                          ", " + std::to_string(hi) +
                          ") but neither queue order nor a needed counter signal orders them";
    throw_program_error("verify.hazard",
                        "/instructions/" + std::to_string(b.instruction) + "/operands/" +
                            std::string(slot_b),
                        std::move(message));
  }

  const Program& program_;
  Reachability reach_;
  std::vector<SegmentMap> maps_;
  std::vector<uint8_t> written_;
  std::vector<uint32_t> checked_by_;  // last later-instruction each earlier one was tested with
  uint64_t pairs_ = 0;
};

}  // namespace

uint64_t check_hazards(const Program& program, const DependencyGraph& graph) {
  HazardSweep sweep(program, graph);
  return sweep.run(graph);
}

}  // namespace amk
