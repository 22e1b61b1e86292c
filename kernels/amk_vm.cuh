// The persistent VM: one block per queue, each walking its instructions (`iterations` times),
// waiting on and signalling the monotonic counters, dispatching to the ops compiled in.
//
// Instruction fetch never sits on the critical path. Warp 0 runs a software pipeline with
// cp.async (global -> shared, no registers held while the op runs), D = AMK_FETCH_DEPTH steps
// per stage:
//   step p issues:  queue item p+3D -> ring;  instruction p+2D -> slot;  buffer-table entries of
//                   instruction p+D's operands -> its slot
// and before the barrier that ends step p waits only for the group issued D-1 steps earlier
// (cp.async.wait_group D-1). Every fetch therefore has D steps to land, so a memory round trip
// (~0.5-1 us from HBM) overlaps D instructions instead of stalling each one.
//
// Per instruction: [waits: lanes of warp 0 spin, one per wait; barrier] op; barrier; [signals:
// lanes of warp 0, one per signal]. An instruction without waits costs one barrier.
#ifndef AMK_VM_CUH
#define AMK_VM_CUH

#include "amk_device.cuh"
#include "amk_sync.cuh"
#include "amk_ops_elementwise.cuh"
#include "amk_ops_norm.cuh"
#include "amk_ops_gemv.cuh"
#include "amk_ops_misc.cuh"

#ifndef AMK_FETCH_DEPTH
#define AMK_FETCH_DEPTH 8
#endif
constexpr uint32_t kAmkDepth = AMK_FETCH_DEPTH;
constexpr uint32_t kAmkSlots = 2 * kAmkDepth + 1;  // instructions p .. p+2D resident
constexpr uint32_t kAmkItemRing = 4 * kAmkDepth;   // >= 3D: the prologue holds items [0, 3D)
constexpr uint32_t kAmkInsVectors = AMK_INSTRUCTION_BYTES / kAmkVectorBytes;  // 16
constexpr uint32_t kAmkBufVectors = sizeof(amk_buffer_t) / kAmkVectorBytes;   // 2 per operand
constexpr uint32_t kAmkBufThread0 = kAmkInsVectors;                            // lanes 16..27
constexpr uint32_t kAmkItemThread = kAmkBufThread0 + AMK_MAX_OPERANDS * kAmkBufVectors;  // 28
static_assert(kAmkItemThread + 1 < kAmkWarpSize, "prefetch roles must fit in warp 0");
static_assert((kAmkItemRing & (kAmkItemRing - 1)) == 0, "AMK_FETCH_DEPTH must be a power of 2");
static_assert(kAmkDepth >= 1 && kAmkDepth <= 8, "cp.async.wait_group takes 0..7");
static_assert(sizeof(amk_slot) % kAmkVectorBytes == 0, "slot must be whole 16-byte vectors");
static_assert(AMK_MAX_WAITS <= kAmkWarpSize && AMK_MAX_SIGNALS <= kAmkWarpSize, "wait lanes");

__shared__ amk_slot amk_slots[kAmkSlots];
__shared__ uint32_t amk_items[kAmkItemRing];
__shared__ __align__(16) unsigned char amk_scratch[AMK_SCRATCH_BYTES];

