// The persistent VM: one block per queue, each walking its instructions (`iterations` times),
// waiting on and signalling the monotonic counters, dispatching to the ops compiled in.
//
// Fetch. The instructions stay in global memory, read through L1 (the buffer table goes to shared
// memory with smem_buffers, amk_device.cuh; a waiting attention step's instruction with
// stage_decode_ins, below). Every warp walks the queue on its own, in windows
// of kAmkWindow = 32 * kAmkSubs steps: lane l holds, for sub-window j, the packed header
// (op, n_waits, n_signals) and the instruction index of step base + 32 j + l, in registers. The
// headers of window w + 1 (ld.global.nc, 8 bytes each) and the queue items of window w + 2 are
// loaded when window w starts, so each load has a whole window (64+ steps) to land, and a
// ballot turns each sub-window into a mask of the steps that need work. A step whose
// instruction is a plain nop (no waits, no signals) costs a bit test; any other step shuffles
// its header and index out of the owning lane, and the op reads the instruction in global
// memory through L1 (the line of the header is already there; the second line is prefetched
// when the header lands).
//
// Order. Waits: lanes of warp 0 poll (one per wait), then a barrier (acquire for the block,
// stop check). A data op is preceded by a barrier when an earlier data op of this block has not
// been followed by one yet (`dirty`), so it sees that op's stores and its scratch is free; a
// signal is preceded by one when the block is dirty, then lanes of warp 0 red.release (one per
// signal). Plain nops need no barrier, so warps may drift apart across them. The stop flag
// (raised by an op or a wait) is checked at every barrier.
//
// Passes. A wait needs value * pass (pass counted per block from 1). With kAmkCfg.stepped a
// carried wait needs value * (pass - 1), the previous pass's signals (amk_wait_need), and each
// warp records the pass of its data op in amk_pass before the op (amk_op_pass). With
// kAmkCfg.early_stop a block ends at its first step of pass q when the stop word (after the
// counters, written by feed_token at eos) holds a pass at most q - 2.
//
// The generated source defines the kernel entry points (amk_vm, and amk_step with the step
// kernel), which call amk_vm_main / amk_step_main with the program and the tensor-map table.
#pragma once

#include "amk_device.cuh"
#include "amk_sync.cuh"
#include "amk_ops_elementwise.cuh"
#include "amk_ops_norm.cuh"
#include "amk_ops_misc.cuh"
#include "amk_ops_gemv.cuh"
#include "amk_ops_rope.cuh"
#include "amk_ops_attention.cuh"
#include "amk_ops_combine.cuh"

AMK_HD constexpr bool amk_vm_uses(amk_op op) { return amk_uses_op(kAmkOps, op); }
AMK_HD constexpr uint32_t amk_op_bits(amk_op op) { return static_cast<uint32_t>(op); }

// The warp whose lanes release a step's signals: warp 1, so that it releases while warp 0, which
// polls the next step's waits, goes on (the next step's first barrier then waits for whichever
// is later). A one-warp block releases on warp 0.
constexpr uint32_t kAmkSignalWarp = kAmkWarps > 1 ? 1u : 0u;

// Sub-windows of 32 steps held per lane (lookahead of a load: one window).
constexpr uint32_t kAmkSubs = 2;
constexpr uint32_t kAmkWindow = kAmkWarpSize * kAmkSubs;
static_assert(AMK_MAX_WAITS <= kAmkWarpSize && AMK_MAX_SIGNALS <= kAmkWarpSize, "wait lanes");
constexpr uint32_t kAmkNoItem = 0xFFFFFFFFu;

