// attention_decode's shared parts: the per-block constants, the merge buffer, the K/V loaders,
// the RoPE table kept across instructions, and the new token's row. The op (amk_ops_attention.cuh)
// takes one of two paths: the streaming pass (amk_attn_pass.cuh) or the tiled path
// (amk_attn_tile.cuh).
//
// Decode attention is flash-decoding split over instructions: attention_decode handles one kv
// head and one chunk of its cache for the query heads of its group and writes, per query head,
// the chunk-normalized output plus (max score, sum of exp); attention_combine merges the chunks.
// A decode step needs no rope or kv_append before it: with theta != 0 the op rotates q and k_new
// itself (a (cos, sin) table in shared memory, computed once per block and RoPE params:
// amk_attn_rope_table), and the new token's (k_new, v_new) joins the chunk as one more position.
#pragma once

#include "amk_device.cuh"
#include "amk_ops_rope.cuh"

// Query heads per pass: a lane keeps its slice of q and o for each in registers, so the count
// follows the register budget of the block size (launch bounds: 64K registers per block).
constexpr uint32_t kAmkAttnHeads = kAmkBlockThreads <= 256 ? 4 : kAmkBlockThreads <= 512 ? 2 : 1;
// Rows of K and of V each lane has in flight per batch: 16-byte vectors of 4 floats or 8 halves
// (64 bytes per lane and matrix at 256 threads), one row for the element-by-element loader.
constexpr uint32_t kAmkAttnUnrollF32 = kAmkBlockThreads <= 512 ? 4 : 2;
constexpr uint32_t kAmkAttnUnrollF16 = kAmkBlockThreads <= 256 ? 2 : 1;
// Warps that stream K/V: eight keep enough 16-byte loads in flight; more would only grow the
// merge. Wider blocks leave the rest idle for this op.
constexpr uint32_t kAmkAttnWarps = kAmkWarps < 8 ? kAmkWarps : 8;
// Whether the K/V dtype has a vector loader (the program's attention_decode uses it).
AMK_HD constexpr bool amk_attn_kv(uint32_t dtype) {
  return (kAmkOps.attn_kv & amk_dtype_bit(dtype)) != 0;
}
// The merge buffer: 8 warps x 4 heads x (128 + 2) floats (16.25 KiB), so a pass of 4 heads of up
// to 128 dims merges in one round; the tiled path keeps its K and V tile here, so it grows with
// the tile (attn_tile wide: 32 KiB; large: 64 KiB, unless the tile is in dynamic shared memory).
constexpr uint32_t kAmkAttnMergeFloats =
    kAmkCfg.attn_tile == amk_attn_tile::large
        ? (kAmkCfg.attn_tile_dynamic ? 8 * 4 * (128 + 2) : 16384)
    : kAmkCfg.attn_tile == amk_attn_tile::wide ? 8192
                                               : 8 * 4 * (128 + 2);
static_assert(kAmkAttnMergeFloats >= kAmkAttnWarps * (kAmkAttnMaxHeadDim + 2),
              "the merge must hold at least one head of every streaming warp");

// Per-warp (max, sum, output) of each query head, merged across the warps at the end.
__shared__ __align__(16) float amk_attn_merge[kAmkAttnMergeFloats];

// A lane's slice of one K or V row: E elements from element `elem` (the first n of them valid).
// The vector loader reads one 16-byte vector (rows are whole vectors and 16-byte aligned).
template <uint32_t DT>
struct amk_attn_vec_loader {
  static constexpr uint32_t E = amk_ftype<DT>::per_vec;
  static constexpr uint32_t U = E == 4 ? kAmkAttnUnrollF32 : kAmkAttnUnrollF16;
  typedef amk_vec16 raw;
  __device__ static __forceinline__ void load(const amk_view& a, uint64_t elem, uint32_t,
                                              raw& out) {
    out = amk_ld16_stream(a.ptr + elem * (kAmkVectorBytes / E));
  }
  __device__ static __forceinline__ void unpack(const raw& r, float* f) {
    amk_ftype<DT>::unpack(r, f);
  }
};
// Any float dtype, any alignment: element by element.
struct amk_attn_any_loader {
  static constexpr uint32_t E = 8;
  static constexpr uint32_t U = 1;
  struct raw {
    float f[8];
  };
  __device__ static __forceinline__ void load(const amk_view& a, uint64_t elem, uint32_t n,
                                              raw& out) {
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) out.f[e] = e < n ? amk_load_f32(a, elem + e) : 0.0f;
  }
  __device__ static __forceinline__ void unpack(const raw& r, float* f) {
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) f[e] = r.f[e];
  }
};

