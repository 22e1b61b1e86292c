// The staging of gemv's x' in shared memory: the norm fusion's x * norm, the o_proj fusion's
// merge of attention partials, and the reads of the staged vectors in the vector path's planes.
#pragma once

#include "amk_device.cuh"

// The optional fusions of one instruction (absent: null pointers, inv_rms 1).
struct amk_gemv_fuse {
  const unsigned char* norm;  // [K] rmsnorm weight, or null
  uint32_t norm_dtype;
  float eps;                // rmsnorm epsilon (with norm)
  const unsigned char* w2;  // GLU up matrix, same row range and dtype as w, or null
  uint32_t combine_hd;      // x is attention partials (0: not): head_dim,
  uint32_t combine_heads;   // query heads a chunk,
  uint32_t combine_chunks;  // chunks
};

// Staged x' of the norm-fused instantiations (kAmkGemvStageFloats, amk_config.h: a Llama-3.1-8B
// hidden state), and the per-warp sums of x^2.
__shared__ __align__(16) float amk_gemv_xs[kAmkGemvStageFloats];
__shared__ float amk_gemv_ss[kAmkWarps];

// Chunks whose (m, l) and values a thread loads before it uses any (one round trip per batch).
constexpr uint32_t kAmkGemvCombineBatch = 4;
// x' = the merge of attention partials p (chunk-major: `chunks` blocks of `heads` rows of hd + 2
// floats: hd values normalized within the chunk, max score m, sum of weights l), the
// attention_combine op's formula sum_c l_c exp(m_c - M) o_c / sum_c l_c exp(m_c - M), into
// amk_gemv_xs in the vector path's kPer / 4 planes (kPer 4: one plane, in order). A thread takes
// 4 elements of one head at a time, two such quads together so that their loads share a round
// trip, the running sums rescaled when the max grows. Every thread calls it; one barrier.
template <uint32_t kPer>
__device__ __forceinline__ void amk_gemv_stage_combine(const float* p, uint32_t k,
                                                       const amk_gemv_fuse& fuse) {
  constexpr uint32_t kPlanes = kPer / 4;
  constexpr uint32_t kB = kAmkGemvCombineBatch;
  const uint32_t plane_len = k / kPlanes;
  const uint32_t hd = fuse.combine_hd, row = hd + 2, block = fuse.combine_heads * row;
  const uint32_t chunks = fuse.combine_chunks, quads = k / 4;
  for (uint32_t q0 = threadIdx.x; q0 < quads; q0 += 2 * kAmkBlockThreads) {
    float big[2], total[2], acc[2][4];
    uint32_t at[2], dd[2];
#pragma unroll
    for (uint32_t i = 0; i < 2; ++i) {
      const uint32_t q = min(q0 + i * kAmkBlockThreads, quads - 1);  // (past the end: unused)
      const uint32_t g = 4 * q / hd;
      dd[i] = 4 * q - g * hd;
      at[i] = g * row + dd[i];
      big[i] = -__int_as_float(0x7f800000);
      total[i] = 0.0f;
#pragma unroll
      for (uint32_t e = 0; e < 4; ++e) acc[i][e] = 0.0f;
    }
    for (uint32_t c0 = 0; c0 < chunks; c0 += kB) {
      float m[2][kB], l[2][kB], o[2][kB][4];
#pragma unroll
      for (uint32_t i = 0; i < 2; ++i) {
#pragma unroll
        for (uint32_t j = 0; j < kB; ++j) {
          const uint32_t c = min(c0 + j, chunks - 1);  // (past the last chunk: weight 0 below)
          const float* r = p + c * block + at[i];
          const float2 ml = *reinterpret_cast<const float2*>(r + hd - dd[i]);
          const float2 o01 = *reinterpret_cast<const float2*>(r);
          const float2 o23 = *reinterpret_cast<const float2*>(r + 2);
          m[i][j] = ml.x;
          l[i][j] = ml.y;
          o[i][j][0] = o01.x;
          o[i][j][1] = o01.y;
          o[i][j][2] = o23.x;
          o[i][j][3] = o23.y;
        }
      }
#pragma unroll
      for (uint32_t i = 0; i < 2; ++i) {
        float mx = big[i];
#pragma unroll
        for (uint32_t j = 0; j < kB; ++j)
          if (c0 + j < chunks && l[i][j] != 0.0f) mx = fmaxf(mx, m[i][j]);
        const float keep = big[i] == mx ? 1.0f : expf(big[i] - mx);  // (-inf - finite: 0)
        total[i] *= keep;
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) acc[i][e] *= keep;
#pragma unroll
        for (uint32_t j = 0; j < kB; ++j) {
          const float wt = c0 + j < chunks && l[i][j] != 0.0f ? l[i][j] * expf(m[i][j] - mx) : 0.0f;
          total[i] += wt;
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) acc[i][e] = fmaf(wt, o[i][j][e], acc[i][e]);
        }
        big[i] = mx;
      }
    }
#pragma unroll
    for (uint32_t i = 0; i < 2; ++i) {
      const uint32_t q = q0 + i * kAmkBlockThreads;
      if (q < quads) {
        const float inv = 1.0f / total[i];
        const uint32_t v = 4 * q / kPer, plane = q % kPlanes;
        *reinterpret_cast<float4*>(amk_gemv_xs + plane * plane_len + 4 * v) =
            make_float4(acc[i][0] * inv, acc[i][1] * inv, acc[i][2] * inv, acc[i][3] * inv);
      }
    }
  }
  amk_sync();
}

