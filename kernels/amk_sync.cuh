// Dependency waits and signals on the monotonic counters, and the watchdog.
//
// Wait: one thread per wait polls counters[c] with relaxed gpu-scope loads (no L1 invalidation
// per poll), back to back (one L2 round trip each, ~0.2 us) for kAmkSpinFastNs, then with a
// short __nanosleep between polls (capped at kAmkSpinMaxSleepNs, so a long waiter still wakes
// within ~0.1-0.2 us of the flip). %globaltimer and the abort flag are read every
// kAmkSpinCheckEvery polls (about 1-2 us), so nothing spins forever. Once satisfied, one acquire
// fence; the VM's __syncthreads after the waits makes it cover the whole block. One poll in
// flight at a time: polls of the line being written delay the write.
// Signal: after the op's stores and a __syncthreads, one thread per signal does a gpu-scope
// release add (cumulative over the block's stores that the barrier ordered before it).
#pragma once

#include "amk_device.cuh"

// Back-to-back polling lasts this long before sleeps start: dependent hops and the gaps of a
// well-scheduled program are far shorter, and a spinning poll costs one L2 request per round trip.
constexpr uint64_t kAmkSpinFastNs = 200000;
constexpr uint32_t kAmkSpinMinSleepNs = 32;
constexpr uint32_t kAmkSpinMaxSleepNs = 128;
// Polls between two reads of %globaltimer and the abort flag (a power of two).
constexpr uint32_t kAmkSpinCheckEvery = 8;

// stepped: the count a wait needs in `pass`: value * pass, or for a carried wait (AMK_WAIT_CARRIED
// in its counter word, which this masks) value * (pass - 1), the previous pass's signals (0 in
// the first pass: it holds at once). Called only in stepped VMs, so the others keep their code.
__device__ __forceinline__ uint32_t amk_wait_need(uint32_t& counter, uint32_t value,
                                                  uint32_t pass) {
  if ((counter & AMK_WAIT_CARRIED) == 0) return value * pass;
  counter &= ~AMK_WAIT_CARRIED;
  return value * (pass - 1);
}

