// argmax (block reduction, first index of the maximum), embedding (row gather with a bounds
// check on every id) and feed_token (a generation step's next token).
#pragma once

#include "amk_device.cuh"

// (value, index) pairs: larger value wins, ties go to the smaller index, NaN never wins. An
// empty or all-NaN input yields index 0.
__device__ __forceinline__ void amk_argmax_merge(float& bv, uint32_t& bi, float v, uint32_t i) {
  if (v > bv || (v == bv && i < bi) || (bi == 0xFFFFFFFFu && v == v)) {
    bv = v;
    bi = i;
  }
}

// 16-byte loads in flight per thread at 256 threads (the same bytes per block at any size).
constexpr uint32_t kAmkArgmaxUnroll = amk_per_thread_at_256(8);

// Operands x, index, value?, index_map?; param base (schemas/README.md).
__device__ __forceinline__ void amk_op_argmax(const amk_device_program_t&,
                                              const amk_instruction_t& ins,
                                              unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view out = amk_operand(ins, 1);
  float bv = -__int_as_float(0x7f800000);
  uint32_t bi = 0xFFFFFFFFu;
  uint32_t done = 0;
  if (x.dtype == AMK_DTYPE_F32 && amk_aligned16(x.ptr)) {
    // The usual case (f32 logits): 16-byte loads, kAmkArgmaxUnroll per thread issued before any
    // is compared, so the loads overlap instead of costing a round trip each.
    const uint32_t nv = x.n / 4;
    for (uint32_t base = threadIdx.x; base < nv; base += kAmkBlockThreads * kAmkArgmaxUnroll) {
      amk_vec16 v[kAmkArgmaxUnroll];
#pragma unroll
      for (uint32_t u = 0; u < kAmkArgmaxUnroll; ++u) {
        const uint32_t i = base + u * kAmkBlockThreads;
        if (i < nv) v[u] = amk_ld16(x.ptr + 16ull * i);
      }
#pragma unroll
      for (uint32_t u = 0; u < kAmkArgmaxUnroll; ++u) {
        const uint32_t i = base + u * kAmkBlockThreads;
        if (i < nv)
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e)
            amk_argmax_merge(bv, bi, __uint_as_float(v[u].w[e]), 4 * i + e);
      }
    }
    done = nv * 4;
  }
  for (uint32_t i = done + threadIdx.x; i < x.n; i += kAmkBlockThreads)
    amk_argmax_merge(bv, bi, amk_load_f32(x, i), i);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(kAmkFullMask, bv, o);
    const uint32_t i = __shfl_xor_sync(kAmkFullMask, bi, o);
    if (i != 0xFFFFFFFFu) amk_argmax_merge(bv, bi, v, i);
  }
  float* sv = reinterpret_cast<float*>(scratch);
  uint32_t* si = reinterpret_cast<uint32_t*>(scratch) + kAmkWarps;
  const unsigned warp = threadIdx.x / kAmkWarpSize;
  const unsigned lane = threadIdx.x % kAmkWarpSize;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  amk_sync();
  if (warp == 0) {
    bv = -__int_as_float(0x7f800000);
    bi = 0xFFFFFFFFu;
    if (lane < kAmkWarps && si[lane] != 0xFFFFFFFFu) amk_argmax_merge(bv, bi, sv[lane], si[lane]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(kAmkFullMask, bv, o);
      const uint32_t i = __shfl_xor_sync(kAmkFullMask, bi, o);
      if (i != 0xFFFFFFFFu) amk_argmax_merge(bv, bi, v, i);
    }
    if (lane == 0 && out.n > 0) {
      // index = base + i (or base + index_map[i]), stored saturated to out's dtype (as the CPU
      // backend stores it); value = x[i], NaN when nothing won.
      const amk_view value = amk_operand(ins, 2);
      const amk_view map = amk_operand(ins, 3);
      const uint32_t i = bi == 0xFFFFFFFFu ? 0u : bi;
      long long at =
          map.present() && i < map.n ? amk_load_index(map, i) : static_cast<long long>(i);
      at += static_cast<long long>(ins.n_params > 0 ? ins.params[0] : 0u);
      amk_store_index(out, 0, at);
      if (value.present() && value.n > 0)
        amk_store_f32(value, 0, bi == 0xFFFFFFFFu ? __int_as_float(0x7fffffff) : bv);
    }
  }
  amk_sync();  // scratch is reused by the next op
}