// Weight streaming ahead of the dependency waits. The operands an op streams from HBM once
// (gemv's weights, attention_decode's cache rows) depend on nothing the program computes, so
// when a block reaches a streaming step, one thread asks the copy engine to pull the first
// kAmkPrefetchBytes of each streamed operand of the prefetch_ahead-th next streaming step of its
// queue into L2 (cp.async.bulk.prefetch: no registers, no shared memory, no completion to wait
// for). HBM then keeps working while the block waits on its counters, and the op's own loads
// start as L2 hits instead of ramping up from an idle pipe. Steps further ahead than the warp's
// lookahead window are skipped (a missed hint costs nothing but the hint). Only steps without
// waits are prefetched: prefetching a dependent step's weights delays the reads on the critical
// path. The chooser turns it off where gemvs wait and preload (the decode steps).
constexpr uint64_t kAmkPrefetchBytes = 32768;
// Bytes of each of its own streamed operands a step that waits prefetches into L2 before the
// wait, so its loads start as L2 hits once the wait is over.
constexpr uint64_t kAmkPrefetchOwnBytes = 32768;

// stage_decode_ins: a step with waits whose op reads its instruction only after them
// (attention_decode, attention_combine: operands, RoPE params) gets its instruction copied into
// shared memory by the last warp before the wait, and the op reads the copy. The wait ends with
// fence.acquire.gpu, which invalidates L1 (amk_device.cuh), so without the copy the op's first
// reads of the instruction are L2 round trips on the critical path. Two slots, alternating: a
// warp still in the previous staged op reads the other one (two staged steps are separated by
// the second one's wait barrier, so no warp is two of them behind).
__shared__ __align__(16) amk_instruction_t amk_ins_stage[2];
__device__ __forceinline__ bool amk_stages_ins(uint32_t op) {
  return op == amk_op_bits(amk_op::attention_decode) ||
         op == amk_op_bits(amk_op::attention_combine);
}

// The ops whose operands stream from HBM once (prefetch candidates).
__device__ __forceinline__ bool amk_op_streams(uint32_t op) {
  return op == amk_op_bits(amk_op::gemv) || op == amk_op_bits(amk_op::attention_decode);
}

__device__ __forceinline__ void amk_prefetch_operand(const amk_instruction_t& ins, uint32_t k,
                                                     uint64_t limit) {
  if (k >= ins.n_operands || ins.operands[k].buffer == AMK_NO_BUFFER) return;
  const amk_view v = amk_operand(ins, k);
  const uint64_t bytes = static_cast<uint64_t>(v.n) * amk_dtype_size(v.dtype);
  amk_prefetch_l2(v.ptr, min(bytes, limit));
}

// The streamed operands of instruction `item` (op `op`): gemv's w and w2, attention's k and v.
__device__ __forceinline__ void amk_prefetch_streams(const amk_device_program_t& prog,
                                                     uint32_t item, uint32_t op, uint64_t limit) {
  const amk_instruction_t& ins = prog.instructions[item];
  if (op == amk_op_bits(amk_op::gemv)) {
    amk_prefetch_operand(ins, 0, limit);
    amk_prefetch_operand(ins, 5, limit);
  } else if (op == amk_op_bits(amk_op::attention_decode)) {
    amk_prefetch_operand(ins, 1, limit);
    amk_prefetch_operand(ins, 2, limit);
  }
}

__shared__ __align__(16) unsigned char amk_scratch[kAmkScratchBytes];

// Packed header: op in bits 0-15, n_waits in 16-19, n_signals in 20-23, with gemv_preload the
// instruction's AMK_INS_CONST_WEIGHTS flag in 24; 0 = plain nop.
__device__ __forceinline__ uint32_t amk_pack_header(uint32_t w0, uint32_t w1) {
  const uint32_t n_waits = min(w0 >> 24, static_cast<uint32_t>(AMK_MAX_WAITS));
  const uint32_t n_signals = min(w1 & 0xFFu, static_cast<uint32_t>(AMK_MAX_SIGNALS));
  uint32_t h = (w0 & 0xFFFFu) | (n_waits << 16) | (n_signals << 20);
  if constexpr (kAmkCfg.gemv_preload > 0) {
    if (((w1 >> 16) & AMK_INS_CONST_WEIGHTS) != 0) h |= 1u << 24;  // weights written by none
  }
  if constexpr (kAmkCfg.trace) h |= 0x80000000u;  // every instruction traced: none a plain nop
  return h;
}

