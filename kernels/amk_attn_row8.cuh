// The tiled attention's stages for chunks of one query head (attn_row8), after K and V land in
// shared memory: eight lanes a K or V row.
#pragma once

#include "amk_attn_tile.cuh"

// attn_row8 (the chooser sets it where every attention chunk has one query head: `amk gen llama
// --combine oproj`, the 1B step's layout): the tiled path's stages
// after K/V land, for a chunk of one query head of head_dim 64 or 128 over at most 256 positions,
// with eight lanes a K or V row. Lane j of a row's eight reads its 16-byte vector j (and j + 8
// at head_dim 128) of eight rows, so one shared load of a warp is 512 contiguous bytes (four
// wavefronts, the fewest) and the lane's slice of q stays in its registers (the split stages'
// rotated walk reads a different q vector a lane: 12 wavefronts a K vector where this takes 4).
// The eight lanes' sums of their eight rows are then transposed over 3 shuffle rounds (7
// shuffles), leaving each lane one row's score: warp w holds positions [32 w, 32 w + 32), one a
// lane. The softmax is the block's max through shared memory (one barrier) and the weights in
// the same registers; the outputs walk V the same way, each row's weight by a shuffle from the
// lane that holds it, the four row groups of a warp transposed over 2 rounds, the warps' partial
// rows summed through shared memory (a second barrier). Two barriers after K/V land, against
// four on the split stages (scores, one warp's softmax, outputs).
static_assert(!kAmkCfg.attn_row8 || kAmkWarps == 8,
              "the row-of-eight attention stages take 8 warps of 256 positions");
// Whether a chunk takes them (group 1; head_dim 64 or 128; len <= 256 positions, one a thread).
__device__ __forceinline__ bool amk_attn_row8_fits(uint32_t hd, uint32_t group, uint32_t len) {
  return group == 1 && (hd == 64 || hd == 128) && len <= kAmkBlockThreads;
}
// One round of a transposed sum over lanes: a lane keeps half of its 2N values (the upper half
// where `hi`) and adds its partner's (lane ^ mask) other half, which the partner sends.
template <uint32_t N>
__device__ __forceinline__ void amk_attn_fold(const float (&in)[2 * N], float (&out)[N], bool hi,
                                              uint32_t mask) {
#pragma unroll
  for (uint32_t e = 0; e < N; ++e)
    out[e] = (hi ? in[e + N] : in[e]) + __shfl_xor_sync(kAmkFullMask, hi ? in[e] : in[e + N], mask);
}
// VPL: vectors of 8 elements a lane takes of each row (head_dim / 64). K at shared address ks
// and V at vs, rows of 2 hd bytes (K's place takes the partial rows once the scores are
// taken); staged q (amk_attn_tq: rotated, scaled, two planes) and, with
// the new row, its k (amk_attn_tk) and v
// (amk_attn_new_v). Writes out[0, hd) normalized, out[hd] = max, out[hd + 1] = sum of exp.
template <uint32_t DT, uint32_t VPL>
__device__ __forceinline__ void amk_attn_row8(uint32_t ks, uint32_t vs, float* out, uint32_t len,
                                              bool with_new) {
  constexpr uint32_t hd = 64 * VPL, half = hd / 2, row_bytes = 2 * hd;
  const uint32_t lane = threadIdx.x % kAmkWarpSize, warp = threadIdx.x / kAmkWarpSize;
  const uint32_t j = lane & 7u, g = lane >> 3;  // vector j of rows 32 warp + 4 i + g, i < 8
  const uint32_t last = len - 1;
  // The lane's q: elements 8 c .. 8 c + 7 of vector c = j + 8 v (4 in each plane).
  float qr[VPL][8];
#pragma unroll
  for (uint32_t vv = 0; vv < VPL; ++vv) {
    const uint32_t q0 = amk_smem_addr(amk_attn_tq) + 16 * (j + 8 * vv);
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(qr[vv][0]), "=f"(qr[vv][1]), "=f"(qr[vv][2]), "=f"(qr[vv][3])
                 : "r"(q0));
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(qr[vv][4]), "=f"(qr[vv][5]), "=f"(qr[vv][6]), "=f"(qr[vv][7])
                 : "r"(q0 + 4 * half));
  }
  // Scores: acc[i] is the lane's share of row 32 warp + 4 i + g (rows past the chunk read its
  // last row, masked below).
  float acc[8];
