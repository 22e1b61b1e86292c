// gemv: y[r] = sum_k w[r, k] * x[k] (+ residual[r]), rows = extent(w) / extent(x), f32
// accumulation. Weights are f32, f16 or bf16 and stream from HBM once, so the op is a bandwidth
// problem: one warp per row (rows interleaved over the warps), 16-byte loads that skip L1, and
// the next batch of loads (possibly the next row's) issued before the current batch is reduced,
// so each warp always has loads in flight. x is small and reused by every row: it stays in L1.
// When the w buffer has a TMA spec the op streams tiles through the copy engine instead
// (amk_ops_tma.cuh).
#ifndef AMK_OPS_GEMV_CUH
#define AMK_OPS_GEMV_CUH

#include "amk_device.cuh"

#if AMK_USE_OP_GEMV

// Which (weight, x) dtype pairs get a vectorized instantiation. The generated source names the
// pairs the program uses; compiled by hand without any, all nine are built. Other pairs run the
// scalar path.
#if !defined(AMK_GEMV_PAIRS_LISTED)
#define AMK_GEMV_F32_F32 1
#define AMK_GEMV_F32_F16 1
#define AMK_GEMV_F32_BF16 1
#define AMK_GEMV_F16_F32 1
#define AMK_GEMV_F16_F16 1
#define AMK_GEMV_F16_BF16 1
#define AMK_GEMV_BF16_F32 1
#define AMK_GEMV_BF16_F16 1
#define AMK_GEMV_BF16_BF16 1
#endif

constexpr uint32_t kAmkGemvUnroll = 8;  // 16-byte weight loads per lane per batch (x2 in flight)
constexpr uint32_t kAmkGemvBatch = kAmkWarpSize * kAmkGemvUnroll;  // vectors per warp batch

// x[e0 .. e0 + P) as floats; e0 is a multiple of P and x is 16-byte aligned.
template <uint32_t X, uint32_t P>
__device__ __forceinline__ void amk_gemv_load_x(const unsigned char* x, uint32_t e0, float* f) {
  if (X == AMK_DTYPE_F32) {
#pragma unroll
    for (uint32_t q = 0; q < P / 4; ++q)
      amk_ftype<AMK_DTYPE_F32>::unpack(amk_ld16(x + (static_cast<uint64_t>(e0) + 4 * q) * 4),
                                       f + 4 * q);
  } else if (P == 8) {
    amk_ftype<X>::unpack(amk_ld16(x + static_cast<uint64_t>(e0) * 2), f);
  } else {  // four 2-byte elements: one 8-byte load
    uint32_t a, b;
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];"
                 : "=r"(a), "=r"(b)
                 : "l"(x + static_cast<uint64_t>(e0) * 2));
    if (X == AMK_DTYPE_BF16) {
      amk_unpack_bf16x2(a, f[0], f[1]);
      amk_unpack_bf16x2(b, f[2], f[3]);
    } else {
      amk_unpack_f16x2(a, f[0], f[1]);
      amk_unpack_f16x2(b, f[2], f[3]);
    }
  }
}

// Row r's result: + residual[r], stored in y's dtype. One lane calls this.
__device__ __forceinline__ void amk_gemv_store_row(const amk_view& y, const amk_view& res,
                                                   uint32_t r, float acc) {
  if (res.present()) acc += amk_load_f32(res, r);
  amk_store_f32(y, r, acc);
}

template <uint32_t W, uint32_t X>
__device__ __forceinline__ void amk_gemv_vector(const unsigned char* w, const unsigned char* x,
                                                uint32_t k, uint32_t rows, const amk_view& y,
                                                const amk_view& res) {
  typedef amk_ftype<W> TW;
  constexpr uint32_t kPer = TW::per_vec;
  const uint32_t vecs_per_row = k / kPer;
  const uint64_t row_bytes = static_cast<uint64_t>(vecs_per_row) * kAmkVectorBytes;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  const uint32_t batches_per_row = (vecs_per_row + kAmkGemvBatch - 1) / kAmkGemvBatch;
  const uint32_t my_rows = rows > warp ? (rows - warp + kAmkWarps - 1) / kAmkWarps : 0;
  const uint32_t batches = my_rows * batches_per_row;
  if (batches == 0) return;

  amk_vec16 cur[kAmkGemvUnroll], nxt[kAmkGemvUnroll];
  uint32_t row = warp, col = 0;
  auto load_batch = [&](amk_vec16* dst, uint32_t r, uint32_t c) {
    const unsigned char* p = w + r * row_bytes;
#pragma unroll
    for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) {
      const uint32_t v = c * kAmkGemvBatch + u * kAmkWarpSize + lane;
      if (v < vecs_per_row) dst[u] = amk_ld16_stream(p + static_cast<uint64_t>(v) * kAmkVectorBytes);
    }
  };
  load_batch(cur, row, col);
  float acc0 = 0.0f, acc1 = 0.0f;
  for (uint32_t b = 0; b < batches; ++b) {
    uint32_t next_row = row, next_col = col + 1;
    if (next_col == batches_per_row) {
      next_col = 0;
      next_row += kAmkWarps;
    }
    if (b + 1 < batches) load_batch(nxt, next_row, next_col);
#pragma unroll
    for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) {
      const uint32_t v = col * kAmkGemvBatch + u * kAmkWarpSize + lane;
      if (v < vecs_per_row) {
        float wf[kPer], xf[kPer];
        TW::unpack(cur[u], wf);
        amk_gemv_load_x<X, kPer>(x, v * kPer, xf);
#pragma unroll
        for (uint32_t e = 0; e < kPer; e += 2) {
          acc0 = fmaf(wf[e], xf[e], acc0);
          acc1 = fmaf(wf[e + 1], xf[e + 1], acc1);
        }
      }
    }
    if (col + 1 == batches_per_row) {
      const float acc = amk_warp_sum(acc0 + acc1);
      if (lane == 0) amk_gemv_store_row(y, res, row, acc);
      acc0 = acc1 = 0.0f;
    }