// The waits a step hands its op: amk_step_wait where the VM has the gemv preload (the op runs
// them), else amk_no_wait (the VM ran them).
template <bool kPreload>
__device__ __forceinline__ auto amk_make_step_wait(const amk_device_program_t& prog,
                                                   const amk_instruction_t& ins, uint32_t n_waits,
                                                   uint32_t pass, uint32_t qpos, bool preload) {
  if constexpr (kPreload)
    return amk_step_wait{&prog, &ins, n_waits, pass, qpos, !preload, false};
  else
    return amk_no_wait{};
}

// Runs the op of `ins`; an op not compiled in (nor a custom op) is reported and the block stops.
// `wait`: the step's waits for an op that runs them itself (gemv, with gemv_preload), else
// amk_no_wait. `tma`: the tensor-map table (null without one).
template <class Wait>
__device__ __forceinline__ void amk_dispatch(const amk_device_program_t& prog,
                                             const amk_instruction_t& ins,
                                             const amk_tma_table_t* tma, Wait& wait) {
  switch (static_cast<amk_op>(ins.op)) {
    case amk_op::nop: return;  // waits and signals only
    case amk_op::copy:
      if constexpr (amk_vm_uses(amk_op::copy)) return amk_op_copy(prog, ins, amk_scratch);
      break;
    case amk_op::fill:
      if constexpr (amk_vm_uses(amk_op::fill)) return amk_op_fill(prog, ins, amk_scratch);
      break;
    case amk_op::add:
      if constexpr (amk_vm_uses(amk_op::add)) return amk_op_add(prog, ins, amk_scratch);
      break;
    case amk_op::mul:
      if constexpr (amk_vm_uses(amk_op::mul)) return amk_op_mul(prog, ins, amk_scratch);
      break;
    case amk_op::scale:
      if constexpr (amk_vm_uses(amk_op::scale)) return amk_op_scale(prog, ins, amk_scratch);
      break;
    case amk_op::silu_mul:
      if constexpr (amk_vm_uses(amk_op::silu_mul)) return amk_op_silu_mul(prog, ins, amk_scratch);
      break;
    case amk_op::rmsnorm:
      if constexpr (amk_vm_uses(amk_op::rmsnorm)) return amk_op_rmsnorm(prog, ins, amk_scratch);
      break;
    case amk_op::softmax:
      if constexpr (amk_vm_uses(amk_op::softmax)) return amk_op_softmax(prog, ins, amk_scratch);
      break;
    case amk_op::gemv:
      if constexpr (amk_vm_uses(amk_op::gemv)) return amk_op_gemv(prog, ins, tma, wait);
      break;
    case amk_op::argmax:
      if constexpr (amk_vm_uses(amk_op::argmax)) return amk_op_argmax(prog, ins, amk_scratch);
      break;
    case amk_op::embedding:
      if constexpr (amk_vm_uses(amk_op::embedding)) return amk_op_embedding(prog, ins, amk_scratch);
      break;
    case amk_op::rope:
      if constexpr (amk_vm_uses(amk_op::rope)) return amk_op_rope(prog, ins, amk_scratch);
      break;
    case amk_op::kv_append:
      if constexpr (amk_vm_uses(amk_op::kv_append)) return amk_op_kv_append(prog, ins, amk_scratch);
      break;
    case amk_op::attention_decode:
      if constexpr (amk_vm_uses(amk_op::attention_decode))
        return amk_op_attention_decode(prog, ins, amk_scratch);
      break;
    case amk_op::attention_combine:
      if constexpr (amk_vm_uses(amk_op::attention_combine))
        return amk_op_attention_combine(prog, ins, amk_scratch);
      break;
    default:
      // feed_token here rather than as a case label: a VM without it keeps its switch as it was.
      if constexpr (amk_vm_uses(amk_op::feed_token)) {
        if (ins.op == amk_op_bits(amk_op::feed_token)) return amk_op_feed_token(prog, ins);
      }
      if (amk_custom_dispatch(prog, ins, amk_scratch)) return;
      break;
  }
  if (threadIdx.x == 0) amk_fail_operand(prog, ins, kAmkDetailUnknownOp | ins.op);
}

