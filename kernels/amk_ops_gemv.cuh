// gemv: y[r] = sum_k w[r, k] * x[k] (+ residual[r]), rows = extent(w) / extent(x), f32
// accumulation. Weights are f32, f16 or bf16 and stream from HBM once, so the op is a bandwidth
// problem: one warp per row (rows interleaved over the warps), 16-byte loads that skip L1, and
// the next batch of loads (possibly the next row's) issued before the current batch is reduced,
// so each warp always has loads in flight (in registers, or, with AMK_GEMV_SMEM_STAGES, through
// a per-warp ring in shared memory, below). x is small and reused by every row: it stays in L1.
// When the w buffer has a TMA spec the op streams tiles through the copy engine instead
// (amk_ops_tma.cuh).
//
// Two optional fusions (template flags, so the plain instantiation does no extra work):
//  - norm: x' = x * inv_rms * norm, inv_rms = 1 / sqrt(mean(x^2) + eps) as rmsnorm computes it.
//    With the first weight batch in flight, the block stages x * norm in f32 in shared memory
//    (one pass, one barrier, which also reduces sum(x^2)); the inner loop then reads x' from
//    there and each row's sum is scaled by inv_rms once. (Measured on the H200: multiplying by
//    norm inside the inner loop, with x and norm loaded per vector from L1 and norm's dtype
//    switched at run time, made the fused gemvs 2-2.3x slower per byte than the plain ones.)
//    x' is kept in kPer/4 planes of 4 floats per vector, so a lane's two 16-byte reads of a
//    vector's 8 values hit consecutive addresses across the warp (no bank conflicts). Norm-fused
//    instructions with more than kAmkGemvStageFloats columns take the scalar path.
//  - w2 (GLU): y[r] = silu(W x')[r] * (W2 x')[r]. Row r of w and row r of w2 are two "virtual
//    rows" of the same pipeline, so w2's loads are in flight while w's row is reduced.
// Neither runs through TMA.
#ifndef AMK_OPS_GEMV_CUH
#define AMK_OPS_GEMV_CUH

#include "amk_device.cuh"
#include "amk_sync.cuh"  // AMK_GEMV_PRELOAD and amk_step_wait

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

// Which fusion combinations get vector instantiations (each as large as the plain one). The
// generated source may list those its gemv instructions use (AMK_GEMV_FUSIONS_LISTED plus
// AMK_GEMV_FUSE_NORM / _GLU / _NORM_GLU); otherwise all three are built. An unlisted combination
// still runs, on the scalar path.
#if !defined(AMK_GEMV_FUSIONS_LISTED)
#define AMK_GEMV_FUSE_NORM 1
#define AMK_GEMV_FUSE_GLU 1
#define AMK_GEMV_FUSE_NORM_GLU 1
#define AMK_GEMV_FUSE_COMBINE 1
#endif
// AMK_GEMV_FUSE_COMBINE (only where the generated source lists it: a gemv whose x is attention
// partials, params head_dim / heads, `amk gen llama --combine oproj`): x' is their merge, staged
// like the norm's x'. Without it such an instruction stops the launch (bad_operand).
#ifndef AMK_GEMV_FUSE_COMBINE
#define AMK_GEMV_FUSE_COMBINE 0
#endif

