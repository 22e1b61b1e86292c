// attention_decode's streaming pass: any dtype, alignment, head_dim and block size. Every warp
// streams its own positions with 16-byte loads that skip L1 (K and V are read once), keeps an
// online softmax per query head in registers, and the warps merge once at the end through
// shared memory. RoPE and the new row happen outside the streaming loop, so its registers (the
// op's limit) are the same with or without them.
#pragma once

#include "amk_attn_common.cuh"

// Query heads [g0, g0 + gn) of q against the chunk (k, v). Lanes form groups of `lp` lanes per
// position (lp = next power of two >= vectors per row); lane r of a group owns elements
// [r*E, r*E + E) of every row, so its slice of q and o stays in registers. Scores are reduced
// across the group with shuffles.
// With `rope` (the (cos, sin) table) q is rotated here, in registers: the partner of element j,
// j +- hd/2, sits in lane r ^ (hd / 2E) of the same group (the caller checks that hd / 2E is a
// power of two). With `with_new` the new token's row (amk_attn_new_*) joins the final merge.
// Every instruction here counts: a block runs one attention instruction per layer with 8 warps,
// so the op is issue-latency bound (~6 cycles per instruction per scheduler), not memory bound.
template <class L>
__device__ __forceinline__ void amk_attn_decode_pass(const amk_view& q, const amk_view& k,
                                                     const amk_view& v, float* out, uint32_t hd,
                                                     float scale, uint32_t g0, uint32_t gn,
                                                     const float* rope, bool with_new) {
  constexpr uint32_t E = L::E, G = kAmkAttnHeads, U = L::U;
  const uint32_t vecs = (hd + E - 1) / E;
  uint32_t lp = 1;
  while (lp < vecs) lp <<= 1;
  const uint32_t per_warp = kAmkWarpSize / lp;       // positions per warp step
  const uint32_t stride = kAmkAttnWarps * per_warp;  // positions per block step
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  const uint32_t sub = lane / lp, r = lane % lp;
  const uint32_t d0 = r * E;
  const uint32_t n_valid = r < vecs ? (hd - d0 < E ? hd - d0 : E) : 0;
  const uint32_t len = k.n / hd;

  float qr[G][E], o[G][E], m[G], l[G];
  // f32 q (the usual case, and the staged rotated q): 16-byte loads when the slice is whole and
  // aligned, else plain loads the compiler issues together. (Through the dtype switch, each load
  // would wait for the one before: one round trip each.)
  const bool q_f32 = q.dtype == AMK_DTYPE_F32;
  const bool q_vec = q_f32 && E % 4 == 0 && n_valid == E && amk_aligned16(q.ptr) && hd % 4 == 0;
  const float* qf = reinterpret_cast<const float*>(q.ptr);
  // (Scaled here at > 256 threads; with the rotation below, after it.)
  const float qscale = kAmkBlockThreads > 256 ? scale : 1.0f;
#pragma unroll
  for (uint32_t g = 0; g < G; ++g) {
    m[g] = amk_neg_inf();
    l[g] = 0.0f;
    const uint64_t qb = static_cast<uint64_t>(g0 + g) * hd + d0;
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) o[g][e] = 0.0f;
    if (q_vec && g < gn) {
#pragma unroll
      for (uint32_t e = 0; e < E; e += 4)
        amk_ftype<AMK_DTYPE_F32>::unpack(amk_ld16(qf + qb + e), &qr[g][e]);
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) qr[g][e] *= qscale;
    } else {
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) {
        const bool in = g < gn && e < n_valid;
        qr[g][e] = in ? qscale * (q_f32 ? qf[qb + e] : amk_load_f32(q, qb + e)) : 0.0f;
      }
    }
  }
  if constexpr (kAmkBlockThreads <= 256) {  // wider blocks stage the rotated q (see the caller)
    if (rope != nullptr) {
      // The lane's slice lies in one half (E divides hd / 2), so its pair indices are i0 + e and
      // the sign of the partner's term is the lane's: y_lo = x cos - x_hi sin, y_hi = x cos + x_lo sin.
      const uint32_t half = hd / 2, partner = half / E;
      const bool lo = d0 < half;
      const uint32_t i0 = lo ? d0 : d0 - half;
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) {
        const float c = rope[2 * (i0 + e)];
        const float s = lo ? -rope[2 * (i0 + e) + 1] : rope[2 * (i0 + e) + 1];
#pragma unroll
        for (uint32_t g = 0; g < G; ++g) {
          const float p = __shfl_xor_sync(kAmkFullMask, qr[g][e], partner);
          qr[g][e] = fmaf(qr[g][e], c, p * s);
        }
      }
    }
