// The ops of a Llama decode step that are not GEMVs: rope, kv_append, attention_decode and
// attention_combine (op ids 12-15, src/ops/registry.cpp; the combine's core also serves
// attention_combine_splitk, amk_ops_gemv_splitk.cuh). Semantics and shape rules: the registry
// summaries, verify/op_rules.cpp and the CPU reference in backend/cpu_ops.cpp.
//
// Decode attention is flash-decoding split over instructions: attention_decode handles one kv
// head and one chunk of its cache for the query heads of its group and writes, per query head,
// the chunk-normalized output plus (max score, sum of exp); attention_combine merges the chunks.
// Inside attention_decode every warp streams its own positions with 16-byte loads that skip L1
// (K and V are read once), keeps an online softmax per query head in registers, and the warps
// merge once at the end through shared memory. A decode step needs no rope or kv_append before
// it: with theta != 0 the op rotates q and k_new itself (a (cos, sin) table in shared memory,
// computed once per block and RoPE params: amk_attn_rope_table),
// and the new token's (k_new, v_new) joins the chunk as one more position. Both happen outside
// the streaming loop, so its registers (the op's limit) are the same with or without them.
//
// The VM dispatches these through AMK_ATTENTION_DISPATCH(prog, ins, scratch), defined at the end
// (empty when the program uses none of them).
#ifndef AMK_OPS_ATTENTION_CUH
#define AMK_OPS_ATTENTION_CUH

#include "amk_device.cuh"

// Op ids (part of the binary format; src/ops/registry.hpp).
constexpr uint16_t kAmkOpRope = 12;
constexpr uint16_t kAmkOpKvAppend = 13;
constexpr uint16_t kAmkOpAttentionDecode = 14;
constexpr uint16_t kAmkOpAttentionCombine = 15;

__device__ __forceinline__ float amk_neg_inf() { return -__int_as_float(0x7f800000); }

// ---------------------------------------------------------------------------------------------
#if AMK_USE_OP_ROPE || AMK_USE_OP_ATTENTION_DECODE
// (cos, sin) pairs that fit in the op scratch; longer heads compute each pair where it is used.
constexpr uint32_t kAmkRopeTable = AMK_SCRATCH_BYTES / (2 * sizeof(float));
constexpr double kAmkTwoPi = 6.283185307179586;            // 2*pi rounded to double
constexpr double kAmkTwoPiLo = 2.4492935982947064e-16;     // 2*pi - kAmkTwoPi
constexpr double kAmkInvTwoPi = 0.15915494309189535;
constexpr double kAmkInvPi = 0.3183098861837907;
// Where the RoPE params start (position, theta, scaling_factor, low_freq_factor,
// high_freq_factor, original_max_position, in this order); head_dim is param 0 of both ops.
constexpr uint32_t kAmkRopeParamsOfRope = 1;
constexpr uint32_t kAmkRopeParamsOfAttention = 2;

// cos and sin of position * inv_freq_i, the RoPE params from ins.params[at]. inv_freq is Hugging
// Face's Llama 3 scaling (_compute_llama3_parameters) and the angle is formed and reduced in
// double, so long positions keep their accuracy (the CPU reference does the same); only the
// results round to f32.
__device__ __forceinline__ void amk_rope_cos_sin(const amk_instruction_t& ins, uint32_t at,
                                                 uint32_t i, float& c, float& s) {
  const uint32_t hd = ins.params[0];
  const double theta = __uint_as_float(ins.params[at + 1]);
  const double factor = __uint_as_float(ins.params[at + 2]);
  double inv = pow(theta, -2.0 * i / hd);
  if (factor != 0.0) {
    const double low = __uint_as_float(ins.params[at + 3]);
    const double high = __uint_as_float(ins.params[at + 4]);
    const double original_max = ins.params[at + 5];
    const double wavelen = kAmkTwoPi / inv;
    if (wavelen > original_max / low) {
      inv = inv / factor;
    } else if (!(wavelen < original_max / high)) {  // the band in between: interpolate
      const double smooth = (original_max / wavelen - low) / (high - low);
      inv = (1.0 - smooth) * inv / factor + smooth * inv;
    }
  }
  const double angle = static_cast<double>(ins.params[at]) * inv;
  const double turns = rint(angle * kAmkInvTwoPi);
  const double r = fma(-turns, kAmkTwoPiLo, fma(-turns, kAmkTwoPi, angle));  // |r| <= ~pi
  // sincospi needs no large-argument reduction (sincos would compile one in, with a stack frame).
  double sd, cd;
  sincospi(r * kAmkInvPi, &sd, &cd);
  c = static_cast<float>(cd);
  s = static_cast<float>(sd);
}
#endif  // AMK_USE_OP_ROPE || AMK_USE_OP_ATTENTION_DECODE

#if AMK_USE_OP_ROPE
// y[i] = x[i] cos - x[i + hd/2] sin, y[i + hd/2] = x[i + hd/2] cos + x[i] sin for each head.
// One thread per (head, i) pair reads both inputs before writing: y may alias x.
AMK_OP_FN void amk_op_rope(const amk_device_program_t&, const amk_instruction_t& ins,
                           unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view y = amk_operand(ins, 1);
  const uint32_t hd = ins.params[0];
  if (hd < 2) return;
  const uint32_t half = hd / 2;
  const uint32_t pairs = x.n / hd * half;
  float* table = reinterpret_cast<float*>(scratch);
  const bool tabled = half <= kAmkRopeTable;
  if (tabled) {  // every head shares the angles: one double-precision evaluation per frequency
    for (uint32_t i = threadIdx.x; i < half; i += AMK_BLOCK_THREADS)
      amk_rope_cos_sin(ins, kAmkRopeParamsOfRope, i, table[2 * i], table[2 * i + 1]);
    __syncthreads();
  }
  for (uint32_t p = threadIdx.x; p < pairs; p += AMK_BLOCK_THREADS) {
    const uint32_t head = p / half, i = p - head * half;
    float c, s;
    if (tabled) {
      c = table[2 * i];
      s = table[2 * i + 1];
    } else {
      amk_rope_cos_sin(ins, kAmkRopeParamsOfRope, i, c, s);
    }
    const uint64_t base = static_cast<uint64_t>(head) * hd;
    const float a = amk_load_f32(x, base + i);
    const float b = amk_load_f32(x, base + i + half);
    amk_store_f32(y, base + i, fmaf(a, c, -b * s));
    amk_store_f32(y, base + i + half, fmaf(b, c, a * s));
  }
}
#endif  // AMK_USE_OP_ROPE

// ---------------------------------------------------------------------------------------------
#if AMK_USE_OP_KV_APPEND
// cache[h, position, :] = x[h*hd : (h+1)*hd]; cache is [n_kv, max_len, hd], head-major.
AMK_OP_FN void amk_op_kv_append(const amk_device_program_t&, const amk_instruction_t& ins,
                                unsigned char*) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view cache = amk_operand(ins, 1);
  const uint32_t hd = ins.params[0];
  const uint64_t position = ins.params[1], max_len = ins.params[2];
  if (hd == 0) return;
  for (uint32_t e = threadIdx.x; e < x.n; e += AMK_BLOCK_THREADS) {
    const uint32_t h = e / hd, d = e - h * hd;
    amk_store_f32(cache, (h * max_len + position) * hd + d, amk_load_f32(x, e));
  }
}
#endif  // AMK_USE_OP_KV_APPEND

// ---------------------------------------------------------------------------------------------
#if AMK_USE_OP_ATTENTION_DECODE
constexpr uint32_t kAmkAttnMaxHeadDim = 256;  // kMaxAttentionHeadDim in verify/op_rules.cpp
// The K/V dtypes with a vector loader (the generated source lists those the program uses; by
// hand, all three). Others take the element-by-element loader.
#if !defined(AMK_ATTN_KV_LISTED)
#define AMK_ATTN_KV_F32 1
#define AMK_ATTN_KV_F16 1
#define AMK_ATTN_KV_BF16 1
#endif
// Query heads per pass: a lane keeps its slice of q and o for each in registers, so the count
// follows the register budget of the block size (launch bounds: 64K registers per block).
constexpr uint32_t kAmkAttnHeads = AMK_BLOCK_THREADS <= 256 ? 4 : AMK_BLOCK_THREADS <= 512 ? 2 : 1;
// Rows of K and of V each lane has in flight per batch: 16-byte vectors of 4 floats or 8 halves
// (64 bytes per lane and matrix at 256 threads), one row for the element-by-element loader.
constexpr uint32_t kAmkAttnUnrollF32 = AMK_BLOCK_THREADS <= 512 ? 4 : 2;
constexpr uint32_t kAmkAttnUnrollF16 = AMK_BLOCK_THREADS <= 256 ? 2 : 1;
// Warps that stream K/V: eight keep enough 16-byte loads in flight; more would only grow the
// merge. Wider blocks leave the rest idle for this op.
constexpr uint32_t kAmkAttnWarps = kAmkWarps < 8 ? kAmkWarps : 8;
// AMK_ATTN_TILED_WIDE=1: the tiled path below also takes chunks of up to 32 KiB of K+V and
// group x head_dim <= 512 (Llama-3.1-8B: 4 query heads of 128, 64 positions), with the merge
// buffer grown to 32 KiB and the staged q to 512 floats (~17 KiB more static shared memory). The
// generated source sets it when some chunk of the program needs it (attention_wide_tiles in
// src/cuda/codegen.cpp); measured on the H200 (`amk profile --events`): Llama-3.1-8B step 5.453
// -> 5.299 ms; the 1B step, whose chunks fit the default tile, 1.279 -> 1.281 ms with it forced on.
// AMK_ATTN_TILED_WIDE=2: the large tile, 64 KiB of K+V (one query head of 64 over 256 positions:
// `amk gen llama --combine oproj`'s chunks), the merge buffer grown to 64 KiB.
#ifndef AMK_ATTN_TILED_WIDE
#define AMK_ATTN_TILED_WIDE 0
#endif
#if AMK_ATTN_TILED_WIDE < 0 || AMK_ATTN_TILED_WIDE > 2
#error "AMK_ATTN_TILED_WIDE is 0 (16 KiB tile), 1 (32 KiB) or 2 (64 KiB)"
#endif
// AMK_ATTN_TILE_DYNAMIC=1 (set by the generated source with the large tile where gemv's ring
// gives the launch at least 64 KiB of dynamic shared memory): the tile lives there, which no
// instruction keeps across instructions (as attention_combine's staging does), instead of in a
// 64 KiB static merge buffer. Measured on the H200 (twenty-seventh session, `amk profile
// --tuning-arms`, the 1B step with --combine oproj, three rounds): the tile static 1.017x slower.
#ifndef AMK_ATTN_TILE_DYNAMIC
#define AMK_ATTN_TILE_DYNAMIC 0
#endif
// The merge buffer: 8 warps x 4 heads x (128 + 2) floats (16.25 KiB; wide: 32 KiB. Counted by
// kAttentionMergeBytes / kAttentionWideMergeBytes in src/cuda/codegen.cpp), so a pass of 4 heads
// of up to 128 dims merges in one round.
constexpr uint32_t kAmkAttnMergeFloats =
    AMK_ATTN_TILED_WIDE == 2 ? (AMK_ATTN_TILE_DYNAMIC ? 8 * 4 * (128 + 2) : 16384)
    : AMK_ATTN_TILED_WIDE   ? 8192
                            : 8 * 4 * (128 + 2);
