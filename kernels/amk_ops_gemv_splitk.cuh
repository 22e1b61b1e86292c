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

#if AMK_USE_OP_GEMV_SPLITK || AMK_USE_OP_ATTENTION_COMBINE_SPLITK || AMK_USE_OP_GEMV_T
__device__ __forceinline__ void amk_red_add_v4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}
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

#if AMK_USE_OP_GEMV_T
// gemv_t: y[n] += sum_{k < K} x[k] * w[k * ld + n] (+ residual[n]), n < N = extent(y): the matrix
// stored transposed, K rows of N. Each row is read whole and contiguous (a warp's load is 512
// contiguous bytes), so a gemv cut along K (the down projection of the gate/up rows a block just
// made) streams like a row-range gemv instead of gathering row pieces (gemv_splitk's 128-byte
// segments 16 KiB apart). Thread t owns 16-byte column vectors t, t + blockDim, ...: its 8
// sums stay in registers over all K rows, with no cross-lane reduction, and go out as vector
// atomics (scalar ones where y is not 16-byte aligned). That streaming path takes bf16 weights,
// rows of whole vectors, K a multiple of the batch and at most AMK_SCRATCH_BYTES / 4 (x staged
// in the op scratch); anything else takes a thread per column (correct, slow: the tests' odd
// shapes).
// Rows a batch: two batches of AMK_GEMV_T_UNROLL 16-byte loads a thread in flight (4: 32 KiB a
// block; at 8, as the row-range gemv's 64 KiB, the 1B step's VM spills ~250 bytes around the call).
#ifndef AMK_GEMV_T_UNROLL
#define AMK_GEMV_T_UNROLL 4
#endif
constexpr uint32_t kAmkGemvTUnroll = AMK_GEMV_T_UNROLL;
static_assert(kAmkGemvTUnroll >= 1 && kAmkGemvTUnroll <= 32, "AMK_GEMV_T_UNROLL in [1, 32]");

