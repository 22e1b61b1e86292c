// gemv: y[r] = sum_k w[r, k] * x[k] (+ residual[r]), rows = extent(w) / extent(x), f32
// accumulation. Weights are f32, f16 or bf16 and stream from HBM once, so the op is a bandwidth
// problem: one warp per row (rows interleaved over the warps), 16-byte loads that skip L1, and
// the next batch of loads (possibly the next row's) issued before the current batch is reduced,
// so each warp always has loads in flight (in registers, or, with gemv_ring_stages, through a
// per-warp ring in shared memory, below). x is small and reused by every row: it stays in L1.
// When the w buffer has a TMA spec the op streams tiles through the copy engine instead
// (amk_ops_tma.cuh).
//
// Two optional fusions (template flags, so the plain instantiation does no extra work):
//  - norm: x' = x * inv_rms * norm, inv_rms = 1 / sqrt(mean(x^2) + eps) as rmsnorm computes it.
//    With the first weight batch in flight, the block stages x * norm in f32 in shared memory
//    (one pass, one barrier, which also reduces sum(x^2)); the inner loop then reads x' from
//    there and each row's sum is scaled by inv_rms once.
//    x' is kept in kPer/4 planes of 4 floats per vector, so a lane's two 16-byte reads of a
//    vector's 8 values hit consecutive addresses across the warp (no bank conflicts). Norm-fused
//    instructions with more than kAmkGemvStageFloats columns take the scalar path.
//  - w2 (GLU): y[r] = silu(W x')[r] * (W2 x')[r]. Row r of w and row r of w2 are two "virtual
//    rows" of the same pipeline, so w2's loads are in flight while w's row is reduced.
// Neither runs through TMA.
#pragma once

#include "amk_device.cuh"
#include "amk_sync.cuh"  // amk_step_wait

// kAmkOps.gemv_pairs: the (weight, x) dtype pairs with a vector instantiation (the program's);
// other pairs run the scalar path. kAmkOps.gemv_fusions: the fusion combinations with vector
// instantiations (each as large as the plain one); an unlisted one still runs, on the scalar
// path. AMK_GEMV_FUSE_COMBINE (a gemv whose x is attention partials, params head_dim / heads,
// `amk gen llama --combine oproj`): x' is their merge, staged like the norm's x'; without it such
// an instruction stops the launch (bad_operand).
AMK_HD constexpr bool amk_gemv_fuses(uint32_t fusion) {
  return (kAmkOps.gemv_fusions & fusion) != 0;
}
constexpr bool kAmkGemvStages =
    amk_gemv_fuses(AMK_GEMV_FUSE_NORM | AMK_GEMV_FUSE_NORM_GLU | AMK_GEMV_FUSE_COMBINE);

// gemv_ring_stages (N >= 2; 0: registers): each warp streams its weight batches through N slots
// of 4 KiB in dynamic shared memory (cp.async) instead of two register buffers. In registers the
// loop's copy of the next batch into the current one waits for that batch, so about one batch
// (32 KiB a block) is in flight while a block streams; the ring keeps N - 1 to N in flight with
// no registers held. The chooser takes it where gemvs wait and preload (the decode steps, one
// block an SM); the GEMV benchmarks (two blocks an SM, no waits) stream faster on registers.
// With the ring, an instruction whose rows are whole batches (k a multiple of kAmkGemvBatch
// vectors: every Llama projection) streams them in a loop of its own, with no bound check or
// clamp a vector, so a batch's addresses are one base and constant offsets.
//
// gemv_x_batch: the unfused gemv issues all of a batch's x loads before its first multiply-add
// instead of each vector's before its own, so that they are in flight together whatever else
// the VM holds (ptxas's own scheduling of those loads moves with the rest of the VM).
//
// The o_proj merge (amk_gemv_stage_combine) reads a chunk's (m, l) and each half of a quad's
// values with one 8-byte load each (a partials row is hd + 2 floats, hd a multiple of 4: 8-byte
// aligned).
//
// Through the ring, the norm-fused gemv's staging of x' = x * norm reads up to three of a
// thread's x and norm quads before it uses any, so the reads after the wait are one round trip
// to L2 for k <= 3072 at 256 threads, and the ring issues the rest of its first batches between
// the last pass's reads and their use. With the weights in registers a quad a pass (three quads'
// registers make that VM spill).
constexpr uint32_t kAmkGemvStageTrip = 3;
// 16-byte weight loads per lane per batch (x2 in flight): kAmkGemvUnroll (amk_config.h).
constexpr uint32_t kAmkGemvBatch = kAmkWarpSize * kAmkGemvUnroll;  // vectors per warp batch

