// gemv_splitk: y[r] += sum_{k < K} w[r * ld + k] * x[k] (+ residual[r]), r < rows = extent(y),
// each row's sum added to y with one atomic add (y f32). Instructions over different K ranges of
// the same rows need no order among themselves, so a matrix can be cut along K and each piece
// run on the block that just produced its slice of x, with no phase barrier in between (the
// Llama generator's down projection: each gate/up block multiplies its own 64 outputs).
//
// A row's K range is short (64-256 elements in that use), so one warp covers several rows per
// load: P lanes per row (the power of two at or above G = row bytes / 16 <= 32), lane j of a row
// loading its vector j (lanes j >= G re-load vector G - 1 against zeros in x: no condition on a
// load), the lane's x values held in registers for the whole instruction, kAmkSplitkUnroll loads
// in flight per lane, the row's sum reduced over its P lanes with shuffles. Anything else (rows
// over 512 bytes, rows not whole vectors, unaligned operands) takes a warp-per-row scalar path.
//
// attention_combine_splitk is the same loop with x made on the spot: the op asks L2 for its weight
// rows, merges its query heads' attention chunks (amk_combine_heads, amk_ops_attention.cuh) into
// shared memory, then multiplies. (The VM asking for the rows before the waits too measured
// slower on the H200, 1B step 1.250 vs 1.199 ms, and was removed.) (Holding the
// first batch of weights in registers across the merge instead made ptxas spill ~8 KiB in this
// function and ~2.4 KiB in the 1B step's VM.) An attention output projection cut by query heads
// this way needs no combine step and no phase barrier between attention and the projection: each
// piece waits only for its own kv head's chunks.
#ifndef AMK_OPS_GEMV_SPLITK_CUH
#define AMK_OPS_GEMV_SPLITK_CUH

#include "amk_device.cuh"
#if AMK_USE_OP_ATTENTION_COMBINE_SPLITK
#include "amk_ops_attention.cuh"  // amk_combine_heads
#endif

#if AMK_USE_OP_GEMV_SPLITK || AMK_USE_OP_ATTENTION_COMBINE_SPLITK

// 16-byte weight loads per lane in flight (one batch at a time: two batches in flight, a register
// buffer each, made ptxas spill kilobytes in this called function). Measured on the H200
// (Llama-3.2-1B down projection, 256 KiB a block in rows of 128 bytes 16 KiB apart): 19-20 us an
// instruction with batches of 8, 16 or 32, with or without the L2 prefetch below, the rotation
// or vector atomics, against 13 us for a row-range gemv of the same bytes: bound by the scattered
// 128-byte reads, not by loads in flight or atomics (README, performance).
#ifndef AMK_SPLITK_UNROLL
#define AMK_SPLITK_UNROLL 16
#endif
constexpr uint32_t kAmkSplitkUnroll = AMK_SPLITK_UNROLL;
static_assert(kAmkSplitkUnroll >= 1 && kAmkSplitkUnroll <= 64, "AMK_SPLITK_UNROLL in [1, 64]");
// AMK_SPLITK_PREFETCH=1: before its first load, each warp asks L2 for every weight line it will
// read (prefetch.global.L2, one lane a line): the whole instruction's weights in flight at once,
// with no registers held for them.
#ifndef AMK_SPLITK_PREFETCH
#define AMK_SPLITK_PREFETCH 0
#endif
// Every block of a split-K phase adds into the same rows. Walked in the same order, 128 blocks
// would hit the same few addresses at the same time, and L2 serializes atomics to one address.
// AMK_SPLITK_ROTATE=1: block b starts its walk b/grid of the way down the rows (a multiple of 4).
#ifndef AMK_SPLITK_ROTATE
#define AMK_SPLITK_ROTATE 1
#endif
// AMK_SPLITK_RED_V4=1: with 4 or more rows a warp load (rows of <= 128 bytes), the sums of 4
// consecutive rows go out as one vector atomic (red.global.add.v4.f32, sm_90): a quarter of the
// atomics. Needs rows % 4 == 0 and y 16-byte aligned; otherwise one atomic a row.
#ifndef AMK_SPLITK_RED_V4
#define AMK_SPLITK_RED_V4 1
#endif