// Column c's sums acc (+ the residual) into y, vector atomics where y is 16-byte aligned; acc
// starts over for the next column.
template <uint32_t kPer>
__device__ __forceinline__ void amk_gemv_t_flush(float (&acc)[kPer], uint32_t c, float* y,
                                                 const amk_view& res) {
  const uint32_t n0 = c * kPer;
  if (res.present()) {
#pragma unroll
    for (uint32_t i = 0; i < kPer; ++i) acc[i] += amk_load_f32(res, n0 + i);
  }
  if (amk_aligned16(y)) {
#pragma unroll
    for (uint32_t i = 0; i < kPer; i += 4)
      amk_red_add_v4(y + n0 + i, acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
  } else {
#pragma unroll
    for (uint32_t i = 0; i < kPer; ++i) atomicAdd(y + n0 + i, acc[i]);
  }
#pragma unroll
  for (uint32_t i = 0; i < kPer; ++i) acc[i] = 0.0f;
}

// acc[i] += x[r] * w[r][i] over the kU rows of a batch (v[u]: row u's vector, xr: its x values).
template <uint32_t W, uint32_t kU>
__device__ __forceinline__ void amk_gemv_t_sum(const amk_vec16 (&v)[kU], const float* xr,
                                               float (&acc)[amk_ftype<W>::per_vec]) {
#pragma unroll
  for (uint32_t u = 0; u < kU; ++u) {
    const float xv = xr[u];
    float f[amk_ftype<W>::per_vec];
    amk_ftype<W>::unpack(v[u], f);
#pragma unroll
    for (uint32_t i = 0; i < amk_ftype<W>::per_vec; ++i) acc[i] = fmaf(xv, f[i], acc[i]);
  }
}

// This thread's share of a gemv_t taken in batches of kU rows: its columns (vectors c0,
// c0 + blockDim, ...) one after the other, each over all K rows (K a multiple of kU, so a batch
// never straddles a column).
template <uint32_t kU>
struct amk_gemv_t_walk {
  uint32_t c0, per_col, batches;
  __device__ __forceinline__ amk_gemv_t_walk(uint32_t vecs, uint32_t k)
      : c0(threadIdx.x), per_col(k / kU) {
    const uint32_t ncols = c0 < vecs ? (vecs - c0 + AMK_BLOCK_THREADS - 1) / AMK_BLOCK_THREADS : 0;
    batches = ncols * per_col;
  }
  // Batch b: its vector column and its first row.
  __device__ __forceinline__ void at(uint32_t b, uint32_t& column, uint32_t& r0) const {
    const uint32_t col = b / per_col;
    column = c0 + col * AMK_BLOCK_THREADS;
    r0 = (b - col * per_col) * kU;
  }
};

// x (K values) into shared memory for the whole block.
__device__ __forceinline__ void amk_gemv_t_stage_x(const amk_view& x, uint32_t k, float* xs) {
  for (uint32_t i = threadIdx.x; i < k; i += AMK_BLOCK_THREADS) xs[i] = amk_load_f32(x, i);
  __syncthreads();
}

// The streaming path: K a multiple of kU, x staged in shared memory (xs) while the first batch
// loads; the thread's batches (amk_gemv_t_walk) as one sequence with two in flight, across
// column boundaries.
template <uint32_t W>
__device__ __forceinline__ void amk_gemv_t_stream(const unsigned char* w, uint64_t ld_bytes,
                                                  uint32_t k, uint32_t vecs, float* y,
                                                  const amk_view& res, const amk_view& x,
                                                  float* xs) {
  constexpr uint32_t kPer = amk_ftype<W>::per_vec;
  constexpr uint32_t kU = kAmkGemvTUnroll;
  const amk_gemv_t_walk<kU> walk(vecs, k);
  const uint32_t batches = walk.batches;
  auto load = [&](amk_vec16 (&v)[kU], uint32_t b) {
    uint32_t column, r0;
    walk.at(b, column, r0);
    const unsigned char* p = w + r0 * ld_bytes + 16ull * column;
#pragma unroll
    for (uint32_t u = 0; u < kU; ++u) v[u] = amk_ld16_stream(p + u * ld_bytes);
  };
  float acc[kPer];
#pragma unroll
  for (uint32_t i = 0; i < kPer; ++i) acc[i] = 0.0f;
  auto consume = [&](const amk_vec16 (&v)[kU], uint32_t b) {
    uint32_t column, r0;
    walk.at(b, column, r0);
    amk_gemv_t_sum<W, kU>(v, xs + r0, acc);
    if (r0 + kU == k) amk_gemv_t_flush<kPer>(acc, column, y, res);
  };
  amk_vec16 va[kU], vb[kU];
  if (batches != 0) load(va, 0);  // in flight while x is staged (its own round trip)
  amk_gemv_t_stage_x(x, k, xs);
  for (uint32_t b = 0; b < batches; b += 2) {
    if (b + 1 < batches) load(vb, b + 1);
    consume(va, b);
    if (b + 2 < batches) load(va, b + 2);
    if (b + 1 < batches) consume(vb, b + 1);
  }
}

// AMK_GEMV_T_RING: where the launch has gemv's ring of dynamic shared memory (the decode steps:
// codegen sized it, AMK_GEMV_RING_SLOT_BYTES), the streaming path copies its weights through it
// with cp.async instead of registers: each thread its own AMK_GEMV_SMEM_STAGES x 128 bytes of it
// (16 vectors at 2 stages), in slots of AMK_GEMV_T_RING_ROWS rows, all but one in flight while one
// is summed. The ring is free while gemv_t runs: a gemv fills it only inside its own step and
// drains it before it returns, as this op does.
#if AMK_USE_OP_GEMV && defined(AMK_GEMV_RING_SLOT_BYTES) && AMK_GEMV_SMEM_STAGES >= 2
#define AMK_GEMV_T_RING 1
#ifndef AMK_GEMV_T_RING_ROWS
#define AMK_GEMV_T_RING_ROWS 4
#endif
constexpr uint32_t kAmkGemvTRingVecs = AMK_GEMV_SMEM_STAGES * AMK_GEMV_RING_SLOT_BYTES /
                                       kAmkWarpSize / kAmkVectorBytes;  // a thread's share
constexpr uint32_t kAmkGemvTRingRows = AMK_GEMV_T_RING_ROWS;
constexpr uint32_t kAmkGemvTRingSlots = kAmkGemvTRingVecs / kAmkGemvTRingRows;
static_assert(kAmkGemvTRingSlots >= 2, "AMK_GEMV_T_RING_ROWS leaves fewer than two slots");

template <uint32_t W>
__device__ __forceinline__ void amk_gemv_t_ring(const unsigned char* w, uint64_t ld_bytes,
                                                uint32_t k, uint32_t vecs, float* y,
                                                const amk_view& res, const amk_view& x,
                                                float* xs) {
  constexpr uint32_t kPer = amk_ftype<W>::per_vec;
  constexpr uint32_t kU = kAmkGemvTRingRows, kS = kAmkGemvTRingSlots;
  const amk_gemv_t_walk<kU> walk(vecs, k);
  const uint32_t batches = walk.batches;
  // Slot s, row u of this thread: a 16-byte vector; consecutive threads side by side.
  const uint32_t base = amk_smem_addr(amk_dynamic_smem) + threadIdx.x * kAmkVectorBytes;
  auto slot_addr = [&](uint32_t s, uint32_t u) {
    return base + (s * kU + u) * AMK_BLOCK_THREADS * kAmkVectorBytes;
  };
#if AMK_STREAM_EVICT_FIRST
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  // Batch b into slot b % kS; one commit group a call, empty past the last batch.
  auto issue = [&](uint32_t b) {
    if (b < batches) {
      uint32_t column, r0;
      walk.at(b, column, r0);
      const uint32_t s = b % kS;
      const unsigned char* p = w + r0 * ld_bytes + 16ull * column;
#pragma unroll
      for (uint32_t u = 0; u < kU; ++u) {
#if AMK_STREAM_EVICT_FIRST
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
                     ::"r"(slot_addr(s, u)), "l"(p + u * ld_bytes), "l"(policy) : "memory");
#else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                     ::"r"(slot_addr(s, u)), "l"(p + u * ld_bytes) : "memory");
#endif
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (uint32_t b = 0; b < kS; ++b) issue(b);  // in flight while x is staged
  amk_gemv_t_stage_x(x, k, xs);
  float acc[kPer];
#pragma unroll
  for (uint32_t i = 0; i < kPer; ++i) acc[i] = 0.0f;
  for (uint32_t b = 0; b < batches; ++b) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kS - 1) : "memory");  // batch b has landed
    // (walk.at's arithmetic spelled out: the column is wanted only at the flush)
    const uint32_t col = b / walk.per_col, r0 = (b - col * walk.per_col) * kU, s = b % kS;
    amk_vec16 v[kU];
#pragma unroll
    for (uint32_t u = 0; u < kU; ++u)
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u].w[0]), "=r"(v[u].w[1]), "=r"(v[u].w[2]), "=r"(v[u].w[3])
                   : "r"(slot_addr(s, u))
                   : "memory");
    issue(b + kS);  // into the slot just read
    amk_gemv_t_sum<W, kU>(v, xs + r0, acc);
    if (r0 + kU == k) amk_gemv_t_flush<kPer>(acc, walk.c0 + col * AMK_BLOCK_THREADS, y, res);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // nothing lands after the op is gone
}
#else
#define AMK_GEMV_T_RING 0
#endif

