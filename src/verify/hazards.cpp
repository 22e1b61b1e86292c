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
// A kv_append at a position operand writes one row per head (row P = position[0] + pass - 1),
// which its static cache view cannot show, so its cache write stays out of the sweep and is
// checked pairwise against every access that overlaps the view. An attention_decode that reads
// the cache through the same position scalar, with its k or v view at rows h * max_len + start
// .. + rows of the append's view (start + rows <= max_len), reads only rows below P: the append
// of the same pass, or of a later one, writes none of them. Every other overlapping access needs
// an order. The sweep stays exact for everything else (those writes conflict with no one there).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/detail.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace detail {

SlotAccess slot_access(const Program& program, const Instruction& ins, size_t slot) {
  if (const OpSig* sig = find_op(ins.op)) {
    const OperandSig& o = sig->operands[slot];
    return {o.name, o.access != Access::write, o.access != Access::read};
  }
  const CustomOp& custom = program.custom_ops[ins.op - kCustomOpBase];
  return {custom.operands[slot], true, true};
}

namespace {

using HazardAccess = HazardPairs::Access;

constexpr uint32_t kCacheSlot = 1;     // kv_append: x, cache, position
constexpr uint32_t kAttnStart = 8;     // attention_decode's `start` param
constexpr uint32_t kAppendMaxLen = 2;  // kv_append's `max_len` param

struct Segment {
  uint64_t end;
  HazardAccess writer;
  std::vector<HazardAccess> readers;  // since the last write
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

bool is_op(const Instruction& ins, OpId op) { return static_cast<OpId>(ins.op) == op; }

}  // namespace

HazardPairs::HazardPairs(const Program& program, const DependencyGraph& graph, OrderOracle& oracle,
                         uint32_t per_pass)
    : program_(program), oracle_(oracle), per_pass_(per_pass),
      position_write_(program.instructions.size(), 0),
      checked_by_(program.instructions.size(), kNoIndex) {
  first_query_ = oracle.queries();
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    if (is_op(ins, OpId::kv_append) && position_slot(ins) != kNoIndex) position_write_[i] = 1;
  }
  sweep(graph);
  position_writes();
}

void HazardPairs::sweep(const DependencyGraph& graph) {
  // Only buffers that someone writes (in the sweep) can have hazards there.
  const Program& program = program_;
  std::vector<SegmentMap> maps(program.buffers.size());
  std::vector<uint8_t> written(program.buffers.size(), 0);
  auto swept_write = [&](uint32_t i, uint32_t s) {
    return slot_access(program, program.instructions[i], s).writes &&
           !(position_write_[i] && s == kCacheSlot);
  };
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    for (uint32_t s = 0; s < ins.operands.size(); ++s)
      if (ins.operands[s].buffer != AMK_NO_BUFFER && swept_write(i, s))
        written[ins.operands[s].buffer] = 1;
  }
  for (size_t b = 0; b < program.buffers.size(); ++b)
    if (written[b])
      maps[b].emplace(0, Segment{program.buffers[b].elements(), {kNoIndex, 0, false}, {}});

  for (uint32_t v : graph.topo) {
    if (v >= graph.n_instructions) continue;
    const Instruction& ins = program.instructions[v];
    for (int step = 0; step < 2; ++step) {  // reads first, so an in-place update is one step
      for (uint32_t s = 0; s < ins.operands.size(); ++s) {
        const Operand& o = ins.operands[s];
        if (o.buffer == AMK_NO_BUFFER || !written[o.buffer]) continue;
        SegmentMap& map = maps[o.buffer];
        const uint64_t lo = o.offset, hi = o.offset + o.extent;
        if (step == 0 && slot_access(program, ins, s).reads) {  // after the last write
          const HazardAccess x{v, s, false};
          split(map, lo);
          split(map, hi);
          for (auto it = map.find(lo); it != map.end() && it->first < hi; ++it) {
            if (it->second.writer.instruction != kNoIndex) order(it->second.writer, x, false);
            auto& readers = it->second.readers;
            if (readers.empty() || readers.back().instruction != v) readers.push_back(x);
          }
        }
        if (step == 1 && swept_write(v, s)) {  // after the last write and every read since
          const HazardAccess x{v, s, true};
          split(map, lo);
          split(map, hi);
          auto first = map.find(lo);
          auto it = first;
          for (; it != map.end() && it->first < hi; ++it) {
            if (it->second.writer.instruction != kNoIndex) order(it->second.writer, x, false);
            for (const HazardAccess& r : it->second.readers) order(r, x, false);
          }
          map.erase(first, it);
          map.emplace(lo, Segment{hi, x, {}});
        }
      }
    }
  }
}

