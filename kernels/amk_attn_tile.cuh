// attention_decode's tiled path, its state and helpers: a whole chunk in shared memory, one thread
// per score and per output. The path itself is amk_attn_tiled (amk_attn_tiled.cuh).
//
// The streaming pass splits every K/V row over a lane group, so each position costs
// shuffle reductions, an online-softmax rescale per batch, and the warps merge at the end: for a
// decode chunk of 64 positions that is ~2000 dependent instructions a warp, nearly all of them
// independent of the chunk length. When the chunk's K
// and V rows fit in shared memory (16-bit caches, 256 threads), the op instead
//   1. copies K and V into shared memory (16-byte cp.async that skip L1, issued first, so the
//      copy runs under what follows), and stages q rotated and scaled in f32 (two planes of 4
//      floats a vector, like amk_xs_index, so the score loop reads it without bank conflicts),
//   2. computes every score s[g][t] on its own thread (no shuffles; each thread walks its row
//      from vector t mod (hd / 8), so the 8 lanes of a quarter warp read 8 different banks),
//   3. takes the softmax of each head on one warp (max, exp, sum),
//   4. computes every output o[g][d] on its own thread (p broadcast, V read along a row).
// Three barriers in all. The new token's row joins as in the pass (amk_attn_new_*).
#pragma once

#include "amk_attn_common.cuh"

// The path exists at 256 threads a block with a 16-bit K/V dtype of the program.
constexpr bool kAmkAttnTile =
    kAmkBlockThreads == 256 && (amk_attn_kv(AMK_DTYPE_BF16) || amk_attn_kv(AMK_DTYPE_F16));
// K and V of a chunk in amk_attn_merge (the pass's merge buffer, unused by this path), or in the
// launch's dynamic shared memory (attn_tile_dynamic).
constexpr uint32_t kAmkAttnTileBytes = amk_attn_tile_bytes(kAmkCfg.attn_tile);
static_assert(kAmkCfg.attn_tile_dynamic || kAmkAttnMergeFloats * sizeof(float) >= kAmkAttnTileBytes,
              "the tile fits the merge buffer");
__device__ __forceinline__ unsigned char* amk_attn_tile_base() {
  if constexpr (kAmkCfg.attn_tile_dynamic)
    return amk_dynamic_smem;
  else
    return reinterpret_cast<unsigned char*>(amk_attn_merge);
}
// Scores (group x positions), at most this many floats, and staged q (group x head_dim).
constexpr uint32_t kAmkAttnTileFloats = kAmkAttnTileScores;
constexpr uint32_t kAmkAttnTileQFloats = amk_attn_tile_q_floats(kAmkCfg.attn_tile);
__shared__ __align__(16) float amk_attn_tq[kAmkAttnTileQFloats];
// Where staged q keeps element d of head g: two planes, element d at plane (d & 4), 4 (d / 8) + d % 4.
__device__ __forceinline__ uint32_t amk_attn_tq_at(uint32_t g, uint32_t d, uint32_t hd,
                                                   uint32_t half) {
  return g * hd + ((d & 4u) != 0 ? half : 0u) + (d >> 3) * 4 + (d & 3u);
}
__shared__ __align__(16) float amk_attn_tp[kAmkAttnTileFloats];
// The tiled path reads q, k_new and v_new in one round trip (amk_attn_tiled), k_new rotated into
// amk_attn_tk.
__shared__ __align__(16) float amk_attn_tk[kAmkAttnMaxHeadDim];  // k_new rotated
// Per query head: max score, sum of exp, the new row's weight.
__shared__ float amk_attn_tm[kAmkAttnNewHeads];
__shared__ float amk_attn_tl[kAmkAttnNewHeads];
__shared__ float amk_attn_tn[kAmkAttnNewHeads];

// Thread 0 copies the chunk's K and V rows (each one contiguous run) into shared memory with two
// bulk copies (cp.async.bulk, completing on amk_attn_kv_bar).
__shared__ __align__(8) uint64_t amk_attn_kv_bar;
__shared__ uint32_t amk_attn_kv_parity;  // the phase the next copy completes
// (thread 0, at the block's start, before its first barrier)
__device__ __forceinline__ void amk_attn_block_init() {
  if constexpr (amk_uses_op(kAmkOps, amk_op::attention_decode) && kAmkAttnTile) {
    amk_mbar_init(amk_smem_addr(&amk_attn_kv_bar), 1);
    amk_mbar_init_fence();
    amk_attn_kv_parity = 0;
  }
}