// The persistent VM's body: block blockIdx.x walks queue blockIdx.x. (A template, so that the
// paths the config leaves out are not instantiated.)
template <class = void>
__device__ __forceinline__ void amk_vm_main(const amk_device_program_t& prog,
                                            const amk_tma_table_t* tma) {
  constexpr bool kPreload = kAmkCfg.gemv_preload > 0;
  if (blockIdx.x >= prog.n_queues) return;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t begin = prog.queue_offsets[blockIdx.x];
  const uint32_t len = prog.queue_offsets[blockIdx.x + 1] - begin;
  const uint32_t total = len * (prog.iterations > 0 ? prog.iterations : 1u);
  if (len == 0) return;
  const uint32_t* items = prog.queue_items + begin;

  if (threadIdx.x == 0) {
    amk_state.stop = 0;
    amk_state.rope_valid = 0;
    amk_attn_block_init();  // (attention's K/V copy barrier, where the tiled path has one)
    amk_state.block_start = amk_globaltimer();
  }
  amk_buffers_init(prog);

  // Window registers (see the top of this file). Sub-window j of the current window: packed
  // header cur[j], instruction index itc[j], mask m[j]; window + 1: raw header words hw0/hw1 and
  // indices itn; window + 2: indices itnn. With prefetch_ahead, ms[j]: the sub-window's steps
  // whose op streams operands.
  uint32_t cur[kAmkSubs], itc[kAmkSubs], m[kAmkSubs], ms[kAmkSubs];
  bool prefetch_started = false;
  uint32_t hw0[kAmkSubs], hw1[kAmkSubs], itn[kAmkSubs], itnn[kAmkSubs];
  // Queue item of step s (kAmkNoItem past the end).
  auto load_item = [&](uint32_t s) -> uint32_t {
    return s < total ? amk_ldg_nc(items + (s < len ? s : s % len)) : kAmkNoItem;
  };
  auto load_header = [&](uint32_t item, uint32_t& w0, uint32_t& w1) {
    w0 = 0;
    w1 = 0;
    if (item != kAmkNoItem) amk_ldg_nc2(prog.instructions + item, w0, w1);
  };
#pragma unroll
  for (uint32_t j = 0; j < kAmkSubs; ++j) {
    itn[j] = load_item(kAmkWarpSize * j + lane);
    itnn[j] = load_item(kAmkWindow + kAmkWarpSize * j + lane);
  }
#pragma unroll
  for (uint32_t j = 0; j < kAmkSubs; ++j) load_header(itn[j], hw0[j], hw1[j]);
  __syncthreads();  // amk_state

  uint32_t q_sub = 0, pass_sub = 1;  // queue position and pass of the sub-window's first step
  bool dirty = false;                // a data op ran since the last barrier
  uint32_t ins_slot = 0;             // stage_decode_ins: amk_ins_stage slot of the next staged step
  uint32_t stop_checked = 1;         // early_stop: the last pass whose start read the stop word
  uint32_t p = 0;
  for (;;) {  // one sub-window of up to 32 steps per pass, starting at p (a multiple of 32)
    if (p != 0) {
      q_sub += kAmkWarpSize;
      if (q_sub >= len) {
        pass_sub += q_sub / len;
        q_sub %= len;
      }
    }
    if ((p & (kAmkWindow - 1)) == 0) {
      // Window p / kAmkWindow starts: its headers landed; start window + 1's headers and
      // window + 2's items.
#pragma unroll
      for (uint32_t j = 0; j < kAmkSubs; ++j) {
        cur[j] = amk_pack_header(hw0[j], hw1[j]);
        itc[j] = itn[j];
        m[j] = __ballot_sync(kAmkFullMask, cur[j] != 0);
        if constexpr (kAmkCfg.prefetch_ahead > 0)
          ms[j] = __ballot_sync(kAmkFullMask,
                                amk_op_streams(cur[j] & 0xFFFFu) && ((cur[j] >> 16) & 0xFu) == 0);
        if (cur[j] != 0 && itc[j] != kAmkNoItem)
          amk_prefetch_l1(reinterpret_cast<const unsigned char*>(prog.instructions + itc[j]) + 128);
        itn[j] = itnn[j];
        load_header(itn[j], hw0[j], hw1[j]);
        itnn[j] = load_item(p + 2 * kAmkWindow + kAmkWarpSize * j + lane);
      }
    } else {
#pragma unroll
      for (uint32_t j = 0; j + 1 < kAmkSubs; ++j) {
        cur[j] = cur[j + 1];
        itc[j] = itc[j + 1];
        m[j] = m[j + 1];
        if constexpr (kAmkCfg.prefetch_ahead > 0) ms[j] = ms[j + 1];
      }
    }
    const uint32_t n = min(kAmkWarpSize, total - p);
    uint32_t mask = m[0];
    for (uint32_t l = 0; l < n; ++l, mask >>= 1) {
      if ((mask & 1u) == 0) continue;  // a plain nop: nothing to do
      // A step with work (warp-uniform).
      const uint32_t h = __shfl_sync(kAmkFullMask, cur[0], l);
      const uint32_t item = __shfl_sync(kAmkFullMask, itc[0], l);
      uint32_t qpos = q_sub + l, pass = pass_sub;
      if (qpos >= len) {
        pass += qpos / len;
        qpos %= len;
      }
      if constexpr (kAmkCfg.early_stop) {
        if (pass != stop_checked) {  // the block's first step of a pass (amk_sync.cuh)
          stop_checked = pass;
          if (amk_stop_word_ends(prog, pass)) return;
          dirty = false;
        }
      }
      const amk_instruction_t& ins = prog.instructions[item];
      const uint32_t op = h & 0xFFFFu;
      const uint32_t n_waits = (h >> 16) & 0xFu;
      const uint32_t n_signals = (h >> 20) & 0xFu;
      if constexpr (kAmkCfg.prefetch_ahead > 0) {
        if (amk_op_streams(op)) {
          // Every streaming step prefetches the prefetch_ahead-th next one; the first of the
          // block also the ones in between. Never the step itself: its loads follow at once, and
          // a prefetch still in flight does not serve them. Candidates: bits after l of this
          // sub-window, then the later sub-windows of the window (once the window has shifted,
          // the last registers are stale copies: only kAmkSubs - sub of them count).
          const bool issuer = warp == kAmkWarps - 1 && lane == 0;
          const uint32_t sub = (p / kAmkWarpSize) % kAmkSubs;
          const bool started = prefetch_started;
          prefetch_started = true;
          uint32_t count = 0;
#pragma unroll
          for (uint32_t j = 0; j < kAmkSubs; ++j) {
            if (j >= kAmkSubs - sub || count >= kAmkCfg.prefetch_ahead) break;
            uint32_t bits = j != 0 ? ms[j] : (l + 1 < kAmkWarpSize ? ms[0] & (~0u << (l + 1)) : 0u);
            while (bits != 0 && count < kAmkCfg.prefetch_ahead) {
              const uint32_t src = __ffs(bits) - 1;
              bits &= bits - 1;
              ++count;
              if (started && count < kAmkCfg.prefetch_ahead) continue;  // issued at an earlier step
              const uint32_t t_item = __shfl_sync(kAmkFullMask, itc[j], src);
              const uint32_t t_op = __shfl_sync(kAmkFullMask, cur[j], src) & 0xFFFFu;
              if (issuer && t_item != kAmkNoItem)
                amk_prefetch_streams(prog, t_item, t_op, kAmkPrefetchBytes);
            }
          }
        }
      }
      // A step that must wait pulls the first bytes of its own streamed operands into L2 first,
      // so its loads start as L2 hits once the wait is over. (A hint: L2 is coherent, so this is
      // safe whatever writes the operand before the wait ends.)
      if (n_waits != 0 && amk_op_streams(op) && warp == kAmkWarps - 1 && lane == 0)
        amk_prefetch_streams(prog, item, op, kAmkPrefetchOwnBytes);
      const bool signaller = warp == kAmkSignalWarp && lane < n_signals;
      uint32_t sig_counter = 0, sig_add = 0;
      if (signaller) amk_ldg_nc2(&ins.signals[lane], sig_counter, sig_add);
      // next_ins_l1: a step that waits looks up the block's next step with work (this
      // sub-window's later bits, else the next sub-window's while its registers are fresh),
      // whose instruction the wait's end pulls into L1 (amk_sync.cuh).
      uint32_t next_item = kAmkNoItem;
      if constexpr (kAmkCfg.next_ins_l1) {
        if (n_waits != 0) {
          constexpr uint32_t j1 = kAmkSubs > 1 ? 1 : 0;
          const uint32_t sub = (p / kAmkWarpSize) % kAmkSubs;
          uint32_t bits = l + 1 < n ? m[0] & (~0u << (l + 1)) & (n < 32 ? (1u << n) - 1 : ~0u) : 0u;
          uint32_t src_item = itc[0];
          if (bits == 0 && kAmkSubs > 1 && sub == 0 && n == kAmkWarpSize && p + n < total) {
            const uint32_t n1 = min(kAmkWarpSize, total - p - n);
            bits = m[j1] & (n1 < 32 ? (1u << n1) - 1 : ~0u);
            src_item = itc[j1];
          }
          if (bits != 0) next_item = __shfl_sync(kAmkFullMask, src_item, __ffs(bits) - 1);
        }
      }
      // gemv_preload: a gemv whose weights no instruction writes runs its waits itself, once its
      // first weight batch is requested (amk_step_wait; header bit 24: the planner's
      // AMK_INS_CONST_WEIGHTS).
      const bool preload =
          kPreload && op == amk_op_bits(amk_op::gemv) && n_waits != 0 && ((h >> 24) & 1u) != 0;
      auto step_wait = amk_make_step_wait<kPreload>(prog, ins, n_waits, pass, qpos, preload);
      if constexpr (kPreload && kAmkCfg.next_ins_l1) {
        if (preload) step_wait.next_ins = next_item;
      }
      const bool staged =
          kAmkCfg.stage_decode_ins && n_waits != 0 && !preload && amk_stages_ins(op);
      if constexpr (kAmkCfg.stage_decode_ins) {
        if (staged && warp == kAmkWarps - 1 && lane < sizeof(amk_instruction_t) / 16) {
          // (16 bytes a lane; ordered before the op's reads by the wait's barrier below)
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(&ins) + lane);
          reinterpret_cast<uint4*>(&amk_ins_stage[ins_slot])[lane] = v;
        }
      }
      const amk_instruction_t* op_ins = &ins;
      if constexpr (kAmkCfg.stage_decode_ins) {
        if (staged) {
          op_ins = &amk_ins_stage[ins_slot];
          ins_slot ^= 1u;
        }
      }
      // Read before the wait: after it, the fence has dropped L1 and the read would be an L2
      // round trip inside the traced op's time (the untraced VM has none).
      uint32_t trace_index = 0;
      if constexpr (kAmkCfg.trace) trace_index = threadIdx.x == 0 ? __ldg(&ins.index) : 0u;
      if (n_waits != 0 && !preload) {
        bool stop = *static_cast<volatile uint32_t*>(&amk_state.stop) != 0;
        if (warp == 0 && lane < n_waits) {
          uint32_t counter, value;
          amk_ldg_nc2(&ins.waits[lane], counter, value);
          uint32_t need = value * pass;
          if constexpr (kAmkCfg.stepped) need = amk_wait_need(counter, value, pass);
          if (!amk_wait(prog, ins, counter, need, qpos)) stop = true;
        }
        if (__syncthreads_or(stop)) return;
        dirty = false;
        if constexpr (kAmkCfg.next_ins_l1) amk_prefetch_next_ins(prog, next_item);
      }
      uint64_t t_start = 0;
      if constexpr (kAmkCfg.trace) {
        t_start = threadIdx.x == 0 ? amk_globaltimer() : 0;
        if (threadIdx.x == 0)  // (read and written by thread 0 only)
          amk_trace.marks =
              prog.trace != nullptr
                  ? prog.trace + static_cast<uint64_t>(trace_index) * kAmkTraceWords + 2
                  : nullptr;
      }
      if (op != 0) {
        if (dirty && __syncthreads_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0))
          return;
        amk_state.queue_pos[warp] = qpos;
        if constexpr (kAmkCfg.stepped) amk_pass[warp] = pass;
        amk_dispatch(prog, *op_ins, tma, step_wait);
        if constexpr (kPreload) {
          if (step_wait.stop) return;
        }
        dirty = true;
      }
      if constexpr (kAmkCfg.trace) {
        if (__syncthreads_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) return;
        dirty = false;
        // A step that ran its own waits starts when they ended.
        if (preload && threadIdx.x == 0) t_start = amk_trace.wait_end;
        if (threadIdx.x == 0 && prog.trace != nullptr) {
          prog.trace[static_cast<uint64_t>(trace_index) * kAmkTraceWords] = t_start;
          prog.trace[static_cast<uint64_t>(trace_index) * kAmkTraceWords + 1] = amk_globaltimer();
        }
      }
      if (n_signals != 0) {
        if (dirty) {
          if (__syncthreads_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) return;
          dirty = false;
        }
        if (signaller) amk_red_release(prog.counters + sig_counter, sig_add);
      }
    }
    p += n;
    if (p == total) break;
  }
}