void HazardPairs::position_writes() {
  const Program& program = program_;
  const size_t n = program.instructions.size();
  std::vector<uint8_t> cache(program.buffers.size(), 0), position(program.buffers.size(), 0);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (!position_write_[i]) continue;
    const Instruction& ins = program.instructions[i];
    cache[ins.operands[kCacheSlot].buffer] = 1;
    position[ins.operands[position_slot(ins)].buffer] = 1;
    any = true;
  }
  if (!any) return;
  // The scalar must hold one value per pass: nobody may write it (check_position_bounds refuses a
  // written one; this keeps check_hazards sound on its own).
  std::vector<Operand> position_stores;
  for (uint32_t i = 0; i < n; ++i) {
    const Instruction& ins = program.instructions[i];
    for (uint32_t s = 0; s < ins.operands.size(); ++s)
      if (const Operand& o = ins.operands[s];
          o.buffer != AMK_NO_BUFFER && position[o.buffer] && slot_access(program, ins, s).writes)
        position_stores.push_back(o);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!position_write_[i]) continue;
    const Instruction& ins = program.instructions[i];
    const Operand& p = ins.operands[position_slot(ins)];
    for (const Operand& o : position_stores)
      if (o.buffer == p.buffer && p.offset >= o.offset && p.offset - o.offset < o.extent)
        position_write_[i] = 2;  // still out of the sweep, but never exempt
  }

  struct Range {
    uint64_t lo, hi;
    HazardAccess access;
  };
  std::vector<std::vector<Range>> ranges(program.buffers.size());
  for (uint32_t i = 0; i < n; ++i) {
    const Instruction& ins = program.instructions[i];
    for (uint32_t s = 0; s < ins.operands.size(); ++s) {
      const Operand& o = ins.operands[s];
      if (o.buffer == AMK_NO_BUFFER || !cache[o.buffer]) continue;
      const SlotAccess a = slot_access(program, ins, s);
      ranges[o.buffer].push_back({o.offset, o.offset + o.extent, {i, s, a.writes}});
    }
  }
  for (auto& r : ranges)
    std::stable_sort(r.begin(), r.end(),
                     [](const Range& a, const Range& b) { return a.lo < b.lo; });

  std::vector<uint32_t> paired(n, kNoIndex);  // the append each instruction was last paired with
  for (uint32_t k = 0; k < n; ++k) {
    if (!position_write_[k]) continue;
    const Operand& w = program.instructions[k].operands[kCacheSlot];
    const HazardAccess write{k, kCacheSlot, true};
    for (const Range& r : ranges[w.buffer]) {
      if (r.lo >= w.offset + w.extent) break;
      const uint32_t other = r.access.instruction;
      if (r.hi <= w.offset || other == k || paired[other] == k) continue;
      // Two appends meet once, from the lower index.
      if (position_write_[other] && r.access.slot == kCacheSlot && other < k) continue;
      if (!r.access.writes && exempt(k, other, r.access.slot)) continue;
      paired[other] = k;
      if (oracle_.rank(k) < oracle_.rank(other))
        order(write, r.access, true);
      else
        order(r.access, write, true);
    }
  }
}

