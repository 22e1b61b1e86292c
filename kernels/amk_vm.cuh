// The persistent VM: one block per queue, each walking its instructions (`iterations` times),
// waiting on and signalling the monotonic counters, dispatching to the ops compiled in.
//
// Fetch. No instruction is staged in shared memory (the buffer table is, in a program whose
// steps wait: AMK_SMEM_BUFFERS, amk_device.cuh). Every warp walks the queue on its own, in windows
// of kAmkWindow = 32 * AMK_VM_SUBS steps: lane l holds, for sub-window j, the packed header
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
#ifndef AMK_VM_CUH
#define AMK_VM_CUH

#include "amk_device.cuh"
#include "amk_sync.cuh"
#include "amk_ops_elementwise.cuh"
#include "amk_ops_norm.cuh"
#include "amk_ops_gemv.cuh"
#include "amk_ops_misc.cuh"
#include "amk_ops_gemv_splitk.cuh"
#include "amk_stream.cuh"

// A VM whose attention has no block state to set up (no tiled path with bulk copies, or no
// attention ops at all: the generated source then leaves amk_ops_attention.cuh out).
#ifndef AMK_ATTN_HAS_BLOCK_INIT
__device__ __forceinline__ void amk_attn_block_init() {}
#endif

// AMK_SIGNAL_WARP (1): the warp whose lanes release a step's signals. Warp 0 also polls the
// next step's waits, so with 0 a block whose step ends last in its phase pays the release (it
// waits for the step's stores, ~0.5 us under load) and then the next wait's poll one after the
// other; 1 lets warp 1 release while warp 0 goes on (the next step's first barrier then waits
// for whichever is later). The traces of the twenty-fourth session: a gate/up step's wait ended
// 2.40 us (median) after the last o_proj when its own block's o_proj ended within 0.3 us of the
// last, 0.96 us on the blocks that ran no o_proj. Measured on the H200 (twenty-fifth session,
// `amk profile --events --tuning-arms`, same process): Llama-3.2-1B step 0.9819 / 0.9837 /
// 0.9819 ms with 0, 0.9812 / 0.9785 / 0.9786 with 1 (0.997x, each round lower), and 1.0027x
// for 0 in a second call; Llama-3.1-8B 0.998x, then 1.0009x for 0. Predicted -1 to -2%: the
// release was not most of that turn-around (AMK_TRACE_MARKS_EARLY=3 traces: a gate/up step
// spends ~1.5 us from entering its op to polling, issuing its first weight batch). A one-warp
// block releases on warp 0.
#ifndef AMK_SIGNAL_WARP
#define AMK_SIGNAL_WARP 1
#endif
constexpr uint32_t kAmkSignalWarp = AMK_SIGNAL_WARP < kAmkWarps ? AMK_SIGNAL_WARP : 0u;

// Sub-windows of 32 steps held per lane (lookahead of a load: one window).
#ifndef AMK_VM_SUBS
#define AMK_VM_SUBS 2
#endif
constexpr uint32_t kAmkSubs = AMK_VM_SUBS;
constexpr uint32_t kAmkWindow = kAmkWarpSize * kAmkSubs;
static_assert(kAmkSubs >= 1 && kAmkSubs <= 8, "AMK_VM_SUBS in [1, 8]");
static_assert(AMK_MAX_WAITS <= kAmkWarpSize && AMK_MAX_SIGNALS <= kAmkWarpSize, "wait lanes");
constexpr uint32_t kAmkNoItem = 0xFFFFFFFFu;