static_assert(kAmkAttnMergeFloats >= kAmkAttnWarps * (kAmkAttnMaxHeadDim + 2),
              "the merge must hold at least one head of every streaming warp");

// Per-warp (max, sum, output) of each query head, merged across the warps at the end.
__shared__ __align__(16) float amk_attn_merge[kAmkAttnMergeFloats];

// A lane's slice of one K or V row: E elements from element `elem` (the first n of them valid).
// The vector loader reads one 16-byte vector (rows are whole vectors and 16-byte aligned).
template <uint32_t DT>
struct amk_attn_vec_loader {
  static constexpr uint32_t E = amk_ftype<DT>::per_vec;
  static constexpr uint32_t U = E == 4 ? kAmkAttnUnrollF32 : kAmkAttnUnrollF16;
  typedef amk_vec16 raw;
  __device__ static __forceinline__ void load(const amk_view& a, uint64_t elem, uint32_t,
                                              raw& out) {
    out = amk_ld16_stream(a.ptr + elem * (kAmkVectorBytes / E));
  }
  __device__ static __forceinline__ void unpack(const raw& r, float* f) {
    amk_ftype<DT>::unpack(r, f);
  }
};
// Any float dtype, any alignment: element by element.
struct amk_attn_any_loader {
  static constexpr uint32_t E = 8;
  static constexpr uint32_t U = 1;
  struct raw {
    float f[8];
  };
  __device__ static __forceinline__ void load(const amk_view& a, uint64_t elem, uint32_t n,
                                              raw& out) {
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) out.f[e] = e < n ? amk_load_f32(a, elem + e) : 0.0f;
  }
  __device__ static __forceinline__ void unpack(const raw& r, float* f) {
#pragma unroll
    for (uint32_t e = 0; e < E; ++e) f[e] = r.f[e];
  }
};

static_assert(kAmkRopeTable >= kAmkAttnMaxHeadDim / 2,
              "the op scratch must hold the (cos, sin) table of the widest head");

// Element j of the head at `base` of x, rotated like the rope op: pairs (j, j + half) with
// y_lo = x_lo cos - x_hi sin, y_hi = x_hi cos + x_lo sin, in f32 from the shared table.
__device__ __forceinline__ float amk_attn_rotated(const amk_view& x, uint64_t base, uint32_t j,
                                                  uint32_t half, const float* table) {
  const bool lo = j < half;
  const uint32_t i = lo ? j : j - half;
  const float a = amk_load_f32(x, base + j);
  const float b = amk_load_f32(x, base + (lo ? j + half : i));
  const float c = table[2 * i], s = table[2 * i + 1];
  return lo ? fmaf(a, c, -b * s) : fmaf(a, c, b * s);
}

// The RoPE (cos, sin) table of attention_decode lives in shared memory across instructions:
// every attention instruction of a decode step has the same position and RoPE params, so the
// first one a block runs computes it (in double, one frequency per thread) and the rest of the
// block's instructions reuse it. The tag is head_dim and the six RoPE params.
constexpr uint32_t kAmkRopeTagWords = 7;
__shared__ __align__(16) float amk_attn_rope[kAmkAttnMaxHeadDim];  // hd / 2 (cos, sin) pairs
__shared__ uint32_t amk_attn_rope_tag[kAmkRopeTagWords];

__device__ __forceinline__ uint32_t amk_attn_rope_tag_word(const amk_instruction_t& ins,
                                                           uint32_t w) {
  return w == 0 ? ins.params[0] : ins.params[kAmkRopeParamsOfAttention + w - 1];
}

// The table for `ins` (theta != 0), computed unless the block already holds it. Ends with a
// barrier when it computes; the check itself costs one. (Without it -- every thread compares the
// same shared words, so the answer is the block's, and a barrier only before a computation's
// writes: thirty-second session, built, `--check`ed, removed -- the 1B step 1.0015x, the 8B
// 0.9986x: a tie, though ncu put 1,322 of the op's samples on this barrier's result.)
__device__ __forceinline__ const float* amk_attn_rope_table(const amk_instruction_t& ins) {
  bool same = amk_state.rope_valid != 0;
#pragma unroll
  for (uint32_t w = 0; w < kAmkRopeTagWords; ++w)
    same = same && amk_attn_rope_tag[w] == amk_attn_rope_tag_word(ins, w);
  if (__syncthreads_and(same)) return amk_attn_rope;  // uniform; every thread has read the tag
  const uint32_t half = ins.params[0] / 2;
  for (uint32_t i = threadIdx.x; i < half; i += AMK_BLOCK_THREADS)
    amk_rope_cos_sin(ins, kAmkRopeParamsOfAttention, i, amk_attn_rope[2 * i],
                     amk_attn_rope[2 * i + 1]);
  if (threadIdx.x < kAmkRopeTagWords) amk_attn_rope_tag[threadIdx.x] = amk_attn_rope_tag_word(ins, threadIdx.x);
  if (threadIdx.x == 0) amk_state.rope_valid = 1;
  __syncthreads();
  return amk_attn_rope;
}

// exp for the softmax weights: ex2.approx of x * log2(e) (two instructions instead of expf's
// range reduction, ~17). Relative error ~1e-6 on the weights that matter; exp(-inf) = 0.
__device__ __forceinline__ float amk_attn_exp(float x) {
  return __expf(x);
}

// The weight of an online-softmax state with max m once the common max is `big` (0 for a state
// that saw no position: m = -inf).
__device__ __forceinline__ float amk_attn_weight(float m, float big) {
  return m == amk_neg_inf() ? 0.0f : amk_attn_exp(m - big);
}

// The new token's row, when the instruction carries one and the chunk has cached rows too: its
// score per query head (q_g . k_new, scaled) and v_new, in shared memory, so the passes' final
// merge takes it as one more partial (max s, sum 1, output v_new). Heads past kAmkAttnNewHeads
// take the separate path after the passes instead.
constexpr uint32_t kAmkAttnNewHeads = 16;
__shared__ float amk_attn_new_s[kAmkAttnNewHeads];
__shared__ __align__(16) float amk_attn_new_v[kAmkAttnMaxHeadDim];

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
  const float qscale = AMK_BLOCK_THREADS > 256 ? scale : 1.0f;
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
#if AMK_BLOCK_THREADS <= 256  // wider blocks stage the rotated q (registers: see the caller)
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
#endif

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
    __syncthreads();
    const uint32_t heads = gn - h0 < per_round ? gn - h0 : per_round;
    for (uint32_t idx = threadIdx.x; idx < heads * row; idx += AMK_BLOCK_THREADS) {
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
    __syncthreads();  // the next round (or pass) rewrites the merge buffer
  }
}

// Whether the instruction rotates q and k_new (theta != 0; the verifier makes head_dim even).
__device__ __forceinline__ bool amk_attn_rotates(const amk_instruction_t& ins) {
  return __uint_as_float(ins.params[kAmkRopeParamsOfAttention + 1]) != 0.0f &&
         ins.params[0] % 2 == 0;
}

// Whether the instruction carries the new token's row: k_new and v_new, a head each.
__device__ __forceinline__ bool amk_attn_has_new_row(const amk_instruction_t& ins, uint32_t hd) {
  return ins.n_operands > 5 && ins.operands[4].buffer != AMK_NO_BUFFER &&
         ins.operands[5].buffer != AMK_NO_BUFFER && ins.operands[4].extent >= hd &&
         ins.operands[5].extent >= hd;
}

// Element d of an f32 head at x, rotated like the rope op when `table` is given.
__device__ __forceinline__ float amk_attn_rotated_f32(const float* x, uint32_t d, uint32_t half,
                                                      const float* table) {
  if (table == nullptr) return x[d];
  const bool lo = d < half;
  const uint32_t i = lo ? d : d - half;
  const float a = x[d], b = x[lo ? d + half : i];
  const float c = table[2 * i], s = table[2 * i + 1];
  return lo ? fmaf(a, c, -b * s) : fmaf(a, c, b * s);
}

// One element of the new token's rows (q's head at `base`, or k_new), rotated when `table` is
// given; f32 rows (the usual case) with plain loads the compiler can issue together.
__device__ __forceinline__ float amk_attn_new_elem(const amk_view& x, uint64_t base, uint32_t d,
                                                   uint32_t half, const float* table) {
  if (x.dtype != AMK_DTYPE_F32)
    return table != nullptr ? amk_attn_rotated(x, base, d, half, table) : amk_load_f32(x, base + d);
  return amk_attn_rotated_f32(reinterpret_cast<const float*>(x.ptr) + base, d, half, table);
}

// The new token's row into amk_attn_new_s / amk_attn_new_v for the passes' merge (group <=
// kAmkAttnNewHeads): one warp per query head. No barrier: the merge's first one orders it.
__device__ __forceinline__ void amk_attn_new_row_to_merge(const amk_instruction_t& ins,
                                                          uint32_t hd, uint32_t group, float scale,
                                                          const float* table) {
  const amk_view qn = amk_operand(ins, 0);
  const amk_view k_new = amk_operand(ins, 4);
  const amk_view v_new = amk_operand(ins, 5);
  const uint32_t half = hd / 2;
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t d = threadIdx.x; d < hd; d += AMK_BLOCK_THREADS)
    amk_attn_new_v[d] = amk_load_f32(v_new, d);
  for (uint32_t g = warp; g < group; g += kAmkWarps) {
    const uint64_t base = static_cast<uint64_t>(g) * hd;
    float dot = 0.0f;
#pragma unroll 4
    for (uint32_t d = lane; d < hd; d += kAmkWarpSize)
      dot = fmaf(amk_attn_new_elem(qn, base, d, half, table), amk_attn_new_elem(k_new, 0, d, half, table), dot);
    dot = amk_warp_sum(dot);
    if (lane == 0) amk_attn_new_s[g] = scale * dot;
  }
}