#pragma unroll
    for (uint32_t g = 0; g < G; ++g)
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) qr[g][e] *= scale;
  }

  if (warp < kAmkAttnWarps) {
    for (uint32_t b0 = 0; b0 < len; b0 += U * stride) {  // uniform over the block
      typename L::raw kr[U], vr[U];
      bool ok[U];
#pragma unroll
      for (uint32_t u = 0; u < U; ++u) {
        const uint32_t t = b0 + u * stride + warp * per_warp + sub;
        ok[u] = t < len;
        if (ok[u] && n_valid != 0) L::load(k, static_cast<uint64_t>(t) * hd + d0, n_valid, kr[u]);
      }
#pragma unroll
      for (uint32_t u = 0; u < U; ++u) {
        const uint32_t t = b0 + u * stride + warp * per_warp + sub;
        if (ok[u] && n_valid != 0) L::load(v, static_cast<uint64_t>(t) * hd + d0, n_valid, vr[u]);
      }
      float s[G][U];
#pragma unroll
      for (uint32_t u = 0; u < U; ++u) {
        float kf[E];
        if (ok[u] && n_valid != 0) {
          L::unpack(kr[u], kf);
        } else {
#pragma unroll
          for (uint32_t e = 0; e < E; ++e) kf[e] = 0.0f;
        }
#pragma unroll
        for (uint32_t g = 0; g < G; ++g) {
          float acc = 0.0f;
#pragma unroll
          for (uint32_t e = 0; e < E; ++e) acc = fmaf(qr[g][e], kf[e], acc);
          s[g][u] = acc;
        }
      }
      for (uint32_t off = lp >> 1; off > 0; off >>= 1) {
#pragma unroll
        for (uint32_t g = 0; g < G; ++g)
#pragma unroll
          for (uint32_t u = 0; u < U; ++u) s[g][u] += __shfl_xor_sync(kAmkFullMask, s[g][u], off);
      }
      // Online softmax, one rescale per batch; s becomes the weights p.
#pragma unroll
      for (uint32_t g = 0; g < G; ++g) {
        float top = m[g];
#pragma unroll
        for (uint32_t u = 0; u < U; ++u)
          if (ok[u]) top = fmaxf(top, s[g][u]);
        const float corr = amk_attn_weight(m[g], top);
        float sum = 0.0f;
#pragma unroll
        for (uint32_t u = 0; u < U; ++u) {
          s[g][u] = ok[u] ? amk_attn_exp(s[g][u] - top) : 0.0f;
          sum += s[g][u];
        }
        l[g] = fmaf(l[g], corr, sum);
        m[g] = top;
#pragma unroll
        for (uint32_t e = 0; e < E; ++e) o[g][e] *= corr;
      }
#pragma unroll
      for (uint32_t u = 0; u < U; ++u) {
        if (!ok[u] || n_valid == 0) continue;
        float vf[E];
        L::unpack(vr[u], vf);
#pragma unroll
        for (uint32_t g = 0; g < G; ++g)
#pragma unroll
          for (uint32_t e = 0; e < E; ++e) o[g][e] = fmaf(s[g][u], vf[e], o[g][e]);
      }
    }
    // Merge the lane groups of the warp (lanes with the same r own the same slice): the common
    // max first, then one rescale per head and plain sums.
#pragma unroll
    for (uint32_t g = 0; g < G; ++g) {
      float big = m[g];
      for (uint32_t off = lp; off < kAmkWarpSize; off <<= 1)
        big = fmaxf(big, __shfl_xor_sync(kAmkFullMask, big, off));
      const float a = amk_attn_weight(m[g], big);
      m[g] = big;
      l[g] *= a;
#pragma unroll
      for (uint32_t e = 0; e < E; ++e) o[g][e] *= a;
    }
    for (uint32_t off = lp; off < kAmkWarpSize; off <<= 1) {
#pragma unroll
      for (uint32_t g = 0; g < G; ++g) {
        l[g] += __shfl_xor_sync(kAmkFullMask, l[g], off);
#pragma unroll
        for (uint32_t e = 0; e < E; ++e) o[g][e] += __shfl_xor_sync(kAmkFullMask, o[g][e], off);
      }
    }
  }

  // Merge the warps through shared memory, `per_round` query heads at a time (plus the new row).
  const uint32_t row = hd + 2;
  const uint32_t per_round_max = kAmkAttnMergeFloats / (kAmkAttnWarps * row);
  const uint32_t per_round = per_round_max < G ? per_round_max : G;
  for (uint32_t h0 = 0; h0 < gn; h0 += per_round) {
    if (warp < kAmkAttnWarps && sub == 0 && n_valid != 0) {
#pragma unroll
      for (uint32_t g = 0; g < G; ++g) {
        if (g < h0 || g >= h0 + per_round || g >= gn) continue;
        float* dst = amk_attn_merge + (warp * per_round + (g - h0)) * row;
#pragma unroll
        for (uint32_t e = 0; e < E; ++e)
          if (e < n_valid) dst[d0 + e] = o[g][e];
        if (r == 0) {
          dst[hd] = m[g];
          dst[hd + 1] = l[g];
        }
      }
    }
    amk_sync();
    const uint32_t heads = gn - h0 < per_round ? gn - h0 : per_round;
    for (uint32_t idx = threadIdx.x; idx < heads * row; idx += kAmkBlockThreads) {
      const uint32_t gl = idx / row, d = idx - gl * row;
      const float* src = amk_attn_merge + gl * row;
      const uint32_t w_stride = per_round * row;
      const float s_new = with_new ? amk_attn_new_s[g0 + h0 + gl] : amk_neg_inf();
      float big = s_new;
#pragma unroll
      for (uint32_t w = 0; w < kAmkAttnWarps; ++w) big = fmaxf(big, src[w * w_stride + hd]);
      const float f_new = amk_attn_weight(s_new, big);
      float total = f_new, acc = d < hd && with_new ? f_new * amk_attn_new_v[d] : 0.0f;
#pragma unroll
      for (uint32_t w = 0; w < kAmkAttnWarps; ++w) {
        const float f = amk_attn_weight(src[w * w_stride + hd], big);
        total = fmaf(f, src[w * w_stride + hd + 1], total);
        if (d < hd) acc = fmaf(f, src[w * w_stride + d], acc);
      }
      float value = acc / total;
      if (d == hd) value = big;
      if (d == hd + 1) value = total;
      out[static_cast<uint64_t>(g0 + h0 + gl) * row + d] = value;
    }
    amk_sync();  // the next round (or pass) rewrites the merge buffer
  }
}