// The 8 elements of K at shared address addr (16 bytes) as f32.
template <uint32_t DT>
__device__ __forceinline__ void amk_attn_lds_k8(uint32_t addr, float (&kf)[8]) {
  amk_vec16 kv;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(kv.w[0]), "=r"(kv.w[1]), "=r"(kv.w[2]), "=r"(kv.w[3])
               : "r"(addr));
  amk_ftype<DT>::unpack(kv, kf);
}
// a0 += the even products, a1 += the odd ones, of kf and the staged q's matching 8 elements (4
// in each plane, at shared addresses q0 and q1).
__device__ __forceinline__ void amk_attn_fma8(const float (&kf)[8], uint32_t q0, uint32_t q1,
                                              float& a0, float& a1) {
  float x0, x1, x2, x3, x4, x5, x6, x7;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x0), "=f"(x1), "=f"(x2), "=f"(x3)
               : "r"(q0));
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x4), "=f"(x5), "=f"(x6), "=f"(x7)
               : "r"(q1));
  a0 = fmaf(kf[0], x0, a0);
  a1 = fmaf(kf[1], x1, a1);
  a0 = fmaf(kf[2], x2, a0);
  a1 = fmaf(kf[3], x3, a1);
  a0 = fmaf(kf[4], x4, a0);
  a1 = fmaf(kf[5], x5, a1);
  a0 = fmaf(kf[6], x6, a0);
  a1 = fmaf(kf[7], x7, a1);
}
// Output element d of query head g of a tiled chunk, from acc (its sum over the chunk's cached
// positions): plus the new row's share, normalized by the head's l; element 0 also writes (m, l).
__device__ __forceinline__ void amk_attn_tile_out(float* out, uint32_t g, uint32_t d, uint32_t hd,
                                                  float acc, bool with_new) {
  if (with_new) acc = fmaf(amk_attn_tn[g], amk_attn_new_v[d], acc);
  const float l = amk_attn_tl[g];
  float* row = out + static_cast<uint64_t>(g) * (hd + 2);
  row[d] = acc / l;
  if (d == 0) {
    row[hd] = amk_attn_tm[g];
    row[hd + 1] = l;
  }
}

// Whether the chunk takes the tiled path (q, and k_new / v_new when present, in f32: the
// decode step's activations; other dtypes take the pass, which reads any).
__device__ __forceinline__ bool amk_attn_tile_fits(const amk_instruction_t& ins, const amk_view& q,
                                                   const amk_view& k, const amk_view& v,
                                                   uint32_t hd, uint32_t group, bool has_new) {
  if (q.dtype != AMK_DTYPE_F32 || (has_new && (amk_operand(ins, 4).dtype != AMK_DTYPE_F32 ||
                                               amk_operand(ins, 5).dtype != AMK_DTYPE_F32)))
    return false;
  const bool dtype_ok = (amk_attn_kv(AMK_DTYPE_BF16) && k.dtype == AMK_DTYPE_BF16) ||
                        (amk_attn_kv(AMK_DTYPE_F16) && k.dtype == AMK_DTYPE_F16);
  const uint32_t len = k.n / hd;
  return dtype_ok && k.dtype == v.dtype && hd % 8 == 0 && len >= 1 && v.n / hd >= len &&
         amk_aligned16(k.ptr) && amk_aligned16(v.ptr) && 4ull * len * hd <= kAmkAttnTileBytes &&
         (!kAmkCfg.attn_tile_dynamic || 4ull * len * hd <= amk_dynamic_smem_size()) && group >= 1 &&
         group <= kAmkAttnNewHeads && group * len <= kAmkAttnTileFloats &&
         group * hd <= kAmkAttnTileQFloats;
}

// attn_split: the tiled path's score and output stages split each dot product over
// several threads so that one shared-memory load feeds up to four heads:
//   scores: a K row over S adjacent lanes (S a power of two dividing head_dim / 8, S * positions
//     <= 256 where it can), each lane taking every S-th 16-byte vector of the row for four heads
//     at a time, the S sums joined with shuffles;
//   outputs: warp w takes positions [w * per, (w + 1) * per), each lane two adjacent elements of
//     every 64 (one 4-byte load of a V row for four heads), the warps' partial sums through
//     shared memory (where K was), then one thread an output adds the eight.
// 0: one thread a score and one an output, each walking the whole row or column (the path's
// first form, ~4.5 instructions a multiply-add in its output loop). The chooser turns it on with
// the wide and large tiles.
// Heads a thread carries at once in the split stages (registers: 2 accumulators a head):
// attn_split_heads, 4, or 1 where every chunk has one query head (`amk gen llama --combine
// oproj`), so no lane repeats its one head's work four times.
constexpr uint32_t kAmkAttnSplitHeads = kAmkCfg.attn_split_heads;
// The lanes a K row is split over: the largest power of two that divides the row's vectors
// (head_dim / 8), is at most 32 and keeps S * len within the block.
__device__ __forceinline__ uint32_t amk_attn_score_split(uint32_t nv, uint32_t len) {
  uint32_t s = 1;
  while (s < 32 && nv % (2 * s) == 0 && 2 * s * len <= kAmkBlockThreads) s *= 2;
  return s;
}