// ---- The tiled path: a whole chunk in shared memory, one thread per score and per output ----
// The streaming pass above splits every K/V row over a lane group, so each position costs
// shuffle reductions, an online-softmax rescale per batch, and the warps merge at the end: for a
// decode chunk of 64 positions that is ~2000 instructions a warp at ~8 cycles each (measured:
// ~8.9 us an instruction, nearly all of it independent of the chunk length). When the chunk's K
// and V rows fit in shared memory (16-bit caches, 256 threads), the op instead
//   1. copies K and V into shared memory (16-byte cp.async that skip L1, issued first, so the
//      copy runs under what follows), and stages q rotated and scaled in f32 (two planes of 4
//      floats a vector, like amk_xs_index, so the score loop reads it without bank conflicts),
//   2. computes every score s[g][t] on its own thread (no shuffles; each thread walks its row
//      from vector t mod (hd / 8), so the 8 lanes of a quarter warp read 8 different banks),
//   3. takes the softmax of each head on one warp (max, exp, sum),
//   4. computes every output o[g][d] on its own thread (p broadcast, V read along a row).
// Three barriers in all. The new token's row joins as in the pass (amk_attn_new_*).
// Where the time goes (twenty-ninth session, the 1B step's one-head chunks of 256 positions,
// traces with AMK_TRACE_MARKS_EARLY=5 and 6, means from the wait's end): q staged 0.45 us, K/V
// landed 0.55, scores taken 1.42, softmax taken 2.48, output partials in 3.10, outputs written
// 3.43, the op's end 3.63. Run twice on the same block (=7), the second run, its code warm, took
// 4.0 us (its K/V copied again, from L2): the time is not the instruction cache's. A form with
// each warp's softmax over its own 32 positions in registers and two barriers instead of four
// (built and checked on the GPU, then removed) took the op 3.47 -> 3.35 us and the step 0.997x
// in one call, 1.002x in the next (`amk profile --events --tuning-arms`, three rounds): a tie.
// AMK_ATTN_TILED=0 turns it off (the streaming pass then takes every chunk).
#ifndef AMK_ATTN_TILED
#define AMK_ATTN_TILED 1
#endif
#if AMK_ATTN_TILED && AMK_BLOCK_THREADS == 256 && (AMK_ATTN_KV_BF16 || AMK_ATTN_KV_F16)
#define AMK_ATTN_TILE 1
// K and V of a chunk in amk_attn_merge (the pass's merge buffer, unused by this path).
constexpr uint32_t kAmkAttnTileBytes =
    AMK_ATTN_TILED_WIDE == 2 ? 65536 : AMK_ATTN_TILED_WIDE ? 32768 : 16384;
static_assert(AMK_ATTN_TILE_DYNAMIC || kAmkAttnMergeFloats * sizeof(float) >= kAmkAttnTileBytes,
              "the tile fits the merge buffer");
// Where the tile is: the merge buffer, or (AMK_ATTN_TILE_DYNAMIC) the launch's dynamic shared memory.
__device__ __forceinline__ unsigned char* amk_attn_tile_base() {
#if AMK_ATTN_TILE_DYNAMIC
  return amk_dynamic_smem;
#else
  return reinterpret_cast<unsigned char*>(amk_attn_merge);
#endif
}
// Scores (group x positions), at most this many floats, and staged q (group x head_dim).
constexpr uint32_t kAmkAttnTileFloats = 256;
constexpr uint32_t kAmkAttnTileQFloats = AMK_ATTN_TILED_WIDE ? 512 : 256;
__shared__ __align__(16) float amk_attn_tq[kAmkAttnTileQFloats];
// Where staged q keeps element d of head g: two planes, element d at plane (d & 4), 4 (d / 8) + d % 4.
__device__ __forceinline__ uint32_t amk_attn_tq_at(uint32_t g, uint32_t d, uint32_t hd,
                                                   uint32_t half) {
  return g * hd + ((d & 4u) != 0 ? half : 0u) + (d >> 3) * 4 + (d & 3u);
}
__shared__ __align__(16) float amk_attn_tp[kAmkAttnTileFloats];
// AMK_ATTN_ONE_TRIP (1): the tiled path reads q, k_new and v_new in one round trip (see
// amk_attn_tiled); 0: a loop of reads each (q, then v_new, then k_new with q again). Measured on
// the H200 (`amk profile --events --tuning-arms`, one process): Llama-3.2-1B step 1.0992 -> 1.0915
// ms, Llama-3.1-8B 4.902 -> 4.870.
#ifndef AMK_ATTN_ONE_TRIP
#define AMK_ATTN_ONE_TRIP 1
#endif
#if AMK_ATTN_ONE_TRIP
__shared__ __align__(16) float amk_attn_tk[kAmkAttnMaxHeadDim];  // k_new rotated
#endif
// Per query head: max score, sum of exp, the new row's weight.
__shared__ float amk_attn_tm[kAmkAttnNewHeads];
__shared__ float amk_attn_tl[kAmkAttnNewHeads];
__shared__ float amk_attn_tn[kAmkAttnNewHeads];

// AMK_ATTN_BULK (1): thread 0 copies the chunk's K and V rows (each one contiguous run) into
// shared memory with two bulk copies (cp.async.bulk, completing on amk_attn_kv_bar), where every
// thread otherwise issues its share of 16-byte cp.async copies (8 a thread for a 1B chunk: the
// issue stalls while the block's requests queue, and the barrier of the RoPE table check that
// follows waits for the slowest warp). 0: the 16-byte copies. Measured on the H200 (same runs
// as AMK_ATTN_SPLIT's): the 1B step 0.9919x of the 16-byte copies' time in one call (three
// rounds, each lower) and 1.003x in the next, the 8B step 0.998x and 0.999x: a tie within the
// spread between calls; in the 1B trace K and V land 2.41 us after the op starts instead of
// 2.67 and the op's mean falls 5.41 -> 5.12 us. On.
#ifndef AMK_ATTN_BULK
#define AMK_ATTN_BULK 1
#endif
#if AMK_ATTN_BULK
__shared__ __align__(8) uint64_t amk_attn_kv_bar;
__shared__ uint32_t amk_attn_kv_parity;  // the phase the next copy completes
// (thread 0, at the block's start, before its first barrier)
__device__ __forceinline__ void amk_attn_block_init() {
  amk_mbar_init(amk_smem_addr(&amk_attn_kv_bar), 1);
  amk_mbar_init_fence();
  amk_attn_kv_parity = 0;
}
#define AMK_ATTN_HAS_BLOCK_INIT 1
#endif

// The 8 elements of K at shared address addr (16 bytes) as f32.
template <uint32_t DT>
__device__ __forceinline__ void amk_attn_lds_k8(uint32_t addr, float (&kf)[8]) {
  amk_vec16 kv;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(kv.w[0]), "=r"(kv.w[1]), "=r"(kv.w[2]), "=r"(kv.w[3])
               : "r"(addr));
  amk_ftype<DT>::unpack(kv, kf);
}
// a0 += the even products, a1 += the odd ones, of kf and the staged q's matching 8 elements (4
// in each plane, at shared addresses q0 and q1).
__device__ __forceinline__ void amk_attn_fma8(const float (&kf)[8], uint32_t q0, uint32_t q1,
                                              float& a0, float& a1) {
  float x0, x1, x2, x3, x4, x5, x6, x7;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x0), "=f"(x1), "=f"(x2), "=f"(x3) : "r"(q0));
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x4), "=f"(x5), "=f"(x6), "=f"(x7) : "r"(q1));
  a0 = fmaf(kf[0], x0, a0);
  a1 = fmaf(kf[1], x1, a1);
  a0 = fmaf(kf[2], x2, a0);
  a1 = fmaf(kf[3], x3, a1);
  a0 = fmaf(kf[4], x4, a0);
  a1 = fmaf(kf[5], x5, a1);
  a0 = fmaf(kf[6], x6, a0);
  a1 = fmaf(kf[7], x7, a1);
}
// Output element d of query head g of a tiled chunk, from acc (its sum over the chunk's cached
// positions): plus the new row's share, normalized by the head's l; element 0 also writes (m, l).
__device__ __forceinline__ void amk_attn_tile_out(float* out, uint32_t g, uint32_t d, uint32_t hd,
                                                  float acc, bool with_new) {
  if (with_new) acc = fmaf(amk_attn_tn[g], amk_attn_new_v[d], acc);
  const float l = amk_attn_tl[g];
  float* row = out + static_cast<uint64_t>(g) * (hd + 2);
  row[d] = acc / l;
  if (d == 0) {
    row[hd] = amk_attn_tm[g];
    row[hd + 1] = l;
  }
}

// Whether the chunk takes the tiled path (q, and k_new / v_new when present, in f32: the
// decode step's activations; other dtypes take the pass, which reads any).
__device__ __forceinline__ bool amk_attn_tile_fits(const amk_instruction_t& ins, const amk_view& q,
                                                   const amk_view& k, const amk_view& v,
                                                   uint32_t hd, uint32_t group, bool has_new) {
  if (q.dtype != AMK_DTYPE_F32 ||
      (has_new && (amk_operand(ins, 4).dtype != AMK_DTYPE_F32 ||
                   amk_operand(ins, 5).dtype != AMK_DTYPE_F32)))
    return false;
  const bool dtype_ok =
#if AMK_ATTN_KV_BF16
      k.dtype == AMK_DTYPE_BF16 ||
#endif
#if AMK_ATTN_KV_F16
      k.dtype == AMK_DTYPE_F16 ||
#endif
      false;
  const uint32_t len = k.n / hd;
  return dtype_ok && k.dtype == v.dtype && hd % 8 == 0 && len >= 1 && v.n / hd >= len &&
         amk_aligned16(k.ptr) && amk_aligned16(v.ptr) && 4ull * len * hd <= kAmkAttnTileBytes &&
#if AMK_ATTN_TILE_DYNAMIC
         4ull * len * hd <= amk_dynamic_smem_size() &&
#endif
         group >= 1 && group <= kAmkAttnNewHeads && group * len <= kAmkAttnTileFloats &&
         group * hd <= kAmkAttnTileQFloats;
}

// AMK_ATTN_SPLIT (1): the tiled path's score and output stages split each dot product over
// several threads so that one shared-memory load feeds up to four heads:
//   scores: a K row over S adjacent lanes (S a power of two dividing head_dim / 8, S * positions
//     <= 256 where it can), each lane taking every S-th 16-byte vector of the row for four heads
//     at a time, the S sums joined with shuffles;
//   outputs: warp w takes positions [w * per, (w + 1) * per), each lane two adjacent elements of
//     every 64 (one 4-byte load of a V row for four heads), the warps' partial sums through
//     shared memory (where K was), then one thread an output adds the eight.
// 0: one thread a score and one an output, each walking the whole row or column (the path's
// first form, ~4.5 instructions a multiply-add in its output loop). Measured on the H200
// (`amk profile --events --tuning-arms`, one process, with the bulk copies below): the 1B step
// 0.9868 / 0.9895 / 0.9980 ms split against 0.9800 / 0.9821 / 0.9881 not (its op is ~0.25 us
// slower from K/V landed to the end in a trace, though a standalone chunk is 0.1 us faster: more
// code to arrive cold, one barrier more); the 8B step (head_dim 128, the wide tile) 4.3529 /
// 4.3636 split against 4.3688 / 4.3738. So on by default exactly where the wide tile is.
#ifndef AMK_ATTN_SPLIT
#define AMK_ATTN_SPLIT AMK_ATTN_TILED_WIDE
#endif
// Heads a thread carries at once in the split stages (registers: 2 accumulators a head).
// AMK_ATTN_SPLIT_HEADS: 4, or 1 where every chunk has one query head (the generated source sets
// it: `amk gen llama --combine oproj`), so no lane repeats its one head's work four times.
#ifndef AMK_ATTN_SPLIT_HEADS
#define AMK_ATTN_SPLIT_HEADS 4
#endif
constexpr uint32_t kAmkAttnSplitHeads = AMK_ATTN_SPLIT_HEADS;
// The lanes a K row is split over: the largest power of two that divides the row's vectors
// (head_dim / 8), is at most 32 and keeps S * len within the block.
__device__ __forceinline__ uint32_t amk_attn_score_split(uint32_t nv, uint32_t len) {
  uint32_t s = 1;
  while (s < 32 && nv % (2 * s) == 0 && 2 * s * len <= AMK_BLOCK_THREADS) s *= 2;
  return s;
}

