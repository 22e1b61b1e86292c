// Elementwise ops: copy, fill, add, mul, scale, silu_mul. The element count is extent(y).
// Fast path: every operand the same float dtype and 16-byte aligned -> 16-byte vectors, several
// loads in flight per thread; otherwise one element at a time through the dtype switch.
#pragma once

#include "amk_device.cuh"

// Vectors in flight per thread (x2 operands) at 256 threads. A decode step's elementwise ops are
// small and run on one block between two waits: 8192 floats take two rounds of loads. Wider
// blocks keep the same bytes in flight with fewer per thread (their register budget is smaller).
constexpr uint32_t kAmkEltUnroll = amk_per_thread_at_256(4);

// Which float dtypes get a vectorized instantiation (kAmkOps.elt: those the program's
// elementwise instructions store). Others take the scalar path.
AMK_HD constexpr bool amk_elt_vectorized(uint32_t dtype) {
  return (kAmkOps.elt & amk_dtype_bit(dtype)) != 0;
}

enum amk_elt_kind : uint32_t { kAmkEltAdd, kAmkEltMul, kAmkEltSiluMul, kAmkEltScale, kAmkEltFill };

template <uint32_t K>
__device__ __forceinline__ float amk_elt_apply(float a, float b, float alpha) {
  if (K == kAmkEltAdd) return a + b;
  if (K == kAmkEltMul) return a * b;
  if (K == kAmkEltSiluMul) return a / (1.0f + expf(-a)) * b;
  if (K == kAmkEltScale) return alpha * a;
  return alpha;  // fill
}

// y[i] = f(a[i], b[i]) over 16-byte vectors of one float dtype; returns elements covered.
template <uint32_t K, uint32_t DT>
__device__ __forceinline__ uint32_t amk_elt_vector(const unsigned char* a, const unsigned char* b,
                                                   unsigned char* y, uint32_t n, float alpha) {
  typedef amk_ftype<DT> T;
  constexpr uint32_t kPer = T::per_vec;
  constexpr bool kUsesA = K != kAmkEltFill;
  constexpr bool kUsesB = K == kAmkEltAdd || K == kAmkEltMul || K == kAmkEltSiluMul;
  const uint32_t nv = n / kPer;
  for (uint32_t base = threadIdx.x; base < nv; base += kAmkBlockThreads * kAmkEltUnroll) {
    amk_vec16 va[kAmkEltUnroll], vb[kAmkEltUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kAmkEltUnroll; ++u) {
      const uint32_t v = base + u * kAmkBlockThreads;
      if (v < nv) {
        if (kUsesA) va[u] = amk_ld16(a + static_cast<uint64_t>(v) * kAmkVectorBytes);
        if (kUsesB) vb[u] = amk_ld16(b + static_cast<uint64_t>(v) * kAmkVectorBytes);
      }
    }
#pragma unroll
    for (uint32_t u = 0; u < kAmkEltUnroll; ++u) {
      const uint32_t v = base + u * kAmkBlockThreads;
      if (v < nv) {
        float fa[kPer], fb[kPer], fy[kPer];
        if (kUsesA) T::unpack(va[u], fa);
        if (kUsesB) T::unpack(vb[u], fb);
#pragma unroll
        for (uint32_t e = 0; e < kPer; ++e)
          fy[e] = amk_elt_apply<K>(kUsesA ? fa[e] : 0.0f, kUsesB ? fb[e] : 0.0f, alpha);
        amk_st16(y + static_cast<uint64_t>(v) * kAmkVectorBytes, T::pack(fy));
      }
    }
  }
  return nv * kPer;
}

template <uint32_t K>
__device__ __forceinline__ void amk_elt_run(const amk_view& a, const amk_view& b, const amk_view& y,
                                            float alpha) {
  constexpr bool kUsesA = K != kAmkEltFill;
  constexpr bool kUsesB = K == kAmkEltAdd || K == kAmkEltMul || K == kAmkEltSiluMul;
  const uint32_t n = y.n;
  uint32_t done = 0;
  const bool same = (!kUsesA || a.dtype == y.dtype) && (!kUsesB || b.dtype == y.dtype);
  const bool aligned = amk_aligned16(y.ptr) && (!kUsesA || amk_aligned16(a.ptr)) &&
                       (!kUsesB || amk_aligned16(b.ptr));
  if (same && aligned) {
    if constexpr (amk_elt_vectorized(AMK_DTYPE_F32)) {
      if (y.dtype == AMK_DTYPE_F32)
        done = amk_elt_vector<K, AMK_DTYPE_F32>(a.ptr, b.ptr, y.ptr, n, alpha);
    }
    if constexpr (amk_elt_vectorized(AMK_DTYPE_BF16)) {
      if (y.dtype == AMK_DTYPE_BF16)
        done = amk_elt_vector<K, AMK_DTYPE_BF16>(a.ptr, b.ptr, y.ptr, n, alpha);
    }
    if constexpr (amk_elt_vectorized(AMK_DTYPE_F16)) {
      if (y.dtype == AMK_DTYPE_F16)
        done = amk_elt_vector<K, AMK_DTYPE_F16>(a.ptr, b.ptr, y.ptr, n, alpha);
    }
  }
  for (uint32_t i = done + threadIdx.x; i < n; i += kAmkBlockThreads) {
    const float fa = kUsesA ? amk_load_f32(a, i) : 0.0f;
    const float fb = kUsesB ? amk_load_f32(b, i) : 0.0f;
    amk_store_f32(y, i, amk_elt_apply<K>(fa, fb, alpha));
  }
}