// Stages x' = x * norm (f32, kPer/4 planes of k * 4 / kPer floats) into amk_gemv_xs and returns
// 1 / sqrt(mean(x^2) + eps). Every thread of the block calls it (one barrier). k is a multiple of
// kPer and at most kAmkGemvStageFloats; x and norm are 16-byte aligned. `between()` runs once, as
// soon as the thread's last reads of x and norm are issued and before they are used (gemv's ring
// issues the rest of its first batches there; with the combine, after the merge).
// kTrip: the quads a thread reads before it uses any (1: one a pass).
template <uint32_t X, uint32_t kPer, uint32_t kTrip, class Between>
__device__ __forceinline__ float amk_gemv_stage_norm(const unsigned char* x, uint32_t k,
                                                     const amk_gemv_fuse& fuse, Between&& between) {
  if constexpr (amk_gemv_fuses(AMK_GEMV_FUSE_COMBINE)) {
    if (fuse.combine_hd != 0) {  // (X is f32: a merging gemv) x' is the partials' merge
      amk_gemv_stage_combine<kPer>(reinterpret_cast<const float*>(x), k, fuse);
      between();
      return 1.0f;
    }
  }
  constexpr uint32_t kPlanes = kPer / 4;
  const uint32_t plane_len = k / kPlanes;
  float ss = 0.0f;
  // Thread i's quads (4 elements from 4q) are q = i, i + kAmkBlockThreads, ...
  auto finish = [&](uint32_t q, const float(&f)[4], const float(&g)[4]) {
    ss = fmaf(f[0], f[0], fmaf(f[1], f[1], fmaf(f[2], f[2], fmaf(f[3], f[3], ss))));
    const uint32_t v = 4 * q / kPer, plane = q % kPlanes;
    *reinterpret_cast<float4*>(amk_gemv_xs + plane * plane_len + 4 * v) =
        make_float4(f[0] * g[0], f[1] * g[1], f[2] * g[2], f[3] * g[3]);
  };
  if constexpr (kTrip > 1) {
    // The thread's reads kTrip quads a pass, all issued before any is used; between() once the
    // last pass's are.
    const uint32_t quads = k / 4;
    bool between_done = false;
    for (uint32_t q0 = threadIdx.x; q0 < quads || !between_done; q0 += kTrip * kAmkBlockThreads) {
      float f[kTrip][4], g[kTrip][4];
#pragma unroll
      for (uint32_t i = 0; i < kTrip; ++i) {
        const uint32_t q = q0 + i * kAmkBlockThreads;
        if (q < quads) {
          amk_load_elems<X, 4>(x, 4 * q, f[i]);
          amk_load_elems_dt<4>(fuse.norm, fuse.norm_dtype, 4 * q, g[i]);
        }
      }
      if (q0 + kTrip * kAmkBlockThreads >= quads) {
        between();
        between_done = true;
      }
#pragma unroll
      for (uint32_t i = 0; i < kTrip; ++i) {
        const uint32_t q = q0 + i * kAmkBlockThreads;
        if (q < quads) finish(q, f[i], g[i]);
      }
    }
  } else {
    for (uint32_t q = threadIdx.x; q < k / 4; q += kAmkBlockThreads) {
      float f[4], g[4];
      amk_load_elems<X, 4>(x, 4 * q, f);
      amk_load_elems_dt<4>(fuse.norm, fuse.norm_dtype, 4 * q, g);
      finish(q, f, g);
    }
    between();
  }
  ss = amk_warp_sum(ss);
  if (threadIdx.x % kAmkWarpSize == 0) amk_gemv_ss[threadIdx.x / kAmkWarpSize] = ss;
  amk_sync();
  float total = 0.0f;
#pragma unroll
  for (uint32_t w = 0; w < kAmkWarps; ++w) total += amk_gemv_ss[w];
  return 1.0f / sqrtf(total / static_cast<float>(k) + fuse.eps);
}

// The kPer staged values of the vector whose first plane's 4 values are at s.
template <uint32_t kPer>
__device__ __forceinline__ void amk_gemv_staged_x_from(const float* s, uint32_t k, float* xf) {
#pragma unroll
  for (uint32_t q = 0; q < kPer / 4; ++q) {
    const float4 s4 = *reinterpret_cast<const float4*>(s + q * (k * 4 / kPer));
    xf[4 * q] = s4.x;
    xf[4 * q + 1] = s4.y;
    xf[4 * q + 2] = s4.z;
    xf[4 * q + 3] = s4.w;
  }
}
// Where vector v's first plane values are staged.
__device__ __forceinline__ const float* amk_gemv_xs_at(uint32_t v) { return amk_gemv_xs + 4 * v; }
// The kPer staged values of vector v.
template <uint32_t kPer>
__device__ __forceinline__ void amk_gemv_staged_x(uint32_t k, uint32_t v, float* xf) {
  amk_gemv_staged_x_from<kPer>(amk_gemv_xs_at(v), k, xf);
}
