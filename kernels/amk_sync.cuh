// Dependency waits and signals on the monotonic counters, and the watchdog.
//
// Wait: one thread per wait polls counters[c] with relaxed gpu-scope loads (no L1 invalidation
// per poll), back to back (one L2 round trip each, ~0.2 us) for AMK_SPIN_FAST_NS, then with a
// short __nanosleep between polls (capped at AMK_SPIN_MAX_SLEEP_NS, so a long waiter still
// wakes within ~0.1-0.2 us of the flip). %globaltimer and the abort flag are read every
// AMK_SPIN_CHECK_EVERY polls (about 1-2 us), so nothing spins forever. Once satisfied, one acquire
// fence; the VM's __syncthreads after the waits makes it cover the whole block.
// (Measured on the H200, seventeenth session: keeping 2, 4 or 8 staggered polls of the counter in
// flight made the hop slower, 831 -> 972-1029 ns, and the 1B step 0-0.6%: polls of the line
// being written delay the write.)
// Signal: after the op's stores and a __syncthreads, one thread per signal does a gpu-scope
// release add (cumulative over the block's stores that the barrier ordered before it).
#ifndef AMK_SYNC_CUH
#define AMK_SYNC_CUH

#include "amk_device.cuh"

// Back-to-back polling lasts this long before sleeps start: dependent hops and the gaps of a
// well-scheduled program are far shorter, and a spinning poll costs one L2 request per round trip.
#ifndef AMK_SPIN_FAST_NS
#define AMK_SPIN_FAST_NS 200000
#endif
#ifndef AMK_SPIN_MIN_SLEEP_NS
#define AMK_SPIN_MIN_SLEEP_NS 32
#endif
#ifndef AMK_SPIN_MAX_SLEEP_NS
#define AMK_SPIN_MAX_SLEEP_NS 128
#endif
// Polls between two reads of %globaltimer and the abort flag (a power of two).
#ifndef AMK_SPIN_CHECK_EVERY
#define AMK_SPIN_CHECK_EVERY 8
#endif
static_assert((AMK_SPIN_CHECK_EVERY & (AMK_SPIN_CHECK_EVERY - 1)) == 0, "power of two");

// Returns true once counters[counter] >= need; false when the launch is stopping (abort flag
// raised elsewhere, or this thread hit the deadline and raised it).
__device__ __noinline__ bool amk_wait_slow(const amk_device_program_t& prog,
                                           const amk_instruction_t& ins, uint32_t counter,
                                           uint32_t need, uint32_t queue_pos) {
  const uint32_t* c = prog.counters + counter;
  const uint64_t wait_start = amk_globaltimer();
  const uint64_t deadline =
      prog.timeout_ns != 0 ? amk_state.block_start + prog.timeout_ns : ~0ull;
  uint32_t sleep_ns = 0;
  for (;;) {
#pragma unroll 1
    for (uint32_t i = 0; i < AMK_SPIN_CHECK_EVERY; ++i) {
      if (amk_ld_relaxed(c) >= need) return true;
      if (sleep_ns != 0) __nanosleep(sleep_ns);
    }
    if (amk_ld_relaxed(prog.abort_flag) != 0) return false;
    const uint64_t now = amk_globaltimer();
    if (now > deadline) {
      const uint32_t have = amk_ld_relaxed(c);
      if (have >= need) return true;
      amk_raise_at(prog, ins, queue_pos, AMK_STATUS_TIMEOUT, counter, have, need,
                   now - wait_start, 0);
      return false;
    }
    if (now - wait_start > AMK_SPIN_FAST_NS)
      sleep_ns = sleep_ns == 0 ? AMK_SPIN_MIN_SLEEP_NS
                               : min(sleep_ns * 2, static_cast<uint32_t>(AMK_SPIN_MAX_SLEEP_NS));
  }
}

__device__ __forceinline__ bool amk_wait(const amk_device_program_t& prog,
                                         const amk_instruction_t& ins, uint32_t counter,
                                         uint32_t need, uint32_t queue_pos) {
  // Fast path: already satisfied (the common case for a well-scheduled queue).
  if (amk_ld_relaxed(prog.counters + counter) < need &&
      !amk_wait_slow(prog, ins, counter, need, queue_pos))
    return false;
  amk_fence_acquire();
  return true;
}