// Returns true once counters[counter] >= need; false when the launch is stopping (abort flag
// raised elsewhere, or this thread hit the deadline and raised it).
__device__ __noinline__ bool amk_wait_slow(const amk_device_program_t& prog,
                                           const amk_instruction_t& ins, uint32_t counter,
                                           uint32_t need, uint32_t queue_pos) {
  const uint32_t* c = prog.counters + counter;
  const uint64_t wait_start = amk_globaltimer();
  const uint64_t deadline = prog.timeout_ns != 0 ? amk_state.block_start + prog.timeout_ns : ~0ull;
  uint32_t sleep_ns = 0;
  for (;;) {
#pragma unroll 1
    for (uint32_t i = 0; i < kAmkSpinCheckEvery; ++i) {
      if (amk_ld_relaxed(c) >= need) return true;
      if (sleep_ns != 0) __nanosleep(sleep_ns);
    }
    if (amk_ld_relaxed(prog.abort_flag) != 0) return false;
    const uint64_t now = amk_globaltimer();
    if (now > deadline) {
      const uint32_t have = amk_ld_relaxed(c);
      if (have >= need) return true;
      amk_raise_at(prog, ins, queue_pos, AMK_STATUS_TIMEOUT, counter, have, need, now - wait_start,
                   0);
      return false;
    }
    if (now - wait_start > kAmkSpinFastNs)
      sleep_ns = sleep_ns == 0 ? kAmkSpinMinSleepNs : min(sleep_ns * 2, kAmkSpinMaxSleepNs);
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

// gemv_preload (kAmkCfg): a gemv step with waits whose weights no instruction of the launch
// writes (AMK_INS_CONST_WEIGHTS, set by the planner) requests its first gemv_preload weight
// batches (into registers, or the ring's first slots) before it waits, so they are in flight
// during the hop instead of after it; the op then runs the step's waits itself, through
// amk_step_wait. 0: off, the VM waits first.
//
// Such a gemv reads each wait's counter once when the op starts (prime(), relaxed, as the first
// poll), and the wait, after the first weight batches are issued, takes that value if it already
// suffices (then only the acquire fence) instead of starting to poll there.
//
// next_ins_l1: a step that waits has the two lines of its block's next step's instruction
// prefetched into L1 by the last warp right after the wait (whose acquire fence drops L1), so
// the next step decodes from L1 instead of from L2 under load.
__device__ __forceinline__ void amk_prefetch_next_ins(const amk_device_program_t& prog,
                                                      uint32_t item) {
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  if (item != 0xFFFFFFFFu && threadIdx.x / kAmkWarpSize == kAmkWarps - 1 && lane < 2)
    amk_prefetch_l1(reinterpret_cast<const unsigned char*>(prog.instructions + item) + 128 * lane);
}

// A step's waits, run by the op at the point where it must read what they guard. Every thread of
// the block calls it at the same point; only the first call waits. true: the launch is stopping
// (the op returns without writing anything, and the VM exits).
struct amk_step_wait {
  __device__ static constexpr bool active() { return true; }
  const amk_device_program_t* prog;
  const amk_instruction_t* ins;
  uint32_t n_waits, pass, queue_pos;
  bool done, stop;
  uint32_t early = 0;               // the counter as prime() read it (warp 0's wait lanes)
  uint32_t next_ins = 0xFFFFFFFFu;  // next_ins_l1: the block's next step with work
  // The first poll, issued when the op starts (its value is used by the wait).
  __device__ __forceinline__ void prime() {
    const uint32_t lane = threadIdx.x % kAmkWarpSize;
    if (threadIdx.x / kAmkWarpSize == 0 && lane < n_waits) {
      uint32_t counter, value;
      amk_ldg_nc2(&ins->waits[lane], counter, value);
      if constexpr (kAmkCfg.stepped) (void)amk_wait_need(counter, value, pass);
      early = amk_ld_relaxed(prog->counters + counter);
    }
  }
  __device__ __forceinline__ bool operator()() {
    if (done) return stop;
    done = true;
    bool s = *static_cast<volatile uint32_t*>(&amk_state.stop) != 0;
    const uint32_t lane = threadIdx.x % kAmkWarpSize;
    if (threadIdx.x / kAmkWarpSize == 0 && lane < n_waits) {
      uint32_t counter, value;
      amk_ldg_nc2(&ins->waits[lane], counter, value);
      uint32_t need = value * pass;
      if constexpr (kAmkCfg.stepped) need = amk_wait_need(counter, value, pass);
      // (the relaxed read that saw the value, then the acquire fence: amk_wait's fast path)
      if (early >= need)
        amk_fence_acquire();
      else if (!amk_wait(*prog, *ins, counter, need, queue_pos))
        s = true;
    }
    stop = amk_sync_or(s) != 0;
    if constexpr (kAmkCfg.next_ins_l1) amk_prefetch_next_ins(*prog, next_ins);
    // The step's trace start is when its wait ends (the VM reads it back after the op: the
    // object may be a copy in a call, so no pointer into the VM's registers).
    if constexpr (kAmkCfg.trace) {
      if (threadIdx.x == 0) amk_trace.wait_end = amk_globaltimer();
    }
    return stop;
  }
};
// (amk_no_wait, for ops whose waits the VM already ran, is in amk_device.cuh.)

// early_stop: at the block's first step of `pass`, whether it ends there: feed_token met its eos
// two or more passes before (the stop word, after the counters). The verifier proves that every
// queue, by the end of pass q - 1, has waited on feed_token's pass q - 2, so every block sees a
// word set then and all of them end before the same pass. Thread 0 reads the word; every thread
// of the op threads' barrier gets the answer.
__device__ __forceinline__ bool amk_stop_word_ends(const amk_device_program_t& prog,
                                                   uint32_t pass) {
  bool end = false;
  if (threadIdx.x == 0) {
    const uint32_t w = amk_ld_relaxed(prog.counters + prog.n_counters);
    end = w != 0 && w + 2 <= pass;
  }
  return amk_sync_or(end) != 0;
}