// Whether read `read_slot` of instruction `read` (an attention_decode reading k or v) never sees
// the row that append `write` writes: the same position scalar, its rows inside one head's
// [start, start + rows) of the append's cache, and a pass no later than the append's.
bool HazardPairs::exempt(uint32_t write, uint32_t read, uint32_t read_slot) const {
  const Instruction& k = program_.instructions[write];
  const Instruction& a = program_.instructions[read];
  if (!is_op(a, OpId::attention_decode) || (read_slot != 1 && read_slot != 2)) return false;
  if (per_pass_ != 0 && write / per_pass_ < read / per_pass_) return false;  // a later pass
  const uint32_t ks = position_slot(k), as = position_slot(a);
  if (ks == kNoIndex || as == kNoIndex) return false;
  const Operand &kp = k.operands[ks], &ap = a.operands[as];
  if (kp.buffer != ap.buffer || kp.offset != ap.offset || position_write_[write] != 1) return false;
  const uint64_t hd = k.params[0], max_len = k.params[kAppendMaxLen];
  if (hd == 0 || max_len == 0 || a.params[0] != hd) return false;
  const Operand &cache = k.operands[kCacheSlot], &view = a.operands[read_slot];
  if (view.offset < cache.offset || (view.offset - cache.offset) % hd != 0 || view.extent % hd != 0)
    return false;
  const uint64_t row = (view.offset - cache.offset) / hd, start = a.params[kAttnStart];
  return row % max_len == start && start + view.extent / hd <= max_len;
}

void HazardPairs::order(HazardAccess earlier, HazardAccess later, bool position_rule) {
  if (earlier.instruction == later.instruction) return;
  if (checked_by_[earlier.instruction] == later.instruction) return;  // already asked
  checked_by_[earlier.instruction] = later.instruction;
  ++n_pairs_;
  const Pair pair{earlier.instruction, later.instruction, static_cast<uint8_t>(earlier.slot),
                  static_cast<uint8_t>(later.slot),
                  static_cast<uint8_t>((earlier.writes ? kEarlierWrites : 0) |
                                       (later.writes ? kLaterWrites : 0) |
                                       (position_rule ? kPositionRule : 0))};
  if (!oracle_.eager()) {
    (void)oracle_.ask_pair(earlier.instruction, later.instruction);
    pairs_.push_back(pair);
  } else if (pairs_.empty() && !oracle_.precedes(earlier.instruction, later.instruction)) {
    pairs_.push_back(pair);
  }
}

std::string HazardPairs::label(uint32_t i) const {
  if (per_pass_ == 0) return instruction_label(program_, i);
  // The copies share the original's name and op: the label names the original and the pass.
  std::string s = "instruction " + std::to_string(i % per_pass_);
  const Instruction& ins = program_.instructions[i];
  if (!ins.name.empty()) s += " '" + ins.name + "'";
  return s + " (" + op_name(program_, ins.op) + ") in pass " + std::to_string(i / per_pass_ + 1);
}

void HazardPairs::throw_first() const {
  for (size_t k = 0; k < pairs_.size(); ++k) {
    if (!oracle_.eager() && oracle_.missing(first_query_ + k) == kNoIndex) continue;
    const Pair& p = pairs_[k];
    const Instruction& ia = program_.instructions[p.earlier];
    const Instruction& ib = program_.instructions[p.later];
    const Operand& oa = ia.operands[p.earlier_slot];
    const Operand& ob = ib.operands[p.later_slot];
    const uint64_t lo = std::max(oa.offset, ob.offset);
    const uint64_t hi = std::min(oa.offset + oa.extent, ob.offset + ob.extent);
    const std::string_view slot_b = slot_access(program_, ib, p.later_slot).name;
    std::string message =
        label(p.earlier) + (p.flags & kEarlierWrites ? " writes" : " reads") + " and " +
        label(p.later) + (p.flags & kLaterWrites ? " writes" : " reads") + " buffer '" +
        program_.buffers[ob.buffer].name + "' elements [" + std::to_string(lo) + ", " +
        std::to_string(hi) + ") but neither queue order nor a needed counter signal orders them";
    if (p.flags & kPositionRule)
      message += " (a kv_append at a position operand writes one row of each head per pass; only "
                 "an attention_decode of the same position reading its rows below it, in the "
                 "same pass or an earlier one, needs no order)";
    const uint32_t at = per_pass_ == 0 ? p.later : p.later % per_pass_;
    throw_program_error("verify.hazard",
                        "/instructions/" + std::to_string(at) + "/operands/" + std::string(slot_b),
                        std::move(message));
  }
}

}  // namespace detail

uint64_t check_hazards(const Program& program, const DependencyGraph& graph) {
  detail::OrderOracle oracle(graph);
  detail::HazardPairs pairs(program, graph, oracle, 0);
  oracle.resolve(true);
  pairs.throw_first();
  return pairs.pairs();
}

}  // namespace amk