static_assert(kAmkRopeTable >= kAmkAttnMaxHeadDim / 2,
              "the op scratch must hold the (cos, sin) table of the widest head");

// Element j of the head at `base` of x, rotated like the rope op: pairs (j, j + half) with
// y_lo = x_lo cos - x_hi sin, y_hi = x_hi cos + x_lo sin, in f32 from the shared table.
__device__ __forceinline__ float amk_attn_rotated(const amk_view& x, uint64_t base, uint32_t j,
                                                  uint32_t half, const float* table) {
  const bool lo = j < half;
  const uint32_t i = lo ? j : j - half;
  const float a = amk_load_f32(x, base + j);
  const float b = amk_load_f32(x, base + (lo ? j + half : i));
  const float c = table[2 * i], s = table[2 * i + 1];
  return lo ? fmaf(a, c, -b * s) : fmaf(a, c, b * s);
}

// The RoPE (cos, sin) table of attention_decode lives in shared memory across instructions:
// every attention instruction of a decode step has the same position and RoPE params, so the
// first one a block runs computes it (in double, one frequency per thread) and the rest of the
// block's instructions reuse it. The tag is head_dim and the six RoPE params; in stepped programs
// the position word is the op's position P (the position operand's, which moves with the pass)
// and an eighth word holds P's high word.
constexpr uint32_t kAmkRopeTagWords = kAmkCfg.stepped ? 8 : 7;
__shared__ __align__(16) float amk_attn_rope[kAmkAttnMaxHeadDim];  // hd / 2 (cos, sin) pairs
__shared__ uint32_t amk_attn_rope_tag[kAmkRopeTagWords];

// attention_decode's position: P = position[0] + pass - 1 with the position operand (slot 6,
// stepped programs), else the position param.
__device__ __forceinline__ amk_position amk_attn_position(const amk_instruction_t& ins) {
  if constexpr (kAmkCfg.stepped)
    return amk_op_position(ins, 6, kAmkRopeParamsOfAttention);
  else
    return {ins.params[kAmkRopeParamsOfAttention], true};
}

__device__ __forceinline__ uint32_t amk_attn_rope_tag_word(const amk_instruction_t& ins, uint32_t w,
                                                           uint64_t position) {
  if constexpr (kAmkCfg.stepped) {
    if (w == 1) return static_cast<uint32_t>(position);
    if (w == 7) return static_cast<uint32_t>(position >> 32);
  }
  return w == 0 ? ins.params[0] : ins.params[kAmkRopeParamsOfAttention + w - 1];
}

// Pair i's (cos, sin) of the op's RoPE at `position` (amk_attn_position's value).
__device__ __forceinline__ void amk_attn_cos_sin(const amk_instruction_t& ins, uint64_t position,
                                                 uint32_t i, float& c, float& s) {
  if constexpr (kAmkCfg.stepped) {
    const double p = static_cast<double>(position);
    amk_rope_cos_sin_at(ins, kAmkRopeParamsOfAttention + 1, i, c, s, [&] { return p; });
  } else {
    amk_rope_cos_sin(ins, kAmkRopeParamsOfAttention, i, c, s);
  }
}

// The table for `ins` (theta != 0), computed unless the block already holds it. Ends with a
// barrier when it computes; the check itself costs one.
__device__ __forceinline__ const float* amk_attn_rope_table(const amk_instruction_t& ins) {
  const uint64_t position = kAmkCfg.stepped ? amk_attn_position(ins).value : 0;
  bool same = amk_state.rope_valid != 0;
#pragma unroll
  for (uint32_t w = 0; w < kAmkRopeTagWords; ++w)
    same = same && amk_attn_rope_tag[w] == amk_attn_rope_tag_word(ins, w, position);
  if (amk_sync_and(same)) return amk_attn_rope;  // uniform; every thread has read the tag
  const uint32_t half = ins.params[0] / 2;
  for (uint32_t i = threadIdx.x; i < half; i += kAmkBlockThreads)
    amk_attn_cos_sin(ins, position, i, amk_attn_rope[2 * i], amk_attn_rope[2 * i + 1]);
  if (threadIdx.x < kAmkRopeTagWords)
    amk_attn_rope_tag[threadIdx.x] = amk_attn_rope_tag_word(ins, threadIdx.x, position);
  if (threadIdx.x == 0) amk_state.rope_valid = 1;
  amk_sync();
  return amk_attn_rope;
}