// AMK_GEMV_CLAMPED_LOADS=1 (the default): every lane loads all kAmkGemvUnroll vectors of a
// batch, the ones past the row's end re-reading its last vector (never used: the dot product skips
// them), so no load is conditional. With conditional loads (=0), the front end copies the 4
// registers of every vector that may stay unloaded before its load (phi copies), and in the VMs
// that also hold the fused variants those copies are ~120 more instructions in the plain loop's
// PTX (469 -> 589). Measured on the H200 (`amk profile --events`, Llama-3.2-1B step, one sweep):
// default layer 1.368 ms either way, fused layer 1.450 -> 1.311 ms; GEMV 8 x 4096^2 3.78 / 3.79
// TB/s.
#ifndef AMK_GEMV_CLAMPED_LOADS
#define AMK_GEMV_CLAMPED_LOADS 1
#endif
// AMK_GEMV_PINGPONG=1: the batch loop runs two batches an iteration with the two register
// buffers swapping roles, instead of copying the next batch's 32 registers into the current
// one's after every batch (copies the VM's plain loop keeps in PTX: 41 mov.u32 an iteration in
// the default VM, 161 in the fused layer's). Measured with clamped loads (same sweep as above):
// fused layer 1.311 -> 1.305 ms, but the default layer 1.368 -> 1.458 ms and GEMV 8 x 4096^2
// 3.79 -> 2.94 TB/s (ptxas spills more). Off by default.
#ifndef AMK_GEMV_PINGPONG
#define AMK_GEMV_PINGPONG 0
#endif
// AMK_GEMV_RES_PREFETCH=1: the residual, read by one lane per row after the row's reduction, has
// its lines prefetched into L1 when the instruction starts. Off by default since the eighteenth
// session: measured on the H200 (`amk profile --events --tuning-arms`, one process, gemv weights
// through the ring), Llama-3.2-1B step 1.0325 ms with it, 1.0159 without, 1.0413 with the
// prefetch moved after the waits (a waiting gemv's prefetch is otherwise dropped by the wait's
// acquire fence, which invalidates L1); Llama-3.1-8B 4.476 -> 4.458 without.
#ifndef AMK_GEMV_RES_PREFETCH
#define AMK_GEMV_RES_PREFETCH 0
#endif
__device__ __forceinline__ void amk_gemv_prefetch_res(const amk_view& res) {
  if (res.present() && threadIdx.x < kAmkWarpSize) {
    const uint64_t a0 = reinterpret_cast<uint64_t>(res.ptr);
    const uint64_t end = a0 + static_cast<uint64_t>(res.n) * amk_dtype_size(res.dtype);
    for (uint64_t a = (a0 & ~127ull) + 128ull * threadIdx.x; a < end; a += 128ull * kAmkWarpSize)
      amk_prefetch_l1(reinterpret_cast<const void*>(a));
  }
}
// AMK_GEMV_SMEM_STAGES (0 here; the generated source sets it, codegen's gemv_smem_stages): with
// N >= 2, each warp streams its weight batches through N slots of 4 KiB in dynamic shared memory
// (cp.async) instead of two register buffers. In registers the loop's copy of the next batch into
// the current one waits for that batch, so about one batch (32 KiB a block) is in flight while a
// block streams; the ring keeps N - 1 to N in flight with no registers held. Measured on the H200
// (`amk profile --events --tuning-arms`, one process): Llama-3.2-1B step 1.089 -> 1.036 ms at 2
// stages (3: 1.039, 4: 1.064), Llama-3.1-8B 4.868 -> 4.509 (3: 4.527); the GEMV benchmark (two
// blocks an SM, no waits) slower on the ring (8 x 4096^2: 71.5 -> 76.1 us), so it stays on
// registers there.
// A batch's turn (twenty-ninth session, traces of the 1B step, AMK_TRACE_MARKS_EARLY=4 and 8,
// medians): from its cp.async group complete to its values reduced, ~0.7 us for the first batch
// and for the second alike (q/k/v and lm_head 704 ns, gate/up 768, down 896, o_proj 960; the
// timer's steps are 32 ns), ~1400 cycles for ~170 PTX instructions: not cold code or cold x,
// and the SM clock was 1980 MHz (nvidia-smi) with ncu counting 1.12 instructions a cycle an SM
// over the step. Not the copies either: with each batch by one bulk copy (cp.async.bulk from
// lane 0 into the same slot, an mbarrier a slot; built, `--check`ed on the GPU, then removed) a
// batch still took 0.72 us from landed to reduced, and the 1B step 1.123x the time (0.9383 /
// 0.9372 / 0.9381 ms against 1.0525 / 1.0532 / 1.0541, `amk profile --events --tuning-arms`).
// Nor the multiply-adds' issue (thirty-second session; both built, `--check`ed on the GPU against
// the CPU backend and numpy, then removed): the norm-fused batches through tensor-core products
// (mma.sync m16n8k16, each lane's 16-byte vector the B operand as it lies in the ring, x' staged
// as bf16 pairs hi + lo in A's rows g and g + 8, the sum on the diagonal: two products and two
// shared loads a vector instead of 8 unpacks and 8 FFMAs) took the second batch's turn from
// 0.59 to 0.70 us (q/k/v) and the 1B step 1.027x, the 8B 1.009x. And x' read with every batch
// (x and norm from L1, each warp its own 1 / rms, no staging or block barrier) instead of staged
// once: the 1B step 1.351x, the 8B 1.283x, lm_head 4.49 -> 2.86 TB/s.
#ifndef AMK_GEMV_SMEM_STAGES
#define AMK_GEMV_SMEM_STAGES 0
#endif
// AMK_GEMV_WHOLE (0 here; the generated source sets 1 where the ring is in): with the ring, an
// instruction whose rows are whole batches (k a multiple of kAmkGemvBatch vectors: every Llama
// projection) streams them in a loop of its own, with no bound check or clamp a vector, so a
// batch's addresses are one base and constant offsets. Measured on the H200 (`amk profile
// --events --tuning-arms`, three rounds): the 1B step 0.9417 / 0.9418 / 0.9420 ms without,
// 0.9231 / 0.9228 / 0.9228 with (0.980x; twenty-ninth session); a warp's second batch from
// landed to reduced 0.70 -> 0.59 us in q/k/v, 0.96 -> 0.70 in o_proj, 0.93 -> 0.79 in down
// (AMK_TRACE_MARKS_EARLY=8). The 8B step 4.2875 / 4.2981 / 4.2946 -> 4.2347 / 4.2385 / 4.2368
// (0.987x; thirtieth). In SASS (nvdisasm) the loop took 423 instructions a batch (norm-fused;
// 64 FFMA) where the other took 471, ~60 of them still the addresses of x' and of the copies, a
// 32-bit index a vector widened to 64 bits apiece: both are now formed from one base a batch
// and each vector's offset as a constant.
#ifndef AMK_GEMV_WHOLE
#define AMK_GEMV_WHOLE 0
#endif
#if AMK_GEMV_WHOLE  // (the lambdas' extra argument; without it the code is the earlier one)
#define AMK_GEMV_WHOLE_ARG(x) , x
#define AMK_GEMV_WHOLE_ARG0(x) x
#else
#define AMK_GEMV_WHOLE_ARG(x)
#define AMK_GEMV_WHOLE_ARG0(x)
#endif
// AMK_GEMV_X_BATCH (0 in the kernel; the generated source sets 1 where gemvs wait and preload,
// the 1B decode step, but not with the wide attention tile, the 8B step: 0.4% slower there): the unfused gemv issues all of a batch's x loads before its first
// multiply-add instead of each vector's before its own, so that they are in flight together
// whatever else the VM holds. Without it ptxas's scheduling of those loads moved with the rest of
// the VM: the merge of `--combine oproj` compiled into the 1B step's VM took its down projection
// from 9.5 to 14.1 us a layer, the gemv's own code unchanged. Measured on the H200 (twenty-seventh
// session, `amk profile --events --tuning-arms`, three rounds): the 1B step (combine steps)
// 0.9854 / 0.9784 / 0.9787 ms without, 0.9751 / 0.9758 / 0.9748 with (down 9.5 -> 8.7 us); with
// the merge, 1.0447 / 1.0406 / 1.0417 without, 0.9515 / 0.9519 / 0.9502 with.
#ifndef AMK_GEMV_X_BATCH
#define AMK_GEMV_X_BATCH 0
#endif
// AMK_GEMV_COMBINE_LD8 (1): the o_proj merge (amk_gemv_stage_combine) reads a chunk's (m, l) and
// each half of a quad's values with one 8-byte load each (a partials row is hd + 2 floats, hd a
// multiple of 4: 8-byte aligned) instead of six 4-byte loads; 0: the 4-byte loads. Measured on
// the H200 (twenty-eighth session, `amk profile --events --tuning-arms`, the 1B step, three
// rounds): 0.9487 / 0.9511 / 0.9518 ms with the 4-byte loads, 0.9449 / 0.9457 / 0.9483 with these
// (0.996x); in the next call, beside attention's K/V before its wait, the 4-byte loads 1.0009x (a
// tie; the two together 1.0054x). Asked in the first call: the merging gemv's whole ring (its 16 rows a block) requested
// before its wait instead of one batch, 1.007x slower though o_proj's own span fell 0.34 us (the
// 64 KiB a block in flight while the attention chunks stream their K/V), so not kept.
#ifndef AMK_GEMV_COMBINE_LD8
#define AMK_GEMV_COMBINE_LD8 1
#endif
// AMK_GEMV_STAGE_ONE_TRIP (1): the norm-fused gemv's staging of x' = x * norm reads up to three
// of a thread's x and norm quads before it uses any, so the reads after the wait are one round
// trip to L2 for k <= 3072 at 256 threads (two for the 8B step's 4096), and gemv's ring issues
// the rest of its first batches between the last pass's reads and their use. 0: a loop of one
// quad a pass (two round trips for the 1B step's k = 2048, four for the 8B step's), the ring's
// rest after. The 1B step's trace (thirtieth session) put the q/k/v and gate/up gemvs' x' staged
// 2.4 and 2.9 us after the previous phase's last end, against 1.0 for the down projection, which
// stages nothing.
// With the ring only: with the weights in registers (the gemv_waits program's VM, two batches
// held across the wait) the three quads' registers made the VM spill. Three at once, not four:
// at four the 8B step's VM spilled (64 bytes). One round trip where k <= 3 * 4 * 256 = 3072.
// The ring's rest requested after x' is staged instead, so that the reads of x after the wait
// meet none of it (thirty-second session; built, `--check`ed, removed): a tie, the 1B step 1.002x
// and the 8B 1.002x, x' staged 1.29 -> 1.22 us after the wait in q/k/v (trace medians).
#ifndef AMK_GEMV_STAGE_ONE_TRIP
#define AMK_GEMV_STAGE_ONE_TRIP 1
#endif
constexpr uint32_t kAmkGemvStageTrip = AMK_GEMV_STAGE_ONE_TRIP ? 3 : 1;
// 16-byte weight loads per lane per batch (x2 in flight). Measured on the H200 (seventeenth
// session, `amk profile --tuning-arms`): 4 a lane reach each phase's first reduced batch ~0.5 us
// sooner (shorter memory queues) but stream slower (lm_head 4.25 -> 3.41 TB/s): 1B step +6%, 8B
// +15%; 6 a lane +16% / +11%.
constexpr uint32_t kAmkGemvUnroll = 8;
constexpr uint32_t kAmkGemvBatch = kAmkWarpSize * kAmkGemvUnroll;  // vectors per warp batch