// One instruction per launch: the baseline `amk bench` compares the persistent VM against. The
// host launches amk_step once per instruction, one block each, in a legal order on one stream
// (or replays that sequence as a CUDA graph), so stream order does what the VM's counters do:
// there are no waits and no signals here, only the op, run through the VM's own dispatch so both
// entry points execute exactly the same op code. Launch with 1 block of block_threads threads
// and the VM's dynamic shared memory (the TMA gemv stages its tiles there).
template <class = void>
__device__ __forceinline__ void amk_step_main(const amk_device_program_t& prog,
                                              uint32_t instruction, const amk_tma_table_t* tma) {
  if (instruction >= prog.n_instructions) return;
  // The block state the ops rely on, as the VM sets it up: stop flag, watchdog origin, buffer
  // table, and the "queue position" a failing op reports (here: the instruction index).
  if (threadIdx.x == 0) {
    amk_state.stop = 0;
    amk_state.rope_valid = 0;
    amk_attn_block_init();  // (attention's K/V copy barrier, where the tiled path has one)
    amk_state.block_start = amk_globaltimer();
    if constexpr (kAmkCfg.trace) amk_trace.marks = nullptr;  // one launch an instruction: no trace
  }
  amk_buffers_init(prog);
  if (threadIdx.x % kAmkWarpSize == 0) {
    amk_state.queue_pos[threadIdx.x / kAmkWarpSize] = instruction;
    if constexpr (kAmkCfg.stepped) amk_pass[threadIdx.x / kAmkWarpSize] = 1;  // one pass a launch
  }
  __syncthreads();
  const amk_instruction_t& ins = prog.instructions[instruction];
  amk_no_wait no_wait;  // stream order stands for the waits
  amk_dispatch(prog, ins, tma, no_wait);
}
