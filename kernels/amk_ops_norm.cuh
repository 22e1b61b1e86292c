// Row reductions: rmsnorm and softmax. One row at a time over the whole block (decode rows are
// long and few); block reductions through warp shuffles. Each thread rereads (or keeps) its own
// elements for the output pass, so y may alias x. A decode step runs these on one block between
// two dependency waits, so their latency is on the critical path: the fast paths issue all of a
// thread's loads before using any (a loop of one dependent load per element costs a round trip
// per element).
#pragma once

#include "amk_device.cuh"

// Vectors of 4 floats per thread in flight per pass of the fast path (at 256 threads): x and
// weight of a row up to 2048 elements stay in registers between the sum and the scaling, so a
// row costs one round trip for its loads (all issued before any is used) and one for the
// stores. Longer rows take several chunks and reread x (from L1) in the second pass.
constexpr uint32_t kAmkNormVecs = amk_per_thread_at_256(2);

// Fast path: f32 x and y, weight of dtype W, 16-byte aligned, d a multiple of 4.
template <uint32_t W>
__device__ __forceinline__ void amk_rmsnorm_vec(const amk_view& x, const amk_view& w,
                                                const amk_view& y, uint32_t d, uint32_t rows,
                                                float eps, unsigned char* scratch) {
  constexpr uint32_t kChunk = kAmkBlockThreads * kAmkNormVecs;  // vectors per pass
  const uint32_t nv = d / 4;
  for (uint32_t r = 0; r < rows; ++r) {
    const unsigned char* xr = x.ptr + static_cast<uint64_t>(r) * d * 4;
    unsigned char* yr = y.ptr + static_cast<uint64_t>(r) * d * 4;
    float xs[kAmkNormVecs][4], ws[kAmkNormVecs][4];
    auto load = [&](uint32_t c0) {
#pragma unroll
      for (uint32_t u = 0; u < kAmkNormVecs; ++u) {
        const uint32_t v = c0 + u * kAmkBlockThreads + threadIdx.x;
        if (v < nv) {
          amk_load_elems<AMK_DTYPE_F32, 4>(xr, 4 * v, xs[u]);
          amk_load_elems<W, 4>(w.ptr, 4 * v, ws[u]);
        }
      }
    };
    float ss = 0.0f, ss2 = 0.0f;
    for (uint32_t c0 = 0; c0 < nv; c0 += kChunk) {
      load(c0);
#pragma unroll
      for (uint32_t u = 0; u < kAmkNormVecs; ++u)
        if (c0 + u * kAmkBlockThreads + threadIdx.x < nv) {
          ss = fmaf(xs[u][0], xs[u][0], fmaf(xs[u][1], xs[u][1], ss));
          ss2 = fmaf(xs[u][2], xs[u][2], fmaf(xs[u][3], xs[u][3], ss2));
        }
    }
    const float inv = 1.0f / sqrtf(amk_block_sum(ss + ss2, scratch) / static_cast<float>(d) + eps);
    for (uint32_t c0 = 0; c0 < nv; c0 += kChunk) {
      if (nv > kChunk) load(c0);  // one chunk: still in registers
#pragma unroll
      for (uint32_t u = 0; u < kAmkNormVecs; ++u) {
        const uint32_t v = c0 + u * kAmkBlockThreads + threadIdx.x;
        if (v < nv) {
          float o[4];
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) o[e] = xs[u][e] * inv * ws[u][e];
          amk_st16(yr + 16ull * v, amk_ftype<AMK_DTYPE_F32>::pack(o));
        }
      }
    }
  }
}

// y = x / sqrt(mean(x^2) + eps) * weight, rows of extent(weight).
__device__ __forceinline__ void amk_op_rmsnorm(const amk_device_program_t&,
                                               const amk_instruction_t& ins,
                                               unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view w = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const float eps = __uint_as_float(ins.params[0]);
  const uint32_t d = w.n;
  if (d == 0) return;
  const uint32_t rows = x.n / d;
  if (x.dtype == AMK_DTYPE_F32 && y.dtype == AMK_DTYPE_F32 && d % 4 == 0 && amk_aligned16(x.ptr) &&
      amk_aligned16(y.ptr) && amk_aligned16(w.ptr)) {
    if (w.dtype == AMK_DTYPE_BF16)
      return amk_rmsnorm_vec<AMK_DTYPE_BF16>(x, w, y, d, rows, eps, scratch);
    if (w.dtype == AMK_DTYPE_F32)
      return amk_rmsnorm_vec<AMK_DTYPE_F32>(x, w, y, d, rows, eps, scratch);
    if (w.dtype == AMK_DTYPE_F16)
      return amk_rmsnorm_vec<AMK_DTYPE_F16>(x, w, y, d, rows, eps, scratch);
  }
  for (uint32_t r = 0; r < rows; ++r) {
    const uint64_t base = static_cast<uint64_t>(r) * d;
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < d; i += kAmkBlockThreads) {
      const float v = amk_load_f32(x, base + i);
      ss = fmaf(v, v, ss);
    }
    ss = amk_block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    for (uint32_t i = threadIdx.x; i < d; i += kAmkBlockThreads)
      amk_store_f32(y, base + i, amk_load_f32(x, base + i) * inv * amk_load_f32(w, i));
  }
}

// Row-wise softmax(scale * x) over rows of `cols` elements (0: the whole extent).
__device__ __forceinline__ void amk_op_softmax(const amk_device_program_t&,
                                               const amk_instruction_t& ins,
                                               unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view y = amk_operand(ins, 1);
  const uint32_t cols = ins.params[0] != 0 ? ins.params[0] : x.n;
  const float scale = __uint_as_float(ins.params[1]);
  if (cols == 0) return;
  const uint32_t rows = x.n / cols;
  for (uint32_t r = 0; r < rows; ++r) {
    const uint64_t base = static_cast<uint64_t>(r) * cols;
    float m = -__int_as_float(0x7f800000);
    for (uint32_t i = threadIdx.x; i < cols; i += kAmkBlockThreads)
      m = fmaxf(m, scale * amk_load_f32(x, base + i));
    m = amk_block_max(m, scratch);
    float s = 0.0f;
    for (uint32_t i = threadIdx.x; i < cols; i += kAmkBlockThreads)
      s += expf(scale * amk_load_f32(x, base + i) - m);
    s = amk_block_sum(s, scratch);
    const float inv = 1.0f / s;
    for (uint32_t i = threadIdx.x; i < cols; i += kAmkBlockThreads)
      amk_store_f32(y, base + i, expf(scale * amk_load_f32(x, base + i) - m) * inv);
  }
}