// Staged x' of the norm-fused instantiations (16 KiB: a Llama-3.1-8B hidden state), and the
// per-warp sums of x^2 (kGemvStageBytes in src/cuda/codegen.cpp).
constexpr uint32_t kAmkGemvStageFloats = 4096;
#if AMK_GEMV_FUSE_NORM || AMK_GEMV_FUSE_NORM_GLU || AMK_GEMV_FUSE_COMBINE
__shared__ __align__(16) float amk_gemv_xs[kAmkGemvStageFloats];
__shared__ float amk_gemv_ss[kAmkWarps];
#endif

// Row r's result: + residual[r], stored in y's dtype. One lane calls this, when the row's sum is
// done, and the warp waits for residual[r] (an L2 round trip) before its next batch. Measured
// against it on the H200 (thirtieth session, `amk profile --events --tuning-arms`, three rounds):
// lane j keeping its warp's j-th row sum, reading the residuals before the warp's last batch and
// storing every row at the warp's end (built, `--check`ed on the GPU, removed): the 1B step
// 1.016x slower (0.9222 / 0.9224 / 0.9215 ms against 0.9064 / 0.9077 / 0.9078), the 8B 1.004x,
// and the GEMV benchmark, with no residual at all, 1.079x (its VM's code changed: 128 -> 111
// registers); predicted: o_proj and down -0.8 us a layer each.
__device__ __forceinline__ void amk_gemv_store_row(const amk_view& y, const amk_view& res,
                                                   uint32_t r, float acc) {
  if (res.present()) acc += amk_load_f32(res, r);
  amk_store_f32(y, r, acc);
}

// The optional fusions of one instruction (absent: null pointers, inv_rms 1).
struct amk_gemv_fuse {
  const unsigned char* norm;  // [K] rmsnorm weight, or null
  uint32_t norm_dtype;
  float eps;                  // rmsnorm epsilon (with norm)
  const unsigned char* w2;    // GLU up matrix, same row range and dtype as w, or null
#if AMK_GEMV_FUSE_COMBINE
  uint32_t combine_hd;        // x is attention partials (0: not): head_dim,
  uint32_t combine_heads;     // query heads a chunk,
  uint32_t combine_chunks;    // chunks
#endif
};

// silu(a) * b, as the silu_mul op computes it.
__device__ __forceinline__ float amk_gemv_glu(float a, float b) {
  return a / (1.0f + expf(-a)) * b;
}

// 1 / sqrt(mean(x^2) + eps), as amk_op_rmsnorm computes it. Each warp reduces x on its own
// (x is a few KiB, L1-resident): no block barrier in the gemv. Measured on the H200: a block
// reduction here, even when not taken, cost the unfused GEMV its L2-prefetch gain (3.7 -> 3.0
// TB/s on 8 x 4096x4096).
__device__ __forceinline__ float amk_gemv_inv_rms(const amk_view& x, float eps) {
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  float ss = 0.0f, ss2 = 0.0f;
  uint32_t done = 0;
  if (x.dtype == AMK_DTYPE_F32 && amk_aligned16(x.ptr)) {  // the usual case: 16-byte loads
    const uint32_t vecs = x.n / 4;
#pragma unroll 4
    for (uint32_t v = lane; v < vecs; v += kAmkWarpSize) {
      float f[4];
      amk_ftype<AMK_DTYPE_F32>::unpack(amk_ld16(x.ptr + 16ull * v), f);
      ss = fmaf(f[0], f[0], fmaf(f[1], f[1], ss));
      ss2 = fmaf(f[2], f[2], fmaf(f[3], f[3], ss2));
    }
    done = vecs * 4;
  }
  for (uint32_t i = done + lane; i < x.n; i += kAmkWarpSize) {
    const float v = amk_load_f32(x, i);
    ss = fmaf(v, v, ss);
  }
  ss = amk_warp_sum(ss + ss2);
  return 1.0f / sqrtf(ss / static_cast<float>(x.n) + eps);
}