// AMK_ATTN_ROW8 (0 in the kernel; the generated source sets 1 where every attention chunk has
// one query head: `amk gen llama --combine oproj`, the 1B step's layout): the tiled path's stages
// after K/V land, for a chunk of one query head of head_dim 64 or 128 over at most 256 positions,
// with eight lanes a K or V row. Lane j of a row's eight reads its 16-byte vector j (and j + 8
// at head_dim 128) of eight rows, so one shared load of a warp is 512 contiguous bytes (four
// wavefronts, the fewest) and the lane's slice of q stays in its registers (the split stages'
// rotated walk reads a different q vector a lane: 12 wavefronts a K vector where this takes 4).
// The eight lanes' sums of their eight rows are then transposed over 3 shuffle rounds (7
// shuffles), leaving each lane one row's score: warp w holds positions [32 w, 32 w + 32), one a
// lane. The softmax is the block's max through shared memory (one barrier) and the weights in
// the same registers; the outputs walk V the same way, each row's weight by a shuffle from the
// lane that holds it, the four row groups of a warp transposed over 2 rounds, the warps' partial
// rows summed through shared memory (a second barrier). Two barriers after K/V land, against
// four on the split stages (scores, one warp's softmax, outputs). Measured on the H200
// (thirty-first session, `amk profile --events --tuning-arms`, the 1B step, three rounds):
// 0.9107 / 0.9124 / 0.9114 ms on the split stages, 0.8941 / 0.8915 / 0.8924 with these
// (0.979x); in the trace the op's mean 3.6 -> 1.9 us, its scores taken 0.73 us after K/V land
// (0.87 on the split stages), the softmax 0.15 (1.06), the outputs written 0.62 later (0.95).
#ifndef AMK_ATTN_ROW8
#define AMK_ATTN_ROW8 0
#endif
#if AMK_ATTN_ROW8
static_assert(kAmkWarps == 8, "the row-of-eight attention stages take 8 warps of 256 positions");
// (Thirty-second session: a VM with only these stages at head_dim 64 compiled into the tiled path,
// 55 -> 23 KiB of its code, measured 1.005x the 1B step's time, q staged 2.50 -> 2.76 us: what
// the instruction cache misses is the code that runs, not the code that is compiled in; ncu
// counted 21% of the op's stall samples waiting for instructions, see README.)
// Whether a chunk takes them (group 1; head_dim 64 or 128; len <= 256 positions, one a thread).
__device__ __forceinline__ bool amk_attn_row8_fits(uint32_t hd, uint32_t group, uint32_t len) {
  return group == 1 && (hd == 64 || hd == 128) && len <= AMK_BLOCK_THREADS;
}
// One round of a transposed sum over lanes: a lane keeps half of its 2N values (the upper half
// where `hi`) and adds its partner's (lane ^ mask) other half, which the partner sends.
template <uint32_t N>
__device__ __forceinline__ void amk_attn_fold(const float (&in)[2 * N], float (&out)[N], bool hi,
                                              uint32_t mask) {
#pragma unroll
  for (uint32_t e = 0; e < N; ++e)
    out[e] = (hi ? in[e + N] : in[e]) + __shfl_xor_sync(kAmkFullMask, hi ? in[e] : in[e + N], mask);
}
// VPL: vectors of 8 elements a lane takes of each row (head_dim / 64). K at shared address ks
// and V at vs, rows of 2 hd bytes (K's place takes the partial rows once the scores are
// taken); staged q (amk_attn_tq: rotated, scaled, two planes) and, with
// the new row, its k (amk_attn_tk, AMK_ATTN_ONE_TRIP) or score (amk_attn_new_s) and v
// (amk_attn_new_v). Writes out[0, hd) normalized, out[hd] = max, out[hd + 1] = sum of exp.
template <uint32_t DT, uint32_t VPL>
__device__ __forceinline__ void amk_attn_row8(uint32_t ks, uint32_t vs, float* out, uint32_t len,
                                              bool with_new) {
  constexpr uint32_t hd = 64 * VPL, half = hd / 2, row_bytes = 2 * hd;
  const uint32_t lane = threadIdx.x % kAmkWarpSize, warp = threadIdx.x / kAmkWarpSize;
  const uint32_t j = lane & 7u, g = lane >> 3;  // vector j of rows 32 warp + 4 i + g, i < 8
  const uint32_t last = len - 1;
  // The lane's q: elements 8 c .. 8 c + 7 of vector c = j + 8 v (4 in each plane).
  float qr[VPL][8];
#pragma unroll
  for (uint32_t vv = 0; vv < VPL; ++vv) {
    const uint32_t q0 = amk_smem_addr(amk_attn_tq) + 16 * (j + 8 * vv);
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(qr[vv][0]), "=f"(qr[vv][1]), "=f"(qr[vv][2]), "=f"(qr[vv][3]) : "r"(q0));
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(qr[vv][4]), "=f"(qr[vv][5]), "=f"(qr[vv][6]), "=f"(qr[vv][7])
                 : "r"(q0 + 4 * half));
  }
  // Scores: acc[i] is the lane's share of row 32 warp + 4 i + g (rows past the chunk read its
  // last row, masked below).
  float acc[8];
#pragma unroll
  for (uint32_t i = 0; i < 8; ++i) {
    const uint32_t r = min(32 * warp + 4 * i + g, last);
    float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
    for (uint32_t vv = 0; vv < VPL; ++vv) {
      float kf[8];
      amk_attn_lds_k8<DT>(ks + r * row_bytes + 16 * (j + 8 * vv), kf);
#pragma unroll
      for (uint32_t e = 0; e < 8; e += 2) {
        a0 = fmaf(kf[e], qr[vv][e], a0);
        a1 = fmaf(kf[e + 1], qr[vv][e + 1], a1);
      }
    }
    acc[i] = a0 + a1;
  }
  // The transpose: after the rounds over lane bits 2, 1, 0, lane j holds row i = j's whole sum.
  float b4[4], b2[2], b1[1];
  amk_attn_fold<4>(acc, b4, (j & 4u) != 0, 4);
  amk_attn_fold<2>(b4, b2, (j & 2u) != 0, 2);
  amk_attn_fold<1>(b2, b1, (j & 1u) != 0, 1);
  const uint32_t row = 32 * warp + 4 * j + g;
  const float s = row < len ? b1[0] : amk_neg_inf();

  // The new token's score, on every lane (each row group of eight lanes has the whole q).
  float s_new = amk_neg_inf();
  if (with_new) {
#if AMK_ATTN_ONE_TRIP
    float dot = 0.0f;
#pragma unroll
    for (uint32_t vv = 0; vv < VPL; ++vv) {
      const float4 k0 = *reinterpret_cast<const float4*>(amk_attn_tk + 8 * (j + 8 * vv));
      const float4 k1 = *reinterpret_cast<const float4*>(amk_attn_tk + 8 * (j + 8 * vv) + 4);
      dot = fmaf(qr[vv][0], k0.x, dot);
      dot = fmaf(qr[vv][1], k0.y, dot);
      dot = fmaf(qr[vv][2], k0.z, dot);
      dot = fmaf(qr[vv][3], k0.w, dot);
      dot = fmaf(qr[vv][4], k1.x, dot);
      dot = fmaf(qr[vv][5], k1.y, dot);
      dot = fmaf(qr[vv][6], k1.z, dot);
      dot = fmaf(qr[vv][7], k1.w, dot);
    }
#pragma unroll
    for (uint32_t o = 4; o > 0; o /= 2) dot += __shfl_xor_sync(kAmkFullMask, dot, o);
    s_new = dot;
#else
    s_new = amk_attn_new_s[0];
#endif
  }

  // The block's max (the warps' maxes through amk_attn_tp, unused by this path), the weights.
  float* red = amk_attn_tp;  // [0, 8): each warp's max; [8, 16): each warp's sum of weights
  const float mw = amk_warp_max(fmaxf(s, s_new));
  if (lane == 0) red[warp] = mw;
  __syncthreads();
  if (kAmkMarksAttnLate == 1) AMK_TRACE_MARK(0);  // (diagnostic) the scores taken
  float big = red[0];
#pragma unroll
  for (uint32_t w = 1; w < kAmkWarps; ++w) big = fmaxf(big, red[w]);
  const float p = row < len ? amk_attn_exp(s - big) : 0.0f;
  const float lw = amk_warp_sum(p);
  if (kAmkMarksAttnLate == 1) AMK_TRACE_MARK(1);  // (diagnostic) the softmax taken

  // Outputs: the lane's vectors of its eight rows, each row's weight from the lane holding it.
  float o[VPL][8];
#pragma unroll
  for (uint32_t vv = 0; vv < VPL; ++vv)
#pragma unroll
    for (uint32_t e = 0; e < 8; ++e) o[vv][e] = 0.0f;
#pragma unroll
  for (uint32_t i = 0; i < 8; ++i) {
    const float pi = __shfl_sync(kAmkFullMask, p, (g << 3) | i);  // row 32 warp + 4 i + g
    const uint32_t r = min(32 * warp + 4 * i + g, last);
#pragma unroll
    for (uint32_t vv = 0; vv < VPL; ++vv) {
      float vf[8];
      amk_attn_lds_k8<DT>(vs + r * row_bytes + 16 * (j + 8 * vv), vf);
#pragma unroll
      for (uint32_t e = 0; e < 8; ++e) o[vv][e] = fmaf(pi, vf[e], o[vv][e]);
    }
  }
  // The warp's four row groups (lane bits 3, 4) transposed: lane (j, g) ends with elements
  // 2 g, 2 g + 1 of its vectors. Partial rows in K's place (free once the max barrier passed:
  // every score is taken), [warp][hd] floats.
  float* part = reinterpret_cast<float*>(amk_attn_tile_base()) +
                (ks - amk_smem_addr(amk_attn_tile_base())) / 4;
#pragma unroll
  for (uint32_t vv = 0; vv < VPL; ++vv) {
    float c4[4], c2[2];
    amk_attn_fold<4>(o[vv], c4, (g & 2u) != 0, 16);
    amk_attn_fold<2>(c4, c2, (g & 1u) != 0, 8);
    *reinterpret_cast<float2*>(part + warp * hd + 8 * (j + 8 * vv) + 2 * g) =
        make_float2(c2[0], c2[1]);
  }
  if (lane == 0) red[kAmkWarps + warp] = lw;
  __syncthreads();
  if (kAmkMarksAttnLate == 2) AMK_TRACE_MARK(0);  // (diagnostic) the partial sums in
  if (threadIdx.x < hd) {
    const uint32_t d = threadIdx.x;
    float a = 0.0f, l = 0.0f;
#pragma unroll
    for (uint32_t w = 0; w < kAmkWarps; ++w) {
      a += part[w * hd + d];
      l += red[kAmkWarps + w];
    }
    if (with_new) {
      const float p_new = amk_attn_exp(s_new - big);
      a = fmaf(p_new, amk_attn_new_v[d], a);
      l += p_new;
    }
    out[d] = a / l;
    if (d == 0) {
      out[hd] = big;
      out[hd + 1] = l;
    }
  }
  if (kAmkMarksAttnLate == 2) AMK_TRACE_MARK(1);  // (diagnostic) thread 0's outputs written
}
#endif

