// attention_combine (op id 15): merges attention_decode's partials across a kv head's chunks.
// Semantics and shape rules: the registry summary, verify/op_rules.cpp and the CPU reference in
// backend/cpu_ops.cpp.
#pragma once

#include "amk_attn_common.cuh"

constexpr uint32_t kAmkCombineDims = 4;  // output dims per lane: a warp covers 128 per item
// Chunks whose values a lane loads at once (fewer where a thread has fewer registers). The
// batch is unrolled twice (first batch, later ones).
constexpr uint32_t kAmkCombineBatch = kAmkBlockThreads <= 256 ? 16 : 8;
static_assert(kAmkCombineBatch >= 1 && kAmkCombineBatch <= kAmkWarpSize, "1..32 chunks a batch");

// out[g] = sum_c w_c o_c / sum_c w_c, w_c = l_c exp(m_c - M), M = max_c m_c, for the query heads
// g0 .. g0 + ng - 1 of partials p (chunks blocks of `block` floats, head g's row of hd + 2 at
// g * (hd + 2) in each); store(i * hd + d, value) receives head g0 + i's dim d. Partials of several
// kv heads back to back (attention_combine's kv_heads): head i is head g0 + i % per_kv of the
// (i / per_kv)-th, kv_stride floats apart. One warp per (query
// head, 128-dim slice); lane c holds chunk c's (m, l) and the weights are broadcast. The
// chunks' values do not depend on M, so the first batch loads together with (m, l): a head of up
// to kAmkCombineBatch chunks costs one round trip instead of a chain of dependent ones. More
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
      if (item == warp && c0 == 0) amk_trace_mark(0);  // the first item's (m, l) arrived
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
      if (item == warp && c0 == 0) amk_trace_mark(1);  // and its first round of values
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

// Where the VM's dynamic shared memory is gemv's ring (which no instruction keeps across
// instructions; never beside the TMA gemv, whose stages live there), the op copies
// its whole partials region (kv x chunks x group rows, contiguous) into dynamic shared memory with
// cp.async from a short loop, computes each head's chunk weights once into shared memory, then
// merges from there. The register path above unrolls a batch of 16 chunks' loads (~35 KiB of
// code), and its first (m, l) arrives about as late at a batch of 4 as at 16 (one round trip
// either way): the code arriving, not the data. Results are the same to the bit for up to 32
// chunks (the same max, weights, fmaf order and sum). A region larger than the launch's dynamic
// shared memory takes the register path.
template <class Store>
__device__ __forceinline__ void amk_combine_staged(const float* p, uint32_t n, uint32_t chunks,
                                                   uint32_t block, uint32_t hd, uint32_t ng,
                                                   uint32_t per_kv, uint32_t kv_stride,
                                                   Store&& store) {
  const uint32_t base = amk_smem_addr(amk_dynamic_smem);
  if ((reinterpret_cast<uint64_t>(p) & 15u) == 0 && n % 4 == 0) {
#pragma unroll 1
    for (uint32_t i = threadIdx.x; i < n / 4; i += kAmkBlockThreads)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(base + 16 * i),
                   "l"(p + 4 * static_cast<uint64_t>(i))
                   : "memory");
  } else {
#pragma unroll 1
    for (uint32_t i = threadIdx.x; i < n; i += kAmkBlockThreads)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(base + 4 * i), "l"(p + i)
                   : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_all;" ::: "memory");
  amk_sync();
  amk_trace_mark(0);  // the partials ((m, l) too) in shared memory
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
    if (i == warp) amk_trace_mark(1);  // the first head merged
  }
}

// Partials (kv_heads x chunks x group rows of head_dim + 2 floats) -> out (kv_heads x group x
// head_dim), param head_dim, kv_heads. (A template, so that a VM without it instantiates none of
// its paths.)
template <class = void>
__device__ __forceinline__ void amk_op_attention_combine(const amk_device_program_t&,
                                                         const amk_instruction_t& ins,
                                                         unsigned char*) {
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
  if constexpr (kAmkCfg.gemv_ring_stages > 0 && !kAmkCfg.tma_gemv) {
    // The partials, then a weight for each of their rows (amk_combine_smem_bytes).
    const uint64_t n = static_cast<uint64_t>(kv) * chunks * block;  // <= partials.n
    if (amk_combine_smem_bytes(n, row) <= amk_dynamic_smem_size()) {
      amk_combine_staged(p, static_cast<uint32_t>(n), chunks, static_cast<uint32_t>(block), hd,
                         group * kv, group, static_cast<uint32_t>(chunks * block),
                         [&](uint64_t at, float v) { amk_store_f32(out, at, v); });
      return;
    }
  }
  amk_combine_heads(p, chunks, block, hd, 0, group * kv, group, chunks * block,
                    [&](uint64_t at, float v) { amk_store_f32(out, at, v); });
}