__device__ __forceinline__ float amk_param_f32(const amk_instruction_t& ins, uint32_t k) {
  return __uint_as_float(ins.params[k]);
}

__device__ __forceinline__ void amk_op_add(const amk_device_program_t&,
                                           const amk_instruction_t& ins, unsigned char*) {
  amk_elt_run<kAmkEltAdd>(amk_operand(ins, 0), amk_operand(ins, 1), amk_operand(ins, 2), 0.0f);
}
__device__ __forceinline__ void amk_op_mul(const amk_device_program_t&,
                                           const amk_instruction_t& ins, unsigned char*) {
  amk_elt_run<kAmkEltMul>(amk_operand(ins, 0), amk_operand(ins, 1), amk_operand(ins, 2), 0.0f);
}
__device__ __forceinline__ void amk_op_silu_mul(const amk_device_program_t&,
                                                const amk_instruction_t& ins, unsigned char*) {
  amk_elt_run<kAmkEltSiluMul>(amk_operand(ins, 0), amk_operand(ins, 1), amk_operand(ins, 2), 0.0f);
}
__device__ __forceinline__ void amk_op_scale(const amk_device_program_t&,
                                             const amk_instruction_t& ins, unsigned char*) {
  const amk_view x = amk_operand(ins, 0);
  amk_elt_run<kAmkEltScale>(x, x, amk_operand(ins, 1), amk_param_f32(ins, 0));
}
__device__ __forceinline__ void amk_op_fill(const amk_device_program_t&,
                                            const amk_instruction_t& ins, unsigned char*) {
  const amk_view y = amk_operand(ins, 0);
  const float value = amk_param_f32(ins, 0);
  const bool is_float =
      y.dtype == AMK_DTYPE_F32 || y.dtype == AMK_DTYPE_F16 || y.dtype == AMK_DTYPE_BF16;
  if (is_float) {
    amk_elt_run<kAmkEltFill>(y, y, y, value);
    return;
  }
  for (uint32_t i = threadIdx.x; i < y.n; i += kAmkBlockThreads) amk_store_f32(y, i, value);
}
// Same dtype: a byte copy (16-byte vectors when aligned). Float <-> float: converts.
__device__ __forceinline__ void amk_op_copy(const amk_device_program_t&,
                                            const amk_instruction_t& ins, unsigned char*) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view y = amk_operand(ins, 1);
  const uint32_t n = y.n;
  if (x.dtype == y.dtype) {
    const uint64_t bytes = static_cast<uint64_t>(n) * amk_dtype_size(y.dtype);
    uint64_t done = 0;
    if (amk_aligned16(x.ptr) && amk_aligned16(y.ptr)) {
      const uint64_t nv = bytes / kAmkVectorBytes;
      for (uint64_t base = threadIdx.x; base < nv; base += kAmkBlockThreads * kAmkEltUnroll) {
        amk_vec16 v[kAmkEltUnroll];
#pragma unroll
        for (uint32_t u = 0; u < kAmkEltUnroll; ++u) {
          const uint64_t i = base + u * kAmkBlockThreads;
          if (i < nv) v[u] = amk_ld16(x.ptr + i * kAmkVectorBytes);
        }
#pragma unroll
        for (uint32_t u = 0; u < kAmkEltUnroll; ++u) {
          const uint64_t i = base + u * kAmkBlockThreads;
          if (i < nv) amk_st16(y.ptr + i * kAmkVectorBytes, v[u]);
        }
      }
      done = nv * kAmkVectorBytes;
    }
    for (uint64_t i = done + threadIdx.x; i < bytes; i += kAmkBlockThreads) y.ptr[i] = x.ptr[i];
    return;
  }
  for (uint32_t i = threadIdx.x; i < n; i += kAmkBlockThreads)
    amk_store_f32(y, i, amk_load_f32(x, i));
}
