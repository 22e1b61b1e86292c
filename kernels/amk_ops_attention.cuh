// attention_decode (op id 14): one kv head, a chunk of its cache, its group of query heads.
// Semantics and shape rules: the registry summary, verify/op_rules.cpp and the CPU reference in
// backend/cpu_ops.cpp. A chunk takes the tiled path (amk_attn_tiled.cuh) when it fits, else the
// streaming pass (amk_attn_pass.cuh).
#pragma once

#include "amk_attn_pass.cuh"
#include "amk_attn_tiled.cuh"

// stepped: with the position operand, P = position[0] + pass - 1 and k, v hold the cache rows
// start .. start + rows - 1 (param 8, start): the chunk attends the rows below P, the first
// clamp(P - start, 0, rows), so k and v are narrowed to them, and the new row only where P is one
// of the chunk's rows (start <= P < start + rows). A chunk left with nothing writes, for each of
// its query heads, o = 0, m = -inf, l = 0, which attention_combine and gemv's merge weigh 0.
// true: the op is done (that empty chunk, or a negative position, which stops the launch).
// Without the operand nothing changes.
__device__ __forceinline__ bool amk_attn_positioned(const amk_device_program_t& prog,
                                                    const amk_instruction_t& ins, const amk_view& q,
                                                    amk_view& k, amk_view& v, const amk_view& out,
                                                    uint32_t hd, bool& has_new) {
  if (!amk_operand(ins, 6).present()) return false;
  const amk_position pos = amk_attn_position(ins);
  if (amk_position_failed(prog, ins, pos)) return true;
  const uint64_t p = pos.value, start = ins.params[8], rows = k.n / hd;
  const uint64_t used = p <= start ? 0 : min(rows, p - start);
  k.n = v.n = static_cast<uint32_t>(used * hd);
  has_new = has_new && p >= start && p - start < rows;
  if (used != 0 || has_new) return false;
  const uint32_t row = hd + 2, n = q.n / hd * row;
  for (uint32_t i = threadIdx.x; i < n; i += kAmkBlockThreads)
    amk_store_f32(out, i, i % row == hd ? amk_neg_inf() : 0.0f);
  return true;
}