// y[i, :] = table[ids[i], :], dim = extent(y) / extent(ids). An id outside the table's rows stops
// the launch with AMK_STATUS_BAD_OPERAND (detail = the id); nothing of that row is written.
__device__ __forceinline__ void amk_op_embedding(const amk_device_program_t& prog,
                                                 const amk_instruction_t& ins, unsigned char*) {
  const amk_view table = amk_operand(ins, 0);
  const amk_view ids = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  if (ids.n == 0) return;
  const uint32_t dim = y.n / ids.n;
  if (dim == 0) return;
  const uint64_t rows = table.n / dim;
  const uint32_t esize = amk_dtype_size(y.dtype);
  const bool bytewise = table.dtype == y.dtype;
  for (uint32_t i = 0; i < ids.n; ++i) {
    const long long id = amk_load_index(ids, i);  // same value in every thread: uniform branch
    if (id < 0 || static_cast<unsigned long long>(id) >= rows) {
      if (threadIdx.x == 0) amk_fail_operand(prog, ins, static_cast<uint32_t>(id));
      return;
    }
    const uint64_t src = static_cast<uint64_t>(id) * dim;
    const uint64_t dst = static_cast<uint64_t>(i) * dim;
    if (bytewise) {
      const unsigned char* s = table.ptr + src * esize;
      unsigned char* d = y.ptr + dst * esize;
      const uint32_t bytes = dim * esize;
      uint32_t done = 0;
      if (amk_aligned16(s) && amk_aligned16(d)) {
        const uint32_t nv = bytes / kAmkVectorBytes;
        for (uint32_t v = threadIdx.x; v < nv; v += kAmkBlockThreads)
          amk_st16(d + v * kAmkVectorBytes, amk_ld16(s + v * kAmkVectorBytes));
        done = nv * kAmkVectorBytes;
      }
      for (uint32_t b = done + threadIdx.x; b < bytes; b += kAmkBlockThreads) d[b] = s[b];
    } else {
      for (uint32_t k = threadIdx.x; k < dim; k += kAmkBlockThreads)
        amk_store_f32(y, dst + k, amk_load_f32(table, src + k));
    }
  }
}

// feed_token (op id 19), step s = pass - 1 of a generation: the next token t is prompt[s + 1]
// while the prompt lasts, then index[0] (the step's argmax); token[0] = t. Past the prompt, t is
// generated: ids[s + 1 - extent(prompt)] = t where that fits. With logits and all_logits, the
// step's logits go to row s of all_logits where the row fits. With eos, a generated t equal to
// eos[0] records the pass in the stop word (the word after the counters), where blocks read it
// at their pass boundaries (amk_vm_main); once it is set, later passes write nothing. Operands
// index, prompt, token, ids?, logits?, all_logits?, eos? (the registry summary and the CPU
// reference in backend/cpu_ops.cpp). (A template, so that a VM without it instantiates nothing.)
template <class = void>
__device__ __forceinline__ void amk_op_feed_token(const amk_device_program_t& prog,
                                                  const amk_instruction_t& ins) {
  const amk_view index = amk_operand(ins, 0);
  const amk_view prompt = amk_operand(ins, 1);
  const amk_view token = amk_operand(ins, 2);
  const amk_view ids = amk_operand(ins, 3);
  const amk_view logits = amk_operand(ins, 4);
  const amk_view all = amk_operand(ins, 5);
  const uint32_t pass = amk_op_pass();
  const uint64_t s = pass - 1, np = prompt.n;
  amk_view eos{};
  if constexpr (kAmkCfg.early_stop) {
    eos = amk_operand(ins, 6);
    // (Only this op writes the word, with its own pass: every thread reads the same verdict.)
    if (eos.present()) {
      const uint32_t stopped = amk_ld_relaxed(prog.counters + prog.n_counters);
      if (stopped != 0 && stopped < pass) return;
    }
  }
  if (threadIdx.x == 0) {
    const long long t = s + 1 < np ? amk_load_index(prompt, s + 1) : amk_load_index(index, 0);
    amk_store_index(token, 0, t);
    if (ids.present() && s + 1 >= np && s + 1 - np < ids.n) amk_store_index(ids, s + 1 - np, t);
    if constexpr (kAmkCfg.early_stop) {
      if (eos.present() && s + 1 >= np && t == amk_load_index(eos, 0))
        *static_cast<volatile uint32_t*>(prog.counters + prog.n_counters) = pass;
    }
  }
  // Loads in flight per thread when the logits are copied (a local constant: NVRTC keeps every
  // namespace-scope one in the cubin, even in VMs without this op).
  constexpr uint32_t kUnroll = amk_per_thread_at_256(4);
  const uint64_t v = logits.n;
  if (!logits.present() || !all.present() || (s + 1) * v > all.n) return;
  // Row s of all_logits (both f32: the registry's dtypes).
  const float* src = reinterpret_cast<const float*>(logits.ptr);
  float* dst = reinterpret_cast<float*>(all.ptr) + s * v;
  uint64_t done = 0;
  if (amk_aligned16(src) && amk_aligned16(dst)) {
    const uint64_t nv = v / 4;
    for (uint64_t base = threadIdx.x; base < nv; base += kAmkBlockThreads * kUnroll) {
      amk_vec16 x[kUnroll];
#pragma unroll
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t i = base + u * kAmkBlockThreads;
        if (i < nv) x[u] = amk_ld16(src + 4 * i);
      }
#pragma unroll
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t i = base + u * kAmkBlockThreads;
        if (i < nv) amk_st16(dst + 4 * i, x[u]);
      }
    }
    done = nv * 4;
  }
  for (uint64_t i = done + threadIdx.x; i < v; i += kAmkBlockThreads) dst[i] = src[i];
}