// One 16-bit element of K or V in shared memory as f32.
template <uint32_t DT>
__device__ __forceinline__ float amk_attn_lds_elem(uint32_t addr) {
  unsigned short h;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(addr));
  if (DT == AMK_DTYPE_BF16) return __uint_as_float(static_cast<uint32_t>(h) << 16);
  return amk_f16_to_f32(h);
}

// The chunk (k, v) of `ins` for query heads [0, group) of q into out (see the top of this part).
// A call by default (its registers apart from the VM's); AMK_ATTN_TILED_INLINE=1 inlines it.
#ifndef AMK_ATTN_TILED_INLINE
#define AMK_ATTN_TILED_INLINE 0
#endif
#if AMK_ATTN_TILED_INLINE
#define AMK_ATTN_TILED_FN __device__ __forceinline__
#else
#define AMK_ATTN_TILED_FN __device__ __noinline__
#endif
// `wait`: the step's waits when the op runs them (AMK_ATTN_PRELOAD: the K/V copies and the RoPE
// table come first, then the waits, then the reads of q and the new row), else amk_no_wait. A
// copy (a call's argument in registers, not a stack object): when the launch is stopping the op
// writes nothing and raises the block's stop flag, which the VM checks before any signal.
// Nothing reads the instruction after the wait (whose fence drops L1).
template <uint32_t DT, class Wait>
AMK_ATTN_TILED_FN void amk_attn_tiled(const amk_instruction_t& ins, const amk_view q,
                                            const amk_view k, const amk_view v, float* out,
                                            uint32_t hd, uint32_t group, float scale,
                                            bool with_new, Wait wait) {
  const uint32_t len = k.n / hd;
  // The new row's operands: decoded here when the wait follows, else where they are read.
  const float* kn = nullptr;
  const float* vn = nullptr;
  if constexpr (Wait::active()) {
    if (with_new) {
      kn = reinterpret_cast<const float*>(amk_operand(ins, 4).ptr);
      vn = reinterpret_cast<const float*>(amk_operand(ins, 5).ptr);
    }
  }
  const uint32_t row_bytes = 2 * hd;
  const uint32_t kv_bytes = len * row_bytes;  // a multiple of 16 (hd % 8 == 0)
  // V first: K's place is free once the scores are taken, and holds the split outputs'
  // partial sums (8 warps x group x hd floats <= half the tile, where K starts at most).
  const uint32_t vs = amk_smem_addr(amk_attn_tile_base()), ks = vs + kv_bytes;
#if AMK_ATTN_BULK
  const uint32_t kv_bar = amk_smem_addr(&amk_attn_kv_bar);
  const uint32_t kv_parity = amk_attn_kv_parity;  // (thread 0 flips it after the block's barrier)
  if (threadIdx.x == 0) {
    // The tile's earlier generic writes (ordered before this thread by the last barrier) before
    // the copy engine's.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    amk_mbar_expect_tx(kv_bar, 2 * kv_bytes);
    amk_bulk_g2s(vs, v.ptr, kv_bytes, kv_bar);
    amk_bulk_g2s(ks, k.ptr, kv_bytes, kv_bar);
  }
  // Every thread waits for the copies (both paths below), then thread 0 flips the phase.
  auto kv_landed = [&]() {
    while (!amk_mbar_try_wait(kv_bar, kv_parity)) {
    }
  };
#else
  const uint32_t vecs = kv_bytes / 16;
  for (uint32_t i = threadIdx.x; i < 2 * vecs; i += AMK_BLOCK_THREADS) {
    const bool is_v = i >= vecs;
    const uint32_t j = is_v ? i - vecs : i;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((is_v ? vs : ks) + 16 * j),
                 "l"((is_v ? v.ptr : k.ptr) + 16ull * j)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  auto kv_landed = [&]() { asm volatile("cp.async.wait_all;" ::: "memory"); };
#endif
  if (kAmkMarksAttn == 2) AMK_TRACE_MARK(1);  // (diagnostic) copies issued

  // q rotated (theta != 0) and scaled, in two planes: element d at plane (d & 4), 4 (d / 8) + d % 4.
  // f32 rows read directly (amk_attn_tile_fits): no dtype switch, little code.
  const float* rope = amk_attn_rotates(ins) ? amk_attn_rope_table(ins) : nullptr;
  const uint32_t half = hd / 2;
  const float* qf = reinterpret_cast<const float*>(q.ptr);
  if (wait()) {  // (every thread; K and V may be landing: nothing may land after the op is gone)
    kv_landed();
    if (threadIdx.x == 0) {
#if AMK_ATTN_BULK
      amk_attn_kv_parity = kv_parity ^ 1u;  // (every thread has waited: the barrier in wait())
#endif
      *static_cast<volatile uint32_t*>(&amk_state.stop) = 1;
    }
    return;
  }
  if (kAmkMarksAttn == 1) AMK_TRACE_MARK(1);  // (diagnostic) copies issued, table ready
#if AMK_ATTN_ONE_TRIP
  // Every global read of the new token's rows (q, k_new, v_new: written by the step this one
  // waited for, so L2 round trips under load) is issued before any is used: one round trip, not
  // one per loop. The new row's score is taken from shared memory in the softmax stage.
  constexpr uint32_t kQIters = kAmkAttnTileQFloats / AMK_BLOCK_THREADS;
  auto partner = [&](uint32_t d) { return d < half ? d + half : d - half; };
  float qx[kQIters], qy[kQIters];
#pragma unroll
  for (uint32_t it = 0; it < kQIters; ++it) {
    const uint32_t i = threadIdx.x + it * AMK_BLOCK_THREADS;
    const uint32_t g = i / hd, d = i - g * hd;
    qx[it] = i < group * hd ? qf[g * hd + d] : 0.0f;
    qy[it] = i < group * hd && rope != nullptr ? qf[g * hd + partner(d)] : 0.0f;
  }
  const bool new_lane = with_new && threadIdx.x < hd;
  float kx = 0.0f, ky = 0.0f, vx = 0.0f;
  if (new_lane) {
    if constexpr (!Wait::active()) {
      kn = reinterpret_cast<const float*>(amk_operand(ins, 4).ptr);
      vn = reinterpret_cast<const float*>(amk_operand(ins, 5).ptr);
    }
    kx = kn[threadIdx.x];
    ky = rope != nullptr ? kn[partner(threadIdx.x)] : 0.0f;
    vx = vn[threadIdx.x];
  }
  // x rotated at element d with its partner y (the rope op's pairs).
  auto rotate = [&](float x, float y, uint32_t d) {
    if (rope == nullptr) return x;
    const uint32_t i = d < half ? d : d - half;
    const float c = rope[2 * i], sn = rope[2 * i + 1];
    return d < half ? fmaf(x, c, -y * sn) : fmaf(x, c, y * sn);
  };
#pragma unroll
  for (uint32_t it = 0; it < kQIters; ++it) {
    const uint32_t i = threadIdx.x + it * AMK_BLOCK_THREADS;
    if (i < group * hd) {
      const uint32_t g = i / hd, d = i - g * hd;
      amk_attn_tq[amk_attn_tq_at(g, d, hd, half)] =
          rotate(qx[it], qy[it], d) * scale;
    }
  }
  if (new_lane) {
    amk_attn_new_v[threadIdx.x] = vx;
    amk_attn_tk[threadIdx.x] = rotate(kx, ky, threadIdx.x);
  }
#else
  for (uint32_t i = threadIdx.x; i < group * hd; i += AMK_BLOCK_THREADS) {
    const uint32_t g = i / hd, d = i - g * hd;
    amk_attn_tq[amk_attn_tq_at(g, d, hd, half)] =
        amk_attn_rotated_f32(qf + g * hd, d, half, rope) * scale;
  }
  if (with_new) {  // the new token's score per head (a warp each) and its v row
    if constexpr (!Wait::active()) {
      kn = reinterpret_cast<const float*>(amk_operand(ins, 4).ptr);
      vn = reinterpret_cast<const float*>(amk_operand(ins, 5).ptr);
    }
    for (uint32_t d = threadIdx.x; d < hd; d += AMK_BLOCK_THREADS) amk_attn_new_v[d] = vn[d];
    const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
    for (uint32_t g = warp; g < group; g += kAmkWarps) {
      float dot = 0.0f;
      for (uint32_t d = lane; d < hd; d += kAmkWarpSize)
        dot = fmaf(amk_attn_rotated_f32(qf + g * hd, d, half, rope),
                   amk_attn_rotated_f32(kn, d, half, rope), dot);
      dot = amk_warp_sum(dot);
      if (lane == 0) amk_attn_new_s[g] = scale * dot;
    }
  }
#endif
  if (!kAmkMarksAttn) AMK_TRACE_MARK(0);  // q staged (and the new row's scores): K and V may still be landing
  kv_landed();
  __syncthreads();
#if AMK_ATTN_BULK
  if (threadIdx.x == 0) amk_attn_kv_parity = kv_parity ^ 1u;
#endif
  if (!kAmkMarksAttn) AMK_TRACE_MARK(1);  // K and V in shared memory
#if AMK_ATTN_ROW8
  if (amk_attn_row8_fits(hd, group, len)) {
    if (hd == 64)
      amk_attn_row8<DT, 1>(ks, vs, out, len, with_new);
    else
      amk_attn_row8<DT, 2>(ks, vs, out, len, with_new);
    return;
  }
#endif

  const uint32_t nv = hd / 8;
#if AMK_ATTN_SPLIT
  {
    // Scores: lane s of position t's S lanes takes vectors j = s, s + S, ... of K row t (rotated
    // by S t, so that the 8 lanes of a quarter warp read 8 different 16-byte bank groups), for
    // kAmkAttnSplitHeads heads at a time. Every lane runs the same trip counts (the shuffles).
    const uint32_t S = amk_attn_score_split(nv, len);
    const uint32_t s_lane = threadIdx.x & (S - 1);
    for (uint32_t base = 0; base < len * S; base += AMK_BLOCK_THREADS) {
      const uint32_t t = (base + threadIdx.x) / S;
      const uint32_t tr = t < len ? t : len - 1;  // (rows past the chunk: read row len - 1, unused)
      const uint32_t krow = ks + tr * row_bytes;
      for (uint32_t g0 = 0; g0 < group; g0 += kAmkAttnSplitHeads) {
        float a0[kAmkAttnSplitHeads], a1[kAmkAttnSplitHeads];
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) a0[h] = a1[h] = 0.0f;
        uint32_t c = (s_lane + S * tr) % nv;
        for (uint32_t j = s_lane; j < nv; j += S) {
          float kf[8];
          amk_attn_lds_k8<DT>(krow + 16 * c, kf);
#pragma unroll
          for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) {
            const uint32_t g = min(g0 + h, group - 1);  // (past the group: a real row, unused)
            const uint32_t q0 = amk_smem_addr(amk_attn_tq + g * hd) + 16 * c;
            amk_attn_fma8(kf, q0, q0 + 4 * half, a0[h], a1[h]);
          }
          c = c + S >= nv ? c + S - nv : c + S;
        }
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) {
          float sum = a0[h] + a1[h];
          for (uint32_t o = S / 2; o > 0; o /= 2) sum += __shfl_xor_sync(kAmkFullMask, sum, o);
          if (s_lane == 0 && t < len && g0 + h < group) amk_attn_tp[(g0 + h) * len + t] = sum;
        }
      }
    }
  }