#if AMK_GEMV_FUSE_COMBINE
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
  for (uint32_t q0 = threadIdx.x; q0 < quads; q0 += 2 * AMK_BLOCK_THREADS) {
    float big[2], total[2], acc[2][4];
    uint32_t at[2], dd[2];
#pragma unroll
    for (uint32_t i = 0; i < 2; ++i) {
      const uint32_t q = min(q0 + i * AMK_BLOCK_THREADS, quads - 1);  // (past the end: unused)
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
#if AMK_GEMV_COMBINE_LD8
          const float2 ml = *reinterpret_cast<const float2*>(r + hd - dd[i]);
          const float2 o01 = *reinterpret_cast<const float2*>(r);
          const float2 o23 = *reinterpret_cast<const float2*>(r + 2);
          m[i][j] = ml.x;
          l[i][j] = ml.y;
          o[i][j][0] = o01.x;
          o[i][j][1] = o01.y;
          o[i][j][2] = o23.x;
          o[i][j][3] = o23.y;
#else
          m[i][j] = r[hd - dd[i]];
          l[i][j] = r[hd - dd[i] + 1];
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) o[i][j][e] = r[e];
#endif
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
          const float wt =
              c0 + j < chunks && l[i][j] != 0.0f ? l[i][j] * expf(m[i][j] - mx) : 0.0f;
          total[i] += wt;
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) acc[i][e] = fmaf(wt, o[i][j][e], acc[i][e]);
        }
        big[i] = mx;
      }
    }
#pragma unroll
    for (uint32_t i = 0; i < 2; ++i) {
      const uint32_t q = q0 + i * AMK_BLOCK_THREADS;
      if (q < quads) {
        const float inv = 1.0f / total[i];
        const uint32_t v = 4 * q / kPer, plane = q % kPlanes;
        *reinterpret_cast<float4*>(amk_gemv_xs + plane * plane_len + 4 * v) =
            make_float4(acc[i][0] * inv, acc[i][1] * inv, acc[i][2] * inv, acc[i][3] * inv);
      }
    }
  }
  __syncthreads();
}
#endif

