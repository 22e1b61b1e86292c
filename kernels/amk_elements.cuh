// Element conversions (cvt.rn, like the host's numeric.cpp) and the 16-byte vector loads and
// stores of the fast paths. Included by amk_device.cuh.
#pragma once

#include "amk_abi.h"

constexpr unsigned kAmkVectorBytes = 16;  // one ld/st.v4.u32

// ---- element conversions (cvt.rn, like the host's numeric.cpp) ----
__device__ __forceinline__ float amk_f16_to_f32(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ uint16_t amk_f32_to_f16(float f) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float amk_bf16_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t amk_f32_to_bf16(float f) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// Two packed halves of a 32-bit word -> floats (low element first).
__device__ __forceinline__ void amk_unpack_f16x2(uint32_t w, float& lo, float& hi) {
  lo = amk_f16_to_f32(static_cast<uint16_t>(w & 0xFFFFu));
  hi = amk_f16_to_f32(static_cast<uint16_t>(w >> 16));
}
__device__ __forceinline__ void amk_unpack_bf16x2(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xFFFF0000u);
}
__device__ __forceinline__ uint32_t amk_pack_f16x2(float lo, float hi) {
  return static_cast<uint32_t>(amk_f32_to_f16(lo)) |
         (static_cast<uint32_t>(amk_f32_to_f16(hi)) << 16);
}
__device__ __forceinline__ uint32_t amk_pack_bf16x2(float lo, float hi) {
  uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}

__device__ __forceinline__ uint32_t amk_dtype_size(uint32_t dtype) {
  switch (dtype) {
    case AMK_DTYPE_F16:
    case AMK_DTYPE_BF16: return 2;
    case AMK_DTYPE_I64: return 8;
    case AMK_DTYPE_U8: return 1;
    default: return 4;
  }
}

// Float to integer as the host stores it: toward zero, saturated, NaN -> 0.
__device__ __forceinline__ long long amk_f2ll_sat(float v, long long lo, long long hi) {
  if (v != v) return 0;
  if (v <= static_cast<float>(lo)) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<long long>(v);
}

// ---- typed 16-byte vectors for the fast paths (8 halves or 4 floats) ----
struct amk_vec16 {
  uint32_t w[4];
};
__device__ __forceinline__ amk_vec16 amk_ld16(const void* p) {
  amk_vec16 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p));
  return v;
}
// The L2 policy of data read once (weights, cache rows): evict first, so a step's streamed
// bytes do not push out what the VM prefetched into L2 for the next instructions (amk_vm.cuh)
// or the activations.
__device__ __forceinline__ uint64_t amk_evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// Streaming load for data read once: skips L1 so activations stay there, evict-first in L2.
__device__ __forceinline__ amk_vec16 amk_ld16_stream(const void* p) {
  amk_vec16 v;
  const uint64_t policy = amk_evict_first_policy();
  asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p), "l"(policy));
  return v;
}
__device__ __forceinline__ void amk_st16(void* p, const amk_vec16& v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]),
               "r"(v.w[2]), "r"(v.w[3])
               : "memory");
}

