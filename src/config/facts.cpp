#include "config/facts.hpp"

#include <algorithm>
#include <bit>
#include <optional>
#include <set>

#include "ops/registry.hpp"
#include "plan/plan.hpp"

namespace amk {
namespace {

constexpr uint32_t kVectorBytes = 16;

uint32_t param(const Instruction& in, size_t k) { return k < in.params.size() ? in.params[k] : 0; }

const Operand* operand(const Program& program, const Instruction& in, size_t k) {
  if (k >= in.operands.size()) return nullptr;
  const Operand& o = in.operands[k];
  return o.buffer != AMK_NO_BUFFER && o.buffer < program.buffers.size() ? &o : nullptr;
}

std::optional<DType> operand_dtype(const Program& program, const Instruction& in, size_t k) {
  const Operand* o = operand(program, in, k);
  if (o == nullptr) return std::nullopt;
  return program.buffers[o->buffer].dtype;
}

bool is(const Instruction& in, OpId op) { return in.op == static_cast<uint16_t>(op); }

// Whether the instruction needs the VM's stepped paths: a carried wait, a position operand
// (rope and kv_append slot 2, attention_decode slot 6), feed_token, kv_append's RoPE.
bool needs_stepped(const Program& program, const Instruction& in) {
  if (std::any_of(in.waits.begin(), in.waits.end(), [](const Wait& w) { return w.carried; }))
    return true;
  if (is(in, OpId::feed_token)) return true;
  if ((is(in, OpId::rope) || is(in, OpId::kv_append)) && operand(program, in, 2) != nullptr)
    return true;
  if (is(in, OpId::attention_decode) && operand(program, in, 6) != nullptr) return true;
  return is(in, OpId::kv_append) && std::bit_cast<float>(param(in, 3)) != 0.0f;
}

// Whether the instruction may end the launch early: feed_token with its eos operand (slot 6).
bool can_stop_early(const Program& program, const Instruction& in) {
  return is(in, OpId::feed_token) && operand(program, in, 6) != nullptr;
}

// The gemv's fusion bit (AMK_GEMV_FUSE_*), 0 for a plain gemv.
uint32_t gemv_fusion(const Program& program, const Instruction& in) {
  if (param(in, 1) != 0) return AMK_GEMV_FUSE_COMBINE;  // (the verifier: no norm, no w2 with it)
  const bool norm = operand(program, in, 4) != nullptr;
  const bool glu = operand(program, in, 5) != nullptr;
  if (norm && glu) return AMK_GEMV_FUSE_NORM_GLU;
  if (norm) return AMK_GEMV_FUSE_NORM;
  if (glu) return AMK_GEMV_FUSE_GLU;
  return 0;
}

}  // namespace

std::vector<TmaGemvSpec> tma_gemv_specs(const Program& program) {
  std::vector<TmaGemvSpec> out;
  std::set<uint32_t> covered;
  for (size_t i = 0; i < program.tma.size(); ++i) {
    const TmaSpec& t = program.tma[i];
    if (t.buffer >= program.buffers.size() || covered.count(t.buffer)) continue;
    const DType dt = program.buffers[t.buffer].dtype;
    if (!dtype_is_float(dt)) continue;
    const uint32_t esize = static_cast<uint32_t>(dtype_size(dt));
    if (t.dims.size() != 2 || t.box.size() != 2) continue;
    if (t.swizzle != TmaSwizzle::none || t.interleave != TmaInterleave::none) continue;
    if (!std::all_of(t.element_strides.begin(), t.element_strides.end(),
                     [](uint32_t s) { return s == 1; }))
      continue;
    if (!t.strides.empty() && t.strides[0] != t.dims[0] * esize) continue;
    if (t.box[0] == 0 || t.box[1] == 0 || (t.box[0] * esize) % kVectorBytes != 0) continue;
    if (t.dims[0] > 0xFFFFFFFFull) continue;
    TmaGemvSpec s;
    s.slot = static_cast<uint32_t>(i);
    s.buffer = t.buffer;
    s.box_k = t.box[0];
    s.box_rows = t.box[1];
    s.elem_bytes = esize;
    s.dim_k = t.dims[0];
    s.dim_rows = t.dims[1];
    s.offset = t.offset;
    out.push_back(s);
    covered.insert(t.buffer);
  }
  return out;
}

AttnPath attention_path(const Program& program, const Instruction& in) {
  const uint32_t hd = param(in, 0);
  const Operand* q = operand(program, in, 0);
  const Operand* k = operand(program, in, 1);
  const Operand* v = operand(program, in, 2);
  const Operand* kn = operand(program, in, 4);
  const Operand* vn = operand(program, in, 5);
  if (hd == 0 || hd > kAmkAttnMaxHeadDim) return AttnPath::none;
  const bool cached = k != nullptr && k->extent >= hd;
  const bool has_new = kn != nullptr && vn != nullptr && kn->extent >= hd && vn->extent >= hd;
  if (!cached && !has_new) return AttnPath::none;
  if (!cached || q == nullptr || v == nullptr) return AttnPath::pass;
  const auto qt = operand_dtype(program, in, 0), kt = operand_dtype(program, in, 1),
             vt = operand_dtype(program, in, 2);
  if (qt != DType::f32 || (kt != DType::bf16 && kt != DType::f16) || vt != kt)
    return AttnPath::pass;
  if (has_new &&
      (operand_dtype(program, in, 4) != DType::f32 || operand_dtype(program, in, 5) != DType::f32))
    return AttnPath::pass;
  // 16-byte aligned K and V rows: buffers are 256-byte aligned, so the offsets decide.
  const uint64_t esize = dtype_size(*kt);
  if (hd % 8 != 0 || (k->offset * esize) % 16 != 0 || (v->offset * esize) % 16 != 0)
    return AttnPath::pass;
  const uint64_t len = k->extent / hd;
  const uint64_t group = q->extent / hd;
  if (len < 1 || v->extent / hd < len || group < 1 || group > kAmkAttnNewHeads ||
      group * len > kAmkAttnTileScores)
    return AttnPath::pass;
  const uint64_t kv = 4ull * len * hd, gh = group * hd;
  for (amk_attn_tile t : {amk_attn_tile::small, amk_attn_tile::wide, amk_attn_tile::large})
    if (kv <= amk_attn_tile_bytes(t) && gh <= amk_attn_tile_q_floats(t))
      return t == amk_attn_tile::small  ? AttnPath::small_tile
             : t == amk_attn_tile::wide ? AttnPath::wide_tile
                                        : AttnPath::large_tile;
  return AttnPath::pass;
}

ProgramFacts program_facts(const Program& program) {
  ProgramFacts f;
  f.block = program.launch.block;
  f.buffers = static_cast<uint32_t>(program.buffers.size());
  f.tma_maps = static_cast<uint32_t>(program.tma.size());
  f.dynamic_smem = program.launch.dynamic_smem;
  f.custom_ops = !program.custom_ops.empty();

  // The planner's constant-weight marks, from the program alone (a plan of its instructions).
  Plan marks;
  marks.instructions.reserve(program.instructions.size());
  for (uint32_t i = 0; i < program.instructions.size(); ++i)
    marks.instructions.push_back(encode_instruction(program.instructions[i], i));
  mark_const_weights(program, marks);

  std::set<uint32_t> fused_pairs;
  bool any_attention = false;
  f.attn_single_heads = true;
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& in = program.instructions[i];
    if (in.op < 32) f.ops.ops |= 1u << in.op;
    const bool waits = !in.waits.empty();
    f.any_wait = f.any_wait || waits;
    f.stepped = f.stepped || needs_stepped(program, in);
    f.early_stop = f.early_stop || can_stop_early(program, in);
    if (is(in, OpId::gemv)) {
      const auto w = operand_dtype(program, in, 0), x = operand_dtype(program, in, 1);
      const uint32_t fusion = gemv_fusion(program, in);
      f.ops.gemv_fusions |= fusion;
      if (w && x && dtype_is_float(*w) && dtype_is_float(*x)) {
        const uint32_t bit =
            amk_gemv_pair_bit(static_cast<uint32_t>(*w), static_cast<uint32_t>(*x));
        f.ops.gemv_pairs |= bit;
        if (fusion == AMK_GEMV_FUSE_NORM || fusion == AMK_GEMV_FUSE_GLU ||
            fusion == AMK_GEMV_FUSE_NORM_GLU)
          fused_pairs.insert(bit);
      }
      if (waits && (marks.instructions[i].flags & AMK_INS_CONST_WEIGHTS) != 0)
        f.gemv_preloads = true;
    }
    if (is(in, OpId::attention_decode)) {
      any_attention = true;
      if (const auto k = operand_dtype(program, in, 1); k && dtype_is_float(*k))
        f.ops.attn_kv |= amk_dtype_bit(static_cast<uint32_t>(*k));
      const AttnPath path = attention_path(program, in);
      if (path == AttnPath::pass) f.attn_pass_needed = true;
      if (path == AttnPath::large_tile) f.attn_tile_needed = amk_attn_tile::large;
      if (path == AttnPath::wide_tile && f.attn_tile_needed == amk_attn_tile::small)
        f.attn_tile_needed = amk_attn_tile::wide;
      const Operand* q = operand(program, in, 0);
      if (param(in, 0) == 0 || q == nullptr || q->extent != param(in, 0))
        f.attn_single_heads = false;
    }
    if ((is(in, OpId::attention_decode) || is(in, OpId::attention_combine)) && waits)
      f.attention_waits = true;
    if (is(in, OpId::attention_combine) && !in.operands.empty()) {
      const uint64_t need =
          amk_combine_smem_bytes(in.operands[0].extent, uint64_t{param(in, 0)} + 2);
      if (need <= kGemvRingCap) f.combine_staging = std::max(f.combine_staging, need);
    }
    std::optional<size_t> y_slot;  // the stored operand of an elementwise op with a fast path
    if (is(in, OpId::add) || is(in, OpId::mul) || is(in, OpId::silu_mul)) y_slot = 2;
    if (is(in, OpId::scale)) y_slot = 1;
    if (is(in, OpId::fill)) y_slot = 0;
    if (y_slot)
      if (const auto y = operand_dtype(program, in, *y_slot); y && dtype_is_float(*y))
        f.ops.elt |= amk_dtype_bit(static_cast<uint32_t>(*y));
  }
  if (!any_attention) f.attn_single_heads = false;
  // Pairs used only by plain gemvs get no fused instantiations (where the program fuses at all).
  if (f.ops.gemv_fusions != 0)
    for (uint32_t bit = 1; bit != 0 && bit < (1u << 9); bit <<= 1)
      if ((f.ops.gemv_pairs & bit) != 0 && !fused_pairs.count(bit)) f.ops.gemv_plain_only |= bit;
  f.tma_gemv = (f.ops.ops & (1u << static_cast<uint32_t>(OpId::gemv))) != 0 &&
               !tma_gemv_specs(program).empty();
  return f;
}

}  // namespace amk