#else
  // Scores: thread i is (head g, position t).
  for (uint32_t i = threadIdx.x; i < group * len; i += AMK_BLOCK_THREADS) {
    const uint32_t g = i / len, t = i - g * len;
    const uint32_t krow = ks + t * row_bytes;
    const uint32_t q0 = amk_smem_addr(amk_attn_tq + g * hd), q1 = q0 + 4 * half;
    float a0 = 0.0f, a1 = 0.0f;
    uint32_t c = t % nv;
#pragma unroll 2
    for (uint32_t j = 0; j < nv; ++j) {
      float kf[8];
      amk_attn_lds_k8<DT>(krow + 16 * c, kf);
      amk_attn_fma8(kf, q0 + 16 * c, q1 + 16 * c, a0, a1);
      c = c + 1 == nv ? 0u : c + 1;
    }
    amk_attn_tp[i] = a0 + a1;
  }
#endif
  __syncthreads();
  if (kAmkMarksAttnLate == 1) AMK_TRACE_MARK(0);  // (diagnostic) the scores taken

  // Softmax of each head on one warp; the scores become the weights p = exp(s - m).
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t g = warp; g < group; g += kAmkWarps) {
    float* sc = amk_attn_tp + g * len;
#if AMK_ATTN_ONE_TRIP
    float s_new = amk_neg_inf();
    if (with_new) {  // staged q (scaled) . rotated k_new
      float dot = 0.0f;
      for (uint32_t d = lane; d < hd; d += kAmkWarpSize)
        dot = fmaf(amk_attn_tq[amk_attn_tq_at(g, d, hd, half)],
                   amk_attn_tk[d], dot);
      s_new = amk_warp_sum(dot);
    }
#else
    const float s_new = with_new ? amk_attn_new_s[g] : amk_neg_inf();
#endif
    float m = s_new;
    for (uint32_t t = lane; t < len; t += kAmkWarpSize) m = fmaxf(m, sc[t]);
    m = amk_warp_max(m);
    float sum = 0.0f;
    for (uint32_t t = lane; t < len; t += kAmkWarpSize) {
      const float p = amk_attn_weight(sc[t], m);
      sc[t] = p;
      sum += p;
    }
    sum = amk_warp_sum(sum);
    if (lane == 0) {
      const float p_new = with_new ? amk_attn_weight(s_new, m) : 0.0f;
      amk_attn_tm[g] = m;
      amk_attn_tl[g] = sum + p_new;
      amk_attn_tn[g] = p_new;
    }
  }
  __syncthreads();
  if (kAmkMarksAttnLate == 1) AMK_TRACE_MARK(1);  // (diagnostic) the softmax taken

#if AMK_ATTN_SPLIT
  {
    // Outputs: warp w sums positions [w * per, (w + 1) * per) for every head and element, lane l
    // elements (2 l, 2 l + 1) of each 64, kAmkAttnSplitHeads heads at a time, into its partial
    // row in K's place (8 x group x hd floats); then thread i adds the 8 partials of (head g,
    // element d), normalizes, and writes the row and (m, l).
    float* part = reinterpret_cast<float*>(amk_attn_tile_base()) + kv_bytes / 4;
    const uint32_t per = (len + kAmkWarps - 1) / kAmkWarps;
    const uint32_t t0 = min(len, warp * per), t1 = min(len, t0 + per);
    const uint32_t gh = group * hd;
    for (uint32_t e = 2 * lane; e < hd; e += 2 * kAmkWarpSize) {
      for (uint32_t g0 = 0; g0 < group; g0 += kAmkAttnSplitHeads) {
        float a0[kAmkAttnSplitHeads], a1[kAmkAttnSplitHeads];
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) a0[h] = a1[h] = 0.0f;
        uint32_t addr = vs + t0 * row_bytes + 2 * e;
#pragma unroll 2
        for (uint32_t t = t0; t < t1; ++t, addr += row_bytes) {
          uint32_t w2;
          asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w2) : "r"(addr));
          float lo, hi;
          if constexpr (DT == AMK_DTYPE_BF16) {
            amk_unpack_bf16x2(w2, lo, hi);
          } else {
            amk_unpack_f16x2(w2, lo, hi);
          }
#pragma unroll
          for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h) {
            const float pw = amk_attn_tp[min(g0 + h, group - 1) * len + t];
            a0[h] = fmaf(pw, lo, a0[h]);
            a1[h] = fmaf(pw, hi, a1[h]);
          }
        }
#pragma unroll
        for (uint32_t h = 0; h < kAmkAttnSplitHeads; ++h)
          if (g0 + h < group)
            *reinterpret_cast<float2*>(part + warp * gh + (g0 + h) * hd + e) = make_float2(a0[h], a1[h]);
      }
    }
    __syncthreads();
    if (kAmkMarksAttnLate == 2) AMK_TRACE_MARK(0);  // (diagnostic) the partial sums in
    for (uint32_t i = threadIdx.x; i < gh; i += AMK_BLOCK_THREADS) {
      const uint32_t g = i / hd, d = i - g * hd;
      float acc = 0.0f;
#pragma unroll
      for (uint32_t w = 0; w < kAmkWarps; ++w) acc += part[w * gh + i];
      amk_attn_tile_out(out, g, d, hd, acc, with_new);
    }
    if (kAmkMarksAttnLate == 2) AMK_TRACE_MARK(1);  // (diagnostic) thread 0's outputs written
  }
#else
  // Outputs: thread i is (head g, element d); the chunk-normalized sum, then (m, l).
  for (uint32_t i = threadIdx.x; i < group * hd; i += AMK_BLOCK_THREADS) {
    const uint32_t g = i / hd, d = i - g * hd;
    const float* p = amk_attn_tp + g * len;
    const uint32_t col = vs + 2 * d;
    float a0 = 0.0f, a1 = 0.0f;
    uint32_t t = 0;
#pragma unroll 2
    for (; t + 2 <= len; t += 2) {
      a0 = fmaf(p[t], amk_attn_lds_elem<DT>(col + t * row_bytes), a0);
      a1 = fmaf(p[t + 1], amk_attn_lds_elem<DT>(col + (t + 1) * row_bytes), a1);
    }
    if (t < len) a0 = fmaf(p[t], amk_attn_lds_elem<DT>(col + t * row_bytes), a0);
    amk_attn_tile_out(out, g, d, hd, a0 + a1, with_new);
  }
#endif
}
#else
#define AMK_ATTN_TILE 0
#endif