// Weight streaming ahead of the dependency waits. The operands an op streams from HBM once
// (gemv's weights, attention_decode's cache rows) depend on nothing the program computes, so
// when a block reaches a streaming step, one thread asks the copy engine to pull the first
// AMK_PREFETCH_BYTES of each streamed operand of the AMK_PREFETCH_AHEAD-th next streaming step
// of its queue into L2 (cp.async.bulk.prefetch: no registers, no shared memory, no completion to
// wait for). HBM then keeps working while the block waits on its counters, and the op's own
// loads start as L2 hits instead of ramping up from an idle pipe. Steps further ahead than the
// warp's lookahead window are skipped (a missed hint costs nothing but the hint). Only steps
// without waits are prefetched: measured on the H200, prefetching the weights of dependent steps
// (every GEMV of a Llama decode step) made the step ~7% slower, while independent GEMVs gained
// ~20% (8 x 4096x4096: 3.1 -> 3.7 TB/s). 0 disables. Asked again of the sixteenth session's VM
// (`amk profile --events --tuning-arms`): dependent steps too, 1B +3.6%, 8B +1.3%; the next gemv
// steps' weights asked for by the attention steps, while HBM idles, 1B +0.8% to +10%, 8B +1% to
// +3.4%, more the more bytes: the combine, on the critical path, read its partials behind the
// prefetches (its first (m, l) 3.1 -> 4.8 us after its start, its span 4.9 -> 8.8 us).
// Nineteenth session, with gemv's ring: 0 measured faster on both decode steps (1B 1.0049 ->
// 0.9968 ms, 8B 4.3923 -> 4.3747, three interleaved rounds), so the generated source sets 0
// where gemvs wait and preload (codegen's vm_choices) and keeps 1 elsewhere.
#ifndef AMK_PREFETCH_AHEAD
#define AMK_PREFETCH_AHEAD 1
#endif
#ifndef AMK_PREFETCH_BYTES
#define AMK_PREFETCH_BYTES 32768
#endif
// Bytes of each of its own streamed operands a step that waits prefetches into L2 before the
// wait (0: none). Off until the eleventh session (measured ~7% slower in the fifth, on the
// unfused layer with the lane-group attention); measured again on the H200 on the fused layer
// with the tiled attention (`amk profile --events`, two interleaved rounds): Llama-3.2-1B step
// 1.309 ms without, 1.281-1.284 at 16 KiB, 1.275-1.276 at 32 KiB, 1.283-1.288 at 64 KiB,
// 1.298-1.302 at 128 KiB, 1.329-1.330 at 256 KiB; Llama-3.1-8B 5.50 without, 5.41 at 32 KiB,
// 5.40 at 64 KiB, 5.46 at 128 KiB, 5.69 at 256 KiB.
#ifndef AMK_PREFETCH_OWN_BYTES
#define AMK_PREFETCH_OWN_BYTES 32768
#endif

// AMK_STAGE_DECODE_INS: a step with waits whose op reads its instruction only after them
// (attention_decode, attention_combine, attention_combine_splitk: operands, RoPE params) gets
// its instruction copied into shared memory by the last warp before the wait, and the op reads
// the copy. The wait ends with fence.acquire.gpu, which invalidates L1 (amk_device.cuh), so
// without the copy the op's first reads of the instruction are L2 round trips on the critical
// path (ncu, seventeenth session: ~12% of attention's stall samples waited on them). Measured on
// the H200 (`amk profile --events --tuning-arms`, same process): Llama-3.2-1B step 1.1061 ->
// 1.0916 ms (four rounds), 3.1-8B 4.918 -> 4.885 (three); attention reaches q staged at 2.53 us
// instead of 3.04, the combine its first (m, l) at 2.65 instead of 3.19. Two slots,
// alternating: a warp still in the previous staged op reads the other one (two staged steps are
// separated by the second one's wait barrier, so no warp is two of them behind). The generated
// source sets 0 unless attention_decode or attention_combine steps wait, and where
// attention_combine_splitk is compiled in too (that VM spills with it; codegen's
// stage_decode_ins). With the wide attention tile (the 8B step) it was 0 from the eighteenth
// session (4.512 -> 4.480 ms without the copy once gemv's weights went through the ring) to the
// twentieth, which measured the copy faster there three times (4.4232 -> 4.3750 ms, -1.0%).
#ifndef AMK_STAGE_DECODE_INS
#define AMK_STAGE_DECODE_INS 1
#endif
#if AMK_STAGE_DECODE_INS
__shared__ __align__(16) amk_instruction_t amk_ins_stage[2];
__device__ __forceinline__ bool amk_stages_ins(uint32_t op) {
  return op == 14 || op == 15 || op == 17;
}
#endif

// With weight streams compiled in, gemv weights go through the ring (amk_stream.cuh) instead.
__device__ __forceinline__ bool amk_op_streams(uint32_t op) {
  return (op == 9 && !AMK_WEIGHT_STREAMS) || op == 14;
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
  if (op == 9) {
    amk_prefetch_operand(ins, 0, limit);
    amk_prefetch_operand(ins, 5, limit);
  } else if (op == 14) {
    amk_prefetch_operand(ins, 1, limit);
    amk_prefetch_operand(ins, 2, limit);
  }
}

__shared__ __align__(16) unsigned char amk_scratch[AMK_SCRATCH_BYTES];