__device__ __forceinline__ void amk_red_add_v4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}

// Vector path: weights of dtype W, G <= P vectors a row, P lanes per row; x_at(k) is x[k].
template <uint32_t W, uint32_t P, class XAt>
__device__ __forceinline__ void amk_splitk_vector(const unsigned char* w, uint32_t G,
                                                  uint64_t ld_bytes, XAt&& x_at, uint32_t rows,
                                                  float* y, const amk_view& res) {
  constexpr uint32_t kPer = amk_ftype<W>::per_vec;
  constexpr uint32_t kRows = kAmkWarpSize / P;  // rows per warp per load
  constexpr uint32_t kU = kAmkSplitkUnroll;
  const uint32_t lane = threadIdx.x % kAmkWarpSize, warp = threadIdx.x / kAmkWarpSize;
  const uint32_t g = lane / P, j = lane % P;
  float xr[kPer];  // this lane's values of x (zeros past the row)
#pragma unroll
  for (uint32_t i = 0; i < kPer; ++i) xr[i] = j < G ? x_at(j * kPer + i) : 0.0f;
  const unsigned char* wl = w + 16ull * min(j, G - 1);
  const bool has_res = res.present();
  uint32_t rot = 0;  // logical row r is physical row (r + rot) % rows
#if AMK_SPLITK_ROTATE
  rot = static_cast<uint32_t>(static_cast<uint64_t>(blockIdx.x) * rows / gridDim.x) & ~3u;
  if (rot >= rows) rot = 0;
#endif
  auto phys = [&](uint32_t r) { return r + rot < rows ? r + rot : r + rot - rows; };
  const bool v4 = AMK_SPLITK_RED_V4 && kRows >= 4 && rows % 4 == 0 && amk_aligned16(y);
#if AMK_SPLITK_PREFETCH
  if ((j & 7u) == 0 && j < G)
    for (uint32_t r = warp * kRows + g; r < rows; r += kRows * kAmkWarps)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(wl + phys(r) * ld_bytes));
#endif
  constexpr uint32_t kStride = kRows * kAmkWarps;  // rows between a warp's consecutive loads
  // Batch at warp row `base` (warp-uniform): row base + g + u * kStride for u < kU.
  auto load = [&](amk_vec16 (&v)[kU], uint32_t base) {
#pragma unroll
    for (uint32_t u = 0; u < kU; ++u) {
      const uint32_t r = base + g + u * kStride;
      const uint32_t rr = r < rows ? r : rows - 1;  // past the end: re-read the last row, unused
      v[u] = amk_ld16_stream(wl + phys(rr) * ld_bytes);
    }
  };
  auto consume = [&](const amk_vec16 (&v)[kU], uint32_t base) {
#pragma unroll
    for (uint32_t u = 0; u < kU; ++u) {
      float f[kPer];
      amk_ftype<W>::unpack(v[u], f);
      float acc = 0.0f;
#pragma unroll
      for (uint32_t i = 0; i < kPer; ++i) acc = fmaf(f[i], xr[i], acc);
#pragma unroll
      for (uint32_t o = P / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(kAmkFullMask, acc, o);
      const uint32_t r = base + g + u * kStride, pr = phys(r);
      if (has_res && j == 0 && r < rows) acc += amk_load_f32(res, pr);
      if constexpr (kRows >= 4) {
        if (v4) {  // rows r .. r + 3 (g % 4 == 0: r and pr are multiples of 4)
          const float s1 = __shfl_down_sync(kAmkFullMask, acc, P);
          const float s2 = __shfl_down_sync(kAmkFullMask, acc, 2 * P);
          const float s3 = __shfl_down_sync(kAmkFullMask, acc, 3 * P);
          if (j == 0 && (g & 3u) == 0 && r < rows) amk_red_add_v4(y + pr, acc, s1, s2, s3);
          continue;
        }
      }
      if (j == 0 && r < rows) atomicAdd(y + pr, acc);
    }
  };
  constexpr uint32_t kStep = kStride * kU;  // rows between a warp's consecutive batches
  amk_vec16 va[kU];
  for (uint32_t base = warp * kRows; base < rows; base += kStep) {
    load(va, base);
    consume(va, base);
  }
}

