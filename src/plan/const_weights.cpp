// Constant weights: the gemv and attention_decode steps whose weights (or cached K and V rows) no
// instruction of the program writes, so the device may load them before their waits are met.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "ops/registry.hpp"
#include "plan/plan.hpp"

namespace amk {

namespace {

// The element ranges [begin, end) of each buffer that some instruction may write, sorted and
// merged: every operand an op writes, and the whole buffer of every operand of a custom op (custom
// op slots declare no access).
using WrittenRanges = std::vector<std::vector<std::pair<uint64_t, uint64_t>>>;  // per buffer
WrittenRanges written_ranges(const Program& program) {
  WrittenRanges ranges(program.buffers.size());
  for (const Instruction& in : program.instructions) {
    const OpSig* sig = in.op < kCustomOpBase ? find_op(in.op) : nullptr;
    for (size_t k = 0; k < in.operands.size(); ++k) {
      const Operand& o = in.operands[k];
      if (o.buffer >= ranges.size()) continue;
      if (sig == nullptr || k >= sig->operands.size())
        ranges[o.buffer].emplace_back(0, UINT64_MAX);
      else if (sig->operands[k].access != Access::read)
        ranges[o.buffer].emplace_back(o.offset, o.offset + o.extent);
    }
  }
  for (auto& r : ranges) {
    std::sort(r.begin(), r.end());
    std::vector<std::pair<uint64_t, uint64_t>> merged;
    for (const auto& x : r) {
      if (!merged.empty() && x.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, x.second);
      else
        merged.push_back(x);
    }
    r = std::move(merged);
  }
  return ranges;
}

// Whether some written range of o's buffer overlaps o's view.
bool view_written(const WrittenRanges& ranges, const Operand& o) {
  if (o.buffer >= ranges.size()) return true;
  const auto& r = ranges[o.buffer];
  const uint64_t begin = o.offset, end = o.offset + o.extent;
  // the first range that ends after the view begins
  auto it = std::upper_bound(
      r.begin(), r.end(), begin,
      [](uint64_t b, const std::pair<uint64_t, uint64_t>& x) { return b < x.second; });
  return it != r.end() && it->first < end;
}

const Operand* present(const Instruction& in, size_t k) {
  return k < in.operands.size() && in.operands[k].buffer != AMK_NO_BUFFER ? &in.operands[k]
                                                                          : nullptr;
}

}  // namespace

void mark_const_weights(const Program& program, Plan& plan) {
  const WrittenRanges ranges = written_ranges(program);
  auto buffer_written = [&](const Operand& o) {
    return o.buffer >= ranges.size() || !ranges[o.buffer].empty();
  };
  for (uint32_t i = 0; i < program.instructions.size() && i < plan.instructions.size(); ++i) {
    const Instruction& in = program.instructions[i];
    if (in.op == static_cast<uint16_t>(OpId::attention_decode)) {
      // Its K and V views (the cached rows; the new token's row comes through other operands)
      // against every range written, so a cache whose other rows an append writes still counts.
      const Operand* k = present(in, 1);
      const Operand* v = present(in, 2);
      if (k == nullptr || v == nullptr || k->extent == 0) continue;
      if (!view_written(ranges, *k) && !view_written(ranges, *v))
        plan.instructions[i].flags |= AMK_INS_CONST_WEIGHTS;
      continue;
    }
    if (in.op != static_cast<uint16_t>(OpId::gemv)) continue;
    const Operand* w = present(in, 0);
    const Operand* w2 = present(in, 5);
    if (w == nullptr || buffer_written(*w)) continue;
    if (w2 != nullptr && buffer_written(*w2)) continue;
    plan.instructions[i].flags |= AMK_INS_CONST_WEIGHTS;
  }
}

}  // namespace amk