#pragma unroll
  for (uint32_t i = 0; i < 8; ++i) {
    const uint32_t r = min(32 * warp + 4 * i + g, last);
    float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
    for (uint32_t vv = 0; vv < VPL; ++vv) {
      float kf[8];
      amk_attn_lds_k8<DT>(ks + r * row_bytes + 16 * (j + 8 * vv), kf);
#pragma unroll
      for (uint32_t e = 0; e < 8; e += 2) {
        a0 = fmaf(kf[e], qr[vv][e], a0);
        a1 = fmaf(kf[e + 1], qr[vv][e + 1], a1);
      }
    }
    acc[i] = a0 + a1;
  }
  // The transpose: after the rounds over lane bits 2, 1, 0, lane j holds row i = j's whole sum.
  float b4[4], b2[2], b1[1];
  amk_attn_fold<4>(acc, b4, (j & 4u) != 0, 4);
  amk_attn_fold<2>(b4, b2, (j & 2u) != 0, 2);
  amk_attn_fold<1>(b2, b1, (j & 1u) != 0, 1);
  const uint32_t row = 32 * warp + 4 * j + g;
  const float s = row < len ? b1[0] : amk_neg_inf();

  // The new token's score, on every lane (each row group of eight lanes has the whole q).
  float s_new = amk_neg_inf();
  if (with_new) {
    float dot = 0.0f;
#pragma unroll
    for (uint32_t vv = 0; vv < VPL; ++vv) {
      const float4 k0 = *reinterpret_cast<const float4*>(amk_attn_tk + 8 * (j + 8 * vv));
      const float4 k1 = *reinterpret_cast<const float4*>(amk_attn_tk + 8 * (j + 8 * vv) + 4);
      dot = fmaf(qr[vv][0], k0.x, dot);
      dot = fmaf(qr[vv][1], k0.y, dot);
      dot = fmaf(qr[vv][2], k0.z, dot);
      dot = fmaf(qr[vv][3], k0.w, dot);
      dot = fmaf(qr[vv][4], k1.x, dot);
      dot = fmaf(qr[vv][5], k1.y, dot);
      dot = fmaf(qr[vv][6], k1.z, dot);
      dot = fmaf(qr[vv][7], k1.w, dot);
    }
#pragma unroll
    for (uint32_t o = 4; o > 0; o /= 2) dot += __shfl_xor_sync(kAmkFullMask, dot, o);
    s_new = dot;
  }

  // The block's max (the warps' maxes through amk_attn_tp, unused by this path), the weights.
  float* red = amk_attn_tp;  // [0, 8): each warp's max; [8, 16): each warp's sum of weights
  const float mw = amk_warp_max(fmaxf(s, s_new));
  if (lane == 0) red[warp] = mw;
  amk_sync();
  float big = red[0];
#pragma unroll
  for (uint32_t w = 1; w < kAmkWarps; ++w) big = fmaxf(big, red[w]);
  const float p = row < len ? amk_attn_exp(s - big) : 0.0f;
  const float lw = amk_warp_sum(p);

  // Outputs: the lane's vectors of its eight rows, each row's weight from the lane holding it.
  float o[VPL][8];
#pragma unroll
  for (uint32_t vv = 0; vv < VPL; ++vv)
#pragma unroll
    for (uint32_t e = 0; e < 8; ++e) o[vv][e] = 0.0f;
#pragma unroll
  for (uint32_t i = 0; i < 8; ++i) {
    const float pi = __shfl_sync(kAmkFullMask, p, (g << 3) | i);  // row 32 warp + 4 i + g
    const uint32_t r = min(32 * warp + 4 * i + g, last);
#pragma unroll
    for (uint32_t vv = 0; vv < VPL; ++vv) {
      float vf[8];
      amk_attn_lds_k8<DT>(vs + r * row_bytes + 16 * (j + 8 * vv), vf);
#pragma unroll
      for (uint32_t e = 0; e < 8; ++e) o[vv][e] = fmaf(pi, vf[e], o[vv][e]);
    }
  }
  // The warp's four row groups (lane bits 3, 4) transposed: lane (j, g) ends with elements
  // 2 g, 2 g + 1 of its vectors. Partial rows in K's place (free once the max barrier passed:
  // every score is taken), [warp][hd] floats.
  float* part = reinterpret_cast<float*>(amk_attn_tile_base()) +
                (ks - amk_smem_addr(amk_attn_tile_base())) / 4;
#pragma unroll
  for (uint32_t vv = 0; vv < VPL; ++vv) {
    float c4[4], c2[2];
    amk_attn_fold<4>(o[vv], c4, (g & 2u) != 0, 16);
    amk_attn_fold<2>(c4, c2, (g & 1u) != 0, 8);
    *reinterpret_cast<float2*>(part + warp * hd + 8 * (j + 8 * vv) + 2 * g) =
        make_float2(c2[0], c2[1]);
  }
  if (lane == 0) red[kAmkWarps + warp] = lw;
  amk_sync();
  if (threadIdx.x < hd) {
    const uint32_t d = threadIdx.x;
    float a = 0.0f, l = 0.0f;
#pragma unroll
    for (uint32_t w = 0; w < kAmkWarps; ++w) {
      a += part[w * hd + d];
      l += red[kAmkWarps + w];
    }
    if (with_new) {
      const float p_new = amk_attn_exp(s_new - big);
      a = fmaf(p_new, amk_attn_new_v[d], a);
      l += p_new;
    }
    out[d] = a / l;
    if (d == 0) {
      out[hd] = big;
      out[hd + 1] = l;
    }
  }
}