// The new token's row folded into each query head's chunk state (m, l, normalized o in out) once
// the passes over the cached rows (if any: `cached`) are done (they end with a barrier), one warp
// per query head; with RoPE, q and k_new rotated by the block's table. Its operands are read from
// the instruction again here: nothing of this stays live through the passes.
__device__ __forceinline__ void amk_attn_fold_new_row(const amk_instruction_t& ins, float* o,
                                                      uint32_t hd, uint32_t group, float scale,
                                                      bool cached, unsigned char* scratch) {
  const uint32_t half = hd / 2;
  const amk_view qn = amk_operand(ins, 0);
  const amk_view k_new = amk_operand(ins, 4);
  const amk_view v_new = amk_operand(ins, 5);
  const float* table =  // (not kept live)
      !amk_attn_rotates(ins)    ? nullptr
      : kAmkBlockThreads <= 256 ? amk_attn_rope
                                : reinterpret_cast<const float*>(scratch);
  const uint32_t warp = threadIdx.x / kAmkWarpSize, lane = threadIdx.x % kAmkWarpSize;
  for (uint32_t g = warp; g < group; g += kAmkWarps) {
    const uint64_t base = static_cast<uint64_t>(g) * hd;
    float dot = 0.0f;
    for (uint32_t d = lane; d < hd; d += kAmkWarpSize) {
      const float qd = table != nullptr ? amk_attn_rotated(qn, base, d, half, table)
                                        : amk_load_f32(qn, base + d);
      const float kd =
          table != nullptr ? amk_attn_rotated(k_new, 0, d, half, table) : amk_load_f32(k_new, d);
      dot = fmaf(scale * qd, kd, dot);
    }
    const float s = amk_warp_sum(dot);
    float* row = o + static_cast<uint64_t>(g) * (hd + 2);
    const float m = cached ? row[hd] : amk_neg_inf();
    const float l = cached ? row[hd + 1] : 0.0f;
    const float big = fmaxf(m, s);
    const float a = m == amk_neg_inf() ? 0.0f : l * expf(m - big);  // the cached rows' weight
    const float b = expf(s - big);                                  // the new row's
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

// out[g] = (o_g[hd] normalized within the chunk, max score m_g, sum exp(s - m_g)) for each query
// head g of q; s_t = scale * q_g . k_t. The vector path needs K and V of one dtype, 16-byte
// aligned rows of at most 32 vectors; anything else takes the element-by-element loader.
// theta != 0 rotates q and k_new with RoPE at `position` (params 2-7, the rope op's meaning);
// (k_new, v_new), when present, is one more position after the cached rows (which may be none).
// attn_pass: the streaming pass is compiled in. The chooser leaves it out when every
// attention_decode instruction takes the tiled path, so the VM does not carry the pass's
// ~190 KiB of code; a chunk that then still reaches the pass stops the launch with a bad_operand
// status (detail kAmkDetailUnknownOp | op) instead of computing nothing. With the position operand
// (stepped programs) the op first narrows the chunk to what the position P allows
// (amk_attn_positioned); a chunk left with the new row alone needs no pass.
// (A template, so that a VM without attention instantiates none of its paths.)
template <class = void>
__device__ __forceinline__ void amk_op_attention_decode(const amk_device_program_t& prog,
                                                        const amk_instruction_t& ins,
                                                        unsigned char* scratch) {
  const amk_view q = amk_operand(ins, 0);
  amk_view k = amk_operand(ins, 1);
  amk_view v = amk_operand(ins, 2);
  const amk_view out = amk_operand(ins, 3);
  const uint32_t hd = ins.params[0];
  bool has_new = amk_attn_has_new_row(ins, hd);
  if constexpr (kAmkCfg.stepped) {
    if (hd != 0 && amk_attn_positioned(prog, ins, q, k, v, out, hd, has_new)) return;
  }
  const bool cached = k.n >= hd;
  if (hd == 0 || hd > kAmkAttnMaxHeadDim || !(cached || has_new)) return;
  float scale = __uint_as_float(ins.params[1]);
  if (scale == 0.0f) scale = 1.0f / sqrtf(static_cast<float>(hd));
  float* o = reinterpret_cast<float*>(out.ptr);
  const uint32_t group = q.n / hd;
  const uint32_t half = hd / 2;

  if constexpr (kAmkAttnTile) {
    if (cached && amk_attn_tile_fits(ins, q, k, v, hd, group, has_new)) {
      const bool with_new = has_new;  // group <= kAmkAttnNewHeads: the tile's condition
      if constexpr (amk_attn_kv(AMK_DTYPE_BF16)) {
        if (k.dtype == AMK_DTYPE_BF16) {
          amk_attn_tiled<AMK_DTYPE_BF16>(ins, q, k, v, o, hd, group, scale, with_new);
          return;
        }
      }
      if constexpr (amk_attn_kv(AMK_DTYPE_F16)) {
        amk_attn_tiled<AMK_DTYPE_F16>(ins, q, k, v, o, hd, group, scale, with_new);
        return;
      }
    }
  }
  if constexpr (!kAmkCfg.attn_pass) {
    if constexpr (kAmkCfg.stepped && kAmkBlockThreads <= 256) {
      // A positioned chunk with no cached row below the position holds the new row alone: no
      // pass over cached rows, only the fold (the tiled path needs a row).
      if (!cached && has_new) {
        if (amk_attn_rotates(ins)) (void)amk_attn_rope_table(ins);
        amk_attn_fold_new_row(ins, o, hd, group, scale, false, scratch);
        return;
      }
    }
    if (threadIdx.x == 0) amk_fail_operand(prog, ins, kAmkDetailUnknownOp | ins.op);
    (void)scratch;
    (void)half;
  } else {
    // This chunk's K and V rows are pulled into L2 while the block computes the RoPE table and
    // stages q; the streaming loop then starts on L2 hits.
    if (kAmkBlockThreads <= 256 && threadIdx.x == 0 && cached) {
      amk_prefetch_l2(k.ptr, static_cast<uint64_t>(k.n) * amk_dtype_size(k.dtype));
      amk_prefetch_l2(v.ptr, static_cast<uint64_t>(v.n) * amk_dtype_size(v.dtype));
    }
    const float* rope = nullptr;
    if (amk_attn_rotates(ins)) {
      if constexpr (kAmkBlockThreads <= 256) {
        rope = amk_attn_rope_table(ins);
      } else {  // wider blocks (128 registers): the table per instruction, in the scratch
        float* table = reinterpret_cast<float*>(scratch);
        const uint64_t position = kAmkCfg.stepped ? amk_attn_position(ins).value : 0;
        for (uint32_t i = threadIdx.x; i < half; i += kAmkBlockThreads)
          amk_attn_cos_sin(ins, position, i, table[2 * i], table[2 * i + 1]);
        amk_sync();
        rope = table;
      }
    }

    // The new row joins the passes' merge when there are passes (and its heads fit the shared
    // arrays); otherwise it is folded in after them, below.
    const bool new_in_merge =
        kAmkBlockThreads <= 256 && cached && has_new && group <= kAmkAttnNewHeads;
    if (new_in_merge) amk_attn_new_row_to_merge(ins, hd, group, scale, rope);

    if (cached) {
      // q is rotated inside the pass (lane shuffles) when each half of the head is a power-of-two
      // number of the loader's vectors; otherwise staged rotated first (always at more than 256
      // threads, where the pass has 128 registers and the shuffles made it spill).
      // (The vector loader's conditions, as `vector` below says them.)
      const uint32_t kv_per_vec = kAmkVectorBytes / amk_dtype_size(k.dtype);
      const uint32_t half_vecs = half / kv_per_vec;
      const bool rotate_in_pass = kAmkBlockThreads <= 256 && rope != nullptr &&
                                  k.dtype == v.dtype && amk_aligned16(k.ptr) &&
                                  amk_aligned16(v.ptr) && hd % kv_per_vec == 0 &&
                                  hd <= kAmkWarpSize * kv_per_vec && half % kv_per_vec == 0 &&
                                  half_vecs != 0 && (half_vecs & (half_vecs - 1)) == 0;
      amk_view qs = q;
      if (rope != nullptr && !rotate_in_pass) {
        // The rotated q, in f32, staged in the tail of out: elements [2*group, group*(hd + 2)).
        // The pass of head g writes out row g, [g*(hd + 2), (g + 1)*(hd + 2)), which ends before
        // the staged heads after g, and it reads its own heads before it writes.
        float* staged = o + 2 * group;
        for (uint32_t idx = threadIdx.x; idx < group * hd; idx += kAmkBlockThreads) {
          const uint32_t g = idx / hd, d = idx - g * hd;
          staged[idx] = amk_attn_rotated(q, static_cast<uint64_t>(g) * hd, d, half, rope);
        }
        amk_sync();
        qs.ptr = reinterpret_cast<unsigned char*>(staged);
        qs.dtype = AMK_DTYPE_F32;
      }
      const uint32_t per_vec = kAmkVectorBytes / amk_dtype_size(k.dtype);
      // At 64 registers a thread (1024 threads) the four paths inlined together spill: there only
      // the element-by-element one is built.
      const bool vector = kAmkBlockThreads <= 512 && k.dtype == v.dtype && amk_aligned16(k.ptr) &&
                          amk_aligned16(v.ptr) && hd % per_vec == 0 && hd <= kAmkWarpSize * per_vec;
      const float* pass_rope = rotate_in_pass ? rope : nullptr;
      for (uint32_t g0 = 0; g0 < group; g0 += kAmkAttnHeads) {
        const uint32_t gn = group - g0 < kAmkAttnHeads ? group - g0 : kAmkAttnHeads;
        // (At 1024 threads only the element-by-element loader is built.)
        constexpr bool kVec = kAmkBlockThreads <= 512;
        if (kVec && amk_attn_kv(AMK_DTYPE_BF16) && vector && k.dtype == AMK_DTYPE_BF16)
          amk_attn_decode_pass<amk_attn_vec_loader<AMK_DTYPE_BF16>>(qs, k, v, o, hd, scale, g0, gn,
                                                                    pass_rope, new_in_merge);
        else if (kVec && amk_attn_kv(AMK_DTYPE_F16) && vector && k.dtype == AMK_DTYPE_F16)
          amk_attn_decode_pass<amk_attn_vec_loader<AMK_DTYPE_F16>>(qs, k, v, o, hd, scale, g0, gn,
                                                                   pass_rope, new_in_merge);
        else if (kVec && amk_attn_kv(AMK_DTYPE_F32) && vector && k.dtype == AMK_DTYPE_F32)
          amk_attn_decode_pass<amk_attn_vec_loader<AMK_DTYPE_F32>>(qs, k, v, o, hd, scale, g0, gn,
                                                                   pass_rope, new_in_merge);
        else
          amk_attn_decode_pass<amk_attn_any_loader>(qs, k, v, o, hd, scale, g0, gn, pass_rope,
                                                    new_in_merge);
      }
    }

    if (has_new && !new_in_merge) amk_attn_fold_new_row(ins, o, hd, group, scale, cached, scratch);
  }
}