// Operands w, x, y (f32), residual?; param ld (0: N). A call, as gemv_splitk.
__device__ __noinline__ void amk_op_gemv_t(const amk_device_program_t&, const amk_instruction_t& ins,
                                           unsigned char* scratch) {
  const amk_view w = amk_operand(ins, 0);
  const amk_view x = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  const uint32_t k = x.n, n = y.n;
  if (k == 0 || n == 0) return;
  const uint64_t ld = ins.params[0] != 0 ? ins.params[0] : n;
  const uint32_t es = amk_dtype_size(w.dtype);
  const uint64_t row_bytes = static_cast<uint64_t>(n) * es, ld_bytes = ld * es;
  float* yp = reinterpret_cast<float*>(y.ptr);
  const bool vector = w.dtype == AMK_DTYPE_BF16 && amk_aligned16(w.ptr) &&
                      row_bytes % kAmkVectorBytes == 0 && ld_bytes % kAmkVectorBytes == 0 &&
                      k <= AMK_SCRATCH_BYTES / sizeof(float);
  const uint32_t vecs = static_cast<uint32_t>(row_bytes / kAmkVectorBytes);
#if AMK_GEMV_T_RING
  if (vector && k % kAmkGemvTRingRows == 0) {
    amk_gemv_t_ring<AMK_DTYPE_BF16>(w.ptr, ld_bytes, k, vecs, yp, res, x,
                                    reinterpret_cast<float*>(scratch));
    return;
  }
#endif
  if (vector && k % kAmkGemvTUnroll == 0) {
    amk_gemv_t_stream<AMK_DTYPE_BF16>(w.ptr, ld_bytes, k, vecs, yp, res, x,
                                      reinterpret_cast<float*>(scratch));
    return;
  }
  // Any other shape or dtype: a thread per output column, over the K rows.
  for (uint32_t j = threadIdx.x; j < n; j += AMK_BLOCK_THREADS) {
    float acc = 0.0f;
    for (uint32_t r = 0; r < k; ++r) acc = fmaf(amk_load_f32(x, r), amk_load_f32(w, r * ld + j), acc);
    atomicAdd(yp + j, acc + (res.present() ? amk_load_f32(res, j) : 0.0f));
  }
}
#endif  // AMK_USE_OP_GEMV_T
#endif  // AMK_OPS_GEMV_SPLITK_CUH