#include "amk_gemv_stage.cuh"

// Row r's result: + residual[r], stored in y's dtype. One lane calls this, when the row's sum is
// done, and the warp waits for residual[r] (an L2 round trip) before its next batch.
__device__ __forceinline__ void amk_gemv_store_row(const amk_view& y, const amk_view& res,
                                                   uint32_t r, float acc) {
  if (res.present()) acc += amk_load_f32(res, r);
  amk_store_f32(y, r, acc);
}

// silu(a) * b, as the silu_mul op computes it.
__device__ __forceinline__ float amk_gemv_glu(float a, float b) {
  return a / (1.0f + expf(-a)) * b;
}

// 1 / sqrt(mean(x^2) + eps), as amk_op_rmsnorm computes it. Each warp reduces x on its own
// (x is a few KiB, L1-resident): no block barrier in the gemv (a block reduction here, even when
// not taken, costs the unfused GEMV its L2-prefetch gain).
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

// Vector path. kNorm / kGlu select the fusions; with kGlu each output row is two virtual rows
// (w's, then w2's) of kMats, streamed back to back. With an active Wait (gemv_preload) the
// step's waits run once the first weight batch is requested, before x is read.
template <uint32_t W, uint32_t X, bool kNorm, bool kGlu, class Wait>
__device__ __forceinline__ void amk_gemv_vector(const unsigned char* w, const unsigned char* x,
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
  // used by the dot product, so no load is conditional). whole (a constant where the lambdas are
  // inlined): the rows are whole batches, so no vector is past the end.
  auto vec_addr = [&](uint32_t r, uint32_t m, uint32_t c, uint32_t u, bool whole) {
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
  auto reduce = [&](const amk_vec16(&use)[kAmkGemvUnroll], bool kWhole) {
    // (gemv_x_batch) every x load of the batch before its first multiply-add: clamped past the
    // row's end like the weights' (those vectors are never used).
    float xb[kNorm || !kAmkCfg.gemv_x_batch ? 1 : kAmkGemvUnroll][kPer];
    if constexpr (!kNorm && kAmkCfg.gemv_x_batch) {
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
        } else if constexpr (kAmkCfg.gemv_x_batch) {
#pragma unroll
          for (uint32_t e = 0; e < kPer; ++e) xf[e] = xb[kNorm ? 0 : u][e];
        } else {
          amk_load_elems<X, kPer>(x, v * kPer, xf);
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

  if constexpr (kAmkCfg.gemv_ring_stages > 0) {
    // Weights through a per-warp ring of kStages batches in shared memory (cp.async, no registers
    // held while in flight): kStages - 1 batches stay in flight while one is reduced. Each lane
    // reads back only the vectors it copied itself, so its own cp.async.wait_group orders them and
    // no warp or block barrier is needed. Every pass commits one group (empty past the last
    // batch), so "at most kStages - 1 pending" always means the batch being reduced has landed.
    constexpr uint32_t kStages = kAmkCfg.gemv_ring_stages;
    constexpr uint32_t kSlotBytes = kAmkGemvBatch * kAmkVectorBytes;
    static_assert(kSlotBytes == kAmkGemvSlotBytes, "the ring's slot is a warp's batch");
    const uint32_t ring =
        amk_smem_addr(amk_dynamic_smem) + warp * kStages * kSlotBytes + lane * kAmkVectorBytes;
    uint32_t ir = warp, im = 0, ic = 0;  // issue cursor
    uint32_t issued = 0, slot_in = 0;    // batches issued (real or empty), the slot they fill
    const uint64_t policy = amk_evict_first_policy();
    auto issue_next = [&](bool whole) {
      if (issued < batches) {
        const uint32_t dst = ring + slot_in * kSlotBytes;
#pragma unroll
        for (uint32_t u = 0; u < kAmkGemvUnroll; ++u)
          asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(
                           dst + u * kAmkWarpSize * kAmkVectorBytes),
                       "l"(vec_addr(ir, im, ic, u, whole)), "l"(policy)
                       : "memory");
        advance(ir, im, ic);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
      ++issued;
      slot_in = slot_in + 1 == kStages ? 0u : slot_in + 1;
    };
    uint32_t pre = kStages;  // batches requested before the waits
    if constexpr (Wait::active()) {
      pre = kAmkCfg.gemv_preload < 1 ? 1u : min(kStages, kAmkCfg.gemv_preload);
      for (uint32_t s = 0; s < pre; ++s) issue_next(false);
      if (wait() ||
          (!kNorm && batches == 0)) {  // every warp (a barrier), its first batches in flight
        asm volatile("cp.async.wait_all;" ::: "memory");  // nothing may land after the op is gone
        return;
      }
    } else {
      for (uint32_t s = 0; s < kStages; ++s) issue_next(false);
    }
    // The rest of the ring after the waits' reads of x (on the critical path) have been issued.
    auto issue_rest = [&]() {
      for (uint32_t s = pre; s < kStages; ++s) issue_next(false);
    };
    if (kNorm)
      inv_rms = amk_gemv_stage_norm<X, kPer, kAmkGemvStageTrip>(x, k, fuse, issue_rest);
    else
      issue_rest();
    amk_trace_mark(0);  // first batches of weights requested (and x' staged): waiting on memory
    // The batches, in a loop of its own where every row is whole batches: no bound checks or
    // clamps, so each batch's addresses are one base and constant offsets.
    auto stream = [&](bool whole) {
      uint32_t slot_out = 0;
      for (uint32_t b = 0; b < batches; ++b) {
        asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
        amk_vec16 use[kAmkGemvUnroll];
        const uint32_t src = ring + slot_out * kSlotBytes;
#pragma unroll
        for (uint32_t u = 0; u < kAmkGemvUnroll; ++u)
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(use[u].w[0]), "=r"(use[u].w[1]), "=r"(use[u].w[2]), "=r"(use[u].w[3])
                       : "r"(src + u * kAmkWarpSize * kAmkVectorBytes)
                       : "memory");
        reduce(use, whole);
        if (b == 0) amk_trace_mark(1);  // the first batch arrived and is reduced
        issue_next(whole);  // batch b + kStages into the slot just read (its values are consumed)
        slot_out = slot_out + 1 == kStages ? 0u : slot_out + 1;
      }
    };
    if (vecs_per_row % kAmkGemvBatch == 0)
      stream(true);
    else
      stream(false);
  } else {
    amk_vec16 cur[kAmkGemvUnroll], nxt[kAmkGemvUnroll];
    auto load_batch = [&](amk_vec16* dst, uint32_t r, uint32_t m, uint32_t c) {
#pragma unroll
      for (uint32_t u = 0; u < kAmkGemvUnroll; ++u)
        dst[u] = amk_ld16_stream(vec_addr(r, m, c, u, false));
    };
    if (batches != 0) load_batch(cur, row, mat, col);
    bool second_in_flight = false;  // gemv_preload >= 2: the first step's fill was requested here
    if constexpr (Wait::active()) {
      if constexpr (kAmkCfg.gemv_preload >= 2) {
        if (batches > 1) {
          uint32_t r1 = row, m1 = mat, c1 = col;
          advance(r1, m1, c1);
          load_batch(nxt, r1, m1, c1);
          second_in_flight = true;
        }
      }
      if (wait()) return;  // every warp (a barrier), its first batch(es) in flight
      if (!kNorm && batches == 0) return;
    }
    if (kNorm) inv_rms = amk_gemv_stage_norm<X, kPer, 1>(x, k, fuse, []() {});
    amk_trace_mark(0);  // first batch of weights requested (and x' staged): waiting on memory
    // One batch: start loading the next one into `fill` (if any), reduce `use`.
    auto step = [&](amk_vec16(&use)[kAmkGemvUnroll], amk_vec16(&fill)[kAmkGemvUnroll], uint32_t b) {
      uint32_t next_row = row, next_mat = mat, next_col = col;
      advance(next_row, next_mat, next_col);
      if (b + 1 < batches && !(b == 0 && second_in_flight))
        load_batch(fill, next_row, next_mat, next_col);
      reduce(use, false);
    };
    for (uint32_t b = 0; b < batches; ++b) {
      step(cur, nxt, b);
      if (b == 0) amk_trace_mark(1);  // the first batch arrived and is reduced
#pragma unroll
      for (uint32_t u = 0; u < kAmkGemvUnroll; ++u) cur[u] = nxt[u];
    }
  }
}

// One vector instantiation per fusion combination of a (w, x) dtype pair; false when the
// combination is not compiled in (the caller takes the scalar path). Pairs that no fused
// instruction of the program uses (kAmkOps.gemv_plain_only, e.g. the bf16 x of a `--mlp-act bf16`
// down projection beside the f32 x of the norm-fused gemvs) get the plain instantiation only.
// A merging gemv (fuse.combine_hd != 0: bf16 weights, f32 partials) takes the norm
// instantiation, whose staging merges the partials: one inlined copy serves both fusions.
template <uint32_t W, uint32_t X, class Wait>
__device__ __forceinline__ bool amk_gemv_vector_any(const unsigned char* w, const unsigned char* x,
                                                    uint32_t k, uint32_t rows, const amk_view& y,
                                                    const amk_view& res, const amk_gemv_fuse& fuse,
                                                    Wait& wait) {
  constexpr bool kFused = (kAmkOps.gemv_plain_only & amk_gemv_pair_bit(W, X)) == 0;
  constexpr bool kMerges =
      amk_gemv_fuses(AMK_GEMV_FUSE_COMBINE) && W == AMK_DTYPE_BF16 && X == AMK_DTYPE_F32;
  constexpr bool kNormFused = kFused && amk_gemv_fuses(AMK_GEMV_FUSE_NORM);
  const bool merges = amk_gemv_fuses(AMK_GEMV_FUSE_COMBINE) && fuse.combine_hd != 0;
  if (!merges && fuse.norm == nullptr && fuse.w2 == nullptr) {
    amk_gemv_vector<W, X, false, false>(w, x, k, rows, y, res, fuse, wait);
    return true;
  }
  if constexpr (kNormFused || kMerges) {
    if (merges ? kMerges : kNormFused && fuse.w2 == nullptr) {
      amk_gemv_vector<W, X, true, false>(w, x, k, rows, y, res, fuse, wait);
      return true;
    }
  }
  if (merges) return false;
  if constexpr (kFused && amk_gemv_fuses(AMK_GEMV_FUSE_GLU)) {
    if (fuse.norm == nullptr) {
      amk_gemv_vector<W, X, false, true>(w, x, k, rows, y, res, fuse, wait);
      return true;
    }
  }
  if constexpr (kFused && amk_gemv_fuses(AMK_GEMV_FUSE_NORM_GLU)) {
    if (fuse.norm != nullptr && fuse.w2 != nullptr) {
      amk_gemv_vector<W, X, true, true>(w, x, k, rows, y, res, fuse, wait);
      return true;
    }
  }
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

// The vector instantiations of dtype pair (W, X), where the program uses the pair; false when
// they did not take the instruction.
template <uint32_t W, uint32_t X, class Wait>
__device__ __forceinline__ bool amk_gemv_pair(const amk_view& w, const amk_view& x, uint32_t k,
                                              uint32_t rows, const amk_view& y, const amk_view& res,
                                              const amk_gemv_fuse& fuse, Wait& wait) {
  if constexpr ((kAmkOps.gemv_pairs & amk_gemv_pair_bit(W, X)) != 0) {
    if (w.dtype == W && x.dtype == X)
      return amk_gemv_vector_any<W, X>(w.ptr, x.ptr, k, rows, y, res, fuse, wait);
  }
  return false;
}

// Every non-TMA gemv: plain, norm- or GLU-fused, or merging attention partials (hd != 0, with
// params head_dim, heads: K = heads * head_dim, x' the partials' merge, staged like the norm's
// x'). Each vector instantiation is inlined once, whichever fusion reaches it; anything the vector
// path does not take runs on the scalar path (a merge staged in order first).
template <class Wait>
__device__ __forceinline__ void amk_gemv_plain(const amk_view& w, const amk_view& x,
                                               const amk_view& y, const amk_view& res,
                                               const amk_view& norm, const amk_view& w2, float eps,
                                               uint32_t hd, uint32_t heads, Wait& wait) {
  // (the verifier: a merge has hd a multiple of 4, x whole chunks, k <= 4096, no norm, no w2)
  const bool merges = amk_gemv_fuses(AMK_GEMV_FUSE_COMBINE) && hd != 0;
  const uint32_t k = merges ? heads * hd : x.n;
  if (k == 0) {
    wait();
    return;
  }
  const uint32_t rows = w.n / k;
  const uint64_t row_bytes = static_cast<uint64_t>(k) * amk_dtype_size(w.dtype);
  amk_gemv_fuse fuse;
  fuse.norm = merges ? nullptr : norm.ptr;
  fuse.norm_dtype = norm.dtype;
  fuse.eps = eps;
  fuse.w2 = merges ? nullptr : w2.ptr;
  fuse.combine_hd = merges ? hd : 0;
  fuse.combine_heads = heads;
  fuse.combine_chunks = merges ? x.n / (heads * (hd + 2)) : 0;
  // The vector loads of norm follow x's pattern, w2's follow w's (the verifier makes w2's dtype
  // w's), and x' must fit the stage; the scalar path takes anything else.
  const bool fuse_aligned =
      merges || ((!norm.present() || (amk_aligned16(norm.ptr) && k <= kAmkGemvStageFloats)) &&
                 (!w2.present() || (amk_aligned16(w2.ptr) && w2.dtype == w.dtype)));
  if (amk_aligned16(w.ptr) && amk_aligned16(x.ptr) && row_bytes % kAmkVectorBytes == 0 &&
      fuse_aligned) {
    constexpr uint32_t F32 = AMK_DTYPE_F32, F16 = AMK_DTYPE_F16, BF16 = AMK_DTYPE_BF16;
    if (amk_gemv_pair<F32, F32>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<F32, F16>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<F32, BF16>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<F16, F32>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<F16, F16>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<F16, BF16>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<BF16, F32>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<BF16, F16>(w, x, k, rows, y, res, fuse, wait) ||
        amk_gemv_pair<BF16, BF16>(w, x, k, rows, y, res, fuse, wait))
      return;
  }
  if (wait())
    return;  // (reached when no vector form took the instruction: its waits are still due)
  // One scalar loop for every fusion: a merge runs it over the partials' merge staged in order.
  amk_view xs = x, ns = norm, w2s = w2;
  float inv_rms = 1.0f;
  if (merges) {
    amk_gemv_stage_combine<4>(reinterpret_cast<const float*>(x.ptr), k, fuse);
    xs.ptr = reinterpret_cast<unsigned char*>(amk_gemv_xs);
    xs.n = k;
    xs.dtype = AMK_DTYPE_F32;
    ns.ptr = nullptr;
    ns.n = 0;
    w2s.ptr = nullptr;
    w2s.n = 0;
  } else if (norm.present()) {
    inv_rms = amk_gemv_inv_rms(x, eps);
  }
  amk_gemv_scalar(w, xs, k, rows, y, res, ns, w2s, inv_rms);
}

// The TMA pipeline stores its rows with amk_gemv_store_row (above).
#include "amk_ops_tma.cuh"

// Operands w, x, y, residual?, norm?, w2?; param eps (read only with norm). `wait`: the step's
// waits when the op runs them (amk_step_wait), else amk_no_wait. `tma`: the tensor-map table.
template <class Wait>
__device__ __forceinline__ void amk_op_gemv(const amk_device_program_t& prog,
                                            const amk_instruction_t& ins,
                                            const amk_tma_table_t* tma, Wait& wait) {
  wait.prime();  // (the first poll of the step's waits, if the op runs them)
  const amk_view w = amk_operand(ins, 0);
  const amk_view x = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  const amk_view norm = amk_operand(ins, 4);
  const amk_view w2 = amk_operand(ins, 5);
  if constexpr (kAmkCfg.tma_gemv) {
    // The TMA pipeline has no fusions: fused instructions take the plain path. (It waits first.)
    if (wait()) return;
    const bool merges = amk_gemv_fuses(AMK_GEMV_FUSE_COMBINE) && ins.params[1] != 0;
    if (!merges && !norm.present() && !w2.present() && amk_gemv_tma(prog, ins, w, x, y, res, tma))
      return;
  }
  const float eps = norm.present() ? __uint_as_float(ins.params[0]) : 0.0f;
  // params[1] != 0: x is attention partials (head_dim params[1], heads params[2]).
  amk_gemv_plain(w, x, y, res, norm, w2, eps, ins.params[1], ins.params[2], wait);
}