#if AMK_GEMV_FUSE_NORM || AMK_GEMV_FUSE_NORM_GLU || AMK_GEMV_FUSE_COMBINE
// Stages x' = x * norm (f32, kPer/4 planes of k * 4 / kPer floats) into amk_gemv_xs and returns
// 1 / sqrt(mean(x^2) + eps). Every thread of the block calls it (one barrier). k is a multiple of
// kPer and at most kAmkGemvStageFloats; x and norm are 16-byte aligned. `between()` runs once, as
// soon as the thread's last reads of x and norm are issued and before they are used (gemv's ring
// issues the rest of its first batches there; with the combine, after the merge).
// kTrip: the quads a thread reads before it uses any (1: one a pass).
template <uint32_t X, uint32_t kPer, uint32_t kTrip, class Between>
__device__ __forceinline__ float amk_gemv_stage_norm(const unsigned char* x, uint32_t k,
                                                     const amk_gemv_fuse& fuse, Between&& between) {
#if AMK_GEMV_FUSE_COMBINE
  if (fuse.combine_hd != 0) {  // (X is f32: amk_gemv_combine) x' is the partials' merge
    amk_gemv_stage_combine<kPer>(reinterpret_cast<const float*>(x), k, fuse);
    between();
    return 1.0f;
  }
#endif
  constexpr uint32_t kPlanes = kPer / 4;
  const uint32_t plane_len = k / kPlanes;
  float ss = 0.0f;
  // Thread i's quads (4 elements from 4q) are q = i, i + AMK_BLOCK_THREADS, ...
  auto finish = [&](uint32_t q, const float (&f)[4], const float (&g)[4]) {
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
    for (uint32_t q0 = threadIdx.x; q0 < quads || !between_done;
         q0 += kTrip * AMK_BLOCK_THREADS) {
      float f[kTrip][4], g[kTrip][4];
#pragma unroll
      for (uint32_t i = 0; i < kTrip; ++i) {
        const uint32_t q = q0 + i * AMK_BLOCK_THREADS;
        if (q < quads) {
          amk_load_elems<X, 4>(x, 4 * q, f[i]);
          amk_load_elems_dt<4>(fuse.norm, fuse.norm_dtype, 4 * q, g[i]);
        }
      }
      if (q0 + kTrip * AMK_BLOCK_THREADS >= quads) {
        between();
        between_done = true;
      }
#pragma unroll
      for (uint32_t i = 0; i < kTrip; ++i) {
        const uint32_t q = q0 + i * AMK_BLOCK_THREADS;
        if (q < quads) finish(q, f[i], g[i]);
      }
    }
  } else {
    for (uint32_t q = threadIdx.x; q < k / 4; q += AMK_BLOCK_THREADS) {
      float f[4], g[4];
      amk_load_elems<X, 4>(x, 4 * q, f);
      amk_load_elems_dt<4>(fuse.norm, fuse.norm_dtype, 4 * q, g);
      finish(q, f, g);
    }
    between();
  }
  ss = amk_warp_sum(ss);
  if (threadIdx.x % kAmkWarpSize == 0) amk_gemv_ss[threadIdx.x / kAmkWarpSize] = ss;
  __syncthreads();
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
#else
// Not compiled in: the norm instantiations that would call these do not exist.
template <uint32_t X, uint32_t kPer, uint32_t kTrip, class Between>
__device__ __forceinline__ float amk_gemv_stage_norm(const unsigned char*, uint32_t,
                                                     const amk_gemv_fuse&, Between&& between) {
  between();
  return 1.0f;
}
template <uint32_t kPer>
__device__ __forceinline__ void amk_gemv_staged_x(uint32_t, uint32_t, float*) {}
template <uint32_t kPer>
__device__ __forceinline__ void amk_gemv_staged_x_from(const float*, uint32_t, float*) {}
__device__ __forceinline__ const float* amk_gemv_xs_at(uint32_t) { return nullptr; }
#endif

// Vector path. kNorm / kGlu select the fusions; with kGlu each output row is two virtual rows
// (w's, then w2's) of kMats, streamed back to back. With an active Wait (AMK_GEMV_PRELOAD) the
// step's waits run once the first weight batch is requested, before x is read.
template <uint32_t W, uint32_t X, bool kNorm, bool kGlu, class Wait>
AMK_HEAVY_OP_FN void amk_gemv_vector(const unsigned char* w, const unsigned char* x,
                                                uint32_t k, uint32_t rows, const amk_view& y,
                                                const amk_view& res, const amk_gemv_fuse& fuse,
                                                Wait& wait) {
  typedef amk_ftype<W> TW;
  constexpr uint32_t kPer = TW::per_vec;
  constexpr uint32_t kMats = kGlu ? 2 : 1;
  const uint32_t vecs_per_row = k / kPer;
  const uint64_t row_bytes = static_cast<uint64_t>(vecs_per_row) * kAmkVectorBytes;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  const uint32_t batches_per_row = (vecs_per_row + kAmkGemvBatch - 1) / kAmkGemvBatch;
  const uint32_t my_rows = rows > warp ? (rows - warp + kAmkWarps - 1) / kAmkWarps : 0;
  const uint32_t batches = my_rows * kMats * batches_per_row;
  if constexpr (!Wait::active()) {
    if (!kNorm && batches == 0) return;  // (with norm, every warp takes part in the staging)
  }

  uint32_t row = warp, mat = 0, col = 0;  // mat: 0 = w, 1 = w2 (kGlu only)
  // Batch (r, m, c)'s successor in the warp's walk: the row's next column batch, then (kGlu) the
  // same row of w2, then the warp's next row.
  auto advance = [&](uint32_t& r, uint32_t& m, uint32_t& c) {
    if (++c == batches_per_row) {
      c = 0;
      if (kGlu && m == 0) {
        m = 1;
      } else {
        m = 0;
        r += kAmkWarps;
      }
    }
  };
  // Address of the lane's vector u of batch (r, m, c) (past the row's end: its last vector, never
  // used by the dot product, so no load is conditional).
  // whole (AMK_GEMV_WHOLE; a constant where the lambdas are inlined): the rows are whole
  // batches, so no vector is past the end.
#if AMK_GEMV_WHOLE
  auto vec_addr = [&](uint32_t r, uint32_t m, uint32_t c, uint32_t u, bool whole) {
#else
  auto vec_addr = [&](uint32_t r, uint32_t m, uint32_t c, uint32_t u) {
    constexpr bool whole = false;
#endif
    const unsigned char* p = (kGlu && m != 0 ? fuse.w2 : w) + r * row_bytes;
    if (whole)  // (u's offset in 64 bits: a constant the copy's address takes as its immediate)
      return p + static_cast<uint64_t>(c * kAmkGemvBatch + lane) * kAmkVectorBytes +
             static_cast<uint64_t>(u) * kAmkWarpSize * kAmkVectorBytes;
    const uint32_t v = c * kAmkGemvBatch + u * kAmkWarpSize + lane;
    return p + static_cast<uint64_t>(min(v, vecs_per_row - 1)) * kAmkVectorBytes;
  };
  float inv_rms = 1.0f;
  float acc0 = 0.0f, acc1 = 0.0f;
  float gate = 0.0f;  // kGlu: row's (W x') while w2's row streams
  // Reduces the batch at the reduce cursor (row, mat, col), held in `use`, and advances the cursor.
#if AMK_GEMV_WHOLE
  auto reduce = [&](const amk_vec16 (&use)[kAmkGemvUnroll], bool kWhole) {
#else
  auto reduce = [&](const amk_vec16 (&use)[kAmkGemvUnroll]) {
    constexpr bool kWhole = false;
#endif
#if AMK_GEMV_X_BATCH
    // (AMK_GEMV_X_BATCH) every x load of the batch before its first multiply-add: clamped past
    // the row's end like the weights' (those vectors are never used).
    float xb[kNorm ? 1 : kAmkGemvUnroll][kPer];
    if constexpr (!kNorm) {
      if (kWhole) {  // (the lane's first vector as the base, u's offset a constant)
        const unsigned char* xw =
            x + static_cast<uint64_t>(col * kAmkGemvBatch + lane) * kPer * amk_dtype_size(X);
#pragma unroll
        for (uint32_t u = 0; u < kAmkGemvUnroll; ++u)
          amk_load_elems<X, kPer>(xw, u * kAmkWarpSize * kPer, xb[u]);
      } else {
#pragma unroll
        for (uint32_t u = 0; u < kAmkGemvUnroll; ++u)
          amk_load_elems<X, kPer>(
              x, min(col * kAmkGemvBatch + u * kAmkWarpSize + lane, vecs_per_row - 1) * kPer,
              xb[u]);
      }
    }
#endif
    // (kWhole, with norm: x' of the lane's first vector in each plane as the base)
    const float* xs0 = kNorm && kWhole ? amk_gemv_xs_at(col * kAmkGemvBatch + lane) : nullptr;
#pragma unroll
    for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) {
      const uint32_t v = col * kAmkGemvBatch + u * kAmkWarpSize + lane;
      if (kWhole || v < vecs_per_row) {
        float wf[kPer], xf[kPer];
        TW::unpack(use[u], wf);
        if (kNorm) {
          if (kWhole)
            amk_gemv_staged_x_from<kPer>(xs0 + 4 * u * kAmkWarpSize, k, xf);
          else
            amk_gemv_staged_x<kPer>(k, v, xf);
        } else {
#if AMK_GEMV_X_BATCH
#pragma unroll
          for (uint32_t e = 0; e < kPer; ++e) xf[e] = xb[kNorm ? 0 : u][e];
#else
          amk_load_elems<X, kPer>(x, v * kPer, xf);
#endif
        }
#pragma unroll
        for (uint32_t e = 0; e < kPer; e += 2) {
          acc0 = fmaf(wf[e], xf[e], acc0);
          acc1 = fmaf(wf[e + 1], xf[e + 1], acc1);
        }
      }
    }
    if (col + 1 == batches_per_row) {
      float acc = amk_warp_sum(acc0 + acc1);
      if (kNorm) acc *= inv_rms;
      if (kGlu && mat == 0) {
        gate = acc;
      } else {
        if (kGlu) acc = amk_gemv_glu(gate, acc);
        if (lane == 0) amk_gemv_store_row(y, res, row, acc);
      }
      acc0 = acc1 = 0.0f;
    }
    advance(row, mat, col);
  };

#if AMK_GEMV_SMEM_STAGES > 0
  // Weights through a per-warp ring of kStages batches in shared memory (cp.async, no registers
  // held while in flight): kStages - 1 batches stay in flight while one is reduced. Each lane
  // reads back only the vectors it copied itself, so its own cp.async.wait_group orders them and
  // no warp or block barrier is needed. Every pass commits one group (empty past the last batch),
  // so "at most kStages - 1 pending" always means the batch being reduced has landed.
  constexpr uint32_t kStages = AMK_GEMV_SMEM_STAGES;
  constexpr uint32_t kSlotBytes = kAmkGemvBatch * kAmkVectorBytes;
#ifdef AMK_GEMV_RING_SLOT_BYTES
  static_assert(kSlotBytes == AMK_GEMV_RING_SLOT_BYTES,
                "the launch's dynamic shared memory was sized for other slots (kGemvSlotBytes)");
#endif
  const uint32_t ring = amk_smem_addr(amk_dynamic_smem) + warp * kStages * kSlotBytes +
                        lane * kAmkVectorBytes;
  uint32_t ir = warp, im = 0, ic = 0;  // issue cursor
  uint32_t issued = 0, slot_in = 0;    // batches issued (real or empty), the slot they fill
#if AMK_STREAM_EVICT_FIRST
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
#if AMK_GEMV_WHOLE
  auto issue_next = [&](bool whole) {
#else
  auto issue_next = [&]() {
#endif
    if (issued < batches) {
      const uint32_t dst = ring + slot_in * kSlotBytes;
#pragma unroll
      for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) {
#if AMK_STREAM_EVICT_FIRST
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
                     ::"r"(dst + u * kAmkWarpSize * kAmkVectorBytes), "l"(vec_addr(ir, im, ic, u AMK_GEMV_WHOLE_ARG(whole))),
                     "l"(policy) : "memory");
#else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                     ::"r"(dst + u * kAmkWarpSize * kAmkVectorBytes), "l"(vec_addr(ir, im, ic, u AMK_GEMV_WHOLE_ARG(whole)))
                     : "memory");
#endif
      }
      advance(ir, im, ic);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    ++issued;
    slot_in = slot_in + 1 == kStages ? 0u : slot_in + 1;
  };
  uint32_t pre = kStages;  // batches requested before the waits
  if constexpr (Wait::active()) {
    pre = AMK_GEMV_PRELOAD < 1 ? 1u : min(kStages, static_cast<uint32_t>(AMK_GEMV_PRELOAD));
    for (uint32_t s = 0; s < pre; ++s) issue_next(AMK_GEMV_WHOLE_ARG0(false));
    if (wait() || (!kNorm && batches == 0)) {  // every warp (a barrier), its first batch(es) in flight
      asm volatile("cp.async.wait_all;" ::: "memory");  // nothing may land after the op is gone
      return;
    }
  } else {
    for (uint32_t s = 0; s < kStages; ++s) issue_next(AMK_GEMV_WHOLE_ARG0(false));
  }
  // The rest of the ring after the waits' reads of x (on the critical path) have been issued.
  auto issue_rest = [&]() {
    for (uint32_t s = pre; s < kStages; ++s) issue_next(AMK_GEMV_WHOLE_ARG0(false));
  };
  if (kNorm)
    inv_rms = amk_gemv_stage_norm<X, kPer, kAmkGemvStageTrip>(x, k, fuse, issue_rest);
  else
    issue_rest();
  if (!kAmkMarksTurn && !kAmkMarksLanded && !kAmkMarksSecond) AMK_TRACE_MARK(0);  // first batches of weights requested (and x' staged): waiting on memory
  // The batches, in a loop of its own where every row is whole batches (AMK_GEMV_WHOLE): no
  // bound checks or clamps, so each batch's addresses are one base and constant offsets.
#if AMK_GEMV_WHOLE
  auto stream = [&](bool whole) {
#endif
  uint32_t slot_out = 0;
  for (uint32_t b = 0; b < batches; ++b) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
    if (b == 0 && kAmkMarksLanded) AMK_TRACE_MARK(0);  // (diagnostic) the first batch has landed
    if (b == 1 && kAmkMarksSecond) AMK_TRACE_MARK(0);  // (diagnostic) the second batch has landed
    amk_vec16 use[kAmkGemvUnroll];
    const uint32_t src = ring + slot_out * kSlotBytes;
#pragma unroll
    for (uint32_t u = 0; u < kAmkGemvUnroll; ++u)
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(use[u].w[0]), "=r"(use[u].w[1]), "=r"(use[u].w[2]), "=r"(use[u].w[3])
                   : "r"(src + u * kAmkWarpSize * kAmkVectorBytes)
                   : "memory");
    reduce(use AMK_GEMV_WHOLE_ARG(whole));
    if (b == 0 && !kAmkMarksTurn && !kAmkMarksSecond) AMK_TRACE_MARK(1);  // the first batch arrived and is reduced
    if (b == 1 && kAmkMarksSecond) AMK_TRACE_MARK(1);  // (diagnostic) the second batch reduced
    issue_next(AMK_GEMV_WHOLE_ARG0(whole));  // batch b + kStages into the slot just read (its values are consumed above)
    slot_out = slot_out + 1 == kStages ? 0u : slot_out + 1;
  }
#if AMK_GEMV_WHOLE
  };
  if (vecs_per_row % kAmkGemvBatch == 0)
    stream(true);
  else
    stream(false);
