// attention_decode's tiled path (amk_attn_tile.cuh describes it).
#pragma once

#include "amk_attn_tile.cuh"
#include "amk_attn_row8.cuh"

// One 16-bit element of K or V in shared memory as f32.
template <uint32_t DT>
__device__ __forceinline__ float amk_attn_lds_elem(uint32_t addr) {
  unsigned short h;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(addr));
  if (DT == AMK_DTYPE_BF16) return __uint_as_float(static_cast<uint32_t>(h) << 16);
  return amk_f16_to_f32(h);
}

// The chunk (k, v) of `ins` for query heads [0, group) of q into out (amk_attn_tile.cuh). A
// call, its registers apart from the VM's.
template <uint32_t DT>
__device__ __noinline__ void amk_attn_tiled(const amk_instruction_t& ins, const amk_view q,
                                            const amk_view k, const amk_view v, float* out,
                                            uint32_t hd, uint32_t group, float scale,
                                            bool with_new) {
  const uint32_t len = k.n / hd;
  // The new row's operands, decoded where they are read.
  const float* kn = nullptr;
  const float* vn = nullptr;
  const uint32_t row_bytes = 2 * hd;
  const uint32_t kv_bytes = len * row_bytes;  // a multiple of 16 (hd % 8 == 0)
  // V first: K's place is free once the scores are taken, and holds the split outputs'
  // partial sums (8 warps x group x hd floats <= half the tile, where K starts at most).
  const uint32_t vs = amk_smem_addr(amk_attn_tile_base()), ks = vs + kv_bytes;
  const uint32_t kv_bar = amk_smem_addr(&amk_attn_kv_bar);
  const uint32_t kv_parity = amk_attn_kv_parity;  // (thread 0 flips it after the block's barrier)
  if (threadIdx.x == 0) {
    // The tile's earlier generic writes (ordered before this thread by the last barrier) before
    // the copy engine's.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    amk_mbar_expect_tx(kv_bar, 2 * kv_bytes);
    amk_bulk_g2s(vs, v.ptr, kv_bytes, kv_bar);
    amk_bulk_g2s(ks, k.ptr, kv_bytes, kv_bar);
  }
  // Every thread waits for the copies, then thread 0 flips the phase.
  auto kv_landed = [&]() {
    while (!amk_mbar_try_wait(kv_bar, kv_parity)) {
    }
  };

  // q rotated (theta != 0) and scaled, in two planes: element d at plane (d & 4), 4 (d / 8) + d % 4.
  // f32 rows read directly (amk_attn_tile_fits): no dtype switch, little code.
  const float* rope = amk_attn_rotates(ins) ? amk_attn_rope_table(ins) : nullptr;
  const uint32_t half = hd / 2;
  const float* qf = reinterpret_cast<const float*>(q.ptr);
  // Every global read of the new token's rows (q, k_new, v_new: written by the step this one
  // waited for, so L2 round trips under load) is issued before any is used: one round trip, not
  // one per loop. The new row's score is taken from shared memory in the softmax stage.
  constexpr uint32_t kQIters = kAmkAttnTileQFloats / kAmkBlockThreads;
  auto partner = [&](uint32_t d) { return d < half ? d + half : d - half; };
  float qx[kQIters], qy[kQIters];
#pragma unroll
  for (uint32_t it = 0; it < kQIters; ++it) {
    const uint32_t i = threadIdx.x + it * kAmkBlockThreads;
    const uint32_t g = i / hd, d = i - g * hd;
    qx[it] = i < group * hd ? qf[g * hd + d] : 0.0f;
    qy[it] = i < group * hd && rope != nullptr ? qf[g * hd + partner(d)] : 0.0f;
  }
  const bool new_lane = with_new && threadIdx.x < hd;
  float kx = 0.0f, ky = 0.0f, vx = 0.0f;
  if (new_lane) {
    kn = reinterpret_cast<const float*>(amk_operand(ins, 4).ptr);
    vn = reinterpret_cast<const float*>(amk_operand(ins, 5).ptr);
    kx = kn[threadIdx.x];
    ky = rope != nullptr ? kn[partner(threadIdx.x)] : 0.0f;
    vx = vn[threadIdx.x];
  }
  // x rotated at element d with its partner y (the rope op's pairs).
  auto rotate = [&](float x, float y, uint32_t d) {
    if (rope == nullptr) return x;
    const uint32_t i = d < half ? d : d - half;
    const float c = rope[2 * i], sn = rope[2 * i + 1];
    return d < half ? fmaf(x, c, -y * sn) : fmaf(x, c, y * sn);
  };
#pragma unroll
  for (uint32_t it = 0; it < kQIters; ++it) {
    const uint32_t i = threadIdx.x + it * kAmkBlockThreads;
    if (i < group * hd) {
      const uint32_t g = i / hd, d = i - g * hd;
      amk_attn_tq[amk_attn_tq_at(g, d, hd, half)] = rotate(qx[it], qy[it], d) * scale;
    }
  }
  if (new_lane) {
    amk_attn_new_v[threadIdx.x] = vx;
    amk_attn_tk[threadIdx.x] = rotate(kx, ky, threadIdx.x);
  }
  amk_trace_mark(0);  // q staged (and the new row's scores): K and V may still be landing
  kv_landed();
  amk_sync();
  if (threadIdx.x == 0) amk_attn_kv_parity = kv_parity ^ 1u;
  amk_trace_mark(1);  // K and V in shared memory
  if constexpr (kAmkCfg.attn_row8) {
    if (amk_attn_row8_fits(hd, group, len)) {
      if (hd == 64)
        amk_attn_row8<DT, 1>(ks, vs, out, len, with_new);
      else
        amk_attn_row8<DT, 2>(ks, vs, out, len, with_new);
      return;
    }
  }

  const uint32_t nv = hd / 8;
  if constexpr (kAmkCfg.attn_split) {
    // Scores: lane s of position t's S lanes takes vectors j = s, s + S, ... of K row t (rotated
    // by S t, so that the 8 lanes of a quarter warp read 8 different 16-byte bank groups), for
    // kAmkAttnSplitHeads heads at a time. Every lane runs the same trip counts (the shuffles).
    const uint32_t S = amk_attn_score_split(nv, len);
    const uint32_t s_lane = threadIdx.x & (S - 1);
    for (uint32_t base = 0; base < len * S; base += kAmkBlockThreads) {
      const uint32_t t = (base + threadIdx.x) / S;
      const uint32_t tr = t < len ? t : len - 1;  // (rows past the chunk: read row len - 1, unused)
      const uint32_t krow = ks + tr * row_bytes;
      for (uint32_t g0 = 0; g0 < group; g0 += kAmkAttnSplitHeads) {
        float a0[kAmkAttnSplitHeads], a1[kAmkAttnSplitHeads];
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) a0[h] = a1[h] = 0.0f;
        uint32_t c = (s_lane + S * tr) % nv;
        for (uint32_t j = s_lane; j < nv; j += S) {
          float kf[8];
          amk_attn_lds_k8<DT>(krow + 16 * c, kf);
#pragma unroll
          for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) {
            const uint32_t g = min(g0 + h, group - 1);  // (past the group: a real row, unused)
            const uint32_t q0 = amk_smem_addr(amk_attn_tq + g * hd) + 16 * c;
            amk_attn_fma8(kf, q0, q0 + 4 * half, a0[h], a1[h]);
          }
          c = c + S >= nv ? c + S - nv : c + S;
        }
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) {
          float sum = a0[h] + a1[h];
          for (uint32_t o = S / 2; o > 0; o /= 2) sum += __shfl_xor_sync(kAmkFullMask, sum, o);
          if (s_lane == 0 && t < len && g0 + h < group) amk_attn_tp[(g0 + h) * len + t] = sum;
        }
      }
    }
  } else {
    // Scores: thread i is (head g, position t).
    for (uint32_t i = threadIdx.x; i < group * len; i += kAmkBlockThreads) {
      const uint32_t g = i / len, t = i - g * len;
      const uint32_t krow = ks + t * row_bytes;
      const uint32_t q0 = amk_smem_addr(amk_attn_tq + g * hd), q1 = q0 + 4 * half;
      float a0 = 0.0f, a1 = 0.0f;
      uint32_t c = t % nv;
#pragma unroll 2
      for (uint32_t j = 0; j < nv; ++j) {
        float kf[8];
        amk_attn_lds_k8<DT>(krow + 16 * c, kf);
        amk_attn_fma8(kf, q0 + 16 * c, q1 + 16 * c, a0, a1);
        c = c + 1 == nv ? 0u : c + 1;
      }
      amk_attn_tp[i] = a0 + a1;
    }
  }
  amk_sync();

  // Softmax of each head on one warp; the scores become the weights p = exp(s - m).
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t g = warp; g < group; g += kAmkWarps) {
    float* sc = amk_attn_tp + g * len;
    float s_new = amk_neg_inf();
    if (with_new) {  // staged q (scaled) . rotated k_new
      float dot = 0.0f;
      for (uint32_t d = lane; d < hd; d += kAmkWarpSize)
        dot = fmaf(amk_attn_tq[amk_attn_tq_at(g, d, hd, half)], amk_attn_tk[d], dot);
      s_new = amk_warp_sum(dot);
    }
    float m = s_new;
    for (uint32_t t = lane; t < len; t += kAmkWarpSize) m = fmaxf(m, sc[t]);
    m = amk_warp_max(m);
    float sum = 0.0f;
    for (uint32_t t = lane; t < len; t += kAmkWarpSize) {
      const float p = amk_attn_weight(sc[t], m);
      sc[t] = p;
      sum += p;
    }
    sum = amk_warp_sum(sum);
    if (lane == 0) {
      const float p_new = with_new ? amk_attn_weight(s_new, m) : 0.0f;
      amk_attn_tm[g] = m;
      amk_attn_tl[g] = sum + p_new;
      amk_attn_tn[g] = p_new;
    }
  }
  amk_sync();

  if constexpr (kAmkCfg.attn_split) {
    // Outputs: warp w sums positions [w * per, (w + 1) * per) for every head and element, lane l
    // elements (2 l, 2 l + 1) of each 64, kAmkAttnSplitHeads heads at a time, into its partial
    // row in K's place (8 x group x hd floats); then thread i adds the 8 partials of (head g,
    // element d), normalizes, and writes the row and (m, l).
    float* part = reinterpret_cast<float*>(amk_attn_tile_base()) + kv_bytes / 4;
    const uint32_t per = (len + kAmkWarps - 1) / kAmkWarps;
    const uint32_t t0 = min(len, warp * per), t1 = min(len, t0 + per);
    const uint32_t gh = group * hd;
    for (uint32_t e = 2 * lane; e < hd; e += 2 * kAmkWarpSize) {
      for (uint32_t g0 = 0; g0 < group; g0 += kAmkAttnSplitHeads) {
        float a0[kAmkAttnSplitHeads], a1[kAmkAttnSplitHeads];
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) a0[h] = a1[h] = 0.0f;
        uint32_t addr = vs + t0 * row_bytes + 2 * e;
#pragma unroll 2
        for (uint32_t t = t0; t < t1; ++t, addr += row_bytes) {
          uint32_t w2;
          asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w2) : "r"(addr));
          float lo, hi;
          if constexpr (DT == AMK_DTYPE_BF16) {
            amk_unpack_bf16x2(w2, lo, hi);
          } else {
            amk_unpack_f16x2(w2, lo, hi);
          }
#pragma unroll
          for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) {
            const float pw = amk_attn_tp[min(g0 + h, group - 1) * len + t];
            a0[h] = fmaf(pw, lo, a0[h]);
            a1[h] = fmaf(pw, hi, a1[h]);
          }
        }
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h)
          if (g0 + h < group)
            *reinterpret_cast<float2*>(part + warp * gh + (g0 + h) * hd + e) =
                make_float2(a0[h], a1[h]);
      }
    }
    amk_sync();
    for (uint32_t i = threadIdx.x; i < gh; i += kAmkBlockThreads) {
      const uint32_t g = i / hd, d = i - g * hd;
      float acc = 0.0f;
#pragma unroll
      for (uint32_t w = 0; w < kAmkWarps; ++w) acc += part[w * gh + i];
      amk_attn_tile_out(out, g, d, hd, acc, with_new);
    }
  } else {
    // Outputs: thread i is (head g, element d); the chunk-normalized sum, then (m, l).
    for (uint32_t i = threadIdx.x; i < group * hd; i += kAmkBlockThreads) {
      const uint32_t g = i / hd, d = i - g * hd;
      const float* p = amk_attn_tp + g * len;
      const uint32_t col = vs + 2 * d;
      float a0 = 0.0f, a1 = 0.0f;
      uint32_t t = 0;
#pragma unroll 2
      for (; t + 2 <= len; t += 2) {
        a0 = fmaf(p[t], amk_attn_lds_elem<DT>(col + t * row_bytes), a0);
        a1 = fmaf(p[t + 1], amk_attn_lds_elem<DT>(col + (t + 1) * row_bytes), a1);
      }
      if (t < len) a0 = fmaf(p[t], amk_attn_lds_elem<DT>(col + t * row_bytes), a0);
      amk_attn_tile_out(out, g, d, hd, a0 + a1, with_new);
    }
  }
}