// Element type tags for templates: how many per 16-byte vector and how they unpack.
template <uint32_t DT>
struct amk_ftype;
template <>
struct amk_ftype<AMK_DTYPE_F32> {
  static constexpr uint32_t per_vec = 4;
  __device__ static __forceinline__ void unpack(const amk_vec16& v, float* f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(v.w[i]);
  }
  __device__ static __forceinline__ amk_vec16 pack(const float* f) {
    amk_vec16 v;
#pragma unroll
    for (int i = 0; i < 4; ++i) v.w[i] = __float_as_uint(f[i]);
    return v;
  }
  __device__ static __forceinline__ float load(const unsigned char* p, uint64_t i) {
    return reinterpret_cast<const float*>(p)[i];
  }
  __device__ static __forceinline__ void store(unsigned char* p, uint64_t i, float x) {
    reinterpret_cast<float*>(p)[i] = x;
  }
};
template <>
struct amk_ftype<AMK_DTYPE_F16> {
  static constexpr uint32_t per_vec = 8;
  __device__ static __forceinline__ void unpack(const amk_vec16& v, float* f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) amk_unpack_f16x2(v.w[i], f[2 * i], f[2 * i + 1]);
  }
  __device__ static __forceinline__ amk_vec16 pack(const float* f) {
    amk_vec16 v;
#pragma unroll
    for (int i = 0; i < 4; ++i) v.w[i] = amk_pack_f16x2(f[2 * i], f[2 * i + 1]);
    return v;
  }
  __device__ static __forceinline__ float load(const unsigned char* p, uint64_t i) {
    return amk_f16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
  __device__ static __forceinline__ void store(unsigned char* p, uint64_t i, float x) {
    reinterpret_cast<uint16_t*>(p)[i] = amk_f32_to_f16(x);
  }
};
template <>
struct amk_ftype<AMK_DTYPE_BF16> {
  static constexpr uint32_t per_vec = 8;
  __device__ static __forceinline__ void unpack(const amk_vec16& v, float* f) {
#pragma unroll
    for (int i = 0; i < 4; ++i) amk_unpack_bf16x2(v.w[i], f[2 * i], f[2 * i + 1]);
  }
  __device__ static __forceinline__ amk_vec16 pack(const float* f) {
    amk_vec16 v;
#pragma unroll
    for (int i = 0; i < 4; ++i) v.w[i] = amk_pack_bf16x2(f[2 * i], f[2 * i + 1]);
    return v;
  }
  __device__ static __forceinline__ float load(const unsigned char* p, uint64_t i) {
    return amk_bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
  __device__ static __forceinline__ void store(unsigned char* p, uint64_t i, float x) {
    reinterpret_cast<uint16_t*>(p)[i] = amk_f32_to_bf16(x);
  }
};

// ---- short vector loads for the fast paths ----
// p[e0 .. e0 + P) as floats, P = 4 or 8 elements of dtype X (f32, f16, bf16); e0 is a multiple of
// P and p is 16-byte aligned.
template <uint32_t X, uint32_t P>
__device__ __forceinline__ void amk_load_elems(const unsigned char* p, uint32_t e0, float* f) {
  if (X == AMK_DTYPE_F32) {
#pragma unroll
    for (uint32_t q = 0; q < P / 4; ++q)
      amk_ftype<AMK_DTYPE_F32>::unpack(amk_ld16(p + (static_cast<uint64_t>(e0) + 4 * q) * 4),
                                       f + 4 * q);
  } else if (P == 8) {
    amk_ftype<X>::unpack(amk_ld16(p + static_cast<uint64_t>(e0) * 2), f);
  } else {  // four 2-byte elements: one 8-byte load
    uint32_t a, b;
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];"
                 : "=r"(a), "=r"(b)
                 : "l"(p + static_cast<uint64_t>(e0) * 2));
    if (X == AMK_DTYPE_BF16) {
      amk_unpack_bf16x2(a, f[0], f[1]);
      amk_unpack_bf16x2(b, f[2], f[3]);
    } else {
      amk_unpack_f16x2(a, f[0], f[1]);
      amk_unpack_f16x2(b, f[2], f[3]);
    }
  }
}

// The same with the dtype a (uniform) runtime value: f16, bf16, anything else read as f32.
template <uint32_t P>
__device__ __forceinline__ void amk_load_elems_dt(const unsigned char* p, uint32_t dtype,
                                                  uint32_t e0, float* f) {
  if (dtype == AMK_DTYPE_BF16)
    amk_load_elems<AMK_DTYPE_BF16, P>(p, e0, f);
  else if (dtype == AMK_DTYPE_F16)
    amk_load_elems<AMK_DTYPE_F16, P>(p, e0, f);
  else
    amk_load_elems<AMK_DTYPE_F32, P>(p, e0, f);
}

__device__ __forceinline__ bool amk_aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & (kAmkVectorBytes - 1)) == 0;
}