#endif
#else
  amk_vec16 cur[kAmkGemvUnroll], nxt[kAmkGemvUnroll];
  auto load_batch = [&](amk_vec16* dst, uint32_t r, uint32_t m, uint32_t c) {
#pragma unroll
    for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) {
#if AMK_GEMV_CLAMPED_LOADS
      dst[u] = amk_ld16_stream(vec_addr(r, m, c, u AMK_GEMV_WHOLE_ARG(false)));
#else
      const uint32_t v = c * kAmkGemvBatch + u * kAmkWarpSize + lane;
      if (v < vecs_per_row) dst[u] = amk_ld16_stream(vec_addr(r, m, c, u AMK_GEMV_WHOLE_ARG(false)));
#endif
    }
  };
  if (batches != 0) load_batch(cur, row, mat, col);
  bool second_in_flight = false;  // AMK_GEMV_PRELOAD >= 2: the first step's fill was requested here
  if constexpr (Wait::active()) {
#if AMK_GEMV_PRELOAD >= 2
    if (batches > 1) {
      uint32_t r1 = row, m1 = mat, c1 = col;
      advance(r1, m1, c1);
      load_batch(nxt, r1, m1, c1);
      second_in_flight = true;
    }
#endif
    if (wait()) return;  // every warp (a barrier), its first batch(es) in flight
    if (!kNorm && batches == 0) return;
  }
  if (kNorm) inv_rms = amk_gemv_stage_norm<X, kPer, 1>(x, k, fuse, []() {});
  if (!kAmkMarksTurn) AMK_TRACE_MARK(0);  // first batch of weights requested (and x' staged): waiting on memory
  // One batch: start loading the next one into `fill` (if any), reduce `use`.
  auto step = [&](amk_vec16 (&use)[kAmkGemvUnroll], amk_vec16 (&fill)[kAmkGemvUnroll],
                  uint32_t b) {
    uint32_t next_row = row, next_mat = mat, next_col = col;
    advance(next_row, next_mat, next_col);
    if (b + 1 < batches && !(b == 0 && second_in_flight))
      load_batch(fill, next_row, next_mat, next_col);
    reduce(use AMK_GEMV_WHOLE_ARG(false));
  };