template <uint32_t W, class XAt>
__device__ __forceinline__ bool amk_splitk_lanes(uint32_t vecs, const unsigned char* w,
                                                 uint64_t ld_bytes, XAt&& x_at, uint32_t rows,
                                                 float* y, const amk_view& res) {
  if (vecs == 0 || vecs > kAmkWarpSize) return false;
  if (vecs <= 1) amk_splitk_vector<W, 1>(w, vecs, ld_bytes, x_at, rows, y, res);
  else if (vecs <= 2) amk_splitk_vector<W, 2>(w, vecs, ld_bytes, x_at, rows, y, res);
  else if (vecs <= 4) amk_splitk_vector<W, 4>(w, vecs, ld_bytes, x_at, rows, y, res);
  else if (vecs <= 8) amk_splitk_vector<W, 8>(w, vecs, ld_bytes, x_at, rows, y, res);
  else if (vecs <= 16) amk_splitk_vector<W, 16>(w, vecs, ld_bytes, x_at, rows, y, res);
  else amk_splitk_vector<W, 32>(w, vecs, ld_bytes, x_at, rows, y, res);
  return true;
}

// Both ops: y[r] += sum_{k < K} w[r * ld + k] * x_at(k) (+ residual[r]); the vector path where
// the weights allow, else a warp per row.
template <class XAt>
__device__ __forceinline__ void amk_splitk_run(const amk_view& w, uint32_t k, uint64_t ld,
                                               const amk_view& y, const amk_view& res,
                                               XAt&& x_at) {
  const uint32_t rows = y.n;
  const uint32_t es = amk_dtype_size(w.dtype);
  const uint64_t row_bytes = static_cast<uint64_t>(k) * es, ld_bytes = ld * es;
  float* yp = reinterpret_cast<float*>(y.ptr);
  if (amk_aligned16(w.ptr) && row_bytes % kAmkVectorBytes == 0 && ld_bytes % kAmkVectorBytes == 0) {
    const uint32_t vecs = static_cast<uint32_t>(row_bytes / kAmkVectorBytes);
    bool done = false;
    if (w.dtype == AMK_DTYPE_BF16)
      done = amk_splitk_lanes<AMK_DTYPE_BF16>(vecs, w.ptr, ld_bytes, x_at, rows, yp, res);
    else if (w.dtype == AMK_DTYPE_F16)
      done = amk_splitk_lanes<AMK_DTYPE_F16>(vecs, w.ptr, ld_bytes, x_at, rows, yp, res);
    else if (w.dtype == AMK_DTYPE_F32)
      done = amk_splitk_lanes<AMK_DTYPE_F32>(vecs, w.ptr, ld_bytes, x_at, rows, yp, res);
    if (done) return;
  }
  // Scalar path: a warp per row, lanes over K.
  const uint32_t lane = threadIdx.x % kAmkWarpSize, warp = threadIdx.x / kAmkWarpSize;
  for (uint32_t r = warp; r < rows; r += kAmkWarps) {
    float acc = 0.0f;
    for (uint32_t c = lane; c < k; c += kAmkWarpSize)
      acc = fmaf(amk_load_f32(w, r * ld + c), x_at(c), acc);
    acc = amk_warp_sum(acc);
    if (lane == 0) atomicAdd(yp + r, acc + (res.present() ? amk_load_f32(res, r) : 0.0f));
  }
}
#endif  // AMK_USE_OP_GEMV_SPLITK || AMK_USE_OP_ATTENTION_COMBINE_SPLITK

#if AMK_USE_OP_GEMV_SPLITK