// AMK_GEMV_PRELOAD (2, the default): a gemv step with waits whose weights no instruction of the
// launch writes (AMK_INS_CONST_WEIGHTS, set by the planner) requests its first two weight batches
// into registers (or the ring's first slots, AMK_GEMV_SMEM_STAGES) before it waits, so they are in
// flight during the hop instead of after it (1: one batch; 3, 4: as many with a ring that deep,
// else as 2; 0: off, the VM waits first). With the ring, 3 before the wait measured slower than 2
// on the H200 (Llama-3.2-1B step at 3 stages: 1.0393 -> 1.0580 ms; 8B 4.527 -> 4.546). The op then
// runs the step's waits itself, through
// amk_step_wait. Measured on the H200 (`amk profile --events`, Llama-3.2-1B step, ctx 1024, two
// interleaved rounds): off 1.2758 / 1.2805 ms, one batch 1.1694 / 1.1660, two 1.1665 / 1.1648.
// Seventeenth session: no preload (nor L2 prefetch of its own weights) for a gemv whose block
// last ran a non-gemv op, i.e. o_proj after attention, so that the combine's reads do not queue
// behind it: the combine gained 0.6 us a layer, o_proj lost 2 us; 1B +2.6% (+3.5% without the
// prefetch too), 8B +1.2% (+1.5%).
// Where the weights go through the ring the generated source sets 1 (codegen's kGemvPreloadRing:
// measured on the H200 in the twenty-third session, Llama-3.2-1B step -1.0%, 8B -0.2%: half the
// bytes in flight at each phase boundary, where the latency-bound steps' round trips queue).
// A program with no such step (codegen's gemv_preload_needed) gets 0: the preload's registers
// took the GEMV benchmark's VM from 128 to 150 a thread, from two blocks an SM to one, and its
// 8 x 4096^2 from 73 to 98.5 us.
#ifndef AMK_GEMV_PRELOAD
#define AMK_GEMV_PRELOAD 2
#endif
#if AMK_GEMV_PRELOAD < 0 || AMK_GEMV_PRELOAD > 4
#error "AMK_GEMV_PRELOAD is 0 to 4 (3 and 4: with the ring, AMK_GEMV_SMEM_STAGES; else as 2)"
#endif

// AMK_ATTN_PRELOAD (0: off, the default; 1: on): attention_decode steps whose K and V no
// instruction writes run their waits inside the op too, after issuing their K/V copies
// (amk_ops_attention.cuh). Needs the preload's machinery (AMK_GEMV_PRELOAD != 0). Measured on the
// H200 in the twenty-fourth session (`amk profile --events --tuning-arms`, three rounds): 1B step
// 0.9830 / 0.9809 / 0.9853 ms against 0.9845 / 0.9825 / 0.9838 (0.9995x), correct. The op's
// time after its wait fell 5.41 -> 3.12 us, but its wait now ended 3.2 us after the q/k/v steps
// it waits for instead of 1.15 (median): the chunks' blocks run those gemvs right before, so
// the work before the wait cannot start earlier than it did after it. Off, except where the
// generated source sets it: chunks of one query head on the large tile (`amk gen llama --combine
// oproj`, the 1B step's default layout), whose 64 KiB copies are four times the old chunks'.
// There, twenty-eighth session (same command, three rounds): 0.9487 / 0.9511 / 0.9518 ms without,
// 0.9421 / 0.9435 / 0.9444 with (0.993x); in the next call, as the default, 0.9536 / 0.9519 /
// 0.9535 against 0.9567 / 0.9574 / 0.9587 without (1.0048x). In the trace the op's mean 5.67 ->
// 3.48 us (q staged 2.54 -> 0.46 us after its start) and the phase's span 7.20 -> 6.66.
// Thirty-second session (built, `--check`ed on the GPU, removed): the K/V of a block's next
// chunk copied into a 64 KiB tile of its own past gemv's ring by the block's down projection
// two steps earlier (its last warp, a few batches into the stream; the planner marked the
// trigger and put the copy geometry in its instruction), so that the chunk only read q and the
// new row after its wait: the 1B step 1.034x slower (down 10.66 -> 11.36 us a layer), and q was
// still staged 2.5 us after the wait (2.54 -> 2.67): the copies are not what delays it.
#ifndef AMK_ATTN_PRELOAD
#define AMK_ATTN_PRELOAD 0
#endif

// AMK_EARLY_POLL (1): a gemv that runs its own waits reads each wait's counter once when the op
// starts (prime(), relaxed, as the first poll), and the wait, after the first weight batches are
// issued, takes that value if it already suffices (then only the acquire fence) instead of
// starting to poll there. The twenty-fifth session's turn-around traces (AMK_TRACE_MARKS_EARLY=3,
// Llama-3.2-1B step): a gemv step spends ~1.5 us (median) from entering its op to its first poll
// (decoding, issuing its first batch), then ~0.6 us polling even when the counter was reached
// before it started; on gate/up, whose blocks end their o_proj ~0.4 us before the last one,
// the wait ends 2.1 us after that last o_proj (o_proj's own, on blocks that were idle: 0.8).
// Measured on the H200 (twenty-fifth session, `amk profile --events --tuning-arms`, one
// process): Llama-3.2-1B step 0.9900 / 0.9925 / 0.9892 ms without, 0.9892 / 0.9878 / 0.9881 with
// (0.997x, each round lower); Llama-3.1-8B 4.3555 / 4.3597 -> 4.3466 / 4.3493 (0.998x).
// Predicted ~-1% (up to -0.6 us on gate/up's hop a layer).
#ifndef AMK_EARLY_POLL
#define AMK_EARLY_POLL 1
#endif