#if AMK_GEMV_PINGPONG
  // Two batches an iteration, the buffers swapping roles: no register copies between batches.
  for (uint32_t b = 0; b < batches; b += 2) {
    step(cur, nxt, b);
    if (b == 0 && !kAmkMarksTurn) AMK_TRACE_MARK(1);  // the first batch arrived and is reduced
    if (b + 1 < batches) step(nxt, cur, b + 1);
  }
#else
  for (uint32_t b = 0; b < batches; ++b) {
    step(cur, nxt, b);
    if (b == 0 && !kAmkMarksTurn) AMK_TRACE_MARK(1);  // the first batch arrived and is reduced
#pragma unroll
    for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) cur[u] = nxt[u];
  }
#endif
#endif
}

// (w, x) dtype pairs that no fused instruction of the program uses, bit W * 8 + X (the
// generated source sets it where it is not 0, codegen's vm_source): those pairs get the plain instantiation
// only, not one per listed fusion (each as large as the plain one), e.g. the bf16 x of a
// `--mlp-act bf16` down projection beside the f32 x of the norm-fused gemvs.
#ifndef AMK_GEMV_PLAIN_ONLY_MASK
#define AMK_GEMV_PLAIN_ONLY_MASK 0ull
#endif

// One vector instantiation per fusion combination of a (w, x) dtype pair; false when the
// combination is not compiled in (the caller takes the scalar path).
template <uint32_t W, uint32_t X, class Wait>
__device__ __forceinline__ bool amk_gemv_vector_any(const unsigned char* w, const unsigned char* x,
                                                    uint32_t k, uint32_t rows, const amk_view& y,
                                                    const amk_view& res, const amk_gemv_fuse& fuse,
                                                    Wait& wait) {
  if (fuse.norm == nullptr && fuse.w2 == nullptr) {
    amk_gemv_vector<W, X, false, false>(w, x, k, rows, y, res, fuse, wait);
    return true;
  }
  if constexpr (((static_cast<unsigned long long>(AMK_GEMV_PLAIN_ONLY_MASK) >> (W * 8 + X)) & 1ull) != 0)
    return false;
#if AMK_GEMV_FUSE_NORM
  if (fuse.w2 == nullptr) {
    amk_gemv_vector<W, X, true, false>(w, x, k, rows, y, res, fuse, wait);
    return true;
  }
#endif
#if AMK_GEMV_FUSE_GLU
  if (fuse.norm == nullptr) {
    amk_gemv_vector<W, X, false, true>(w, x, k, rows, y, res, fuse, wait);
    return true;
  }
#endif
#if AMK_GEMV_FUSE_NORM_GLU
  if (fuse.norm != nullptr && fuse.w2 != nullptr) {
    amk_gemv_vector<W, X, true, true>(w, x, k, rows, y, res, fuse, wait);
    return true;
  }
#endif
  return false;
}

// Any dtypes, any alignment: one element at a time, one warp per row.
__device__ __forceinline__ void amk_gemv_scalar(const amk_view& w, const amk_view& x, uint32_t k,
                                                uint32_t rows, const amk_view& y,
                                                const amk_view& res, const amk_view& norm,
                                                const amk_view& w2, float inv_rms) {
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t r = warp; r < rows; r += kAmkWarps) {
    const uint64_t base = static_cast<uint64_t>(r) * k;
    float acc = 0.0f, up = 0.0f;
    for (uint32_t i = lane; i < k; i += kAmkWarpSize) {
      float xv = amk_load_f32(x, i);
      if (norm.present()) xv *= amk_load_f32(norm, i);
      acc = fmaf(amk_load_f32(w, base + i), xv, acc);
      if (w2.present()) up = fmaf(amk_load_f32(w2, base + i), xv, up);
    }
    acc = amk_warp_sum(acc) * inv_rms;
    if (w2.present()) acc = amk_gemv_glu(acc, amk_warp_sum(up) * inv_rms);
    if (lane == 0) amk_gemv_store_row(y, res, r, acc);
  }
}

#define AMK_GEMV_CASE(WN, XN)                                                                     \
  if (w.dtype == AMK_DTYPE_##WN && x.dtype == AMK_DTYPE_##XN) {                                   \
    if (amk_gemv_vector_any<AMK_DTYPE_##WN, AMK_DTYPE_##XN>(w.ptr, x.ptr, k, rows, y, res, fuse, \
                                                            wait))                               \
      return;                                                                                     \
  }