#pragma unroll
    for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) cur[u] = nxt[u];
    row = next_row;
    col = next_col;
  }
}

// Any dtypes, any alignment: one element at a time, one warp per row.
__device__ __forceinline__ void amk_gemv_scalar(const amk_view& w, const amk_view& x, uint32_t k,
                                                uint32_t rows, const amk_view& y,
                                                const amk_view& res) {
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t r = warp; r < rows; r += kAmkWarps) {
    const uint64_t base = static_cast<uint64_t>(r) * k;
    float acc = 0.0f;
    for (uint32_t i = lane; i < k; i += kAmkWarpSize)
      acc = fmaf(amk_load_f32(w, base + i), amk_load_f32(x, i), acc);
    acc = amk_warp_sum(acc);
    if (lane == 0) amk_gemv_store_row(y, res, r, acc);
  }
}

#define AMK_GEMV_CASE(WN, XN)                                                     \
  if (w.dtype == AMK_DTYPE_##WN && x.dtype == AMK_DTYPE_##XN) {                   \
    amk_gemv_vector<AMK_DTYPE_##WN, AMK_DTYPE_##XN>(w.ptr, x.ptr, k, rows, y, res); \
    return;                                                                       \
  }

__device__ __forceinline__ void amk_gemv_plain(const amk_view& w, const amk_view& x,
                                               const amk_view& y, const amk_view& res) {
  const uint32_t k = x.n;
  if (k == 0) return;
  const uint32_t rows = w.n / k;
  const uint64_t row_bytes = static_cast<uint64_t>(k) * amk_dtype_size(w.dtype);
  if (amk_aligned16(w.ptr) && amk_aligned16(x.ptr) && row_bytes % kAmkVectorBytes == 0) {
#if AMK_GEMV_F32_F32
    AMK_GEMV_CASE(F32, F32)
#endif
#if AMK_GEMV_F32_F16
    AMK_GEMV_CASE(F32, F16)
#endif
#if AMK_GEMV_F32_BF16
    AMK_GEMV_CASE(F32, BF16)
#endif
#if AMK_GEMV_F16_F32
    AMK_GEMV_CASE(F16, F32)
#endif
#if AMK_GEMV_F16_F16
    AMK_GEMV_CASE(F16, F16)
#endif
#if AMK_GEMV_F16_BF16
    AMK_GEMV_CASE(F16, BF16)
#endif
#if AMK_GEMV_BF16_F32
    AMK_GEMV_CASE(BF16, F32)
#endif
#if AMK_GEMV_BF16_F16
    AMK_GEMV_CASE(BF16, F16)
#endif
#if AMK_GEMV_BF16_BF16
    AMK_GEMV_CASE(BF16, BF16)
#endif
  }
  amk_gemv_scalar(w, x, k, rows, y, res);
}
#undef AMK_GEMV_CASE

#if AMK_TMA_GEMV
#include "amk_ops_tma.cuh"
#endif

#if AMK_TMA_GEMV
AMK_OP_FN void amk_op_gemv(const amk_device_program_t& prog, const amk_instruction_t& ins,
                           unsigned char* scratch, const amk_tma_table_t* tma) {
  const amk_view w = amk_operand(ins, 0);
  const amk_view x = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  if (amk_gemv_tma(prog, ins, w, x, y, res, tma)) return;
  amk_gemv_plain(w, x, y, res);
}
#else
AMK_OP_FN void amk_op_gemv(const amk_device_program_t&, const amk_instruction_t& ins,
                           unsigned char*) {
  amk_gemv_plain(amk_operand(ins, 0), amk_operand(ins, 1), amk_operand(ins, 2),
                 amk_operand(ins, 3));
}
#endif

#endif  // AMK_USE_OP_GEMV
#endif  // AMK_OPS_GEMV_CUH