// Operands w, x, y (f32), residual?; param ld (0: K). A call, not inlined: its own register
// allocation leaves the VM's (and the gemv loop's inside it) as it is without this op (inlined,
// the 1B step's VM went from 96 to 120-144 bytes of stack).
__device__ __noinline__ void amk_op_gemv_splitk(const amk_device_program_t&, const amk_instruction_t& ins,
                                        unsigned char*) {
  const amk_view w = amk_operand(ins, 0);
  const amk_view x = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  const uint32_t k = x.n;
  if (k == 0 || y.n == 0) return;
  const uint64_t ld = ins.params[0] != 0 ? ins.params[0] : k;
  amk_splitk_run(w, k, ld, y, res, [&](uint32_t c) { return amk_load_f32(x, c); });
}
#endif  // AMK_USE_OP_GEMV_SPLITK

#if AMK_USE_OP_ATTENTION_COMBINE_SPLITK
// x of one instruction: K = count * head_dim floats, at most the verifier's limit
// (kCombineSplitkMaxK in src/ops/registry.hpp, which the generated source passes here).
#ifndef AMK_COMBINE_SPLITK_MAX_K
#define AMK_COMBINE_SPLITK_MAX_K 1024
#endif
constexpr uint32_t kAmkCombineSplitkMaxK = AMK_COMBINE_SPLITK_MAX_K;
__shared__ __align__(16) float amk_combine_xs[kAmkCombineSplitkMaxK];

// K = count * head_dim of an instruction (params head_dim, heads, head0, count), 0 when its
// params are out of the registry's range (the verifier refuses those).
__device__ __forceinline__ uint32_t amk_combine_splitk_k(const amk_instruction_t& ins) {
  const uint32_t hd = ins.params[0], heads = ins.params[1], head0 = ins.params[2];
  if (head0 >= heads) return 0;
  const uint64_t k = static_cast<uint64_t>(ins.params[3] != 0 ? ins.params[3] : heads - head0) * hd;
  return k <= kAmkCombineSplitkMaxK ? static_cast<uint32_t>(k) : 0u;
}

// Asks L2 for rows [0, rows) of K weights, ld apart (one bulk prefetch a row piece, a thread a
// row in turn).
__device__ __forceinline__ void amk_splitk_prefetch_rows(const amk_view& w, uint64_t k, uint64_t ld,
                                                         uint32_t rows) {
  const uint32_t es = amk_dtype_size(w.dtype);
  for (uint32_t r = threadIdx.x; r < rows; r += AMK_BLOCK_THREADS)
    amk_prefetch_l2(w.ptr + r * ld * es, k * es);
}

// Operands w, partials (f32), y (f32), residual?; params head_dim, heads, head0, count (0: the
// rest), ld (0: K). A call, as gemv_splitk.
__device__ __noinline__ void amk_op_attention_combine_splitk(const amk_device_program_t&,
                                                             const amk_instruction_t& ins,
                                                             unsigned char*) {
  const amk_view w = amk_operand(ins, 0);
  const amk_view partials = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  const uint32_t hd = ins.params[0], heads = ins.params[1], head0 = ins.params[2];
  const uint32_t k = amk_combine_splitk_k(ins);
  const uint64_t block = static_cast<uint64_t>(heads) * (hd + 2);
  if (k == 0 || y.n == 0 || partials.n < block) return;  // (the verifier refuses these)
  const uint32_t chunks = static_cast<uint32_t>(partials.n / block);
  const float* p = reinterpret_cast<const float*>(partials.ptr);
  const uint64_t ld = ins.params[4] != 0 ? ins.params[4] : k;
  // The weights are not needed until x is made: ask L2 for them first (no registers held across
  // the merge, which needs its own), merge into shared memory, then the gemv_splitk loop.
  amk_splitk_prefetch_rows(w, k, ld, y.n);
  amk_combine_heads(p, chunks, block, hd, head0, k / hd, k / hd, 0,
                    [](uint64_t at, float v) { amk_combine_xs[at] = v; });
  __syncthreads();
  amk_splitk_run(w, k, ld, y, res, [](uint32_t c) { return amk_combine_xs[c]; });
}
#endif  // AMK_USE_OP_ATTENTION_COMBINE_SPLITK
#endif  // AMK_OPS_GEMV_SPLITK_CUH