// AMK_NEXT_INS_L1 (1): a step that waits has the two lines of its block's next step's
// instruction prefetched into L1 by the last warp right after the wait (whose acquire fence drops
// L1), so the next step decodes from L1 instead of from L2 under load (the twenty-fifth session's
// traces: ~1.5 us from a gemv step's entry to its first poll, on the critical path of the block
// that ends a phase last). The lookup of the next step (a shuffle from the window registers)
// covers the current sub-window and the next one while its registers are fresh. Measured on the
// H200 (twenty-sixth session, `amk profile --events --tuning-arms`, one process): Llama-3.2-1B
// step 0.9842 / 0.9848 / 0.9823 ms without, 0.9723 / 0.9756 / 0.9781 with (0.991x, each round
// lower; 0.991x again in another call), Llama-3.1-8B 0.997x in both calls. 0: off (what the
// generated source sets where no gemv waits and preloads; codegen's vm_source).
#ifndef AMK_NEXT_INS_L1
#define AMK_NEXT_INS_L1 1
#endif
#if AMK_NEXT_INS_L1
__device__ __forceinline__ void amk_prefetch_next_ins(const amk_device_program_t& prog,
                                                      uint32_t item) {
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  if (item != 0xFFFFFFFFu && threadIdx.x / kAmkWarpSize == kAmkWarps - 1 && lane < 2)
    amk_prefetch_l1(reinterpret_cast<const unsigned char*>(prog.instructions + item) + 128 * lane);
}
#endif

// A step's waits, run by the op at the point where it must read what they guard. Every thread of
// the block calls it at the same point; only the first call waits. true: the launch is stopping
// (the op returns without writing anything, and the VM exits).
struct amk_step_wait {
  __device__ static constexpr bool active() { return true; }
  const amk_device_program_t* prog;
  const amk_instruction_t* ins;
  uint32_t n_waits, pass, queue_pos;
  bool done, stop;
  uint32_t early = 0;  // AMK_EARLY_POLL: the counter as prime() read it (warp 0's wait lanes)
#if AMK_NEXT_INS_L1
  uint32_t next_ins = 0xFFFFFFFFu;  // the block's next step with work (AMK_NEXT_INS_L1)
#endif
  // AMK_EARLY_POLL: the first poll, issued when the op starts (its value is used by the wait).
  __device__ __forceinline__ void prime() {
#if AMK_EARLY_POLL
    const uint32_t lane = threadIdx.x % kAmkWarpSize;
    if (threadIdx.x / kAmkWarpSize == 0 && lane < n_waits) {
      uint32_t counter, value;
      amk_ldg_nc2(&ins->waits[lane], counter, value);
      early = amk_ld_relaxed(prog->counters + counter);
    }
#endif
  }
  __device__ __forceinline__ bool operator()() {
    if (done) return stop;
    done = true;
    bool s = *static_cast<volatile uint32_t*>(&amk_state.stop) != 0;
    const uint32_t lane = threadIdx.x % kAmkWarpSize;
    if (threadIdx.x / kAmkWarpSize == 0 && lane < n_waits) {
      uint32_t counter, value;
      amk_ldg_nc2(&ins->waits[lane], counter, value);
      if (kAmkMarksTurn) AMK_TRACE_MARK(0);  // (diagnostic) polling starts (thread 0: lane 0)
#if AMK_EARLY_POLL
      // (the relaxed read that saw the value, then the acquire fence: amk_wait's fast path)
      if (early >= value * pass)
        amk_fence_acquire();
      else
#endif
      if (!amk_wait(*prog, *ins, counter, value * pass, queue_pos)) s = true;
    }
    stop = __syncthreads_or(s) != 0;
#if AMK_NEXT_INS_L1
    amk_prefetch_next_ins(*prog, next_ins);
#endif
    if (kAmkMarksTurn) AMK_TRACE_MARK(1);  // (diagnostic) the wait is over
#ifdef AMK_TRACE
    // The step's trace start is when its wait ends (the VM reads it back after the op: the
    // object may be a copy in a call, so no pointer into the VM's registers).
    if (threadIdx.x == 0) amk_state.wait_end = amk_globaltimer();
#endif
    return stop;
  }
};
// (amk_no_wait, for ops whose waits the VM already ran, is in amk_device.cuh.)

#endif  // AMK_SYNC_CUH