__device__ __forceinline__ void amk_cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(amk_smem_addr(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void amk_cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(amk_smem_addr(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void amk_cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Everything but the groups of the last D-1 steps has landed.
__device__ __forceinline__ void amk_cp_async_wait_lagged() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kAmkDepth - 1) : "memory");
}
__device__ __forceinline__ void amk_cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Where a block is in its walk: step p covers queue position p % len of pass p / len + 1.
struct amk_walk {
  uint32_t begin;  // first queue item of this block
  uint32_t len;    // queue length
  uint32_t total;  // len * iterations
};

__device__ __forceinline__ uint32_t amk_slot_index(uint32_t p) { return p % kAmkSlots; }

// Buffer-table entry half `v` (0 .. 11) of `slot`'s operands.
__device__ __forceinline__ void amk_fetch_buffer(const amk_device_program_t& prog, amk_slot& slot,
                                                 uint32_t v, bool async) {
  const uint32_t k = v / kAmkBufVectors;
  const uint32_t half = v % kAmkBufVectors;
  const amk_operand_t& o = slot.ins.operands[k];
  if (k >= slot.ins.n_operands || o.buffer == AMK_NO_BUFFER || o.buffer >= prog.n_buffers) return;
  const unsigned char* src =
      reinterpret_cast<const unsigned char*>(prog.buffers + o.buffer) + half * kAmkVectorBytes;
  unsigned char* dst = reinterpret_cast<unsigned char*>(&slot.bufs[k]) + half * kAmkVectorBytes;
  if (async)
    amk_cp_async16(dst, src);
  else
    *reinterpret_cast<amk_vec16*>(dst) = amk_ld16(src);
}

// Queue position and pass of step p.
__device__ __forceinline__ void amk_set_slot_meta(amk_slot& slot, const amk_walk& walk, uint32_t p) {
  slot.queue_pos = p % walk.len;
  slot.pass = p / walk.len + 1;
}

// Warp 0, before the waits of step p: start the fetches described at the top of this file.
__device__ __forceinline__ void amk_prefetch(const amk_device_program_t& prog, const amk_walk& walk,
                                             uint32_t p, uint32_t lane) {
  const uint32_t pi = p + 3 * kAmkDepth, pn = p + 2 * kAmkDepth, pb = p + kAmkDepth;
  if (lane == kAmkItemThread && pi < walk.total)
    amk_cp_async4(&amk_items[pi % kAmkItemRing], prog.queue_items + walk.begin + pi % walk.len);
  if (lane < kAmkInsVectors && pn < walk.total) {
    const uint32_t item = amk_items[pn % kAmkItemRing];
    amk_cp_async16(reinterpret_cast<unsigned char*>(&amk_slots[amk_slot_index(pn)]) +
                       lane * kAmkVectorBytes,
                   reinterpret_cast<const unsigned char*>(prog.instructions + item) +
                       lane * kAmkVectorBytes);
  }
  if (pb < walk.total) {
    amk_slot& slot = amk_slots[amk_slot_index(pb)];
    if (lane >= kAmkBufThread0 && lane < kAmkItemThread)
      amk_fetch_buffer(prog, slot, lane - kAmkBufThread0, true);
    if (lane == kAmkItemThread + 1) amk_set_slot_meta(slot, walk, pb);
  }
  amk_cp_async_commit();
}

// Runs the op of `ins`; false if the op is not compiled in (reported, block stops).
__device__ __forceinline__ void amk_dispatch(const amk_device_program_t& prog,
                                             const amk_instruction_t& ins
#if AMK_TMA_GEMV
                                             ,
                                             const amk_tma_table_t* tma
#endif
) {
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
    case 9: amk_op_gemv(prog, ins, amk_scratch, tma); break;
#else
    case 9: amk_op_gemv(prog, ins, amk_scratch); break;
#endif
#endif
#if AMK_USE_OP_ARGMAX
    case 10: amk_op_argmax(prog, ins, amk_scratch); break;
#endif
#if AMK_USE_OP_EMBEDDING
    case 11: amk_op_embedding(prog, ins, amk_scratch); break;
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
  const bool warp0 = threadIdx.x < kAmkWarpSize;
  amk_walk walk;
  walk.begin = prog.queue_offsets[blockIdx.x];
  walk.len = prog.queue_offsets[blockIdx.x + 1] - walk.begin;
  walk.total = walk.len * (prog.iterations > 0 ? prog.iterations : 1u);
  if (walk.len == 0) return;

  // Prologue (whole block, plain loads): items [0, 3D), instructions [0, 2D), operands of
  // instructions [0, D) -- what steps 0 .. D-1 would otherwise have fetched.
  if (threadIdx.x == 0) {
    amk_state.stop = 0;
    amk_state.block_start = amk_globaltimer();
  }
  for (uint32_t i = threadIdx.x; i < 3 * kAmkDepth && i < walk.total; i += AMK_BLOCK_THREADS)
    amk_items[i % kAmkItemRing] = prog.queue_items[walk.begin + i % walk.len];
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < 2 * kAmkDepth * kAmkInsVectors; i += AMK_BLOCK_THREADS) {
    const uint32_t q = i / kAmkInsVectors, v = i % kAmkInsVectors;
    if (q >= walk.total) break;
    reinterpret_cast<amk_vec16*>(&amk_slots[amk_slot_index(q)])[v] =
        amk_ld16(reinterpret_cast<const unsigned char*>(prog.instructions +
                                                        amk_items[q % kAmkItemRing]) +
                 v * kAmkVectorBytes);
  }
  __syncthreads();
  constexpr uint32_t kBufHalves = AMK_MAX_OPERANDS * kAmkBufVectors;
  for (uint32_t i = threadIdx.x; i < kAmkDepth * kBufHalves; i += AMK_BLOCK_THREADS) {
    const uint32_t q = i / kBufHalves;
    if (q >= walk.total) break;
    amk_fetch_buffer(prog, amk_slots[amk_slot_index(q)], i % kBufHalves, false);
    if (i % kBufHalves == 0) amk_set_slot_meta(amk_slots[amk_slot_index(q)], walk, q);
  }
  __syncthreads();

  for (uint32_t p = 0; p < walk.total; ++p) {
    const amk_slot& slot = amk_slots[amk_slot_index(p)];
    const amk_instruction_t& ins = slot.ins;
    if (warp0) {
      __syncwarp();  // every lane is done with the slot this step refills
      amk_prefetch(prog, walk, p, lane);
    }
    const uint32_t n_waits = ins.n_waits;
    if (n_waits != 0) {
      if (threadIdx.x < n_waits) {
        const amk_wait_t& w = ins.waits[threadIdx.x];
        if (!amk_wait(prog, ins, w.counter, w.value * slot.pass)) amk_state.stop = 1;
      }
      __syncthreads();
      if (amk_state.stop) {
        if (warp0) amk_cp_async_wait_all();
        return;
      }
    }
#ifdef AMK_TRACE
    const uint64_t t_start = threadIdx.x == 0 ? amk_globaltimer() : 0;
#endif
#if AMK_TMA_GEMV
    amk_dispatch(prog, ins, &tma);
#else
    amk_dispatch(prog, ins);
#endif
    if (warp0) amk_cp_async_wait_lagged();
    __syncthreads();
    if (amk_state.stop) {
      if (warp0) amk_cp_async_wait_all();
      return;
    }
    if (warp0) {
#ifdef AMK_TRACE
      if (lane == 0 && prog.trace != nullptr) {
        prog.trace[2ull * ins.index] = t_start;
        prog.trace[2ull * ins.index + 1] = amk_globaltimer();
      }
#endif
      if (lane < ins.n_signals)
        amk_red_release(prog.counters + ins.signals[lane].counter, ins.signals[lane].add);
    }
  }
}

#endif  // AMK_VM_CUH