// out[g] = (o_g[hd] normalized within the chunk, max score m_g, sum exp(s - m_g)) for each query
// head g of q; s_t = scale * q_g . k_t. The vector path needs K and V of one dtype, 16-byte
// aligned rows of at most 32 vectors; anything else takes the element-by-element loader.
// theta != 0 rotates q and k_new with RoPE at `position` (params 2-7, the rope op's meaning);
// (k_new, v_new), when present, is one more position after the cached rows (which may be none).
// AMK_ATTN_PASS (1): the streaming pass is compiled in. The generated source sets it to 0 when
// the plan shows that every attention_decode instruction takes the tiled path (codegen's
// attention_pass_needed), so the VM does not carry the pass's ~190 KiB of code; a chunk that then
// still reaches the pass stops the launch with a bad_operand status (detail
// kAmkDetailUnknownOp | op) instead of computing nothing.
#ifndef AMK_ATTN_PASS
#define AMK_ATTN_PASS 1
#endif
//
// AMK_ATTN_PRELOAD (0, the default: measured no faster, amk_sync.cuh; 1: on): a step whose K
// and V no instruction writes (the planner's AMK_INS_CONST_WEIGHTS on attention_decode: no
// written range of the program overlaps them) and that waits runs its waits inside the op, as
// gemv's preload does (amk_step_wait): the operands are decoded, the tiled path's K/V copies
// issued and the RoPE table checked before the wait, so only the reads of q and the new row and
// the arithmetic follow it. `wait`: those waits, or
// amk_no_wait where the VM ran them first (every return path runs them before the VM signals).
// (The macro's default is in amk_sync.cuh.)
template <class Wait>
AMK_HEAVY_OP_FN void amk_op_attention_decode(const amk_device_program_t& prog, const amk_instruction_t& ins,
                                       unsigned char* scratch, Wait& wait) {
  if (kAmkMarksAttn == 1) AMK_TRACE_MARK(0);  // (diagnostic) entered
  const amk_view q = amk_operand(ins, 0);
  const amk_view k = amk_operand(ins, 1);
  const amk_view v = amk_operand(ins, 2);
  const amk_view out = amk_operand(ins, 3);
  const uint32_t hd = ins.params[0];
  const bool cached = k.n >= hd;
  const bool has_new = amk_attn_has_new_row(ins, hd);
  if (hd == 0 || hd > kAmkAttnMaxHeadDim || !(cached || has_new)) {
    wait();
    return;
  }
  float scale = __uint_as_float(ins.params[1]);
  if (scale == 0.0f) scale = 1.0f / sqrtf(static_cast<float>(hd));
  float* o = reinterpret_cast<float*>(out.ptr);
  const uint32_t group = q.n / hd;
  const uint32_t half = hd / 2;

#if AMK_ATTN_TILE
  if (cached && amk_attn_tile_fits(ins, q, k, v, hd, group, has_new)) {
    const bool with_new = has_new;  // group <= kAmkAttnNewHeads: the tile's condition
    if (kAmkMarksAttn == 2) AMK_TRACE_MARK(0);  // (diagnostic) operands decoded, tile chosen
#if AMK_ATTN_KV_BF16
    if (k.dtype == AMK_DTYPE_BF16) {
      amk_attn_tiled<AMK_DTYPE_BF16>(ins, q, k, v, o, hd, group, scale, with_new, wait);
      if constexpr (kAmkMarksTwice) {  // (diagnostic) again, its code warm: same inputs, same outputs
        if (__syncthreads_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) return;
        AMK_TRACE_MARK(0);
        Wait again = wait;  // (the same code: its waits marked done, none run)
        if constexpr (Wait::active()) {
          again.done = true;
          again.stop = false;
        }
        amk_attn_tiled<AMK_DTYPE_BF16>(ins, q, k, v, o, hd, group, scale, with_new, again);
        __syncthreads();
        AMK_TRACE_MARK(1);
      }
      return;
    }
#endif
#if AMK_ATTN_KV_F16
    amk_attn_tiled<AMK_DTYPE_F16>(ins, q, k, v, o, hd, group, scale, with_new, wait);
    return;
#endif
  }
#endif
  if (wait()) return;  // the streaming pass and its failure path wait first
#if !AMK_ATTN_PASS
  if (threadIdx.x == 0) amk_fail_operand(prog, ins, kAmkDetailUnknownOp | ins.op);
  (void)scratch;
  (void)half;
#else
  (void)prog;
  // This chunk's K and V rows are pulled into L2 while the block computes the RoPE table and
  // stages q; the streaming loop then starts on L2 hits.
  if (AMK_BLOCK_THREADS <= 256 && threadIdx.x == 0 && cached) {
    amk_prefetch_l2(k.ptr, static_cast<uint64_t>(k.n) * amk_dtype_size(k.dtype));
    amk_prefetch_l2(v.ptr, static_cast<uint64_t>(v.n) * amk_dtype_size(v.dtype));
  }
  const float* rope = nullptr;
  if (amk_attn_rotates(ins)) {
#if AMK_BLOCK_THREADS <= 256
    rope = amk_attn_rope_table(ins);
#else  // wider blocks (128 registers): the table per instruction, in the scratch
    float* table = reinterpret_cast<float*>(scratch);
    for (uint32_t i = threadIdx.x; i < half; i += AMK_BLOCK_THREADS)
      amk_rope_cos_sin(ins, kAmkRopeParamsOfAttention, i, table[2 * i], table[2 * i + 1]);
    __syncthreads();
    rope = table;
#endif
  }

  // The new row joins the passes' merge when there are passes (and its heads fit the shared
  // arrays); otherwise it is folded in after them, below.
  const bool new_in_merge =
      AMK_BLOCK_THREADS <= 256 && cached && has_new && group <= kAmkAttnNewHeads;
  if (new_in_merge) amk_attn_new_row_to_merge(ins, hd, group, scale, rope);

  if (cached) {
    // q is rotated inside the pass (lane shuffles) when each half of the head is a power-of-two
    // number of the loader's vectors; otherwise staged rotated first (always at more than 256
    // threads, where the pass has 128 registers and the shuffles made it spill).
    // (The vector loader's conditions, as `vector` below says them.)
    const uint32_t kv_per_vec = kAmkVectorBytes / amk_dtype_size(k.dtype);
    const uint32_t half_vecs = half / kv_per_vec;
    const bool rotate_in_pass =
        AMK_BLOCK_THREADS <= 256 && rope != nullptr && k.dtype == v.dtype &&
        amk_aligned16(k.ptr) && amk_aligned16(v.ptr) && hd % kv_per_vec == 0 &&
        hd <= kAmkWarpSize * kv_per_vec && half % kv_per_vec == 0 && half_vecs != 0 &&
        (half_vecs & (half_vecs - 1)) == 0;
    amk_view qs = q;
    if (rope != nullptr && !rotate_in_pass) {
      // The rotated q, in f32, staged in the tail of out: elements [2*group, group*(hd + 2)).
      // The pass of head g writes out row g, [g*(hd + 2), (g + 1)*(hd + 2)), which ends before
      // the staged heads after g, and it reads its own heads before it writes.
      float* staged = o + 2 * group;
      for (uint32_t idx = threadIdx.x; idx < group * hd; idx += AMK_BLOCK_THREADS) {
        const uint32_t g = idx / hd, d = idx - g * hd;
        staged[idx] = amk_attn_rotated(q, static_cast<uint64_t>(g) * hd, d, half, rope);
      }
      __syncthreads();
      qs.ptr = reinterpret_cast<unsigned char*>(staged);
      qs.dtype = AMK_DTYPE_F32;
    }
    const uint32_t per_vec = kAmkVectorBytes / amk_dtype_size(k.dtype);
    // At 64 registers a thread (1024 threads) the four paths inlined together spill: there only
    // the element-by-element one is built.
    const bool vector = AMK_BLOCK_THREADS <= 512 && k.dtype == v.dtype && amk_aligned16(k.ptr) &&
                        amk_aligned16(v.ptr) && hd % per_vec == 0 && hd <= kAmkWarpSize * per_vec;
    const float* pass_rope = rotate_in_pass ? rope : nullptr;
    for (uint32_t g0 = 0; g0 < group; g0 += kAmkAttnHeads) {
      const uint32_t gn = group - g0 < kAmkAttnHeads ? group - g0 : kAmkAttnHeads;
#if AMK_BLOCK_THREADS <= 512
#if AMK_ATTN_KV_BF16
      if (vector && k.dtype == AMK_DTYPE_BF16)
        amk_attn_decode_pass<amk_attn_vec_loader<AMK_DTYPE_BF16>>(qs, k, v, o, hd, scale, g0, gn, pass_rope, new_in_merge);
      else
#endif
#if AMK_ATTN_KV_F16
      if (vector && k.dtype == AMK_DTYPE_F16)
        amk_attn_decode_pass<amk_attn_vec_loader<AMK_DTYPE_F16>>(qs, k, v, o, hd, scale, g0, gn, pass_rope, new_in_merge);
      else
#endif
#if AMK_ATTN_KV_F32
      if (vector && k.dtype == AMK_DTYPE_F32)
        amk_attn_decode_pass<amk_attn_vec_loader<AMK_DTYPE_F32>>(qs, k, v, o, hd, scale, g0, gn, pass_rope, new_in_merge);
      else
#endif
#endif
        amk_attn_decode_pass<amk_attn_any_loader>(qs, k, v, o, hd, scale, g0, gn, pass_rope, new_in_merge);
    }
  }

  if (has_new && !new_in_merge) {
    // The new token's row folded into each head's chunk state (m, l, normalized o) once the
    // passes (if any) are done (they end with a barrier), one warp per query head. Its operands
    // are read from the instruction again here: nothing of this stays live through the loop.
    const amk_view qn = amk_operand(ins, 0);
    const amk_view k_new = amk_operand(ins, 4);
    const amk_view v_new = amk_operand(ins, 5);
#if AMK_BLOCK_THREADS <= 256
    const float* table = amk_attn_rotates(ins) ? amk_attn_rope : nullptr;  // not kept live
#else
    const float* table = amk_attn_rotates(ins) ? reinterpret_cast<const float*>(scratch) : nullptr;
#endif
    const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
    for (uint32_t g = warp; g < group; g += kAmkWarps) {
      const uint64_t base = static_cast<uint64_t>(g) * hd;
      float dot = 0.0f;
      for (uint32_t d = lane; d < hd; d += kAmkWarpSize) {
        const float qd = table != nullptr ? amk_attn_rotated(qn, base, d, half, table)
                                          : amk_load_f32(qn, base + d);
        const float kd = table != nullptr ? amk_attn_rotated(k_new, 0, d, half, table)
                                          : amk_load_f32(k_new, d);
        dot = fmaf(scale * qd, kd, dot);
      }
      const float s = amk_warp_sum(dot);
      float* row = o + static_cast<uint64_t>(g) * (hd + 2);
      const float m = cached ? row[hd] : amk_neg_inf();
      const float l = cached ? row[hd + 1] : 0.0f;
      const float big = fmaxf(m, s);
      const float a = m == amk_neg_inf() ? 0.0f : l * expf(m - big);  // the cached rows' weight
      const float b = expf(s - big);                                   // the new row's
      const float total = a + b;
      for (uint32_t d = lane; d < hd; d += kAmkWarpSize) {
        const float prev = a != 0.0f ? a * row[d] : 0.0f;
        row[d] = fmaf(b, amk_load_f32(v_new, d), prev) / total;
      }
      __syncwarp();  // every lane has read m and l
      if (lane == 0) {
        row[hd] = big;
        row[hd + 1] = total;
      }
    }
  }
#endif  // AMK_ATTN_PASS
}
// The VM ran the step's waits (or it has none).
AMK_HEAVY_OP_FN void amk_op_attention_decode(const amk_device_program_t& prog,
                                             const amk_instruction_t& ins, unsigned char* scratch) {
  amk_no_wait none;
  amk_op_attention_decode(prog, ins, scratch, none);
}
#endif  // AMK_USE_OP_ATTENTION_DECODE

// ---------------------------------------------------------------------------------------------
#if AMK_USE_OP_ATTENTION_COMBINE || AMK_USE_OP_ATTENTION_COMBINE_SPLITK
constexpr uint32_t kAmkCombineDims = 4;    // output dims per lane: a warp covers 128 per item
// Chunks whose values a lane loads at once (fewer where a thread has fewer registers). The
// batch is unrolled twice (first batch, later ones): at 16 the op is ~35 KiB of the 1B step's VM
// code (~382 KiB in all, built with nvcc), at 4 ~20 KiB; AMK_COMBINE_BATCH sets it, for a
// measurement of how much of the op's ~4 us is its code arriving cold.
#ifndef AMK_COMBINE_BATCH
#define AMK_COMBINE_BATCH (AMK_BLOCK_THREADS <= 256 ? 16 : 8)
#endif
constexpr uint32_t kAmkCombineBatch = AMK_COMBINE_BATCH;
static_assert(kAmkCombineBatch >= 1 && kAmkCombineBatch <= kAmkWarpSize, "1..32 chunks a batch");

// out[g] = sum_c w_c o_c / sum_c w_c, w_c = l_c exp(m_c - M), M = max_c m_c, for the query heads
// g0 .. g0 + ng - 1 of partials p (chunks blocks of `block` floats, head g's row of hd + 2 at
// g * (hd + 2) in each); store(i * hd + d, value) receives head g0 + i's dim d. Partials of several
// kv heads back to back (attention_combine's kv_heads): head i is head g0 + i % per_kv of the
// (i / per_kv)-th, kv_stride floats apart. One warp per (query
// head, 128-dim slice); lane c holds chunk c's (m, l) and the weights are broadcast. The
// chunks' values do not depend on M, so the first batch loads together with (m, l): a head of up
// to kAmkCombineBatch chunks costs one round trip (a chain of four cost ~4 us on the H200). More
// than 32 chunks: rounds of 32, the running sums rescaled when the max grows.
template <class Store>
__device__ __forceinline__ void amk_combine_heads(const float* p, uint32_t chunks, uint64_t block,
                                                  uint32_t hd, uint32_t g0, uint32_t ng,
                                                  uint32_t per_kv, uint64_t kv_stride,
                                                  Store&& store) {
  const uint32_t row = hd + 2;
  constexpr uint32_t kSlice = kAmkWarpSize * kAmkCombineDims;
  const uint32_t slices = (hd + kSlice - 1) / kSlice;
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t item = warp; item < ng * slices; item += kAmkWarps) {
    const uint32_t i = item / slices, dbase = (item - i * slices) * kSlice;
    const uint32_t kv = i / per_kv;
    const float* head = p + kv * kv_stride + static_cast<uint64_t>(g0 + i - kv * per_kv) * row;
    float big = amk_neg_inf(), total = 0.0f;
    float acc[kAmkCombineDims] = {};
    for (uint32_t c0 = 0; c0 < chunks; c0 += kAmkWarpSize) {
      const uint32_t c = c0 + lane;
      const uint32_t n = chunks - c0 < kAmkWarpSize ? chunks - c0 : kAmkWarpSize;
      const float mc = c < chunks ? head[c * block + hd] : amk_neg_inf();
      const float lc = c < chunks ? head[c * block + hd + 1] : 0.0f;
      float val[kAmkCombineBatch][kAmkCombineDims];
      auto load_batch = [&](uint32_t j0) {
#pragma unroll
        for (uint32_t j = 0; j < kAmkCombineBatch; ++j) {
          const float* src = head + static_cast<uint64_t>(c0 + j0 + j) * block;
#pragma unroll
          for (uint32_t e = 0; e < kAmkCombineDims; ++e) {
            const uint32_t d = dbase + e * kAmkWarpSize + lane;
            val[j][e] = j0 + j < n && d < hd ? src[d] : 0.0f;
          }
        }
      };
      load_batch(0);
      const float round_max = amk_warp_max(mc);
      if (item == warp && c0 == 0) AMK_TRACE_MARK(kAmkMarksAttn ? 1 : 0);  // the first item's (m, l) arrived
      if (round_max > big) {  // uniform: rescale what earlier rounds summed
        const float r = big == amk_neg_inf() ? 0.0f : expf(big - round_max);
        total *= r;
#pragma unroll
        for (uint32_t e = 0; e < kAmkCombineDims; ++e) acc[e] *= r;
        big = round_max;
      }
      const float w = mc == amk_neg_inf() ? 0.0f : lc * expf(mc - big);
      total += w;
      for (uint32_t j0 = 0; j0 < n; j0 += kAmkCombineBatch) {
        if (j0 != 0) load_batch(j0);
#pragma unroll
        for (uint32_t j = 0; j < kAmkCombineBatch; ++j) {
          const float wj = __shfl_sync(kAmkFullMask, w, (j0 + j) % kAmkWarpSize);
#pragma unroll
          for (uint32_t e = 0; e < kAmkCombineDims; ++e) acc[e] = fmaf(wj, val[j][e], acc[e]);
        }
      }
      if (!kAmkMarksAttn && item == warp && c0 == 0) AMK_TRACE_MARK(1);  // and its first round of values
    }
    total = amk_warp_sum(total);
    const float inv = 1.0f / total;
#pragma unroll
    for (uint32_t e = 0; e < kAmkCombineDims; ++e) {
      const uint32_t d = dbase + e * kAmkWarpSize + lane;
      if (d < hd) store(static_cast<uint64_t>(i) * hd + d, acc[e] * inv);
    }
  }
}
#endif  // AMK_USE_OP_ATTENTION_COMBINE || AMK_USE_OP_ATTENTION_COMBINE_SPLITK