// exp for the softmax weights: ex2.approx of x * log2(e) (two instructions instead of expf's
// range reduction, ~17). Relative error ~1e-6 on the weights that matter; exp(-inf) = 0.
__device__ __forceinline__ float amk_attn_exp(float x) { return __expf(x); }

// The weight of an online-softmax state with max m once the common max is `big` (0 for a state
// that saw no position: m = -inf).
__device__ __forceinline__ float amk_attn_weight(float m, float big) {
  return m == amk_neg_inf() ? 0.0f : amk_attn_exp(m - big);
}

// The new token's row, when the instruction carries one and the chunk has cached rows too: its
// score per query head (q_g . k_new, scaled) and v_new, in shared memory, so the passes' final
// merge takes it as one more partial (max s, sum 1, output v_new). Heads past kAmkAttnNewHeads
// take the separate path after the passes instead.
__shared__ float amk_attn_new_s[kAmkAttnNewHeads];
__shared__ __align__(16) float amk_attn_new_v[kAmkAttnMaxHeadDim];

__device__ __forceinline__ bool amk_attn_rotates(const amk_instruction_t& ins) {
  return __uint_as_float(ins.params[kAmkRopeParamsOfAttention + 1]) != 0.0f &&
         ins.params[0] % 2 == 0;
}

// Whether the instruction carries the new token's row: k_new and v_new, a head each.
__device__ __forceinline__ bool amk_attn_has_new_row(const amk_instruction_t& ins, uint32_t hd) {
  return ins.n_operands > 5 && ins.operands[4].buffer != AMK_NO_BUFFER &&
         ins.operands[5].buffer != AMK_NO_BUFFER && ins.operands[4].extent >= hd &&
         ins.operands[5].extent >= hd;
}

// Element d of an f32 head at x, rotated like the rope op when `table` is given.
__device__ __forceinline__ float amk_attn_rotated_f32(const float* x, uint32_t d, uint32_t half,
                                                      const float* table) {
  if (table == nullptr) return x[d];
  const bool lo = d < half;
  const uint32_t i = lo ? d : d - half;
  const float a = x[d], b = x[lo ? d + half : i];
  const float c = table[2 * i], s = table[2 * i + 1];
  return lo ? fmaf(a, c, -b * s) : fmaf(a, c, b * s);
}

// One element of the new token's rows (q's head at `base`, or k_new), rotated when `table` is
// given; f32 rows (the usual case) with plain loads the compiler can issue together.
__device__ __forceinline__ float amk_attn_new_elem(const amk_view& x, uint64_t base, uint32_t d,
                                                   uint32_t half, const float* table) {
  if (x.dtype != AMK_DTYPE_F32)
    return table != nullptr ? amk_attn_rotated(x, base, d, half, table) : amk_load_f32(x, base + d);
  return amk_attn_rotated_f32(reinterpret_cast<const float*>(x.ptr) + base, d, half, table);
}

// The new token's row into amk_attn_new_s / amk_attn_new_v for the passes' merge (group <=
// kAmkAttnNewHeads): one warp per query head. No barrier: the merge's first one orders it.
__device__ __forceinline__ void amk_attn_new_row_to_merge(const amk_instruction_t& ins, uint32_t hd,
                                                          uint32_t group, float scale,
                                                          const float* table) {
  const amk_view qn = amk_operand(ins, 0);
  const amk_view k_new = amk_operand(ins, 4);
  const amk_view v_new = amk_operand(ins, 5);
  const uint32_t half = hd / 2;
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t d = threadIdx.x; d < hd; d += kAmkBlockThreads)
    amk_attn_new_v[d] = amk_load_f32(v_new, d);
  for (uint32_t g = warp; g < group; g += kAmkWarps) {
    const uint64_t base = static_cast<uint64_t>(g) * hd;
    float dot = 0.0f;
#pragma unroll 4
    for (uint32_t d = lane; d < hd; d += kAmkWarpSize)
      dot = fmaf(amk_attn_new_elem(qn, base, d, half, table),
                 amk_attn_new_elem(k_new, 0, d, half, table), dot);
    dot = amk_warp_sum(dot);
    if (lane == 0) amk_attn_new_s[g] = scale * dot;
  }
}
