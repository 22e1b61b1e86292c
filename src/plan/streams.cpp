// Weight streams: which gemv steps of each queue may load their weights ahead of their waits,
// and how their weights split into ring tiles (kernels/amk_abi.h, kernels/amk_stream.cuh).
#include <algorithm>
#include <cstring>
#include <optional>

#include "ops/registry.hpp"
#include "plan/plan.hpp"

namespace amk {

namespace {

constexpr uint64_t kAlign = 16;

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
  auto it = std::upper_bound(r.begin(), r.end(), begin,
                             [](uint64_t b, const std::pair<uint64_t, uint64_t>& x) {
                               return b < x.second;
                             });
  return it != r.end() && it->first < end;
}

// Buffers some instruction may write.
std::vector<bool> written_buffers(const Program& program) {
  const WrittenRanges ranges = written_ranges(program);
  std::vector<bool> written(ranges.size());
  for (size_t b = 0; b < ranges.size(); ++b) written[b] = !ranges[b].empty();
  return written;
}

const Operand* present(const Instruction& in, size_t k) {
  return k < in.operands.size() && in.operands[k].buffer != AMK_NO_BUFFER ? &in.operands[k]
                                                                          : nullptr;
}

bool float_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// Byte offset of the operand in its buffer when it is a 16-byte aligned float view.
std::optional<uint64_t> aligned_float(const Program& program, const Operand& o) {
  const Buffer& b = program.buffers.at(o.buffer);
  if (!float_dtype(b.dtype)) return std::nullopt;
  const uint64_t at = o.offset * dtype_size(b.dtype);
  if (at % kAlign != 0) return std::nullopt;
  return at;
}

// The entry of gemv `in` (instruction `item`), or nothing when it does not stream.
std::optional<amk_stream_entry_t> stream_entry(const Program& program,
                                               const std::vector<bool>& written,
                                               const Instruction& in, uint32_t item) {
  if (in.op != static_cast<uint16_t>(OpId::gemv)) return std::nullopt;
  if (in.params.size() > 1 && in.params[1] != 0) return std::nullopt;  // x is merged partials
  const Operand* w = present(in, 0);
  const Operand* x = present(in, 1);
  const Operand* norm = present(in, 4);
  const Operand* w2 = present(in, 5);
  if (w == nullptr || x == nullptr || x->extent == 0 || written[w->buffer]) return std::nullopt;
  if (w2 != nullptr && (written[w2->buffer] || program.buffers[w2->buffer].dtype !=
                                                   program.buffers[w->buffer].dtype))
    return std::nullopt;
  const auto w_at = aligned_float(program, *w);
  const auto x_at = aligned_float(program, *x);
  const auto w2_at = w2 != nullptr ? aligned_float(program, *w2) : std::optional<uint64_t>(0);
  const bool norm_ok = norm == nullptr || aligned_float(program, *norm).has_value();
  if (!w_at || !x_at || !w2_at || !norm_ok) return std::nullopt;
  const uint64_t k = x->extent;
  const uint64_t row_bytes = k * dtype_size(program.buffers[w->buffer].dtype);
  if (w->extent % k != 0 || row_bytes % kAlign != 0 || row_bytes > 0xFFFFFFFFull)
    return std::nullopt;
  const uint64_t rows = w->extent / k;
  if (rows == 0 || rows > AMK_STREAM_MAX_ROWS) return std::nullopt;

  amk_stream_entry_t e;
  std::memset(&e, 0, sizeof e);
  e.w = *w_at;
  e.w2 = w2 != nullptr ? *w2_at : 0;
  e.item = item;
  e.w_buffer = w->buffer;
  e.w2_buffer = w2 != nullptr ? w2->buffer : AMK_NO_BUFFER;
  e.rows = static_cast<uint32_t>(rows);
  e.row_bytes = static_cast<uint32_t>(row_bytes);
  if (row_bytes <= AMK_STREAM_SLOT_BYTES) {
    e.rows_per_tile = static_cast<uint32_t>(std::min<uint64_t>(rows, AMK_STREAM_SLOT_BYTES / row_bytes));
    e.chunks_per_row = 1;
    e.chunk_bytes = e.row_bytes;
    e.tiles = static_cast<uint32_t>((rows + e.rows_per_tile - 1) / e.rows_per_tile);
  } else {
    // Rows longer than a slot: equal chunks, each a multiple of 16 bytes.
    const uint64_t chunks = (row_bytes + AMK_STREAM_SLOT_BYTES - 1) / AMK_STREAM_SLOT_BYTES;
    const uint64_t chunk = ((row_bytes + chunks - 1) / chunks + kAlign - 1) / kAlign * kAlign;
    e.rows_per_tile = 1;
    e.chunks_per_row = static_cast<uint32_t>((row_bytes + chunk - 1) / chunk);
    e.chunk_bytes = static_cast<uint32_t>(chunk);
    const uint64_t tiles = rows * e.chunks_per_row;
    if (tiles > 0xFFFFFFFFull) return std::nullopt;
    e.tiles = static_cast<uint32_t>(tiles);
  }
  return e;
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

void plan_weight_streams(const Program& program, Plan& plan) {
  plan.stream_offsets.clear();
  plan.stream_entries.clear();
  if (!program.tma.empty() || program.launch.dynamic_smem != 0) return;
  if (!std::binary_search(plan.ops_used.begin(), plan.ops_used.end(),
                          static_cast<uint16_t>(OpId::gemv)))
    return;
  const std::vector<bool> written = written_buffers(program);
  std::vector<std::optional<amk_stream_entry_t>> by_item(program.instructions.size());
  for (uint32_t i = 0; i < program.instructions.size(); ++i)
    by_item[i] = stream_entry(program, written, program.instructions[i], i);

  const uint32_t nq = plan.n_queues();
  plan.stream_offsets.reserve(nq + 1);
  plan.stream_offsets.push_back(0);
  for (uint32_t q = 0; q < nq; ++q) {
    const uint32_t begin = plan.queue_offsets[q];
    for (uint32_t s = begin; s < plan.queue_offsets[q + 1]; ++s) {
      const uint32_t item = plan.queue_items[s];
      if (item >= by_item.size() || !by_item[item]) continue;
      amk_stream_entry_t e = *by_item[item];
      e.step = s - begin;
      plan.stream_entries.push_back(e);
    }
    plan.stream_offsets.push_back(static_cast<uint32_t>(plan.stream_entries.size()));
  }
  if (plan.stream_entries.empty()) plan.stream_offsets.clear();
}

}  // namespace amk