#if AMK_USE_OP_ATTENTION_COMBINE
// AMK_COMBINE_SMEM (the generated source sets it: 1 where the VM's dynamic shared memory is
// gemv's ring, which nothing keeps across instructions; codegen's combine_staged): the op copies
// its whole partials region (kv x chunks x group rows, contiguous) into dynamic shared memory with
// cp.async from a short loop, computes each head's chunk weights once into shared memory, then
// merges from there. The register path above unrolls a batch of 16 chunks' loads (~35 KiB of
// code); on the Llama-3.2-1B step its first (m, l) arrived 2.2 us after the operands were decoded
// at batch 16 and 1.0 us at batch 4 (one round trip either way), so most of that was the op's
// code arriving, not its data. Measured on the H200 (twenty-second session, `amk profile
// --events --tuning-arms`, three rounds): the combine 4.08 -> 3.12 us a layer (trace mean), the
// 1B step 1.0010 -> 0.9953 ms, the 8B step 4.377 -> 4.380 (a tie); recomputing each weight in the
// merge loop instead (expf per chunk per output) had made both slower (+1.9%, +2.4%). Results are
// the same to the bit for up to 32 chunks (the same max, weights, fmaf order and sum). A region
// larger than the launch's dynamic shared memory takes the register path.
#ifndef AMK_COMBINE_SMEM
#define AMK_COMBINE_SMEM 0
#endif
// (Never with the weight streams or the TMA gemv, whose dynamic shared memory outlives an
// instruction; codegen does not set it there either.)
#if AMK_COMBINE_SMEM && !AMK_WEIGHT_STREAMS && !AMK_TMA_GEMV
template <class Store>
__device__ __forceinline__ void amk_combine_staged(const float* p, uint32_t n, uint32_t chunks,
                                                   uint32_t block, uint32_t hd, uint32_t ng,
                                                   uint32_t per_kv, uint32_t kv_stride,
                                                   Store&& store) {
  const uint32_t base = amk_smem_addr(amk_dynamic_smem);
  if ((reinterpret_cast<uint64_t>(p) & 15u) == 0 && n % 4 == 0) {
#pragma unroll 1
    for (uint32_t i = threadIdx.x; i < n / 4; i += AMK_BLOCK_THREADS)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(base + 16 * i),
                   "l"(p + 4 * static_cast<uint64_t>(i)) : "memory");
  } else {
#pragma unroll 1
    for (uint32_t i = threadIdx.x; i < n; i += AMK_BLOCK_THREADS)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(base + 4 * i), "l"(p + i)
                   : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  AMK_TRACE_MARK(kAmkMarksAttn ? 1 : 0);  // the partials ((m, l) too) in shared memory
  const float* s = reinterpret_cast<const float*>(amk_dynamic_smem);
  // Each head's chunk weights, computed once (a lane a chunk) and read back by every lane.
  float* wts = reinterpret_cast<float*>(amk_dynamic_smem) + (n + 3) / 4 * 4;
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  const uint32_t row = hd + 2;
#pragma unroll 1
  for (uint32_t i = warp; i < ng; i += kAmkWarps) {
    const uint32_t kv = i / per_kv;
    const float* head = s + kv * kv_stride + (i - kv * per_kv) * row;  // chunk c at c * block
    float* w = wts + i * chunks;
    float big = amk_neg_inf();
    for (uint32_t c = lane; c < chunks; c += kAmkWarpSize) big = fmaxf(big, head[c * block + hd]);
    big = amk_warp_max(big);
    float total = 0.0f;
    for (uint32_t c = lane; c < chunks; c += kAmkWarpSize) {
      const float mc = head[c * block + hd];
      w[c] = mc == amk_neg_inf() ? 0.0f : head[c * block + hd + 1] * expf(mc - big);
      total += w[c];
    }
    total = amk_warp_sum(total);
    __syncwarp();  // every lane's weights written
    const float inv = 1.0f / total;
    for (uint32_t d = lane; d < hd; d += kAmkWarpSize) {
      float acc = 0.0f;
#pragma unroll 8
      for (uint32_t c = 0; c < chunks; ++c) acc = fmaf(w[c], head[c * block + d], acc);
      store(static_cast<uint64_t>(i) * hd + d, acc * inv);
    }
    if (!kAmkMarksAttn && i == warp) AMK_TRACE_MARK(1);  // the first head merged
  }
}
#define AMK_COMBINE_STAGED 1
#else
#define AMK_COMBINE_STAGED 0
#endif

// With `arrive` (params 2, 3: a counter and the group's size) the instruction is one member of
// an arrival group, each member right behind one attention chunk on that chunk's block: it adds
// 1 to the counter (a release, after the VM's barrier has ordered the block's partials before
// it), and only the member whose add completes a round of `arrivals` merges, after an acquire;
// the others return having written nothing. The merge then follows the last chunk with no hop
// and no instruction of its own. The counter counts rounds, not passes (zeroed per launch like
// every counter): a pass's members arrive after the previous pass's merge wherever the next
// pass's chunks depend on it, as a decode step's do. Measured on the H200 (README, twenty-first
// session): the merge reached its first (m, l) 4.4 us after the member started, against 2.9 us
// after a combine step's wait (the add is a full round trip), so `amk gen llama` keeps the
// steps by default (--combine arrive: this form).
AMK_OP_FN void amk_op_attention_combine(const amk_device_program_t& prog,
                                        const amk_instruction_t& ins, unsigned char* scratch) {
  if (kAmkMarksAttn == 1) AMK_TRACE_MARK(0);  // (diagnostic) entered
  const uint32_t arrive = ins.params[2];
  if (arrive != 0xFFFFFFFFu) {
    uint32_t* last = reinterpret_cast<uint32_t*>(scratch);
    if (threadIdx.x == 0) {
      uint32_t old;
      asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;"
                   : "=r"(old) : "l"(prog.counters + arrive) : "memory");
      const bool done = (old + 1) % max(ins.params[3], 1u) == 0;
      if (done) amk_fence_acquire();
      *last = done;
    }
    __syncthreads();
    if (*last == 0) return;
  }
  const amk_view partials = amk_operand(ins, 0);
  const amk_view out = amk_operand(ins, 1);
  const uint32_t hd = ins.params[0];
  const uint32_t kv = max(ins.params[1], 1u);  // kv heads back to back (the verifier: >= 1)
  if (hd == 0) return;
  const uint32_t row = hd + 2;
  const uint32_t group = out.n / hd / kv;  // query heads of one kv head
  const uint64_t block = static_cast<uint64_t>(group) * row;
  if (block == 0) return;
  const uint32_t chunks = static_cast<uint32_t>(partials.n / kv / block);
  const float* p = reinterpret_cast<const float*>(partials.ptr);
  // (diagnostic) operands decoded: the test makes the mark wait for the buffer table's load
  if (kAmkMarksAttn == 2 && p != nullptr) AMK_TRACE_MARK(0);
#if AMK_COMBINE_STAGED
  // The partials, then a weight for each of their rows (codegen's combine_smem_bytes).
  const uint64_t n = static_cast<uint64_t>(kv) * chunks * block;  // <= partials.n
  if (((n + 3) / 4 * 4 + n / row) * sizeof(float) <= amk_dynamic_smem_size()) {
    amk_combine_staged(p, static_cast<uint32_t>(n), chunks, static_cast<uint32_t>(block), hd,
                       group * kv, group, static_cast<uint32_t>(chunks * block),
                       [&](uint64_t at, float v) { amk_store_f32(out, at, v); });
    return;
  }
#endif
  amk_combine_heads(p, chunks, block, hd, 0, group * kv, group, chunks * block,
                    [&](uint64_t at, float v) { amk_store_f32(out, at, v); });
}
#endif  // AMK_USE_OP_ATTENTION_COMBINE

// ---------------------------------------------------------------------------------------------
// Cases of the VM's dispatch switch for the ops compiled in (P: program, I: instruction in shared
// memory, S: op scratch).
#if AMK_USE_OP_ROPE
#define AMK_ATTN_CASE_ROPE(P, I, S) \
  case kAmkOpRope: amk_op_rope(P, I, S); break;
#else
#define AMK_ATTN_CASE_ROPE(P, I, S)
#endif
#if AMK_USE_OP_KV_APPEND
#define AMK_ATTN_CASE_KV_APPEND(P, I, S) \
  case kAmkOpKvAppend: amk_op_kv_append(P, I, S); break;
#else
#define AMK_ATTN_CASE_KV_APPEND(P, I, S)
#endif
#if AMK_USE_OP_ATTENTION_DECODE
#define AMK_ATTN_CASE_DECODE(P, I, S) \
  case kAmkOpAttentionDecode: amk_op_attention_decode(P, I, S); break;
#else
#define AMK_ATTN_CASE_DECODE(P, I, S)
#endif
#if AMK_USE_OP_ATTENTION_COMBINE
#define AMK_ATTN_CASE_COMBINE(P, I, S) \
  case kAmkOpAttentionCombine: amk_op_attention_combine(P, I, S); break;
#else
#define AMK_ATTN_CASE_COMBINE(P, I, S)
#endif
#define AMK_ATTENTION_DISPATCH(P, I, S)                                            \
  AMK_ATTN_CASE_ROPE(P, I, S) AMK_ATTN_CASE_KV_APPEND(P, I, S)                     \
  AMK_ATTN_CASE_DECODE(P, I, S) AMK_ATTN_CASE_COMBINE(P, I, S)

#endif  // AMK_OPS_ATTENTION_CUH
