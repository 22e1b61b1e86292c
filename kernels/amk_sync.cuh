// Dependency waits and signals on the monotonic counters, and the watchdog.
//
// Wait: one thread per wait polls counters[c] with relaxed gpu-scope loads (no L1 invalidation
// per poll), first back to back, then with a __nanosleep backoff that doubles up to a cap; once
// satisfied, one acquire fence. A __syncthreads after the waits makes the acquire cover the
// whole block. Every poll also reads %globaltimer and the abort flag, so nothing spins forever.
// Signal: after the op's stores and a __syncthreads, one thread per signal does a gpu-scope
// release add (cumulative over the block's stores that the barrier ordered before it).
#ifndef AMK_SYNC_CUH
#define AMK_SYNC_CUH

#include "amk_device.cuh"

// Polls without sleeping first: a dependent hop is a few hundred ns, and sleeping through the
// moment the counter flips costs more than the polling does.
#ifndef AMK_SPIN_FAST_POLLS
#define AMK_SPIN_FAST_POLLS 64
#endif
#ifndef AMK_SPIN_MIN_SLEEP_NS
#define AMK_SPIN_MIN_SLEEP_NS 32
#endif
#ifndef AMK_SPIN_MAX_SLEEP_NS
#define AMK_SPIN_MAX_SLEEP_NS 1024
#endif

// Returns true once counters[w.counter] >= need; false when the launch is stopping (abort flag
// raised elsewhere, or this thread hit the deadline and raised it).
__device__ __noinline__ bool amk_wait_slow(const amk_device_program_t& prog,
                                           const amk_instruction_t& ins, uint32_t counter,
                                           uint32_t need) {
  const uint32_t* c = prog.counters + counter;
  const uint64_t wait_start = amk_globaltimer();
  uint32_t sleep_ns = AMK_SPIN_MIN_SLEEP_NS;
  for (uint32_t polls = 0;; ++polls) {
    const uint32_t have = amk_ld_relaxed(c);
    const uint32_t aborted = amk_ld_relaxed(prog.abort_flag);
    if (have >= need) return true;
    if (aborted != 0) return false;
    const uint64_t now = amk_globaltimer();
    if (prog.timeout_ns != 0 && now - amk_state.block_start > prog.timeout_ns) {
      amk_raise(prog, ins, AMK_STATUS_TIMEOUT, counter, have, need, now - wait_start, 0);
      return false;
    }
    if (polls >= AMK_SPIN_FAST_POLLS) {
      __nanosleep(sleep_ns);
      sleep_ns = min(sleep_ns * 2, static_cast<uint32_t>(AMK_SPIN_MAX_SLEEP_NS));
    }
  }
}

__device__ __forceinline__ bool amk_wait(const amk_device_program_t& prog,
                                         const amk_instruction_t& ins, uint32_t counter,
                                         uint32_t need) {
  // Fast path: already satisfied (the common case for a well-scheduled queue).
  if (amk_ld_relaxed(prog.counters + counter) < need && !amk_wait_slow(prog, ins, counter, need))
    return false;
  amk_fence_acquire();
  return true;
}

#endif  // AMK_SYNC_CUH