// Packed header: op in bits 0-15, n_waits in 16-19, n_signals in 20-23, with AMK_GEMV_PRELOAD
// the instruction's AMK_INS_CONST_WEIGHTS flag in 24; 0 = plain nop.
__device__ __forceinline__ uint32_t amk_pack_header(uint32_t w0, uint32_t w1) {
  const uint32_t n_waits = min(w0 >> 24, static_cast<uint32_t>(AMK_MAX_WAITS));
  const uint32_t n_signals = min(w1 & 0xFFu, static_cast<uint32_t>(AMK_MAX_SIGNALS));
  uint32_t h = (w0 & 0xFFFFu) | (n_waits << 16) | (n_signals << 20);
#if AMK_GEMV_PRELOAD
  if (((w1 >> 16) & AMK_INS_CONST_WEIGHTS) != 0) h |= 1u << 24;  // flags: weights written by none
#endif
#ifdef AMK_TRACE
  h |= 0x80000000u;  // every instruction is traced: none is skipped as a plain nop
#endif
  return h;
}

// Runs the op of `ins`; false if the op is not compiled in (reported, block stops). `wait`: the
// step's waits for an op that runs them itself (gemv, AMK_GEMV_PRELOAD), else amk_no_wait.
template <class Wait>
__device__ __forceinline__ void amk_dispatch(const amk_device_program_t& prog,
                                             const amk_instruction_t& ins,
#if AMK_TMA_GEMV
                                             const amk_tma_table_t* tma,
#endif
                                             Wait& wait) {
  switch (ins.op) {
    case 0: break;  // nop: waits and signals only
#if AMK_USE_OP_COPY
    case 1: amk_op_copy(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_FILL
    case 2: amk_op_fill(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_ADD
    case 3: amk_op_add(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_MUL
    case 4: amk_op_mul(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_SCALE
    case 5: amk_op_scale(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_SILU_MUL
    case 6: amk_op_silu_mul(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_RMSNORM
    case 7: amk_op_rmsnorm(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_SOFTMAX
    case 8: amk_op_softmax(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_GEMV
#if AMK_TMA_GEMV
    case 9: amk_op_gemv(prog, ins, amk_scratch, tma, wait); break;
#else
    case 9: amk_op_gemv(prog, ins, amk_scratch, wait); break;
#endif
#endif
#if AMK_USE_OP_ARGMAX
    case 10: amk_op_argmax(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_EMBEDDING
    case 11: amk_op_embedding(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_ROPE
    case 12: amk_op_rope(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_KV_APPEND
    case 13: amk_op_kv_append(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_ATTENTION_DECODE
#if AMK_ATTN_PRELOAD
    case 14: amk_op_attention_decode(prog, ins, amk_scratch, wait); break;
#else
    case 14: amk_op_attention_decode(prog, ins, amk_scratch); break;
#endif
#endif
#if AMK_USE_OP_ATTENTION_COMBINE
    case 15: amk_op_attention_combine(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_GEMV_SPLITK
    case 16: amk_op_gemv_splitk(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_ATTENTION_COMBINE_SPLITK
    case 17: amk_op_attention_combine_splitk(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_GEMV_T
    case 18: amk_op_gemv_t(prog, ins, amk_scratch); break;
#endif
#ifdef AMK_CUSTOM_DISPATCH
    AMK_CUSTOM_DISPATCH(prog, ins, amk_scratch)
#endif
    default:
      if (threadIdx.x == 0) amk_fail_operand(prog, ins, kAmkDetailUnknownOp | ins.op);
      break;
  }
}

extern "C" __global__ void __launch_bounds__(AMK_BLOCK_THREADS, 1)
    amk_vm(const __grid_constant__ amk_device_program_t prog
#if AMK_TMA_COUNT > 0
           ,
           const __grid_constant__ amk_tma_table_t tma
#endif
    ) {
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
#if AMK_WEIGHT_STREAMS
  amk_stream_cursor sc = amk_stream_init(prog, blockIdx.x, len, prog.iterations > 0 ? prog.iterations : 1u);
  // A stopping block waits for the weight copies still landing in its shared memory.
#define AMK_VM_EXIT()     \
  do {                    \
    amk_stream_drain();   \
    return;               \
  } while (0)
#else
#define AMK_VM_EXIT() return
#endif

  // Window registers (see the top of this file). Sub-window j of the current window: packed
  // header cur[j], instruction index itc[j], mask m[j]; window + 1: raw header words hw0/hw1 and
  // indices itn; window + 2: indices itnn.
  uint32_t cur[kAmkSubs], itc[kAmkSubs], m[kAmkSubs];
#if AMK_PREFETCH_AHEAD > 0
  uint32_t ms[kAmkSubs];     // steps of the sub-window whose op streams operands
  bool prefetch_started = false;
#endif
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
#if AMK_STAGE_DECODE_INS
  uint32_t ins_slot = 0;  // amk_ins_stage slot of the next staged step (warp-uniform)
#endif
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
#if AMK_PREFETCH_AHEAD > 0
        ms[j] = __ballot_sync(kAmkFullMask,
                              amk_op_streams(cur[j] & 0xFFFFu) && ((cur[j] >> 16) & 0xFu) == 0);
#endif
        if (cur[j] != 0 && itc[j] != kAmkNoItem)
          amk_prefetch_l1(reinterpret_cast<const unsigned char*>(prog.instructions + itc[j]) +
                          128);
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
#if AMK_PREFETCH_AHEAD > 0
        ms[j] = ms[j + 1];
#endif
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
      const amk_instruction_t& ins = prog.instructions[item];
      const uint32_t op = h & 0xFFFFu;
      const uint32_t n_waits = (h >> 16) & 0xFu;
      const uint32_t n_signals = (h >> 20) & 0xFu;
#if AMK_PREFETCH_AHEAD > 0
      if (amk_op_streams(op)) {
        // Every streaming step prefetches the AMK_PREFETCH_AHEAD-th next one; the first of the
        // block also the ones in between. Never the step itself: its loads follow at once, and a
        // prefetch still in flight does not serve them (measured: slower than no prefetch). Candidates: bits after l of this sub-window, then the
        // later sub-windows of the window (once the window has shifted, the last registers are
        // stale copies: only kAmkSubs - sub of them count).
        const bool issuer = warp == kAmkWarps - 1 && lane == 0;
        const uint32_t sub = (p / kAmkWarpSize) % kAmkSubs;
        const bool started = prefetch_started;
        prefetch_started = true;
        uint32_t count = 0;
#pragma unroll
        for (uint32_t j = 0; j < kAmkSubs; ++j) {
          if (j >= kAmkSubs - sub || count >= AMK_PREFETCH_AHEAD) break;
          uint32_t bits = j != 0 ? ms[j] : (l + 1 < kAmkWarpSize ? ms[0] & (~0u << (l + 1)) : 0u);
          while (bits != 0 && count < AMK_PREFETCH_AHEAD) {
            const uint32_t src = __ffs(bits) - 1;
            bits &= bits - 1;
            ++count;
            if (started && count < AMK_PREFETCH_AHEAD) continue;  // issued at an earlier step
            const uint32_t t_item = __shfl_sync(kAmkFullMask, itc[j], src);
            const uint32_t t_op = __shfl_sync(kAmkFullMask, cur[j], src) & 0xFFFFu;
            if (issuer && t_item != kAmkNoItem)
              amk_prefetch_streams(prog, t_item, t_op, AMK_PREFETCH_BYTES);
          }
        }
      }
#endif
#if AMK_WEIGHT_STREAMS
      amk_stream_top_up();  // the warps keep the ring full across this step's waits
      const bool streamed = p + l == sc.next_step;
#endif
#if AMK_PREFETCH_OWN_BYTES > 0
      // A step that must wait pulls the first bytes of its own streamed operands into L2 first,
      // so its loads start as L2 hits once the wait is over. (A hint: L2 is coherent, so this is
      // safe whatever writes the operand before the wait ends.)
      if (n_waits != 0 && amk_op_streams(op) && warp == kAmkWarps - 1 && lane == 0)
        amk_prefetch_streams(prog, item, op, AMK_PREFETCH_OWN_BYTES);
#endif
      const bool signaller = warp == kAmkSignalWarp && lane < n_signals;
      uint32_t sig_counter = 0, sig_add = 0;
      if (signaller) amk_ldg_nc2(&ins.signals[lane], sig_counter, sig_add);
#if AMK_NEXT_INS_L1
      // A step that waits looks up the block's next step with work (this sub-window's later
      // bits, else the next sub-window's while its registers are fresh), whose instruction the
      // wait's end pulls into L1 (amk_sync.cuh).
      uint32_t next_item = kAmkNoItem;
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
#endif
#if AMK_GEMV_PRELOAD
      // A gemv whose weights no instruction writes runs its waits itself, once its first weight
      // batch is requested, and so does an attention_decode whose K and V none writes, once its
      // K/V copies are issued (AMK_ATTN_PRELOAD) (amk_step_wait; header bit 24: the planner's
      // AMK_INS_CONST_WEIGHTS).
#if AMK_ATTN_PRELOAD
      const bool preload = (op == 9 || op == 14) && n_waits != 0 && ((h >> 24) & 1u) != 0
#else
      const bool preload = op == 9 && n_waits != 0 && ((h >> 24) & 1u) != 0
#endif
#if AMK_WEIGHT_STREAMS
                           && !streamed
#endif
          ;
      amk_step_wait step_wait{&prog, &ins, n_waits, pass, qpos, !preload, false};
#if AMK_NEXT_INS_L1
      if (preload) step_wait.next_ins = next_item;
#endif
#else
      constexpr bool preload = false;
      amk_no_wait step_wait;
#endif
#if AMK_STAGE_DECODE_INS
      const bool staged = n_waits != 0 && !preload && amk_stages_ins(op);
      if (staged && warp == kAmkWarps - 1 && lane < sizeof(amk_instruction_t) / 16) {
        // (16 bytes a lane; ordered before the op's reads by the wait's barrier below)
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(&ins) + lane);
        reinterpret_cast<uint4*>(&amk_ins_stage[ins_slot])[lane] = v;
      }
      const amk_instruction_t& op_ins = staged ? amk_ins_stage[ins_slot] : ins;
      if (staged) ins_slot ^= 1u;
#else
      const amk_instruction_t& op_ins = ins;
#endif
#ifdef AMK_TRACE
      // Read before the wait: after it, the fence has dropped L1 and the read would be an L2
      // round trip inside the traced op's time (the untraced VM has none).
      const uint32_t trace_index = threadIdx.x == 0 ? __ldg(&ins.index) : 0u;
#endif
      if (n_waits != 0 && !preload) {
        bool stop = *static_cast<volatile uint32_t*>(&amk_state.stop) != 0;
        if (warp == 0 && lane < n_waits) {
          uint32_t counter, value;
          amk_ldg_nc2(&ins.waits[lane], counter, value);
          if (!amk_wait(prog, ins, counter, value * pass, qpos)) stop = true;
        }
        if (__syncthreads_or(stop)) AMK_VM_EXIT();
        dirty = false;
#if AMK_NEXT_INS_L1
        amk_prefetch_next_ins(prog, next_item);
#endif
      }
#ifdef AMK_TRACE
      uint64_t t_start = threadIdx.x == 0 ? amk_globaltimer() : 0;
      if (threadIdx.x == 0)  // (read and written by thread 0 only)
        amk_state.marks = prog.trace != nullptr
                              ? prog.trace + static_cast<uint64_t>(trace_index) * kAmkTraceWords + 2
                              : nullptr;
#endif
      if (op != 0) {
        if (dirty && __syncthreads_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0))
          AMK_VM_EXIT();
        amk_state.queue_pos[warp] = qpos;
#if AMK_WEIGHT_STREAMS
        if (streamed) {
          if (!amk_stream_gemv(prog, ins, sc)) AMK_VM_EXIT();
        } else
#endif
        {
#if AMK_TMA_GEMV
          amk_dispatch(prog, op_ins, &tma, step_wait);
#else
          amk_dispatch(prog, op_ins, step_wait);
#endif
#if AMK_GEMV_PRELOAD
          if (step_wait.stop) AMK_VM_EXIT();
#endif
        }
        dirty = true;
      }
#ifdef AMK_TRACE
      if (__syncthreads_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) AMK_VM_EXIT();
      dirty = false;
#if AMK_GEMV_PRELOAD
      // It starts when its wait ends (with the turn-around marks, when the op is entered).
      if (preload && threadIdx.x == 0 && !kAmkMarksTurn) t_start = amk_state.wait_end;
#endif
      if (threadIdx.x == 0 && prog.trace != nullptr) {
        prog.trace[static_cast<uint64_t>(trace_index) * kAmkTraceWords] = t_start;
        prog.trace[static_cast<uint64_t>(trace_index) * kAmkTraceWords + 1] = amk_globaltimer();
      }
#endif
      if (n_signals != 0) {
        if (dirty) {
          if (__syncthreads_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) AMK_VM_EXIT();
          dirty = false;
        }
        if (signaller) amk_red_release(prog.counters + sig_counter, sig_add);
      }
    }
    p += n;
    if (p == total) break;
  }
}
#undef AMK_VM_EXIT

#endif  // AMK_VM_CUH