template <class Wait>
__device__ __forceinline__ void amk_gemv_plain(const amk_view& w, const amk_view& x,
                                               const amk_view& y, const amk_view& res,
                                               const amk_view& norm, const amk_view& w2,
                                               float eps, Wait& wait) {
  const uint32_t k = x.n;
  if (k == 0) {
    wait();
    return;
  }
  const uint32_t rows = w.n / k;
  const uint64_t row_bytes = static_cast<uint64_t>(k) * amk_dtype_size(w.dtype);
  amk_gemv_fuse fuse;
  fuse.norm = norm.ptr;
  fuse.norm_dtype = norm.dtype;
  fuse.eps = eps;
  fuse.w2 = w2.ptr;
#if AMK_GEMV_FUSE_COMBINE
  fuse.combine_hd = 0;
#endif
  // The vector loads of norm follow x's pattern, w2's follow w's (the verifier makes w2's dtype
  // w's), and x' must fit the stage; the scalar path takes anything else.
  const bool fuse_aligned =
      (!norm.present() || (amk_aligned16(norm.ptr) && k <= kAmkGemvStageFloats)) &&
      (!w2.present() || (amk_aligned16(w2.ptr) && w2.dtype == w.dtype));
  if (amk_aligned16(w.ptr) && amk_aligned16(x.ptr) && row_bytes % kAmkVectorBytes == 0 &&
      fuse_aligned) {
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
  if (wait()) return;  // (reached when no vector form took the instruction: its waits are still due)
  amk_gemv_scalar(w, x, k, rows, y, res, norm, w2,
                  norm.present() ? amk_gemv_inv_rms(x, eps) : 1.0f);
}
#undef AMK_GEMV_CASE

#if AMK_GEMV_FUSE_COMBINE
// A gemv whose x is attention partials (params head_dim, heads): K = heads * head_dim, the
// partials merged into the staged x' (amk_gemv_stage_combine), then the norm instantiation's
// loop with bf16 weights (the decode steps'), else the scalar path over the merge staged in order.
// Inlined like every heavy op. Measured on the H200 (twenty-seventh session, `amk profile
// --events --tuning-arms`, the 1B step with --combine oproj, three rounds): as a call of its own
// (its views through a 104-byte stack frame) 0.9813 / 0.9864 / 0.9812 ms, inlined 0.9515 /
// 0.9519 / 0.9502.
template <class Wait>
__device__ __forceinline__ void amk_gemv_combine(const amk_view& w, const amk_view& x,
                                                 const amk_view& y, const amk_view& res,
                                                 uint32_t hd, uint32_t heads, Wait& wait) {
  const uint32_t k = heads * hd;  // (the verifier: hd a multiple of 4, x whole chunks, k <= 4096)
  const uint32_t rows = w.n / k;
  amk_gemv_fuse fuse;
  fuse.norm = nullptr;
  fuse.norm_dtype = 0;
  fuse.eps = 0.0f;
  fuse.w2 = nullptr;
  fuse.combine_hd = hd;
  fuse.combine_heads = heads;
  fuse.combine_chunks = x.n / (heads * (hd + 2));
#if AMK_GEMV_BF16_F32
  if (w.dtype == AMK_DTYPE_BF16 && amk_aligned16(w.ptr) && amk_aligned16(x.ptr) &&
      (2ull * k) % kAmkVectorBytes == 0) {
    amk_gemv_vector<AMK_DTYPE_BF16, AMK_DTYPE_F32, true, false>(w.ptr, x.ptr, k, rows, y, res,
                                                                 fuse, wait);
    return;
  }
#endif
  if (wait()) return;
  amk_gemv_stage_combine<4>(reinterpret_cast<const float*>(x.ptr), k, fuse);
  amk_view xs = x;
  xs.ptr = reinterpret_cast<unsigned char*>(amk_gemv_xs);
  xs.n = k;
  xs.dtype = AMK_DTYPE_F32;
  amk_view none;
  none.ptr = nullptr;
  none.n = 0;
  none.dtype = 0;
  amk_gemv_scalar(w, xs, k, rows, y, res, none, none, 1.0f);
}
#endif

#if AMK_TMA_GEMV
#include "amk_ops_tma.cuh"
#endif

// Operands w, x, y, residual?, norm?, w2?; param eps (read only with norm). `wait`: the step's
// waits when the op runs them (amk_step_wait), else amk_no_wait.
#if AMK_TMA_GEMV
template <class Wait>
AMK_HEAVY_OP_FN void amk_op_gemv(const amk_device_program_t& prog, const amk_instruction_t& ins,
                           unsigned char*, const amk_tma_table_t* tma, Wait& wait) {
#else
template <class Wait>
AMK_HEAVY_OP_FN void amk_op_gemv(const amk_device_program_t&, const amk_instruction_t& ins,
                           unsigned char*, Wait& wait) {
#endif
  wait.prime();  // (AMK_EARLY_POLL: the first poll of the step's waits, if the op runs them)
  const amk_view w = amk_operand(ins, 0);
  const amk_view x = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  const amk_view norm = amk_operand(ins, 4);
  const amk_view w2 = amk_operand(ins, 5);
#if AMK_GEMV_RES_PREFETCH
  amk_gemv_prefetch_res(res);
#endif
#if AMK_TMA_GEMV
  // The TMA pipeline has no fusions: fused instructions take the plain path. (It waits first.)
  if (wait()) return;
#if AMK_GEMV_FUSE_COMBINE
  if (ins.params[1] == 0 && !norm.present() && !w2.present() &&
      amk_gemv_tma(prog, ins, w, x, y, res, tma))
    return;
#else
  if (!norm.present() && !w2.present() && amk_gemv_tma(prog, ins, w, x, y, res, tma)) return;
#endif
#endif
  const float eps = norm.present() ? __uint_as_float(ins.params[0]) : 0.0f;
#if AMK_GEMV_FUSE_COMBINE
  if (ins.params[1] != 0) {  // x is attention partials (codegen lists the macro where one is)
    amk_gemv_combine(w, x, y, res, ins.params[1], ins.params[2], wait);
    return;
  }
#endif
  amk_gemv_plain(w, x, y, res, norm, w2, eps, wait);
}

#endif  // AMK_USE_OP_GEMV
#endif  // AMK_OPS_GEMV_CUH
