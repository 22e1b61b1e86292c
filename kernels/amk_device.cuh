// Device-side basics shared by the VM and every op family: the tensor-map type, per-block state,
// operand views, block reductions and the abort/diagnostic path (element conversions and vector
// loads: amk_elements.cuh).
// Self-contained on purpose (no toolkit headers): NVRTC compiles it fast and without -I.
// The generated source defines kAmkCfg and kAmkOps (amk_config.h) before including it.
#pragma once

#include "amk_abi.h"
#include "amk_config.h"
#include "amk_elements.cuh"

static_assert(amk_vm_config_error(kAmkCfg) == nullptr,
              "kAmkCfg: a field is out of range (amk_vm_config_error names it)");

constexpr unsigned kAmkWarpSize = 32;
constexpr unsigned kAmkBlockThreads = kAmkCfg.block_threads;
constexpr unsigned kAmkWarps = kAmkBlockThreads / kAmkWarpSize;
constexpr unsigned kAmkFullMask = 0xFFFFFFFFu;
// Static shared scratch handed to every op (block reductions, the RoPE table, custom ops).
constexpr unsigned kAmkScratchBytes = 1024;

// Byte-for-byte the driver's CUtensorMap (128 bytes, 64-byte aligned), under our own name so a
// custom op may include <cuda.h> without a clash. The host copies encoded maps in as they are.
struct alignas(64) amk_tensor_map {
  unsigned long long opaque[16];
};
typedef struct alignas(64) amk_tma_table {
  amk_tensor_map maps[kAmkCfg.tma_maps > 0 ? kAmkCfg.tma_maps : 1];
} amk_tma_table_t;

// A TMA spec that gemv can stream: w rows of dim_k elements, the tensor's base `offset` elements
// into its buffer; boxes of box_k x box_rows elements. Filled by amk_tma_gemv_lookup, which the
// generated source defines.
struct amk_tma_gemv_geom {
  uint32_t slot;  // index into amk_tma_table_t::maps
  uint32_t box_k;
  uint32_t box_rows;
  uint32_t elem_bytes;
  uint64_t dim_k;
  uint64_t dim_rows;
  uint64_t offset;
};

// What the block knows about itself; lives in shared memory so ops can stop the block.
struct amk_block_state {
  uint32_t stop;         // nonzero: return after the current instruction
  uint32_t rope_valid;   // nonzero: the attention op's RoPE table is filled (its tag says for what)
  uint64_t block_start;  // %globaltimer at entry (watchdog origin)
  const amk_buffer_t* buffers;    // prog.buffers, for amk_operand
  uint32_t queue_pos[kAmkWarps];  // per warp: queue position of the data op it runs (diag)
};
__shared__ amk_block_state amk_state;
// stepped: per warp, the pass (from 1) of the data op it runs, which the VM sets before the op (a
// warp's value, like queue_pos: warps drift apart across plain nops, never across a data op).
__shared__ uint32_t amk_pass[kAmkCfg.stepped ? kAmkWarps : 1];
// The running op's pass: 1 outside stepped programs.
__device__ __forceinline__ uint32_t amk_op_pass() {
  if constexpr (kAmkCfg.stepped)
    return amk_pass[threadIdx.x / kAmkWarpSize];
  else
    return 1;
}
// With the trace: the running instruction's two op marks in the trace (or null), and when the
// waits an op ran itself ended (amk_step_wait). Read and written by thread 0 only.
struct amk_trace_state {
  uint64_t* marks;
  uint64_t wait_end;
};
__shared__ amk_trace_state amk_trace;

// The waits of a step whose op does not run them itself (the VM ran them first; amk_sync.cuh's
// amk_step_wait is the other kind).
struct amk_no_wait {
  static constexpr bool stop = false;  // (amk_step_wait's fields, for the VM's code over both)
  uint32_t next_ins = 0;
  __device__ static constexpr bool active() { return false; }
  __device__ __forceinline__ constexpr void prime() const {}
  __device__ __forceinline__ constexpr bool operator()() const { return false; }
};

// Positions in amk_diag_t::detail for failures that are not about a data value.
constexpr uint32_t kAmkDetailUnknownOp = 0xFFFF0000u;  // | op: op not compiled in
constexpr uint32_t kAmkCounterNone = 0xFFFFFFFFu;      // diag.counter when no counter applies

// ---- the op threads' barrier ----
// Ops synchronize the threads that run them through these, never through __syncthreads: in this
// VM they are the whole block.
__device__ __forceinline__ void amk_sync() { __syncthreads(); }
__device__ __forceinline__ int amk_sync_or(int p) { return __syncthreads_or(p); }
__device__ __forceinline__ int amk_sync_and(int p) { return __syncthreads_and(p); }

// ---- time and flags ----
__device__ __forceinline__ uint64_t amk_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Thread 0 stamps mark k (0 or 1) of the running instruction in the trace (words 2 + k of its
// kAmkTraceWords) where the op reaches a point worth timing (its loads issued, its first data
// arrived). Nothing without the trace.
constexpr uint32_t kAmkTraceWords = 4;  // start, end, mark 0, mark 1 (kTraceWordsPerInstruction)
__device__ __forceinline__ void amk_trace_mark(uint32_t k) {
  if constexpr (kAmkCfg.trace) {
    if (threadIdx.x == 0 && amk_trace.marks != nullptr) amk_trace.marks[k] = amk_globaltimer();
  }
}
__device__ __forceinline__ uint32_t amk_ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Acquire only: on sm_90 this is an L1 invalidation (CCTL), where fence.acq_rel.gpu also
// drains the memory pipeline (MEMBAR.GPU) -- the hop's dominant cost besides the L2 trips.
__device__ __forceinline__ void amk_fence_acquire() {
  asm volatile("fence.acquire.gpu;" ::: "memory");
}
__device__ __forceinline__ void amk_red_release(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Read-only (non-coherent) loads: instructions, queue items and the buffer table never change
// during a launch.
__device__ __forceinline__ uint32_t amk_ldg_nc(const void* p) {
  uint32_t v;
  asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void amk_ldg_nc2(const void* p, uint32_t& a, uint32_t& b) {
  asm("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
}
__device__ __forceinline__ void amk_prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}
__device__ __forceinline__ uint32_t amk_smem_addr(const void* p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ uint32_t amk_dynamic_smem_size() {
  uint32_t v;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
}

// ---- dynamic shared memory and mbarriers (the TMA gemv, the attention tile) ----
extern __shared__ __align__(128) unsigned char amk_dynamic_smem[];

__device__ __forceinline__ void amk_mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the mbarriers this thread just initialized visible to the copy engine and the block's
// other threads (before their first use, after a barrier).
__device__ __forceinline__ void amk_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void amk_mbar_inval(uint32_t bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void amk_mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool amk_mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, "
               "1, 0, p; }"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
// Non-blocking: try_wait may suspend the thread for a while when the phase is not complete.
__device__ __forceinline__ bool amk_mbar_test_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 "
               "%0, 1, 0, p; }"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
__device__ __forceinline__ void amk_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// One bulk copy global -> shared of `bytes` (a multiple of 16, both ends 16-byte aligned) that
// completes `bytes` of the transaction of the mbarrier at `bar`.
__device__ __forceinline__ void amk_bulk_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                             uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// ---- operands ----
// The instruction an op receives is the one in global memory (read through L1); the VM does not
// stage it. Operands resolve through the buffer table (global, read-only, L1-resident).

// Stops the launch: the first block to raise the abort flag records what it saw in host-mapped
// memory (fields first, status last, each made visible to the host); this block stops either way.
// Called by one thread; `queue_pos` is the running instruction's position in this block's queue.
__device__ __noinline__ void amk_raise_at(const amk_device_program_t& prog,
                                          const amk_instruction_t& ins, uint32_t queue_pos,
                                          uint32_t status, uint32_t counter, uint32_t have,
                                          uint32_t need, uint64_t elapsed_ns, uint32_t detail) {
  *static_cast<volatile uint32_t*>(&amk_state.stop) = 1;
  if (atomicCAS(prog.abort_flag, 0u, 1u) != 0u) return;
  if (prog.diag == nullptr) return;
  volatile amk_diag_t* d = prog.diag;
  d->block = blockIdx.x;
  d->queue_pos = queue_pos;
  d->instruction = ins.index;
  d->op = ins.op;
  d->counter = counter;
  d->have = have;
  d->need = need;
  d->elapsed_ns = elapsed_ns;
  d->detail = detail;
  __threadfence_system();
  d->status = status;
  __threadfence_system();
}

// From inside an op (the VM recorded the op's queue position for the calling warp).
__device__ __forceinline__ void amk_raise(const amk_device_program_t& prog,
                                          const amk_instruction_t& ins, uint32_t status,
                                          uint32_t counter, uint32_t have, uint32_t need,
                                          uint64_t elapsed_ns, uint32_t detail) {
  amk_raise_at(prog, ins, amk_state.queue_pos[threadIdx.x / kAmkWarpSize], status, counter, have,
               need, elapsed_ns, detail);
}

// An op found invalid data: one thread calls this; the block stops after the instruction.
__device__ __forceinline__ void amk_fail_operand(const amk_device_program_t& prog,
                                                 const amk_instruction_t& ins, uint32_t detail) {
  amk_raise(prog, ins, AMK_STATUS_BAD_OPERAND, kAmkCounterNone, 0, 0, 0, detail);
}

// Waits for an mbarrier phase (a TMA tile) with the watchdog: false once the
// launch deadline passed (this thread raised) or another thread of the block already stopped it.
__device__ __forceinline__ bool amk_mbar_wait(const amk_device_program_t& prog,
                                              const amk_instruction_t& ins, uint32_t bar,
                                              uint32_t parity, uint32_t tile) {
  if (amk_mbar_try_wait(bar, parity)) return true;
  const uint64_t wait_start = amk_globaltimer();
  while (!amk_mbar_try_wait(bar, parity)) {
    if (*static_cast<volatile uint32_t*>(&amk_state.stop)) return false;
    const uint64_t now = amk_globaltimer();
    if (prog.timeout_ns != 0 && now - amk_state.block_start > prog.timeout_ns) {
      amk_raise(prog, ins, AMK_STATUS_TIMEOUT, kAmkCounterNone, 0, 0, now - wait_start, tile);
      return false;
    }
  }
  return true;
}

struct amk_view {
  unsigned char* ptr;  // element 0 of the operand
  uint32_t n;          // extent in elements
  uint32_t dtype;
  __device__ __forceinline__ bool present() const { return ptr != nullptr; }
};

// smem_buffers: each block copies the buffer table's (address, dtype) pairs into shared memory
// at its start, so an op's operand decode reads shared memory instead of a global line (a wait's
// acquire fence invalidates L1: after a wait, the global read is an L2 round trip under load, on
// the critical path of every step). Entry: address | dtype << 56 (the executor refuses buffers
// placed above 2^56; GPU virtual addresses are 49 bits).
__shared__ uint64_t amk_buffer_tags[kAmkCfg.smem_buffers ? kAmkCfg.buffers : 1];
// The block's view of the buffer table, set up by every thread at the block's start (a barrier
// must follow before any op runs).
__device__ __forceinline__ void amk_buffers_init(const amk_device_program_t& prog) {
  if (threadIdx.x == 0) amk_state.buffers = prog.buffers;
  if constexpr (kAmkCfg.smem_buffers) {
    for (uint32_t i = threadIdx.x; i < kAmkCfg.buffers && i < prog.n_buffers;
         i += kAmkBlockThreads) {
      uint32_t lo, hi;
      amk_ldg_nc2(&prog.buffers[i].address, lo, hi);
      const uint32_t dtype = amk_ldg_nc(&prog.buffers[i].dtype);
      amk_buffer_tags[i] = (static_cast<uint64_t>(hi & 0xFFFFFFu) << 32 | lo) |
                           static_cast<uint64_t>(dtype & 0xFFu) << 56;
    }
  }
}

// Operand slot k of an instruction; slot 6 (the position operand) exists in stepped programs only.
__device__ __forceinline__ const amk_operand_t& amk_operand_slot(const amk_instruction_t& ins,
                                                                 uint32_t k) {
  if constexpr (kAmkCfg.stepped)
    return amk_ins_operand(ins, k);
  else
    return ins.operands[k];
}

// Operand k of the running instruction.
__device__ __forceinline__ amk_view amk_operand(const amk_instruction_t& ins, uint32_t k) {
  const amk_operand_t& o = amk_operand_slot(ins, k);
  amk_view v;
  const uint32_t buffer = o.buffer;
  if (k >= ins.n_operands || buffer == AMK_NO_BUFFER) {
    v.ptr = nullptr;
    v.n = 0;
    v.dtype = AMK_DTYPE_F32;
    return v;
  }
  if constexpr (kAmkCfg.smem_buffers) {
    // (The loader checked every operand's buffer against the program's table.)
    const uint64_t tag = amk_buffer_tags[buffer];
    v.dtype = static_cast<uint32_t>(tag >> 56);
    v.n = o.extent;
    v.ptr = reinterpret_cast<unsigned char*>(tag & ((1ull << 56) - 1)) +
            o.offset * amk_dtype_size(v.dtype);
    return v;
  } else {
    const amk_buffer_t* b = amk_state.buffers + buffer;
    uint32_t lo, hi;
    amk_ldg_nc2(&b->address, lo, hi);
    v.dtype = amk_ldg_nc(&b->dtype);
    v.n = o.extent;
    v.ptr = reinterpret_cast<unsigned char*>((static_cast<uint64_t>(hi) << 32) | lo) +
            o.offset * amk_dtype_size(v.dtype);
    return v;
  }
}

// Element i as float / stored from float (any dtype; integers convert like the host).
__device__ __forceinline__ float amk_load_f32(const amk_view& v, uint64_t i) {
  switch (v.dtype) {
    case AMK_DTYPE_F32: return reinterpret_cast<const float*>(v.ptr)[i];
    case AMK_DTYPE_F16: return amk_f16_to_f32(reinterpret_cast<const uint16_t*>(v.ptr)[i]);
    case AMK_DTYPE_BF16: return amk_bf16_to_f32(reinterpret_cast<const uint16_t*>(v.ptr)[i]);
    case AMK_DTYPE_I32: return static_cast<float>(reinterpret_cast<const int32_t*>(v.ptr)[i]);
    case AMK_DTYPE_U32: return static_cast<float>(reinterpret_cast<const uint32_t*>(v.ptr)[i]);
    case AMK_DTYPE_I64: return static_cast<float>(reinterpret_cast<const int64_t*>(v.ptr)[i]);
    default: return static_cast<float>(v.ptr[i]);
  }
}
__device__ __forceinline__ void amk_store_f32(const amk_view& v, uint64_t i, float x) {
  switch (v.dtype) {
    case AMK_DTYPE_F32: reinterpret_cast<float*>(v.ptr)[i] = x; break;
    case AMK_DTYPE_F16: reinterpret_cast<uint16_t*>(v.ptr)[i] = amk_f32_to_f16(x); break;
    case AMK_DTYPE_BF16: reinterpret_cast<uint16_t*>(v.ptr)[i] = amk_f32_to_bf16(x); break;
    case AMK_DTYPE_I32:
      reinterpret_cast<int32_t*>(v.ptr)[i] =
          static_cast<int32_t>(amk_f2ll_sat(x, -2147483648LL, 2147483647LL));
      break;
    case AMK_DTYPE_U32:
      reinterpret_cast<uint32_t*>(v.ptr)[i] =
          static_cast<uint32_t>(amk_f2ll_sat(x, 0LL, 4294967295LL));
      break;
    case AMK_DTYPE_I64:
      reinterpret_cast<int64_t*>(v.ptr)[i] =
          amk_f2ll_sat(x, -9223372036854775807LL - 1, 9223372036854775807LL);
      break;
    default: v.ptr[i] = static_cast<uint8_t>(amk_f2ll_sat(x, 0LL, 255LL)); break;
  }
}
// Integer element i (index types), as a signed 64-bit value.
__device__ __forceinline__ long long amk_load_index(const amk_view& v, uint64_t i) {
  switch (v.dtype) {
    case AMK_DTYPE_I32: return reinterpret_cast<const int32_t*>(v.ptr)[i];
    case AMK_DTYPE_U32: return reinterpret_cast<const uint32_t*>(v.ptr)[i];
    case AMK_DTYPE_I64: return reinterpret_cast<const int64_t*>(v.ptr)[i];
    case AMK_DTYPE_U8: return v.ptr[i];
    default: return static_cast<long long>(amk_load_f32(v, i));
  }
}
// An index stored as the host stores it: saturated to the dtype's range.
__device__ __forceinline__ void amk_store_index(const amk_view& v, uint64_t i, long long x) {
  switch (v.dtype) {
    case AMK_DTYPE_I32:
      reinterpret_cast<int32_t*>(v.ptr)[i] =
          static_cast<int32_t>(min(max(x, -2147483648LL), 2147483647LL));
      break;
    case AMK_DTYPE_U32:
      reinterpret_cast<uint32_t*>(v.ptr)[i] = static_cast<uint32_t>(min(max(x, 0LL), 4294967295LL));
      break;
    case AMK_DTYPE_I64: reinterpret_cast<int64_t*>(v.ptr)[i] = x; break;
    default: amk_store_f32(v, i, static_cast<float>(x)); break;
  }
}

// The position of a stepped op (rope, kv_append, attention_decode): with the position operand in
// `slot`, P = position[0] + pass - 1; without it, the `param` word. Not ok where the operand is
// empty or position[0] is negative (the op stops the launch, detail: value's low word).
struct amk_position {
  uint64_t value;
  bool ok;
};
__device__ __forceinline__ amk_position amk_op_position(const amk_instruction_t& ins, uint32_t slot,
                                                        uint32_t param) {
  const amk_view pos = amk_operand(ins, slot);
  if (!pos.present()) return {ins.params[param], true};
  const long long p0 = pos.n != 0 ? amk_load_index(pos, 0) : -1;
  if (p0 < 0) return {static_cast<uint64_t>(p0), false};
  return {static_cast<uint64_t>(p0) + amk_op_pass() - 1, true};
}

constexpr uint32_t kAmkPrefetchChunkBytes = 32768;  // bytes per bulk prefetch request
// [p, p + bytes) into L2, whole 16-byte units inside the range only (the range is in bounds).
__device__ __forceinline__ void amk_prefetch_l2(const unsigned char* p, uint64_t bytes) {
#if __CUDA_ARCH__ >= 900
  uint64_t a = (reinterpret_cast<uint64_t>(p) + 15) & ~15ull;
  const uint64_t end = (reinterpret_cast<uint64_t>(p) + bytes) & ~15ull;
  while (a < end) {
    const uint32_t n =
        static_cast<uint32_t>(min(end - a, static_cast<uint64_t>(kAmkPrefetchChunkBytes)));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(n) : "memory");
    a += n;
  }
#endif
}

// A per-thread count tuned at 256 threads, scaled to the block so a block keeps the same total
// (at least 1): how many 16-byte loads the single-block ops keep in flight per thread.
__host__ __device__ constexpr uint32_t amk_per_thread_at_256(uint32_t n) {
  return n * 256 / kAmkBlockThreads > 0 ? n * 256 / kAmkBlockThreads : 1;
}

// ---- block reductions (warp shuffles, then one value per warp through shared memory) ----
__device__ __forceinline__ float amk_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAmkFullMask, v, o);
  return v;
}
__device__ __forceinline__ float amk_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kAmkFullMask, v, o));
  return v;
}
// Every thread gets the block's total. `scratch` holds kAmkWarps + 1 floats; the trailing
// barrier lets the caller reuse it at once.
template <bool kMax>
__device__ __forceinline__ float amk_block_reduce(float v, unsigned char* scratch) {
  float* s = reinterpret_cast<float*>(scratch);
  const unsigned warp = threadIdx.x / kAmkWarpSize;
  const unsigned lane = threadIdx.x % kAmkWarpSize;
  v = kMax ? amk_warp_max(v) : amk_warp_sum(v);
  if (lane == 0) s[warp] = v;
  amk_sync();
  if (warp == 0) {
    float w = lane < kAmkWarps ? s[lane] : (kMax ? -__int_as_float(0x7f800000) : 0.0f);
    w = kMax ? amk_warp_max(w) : amk_warp_sum(w);
    if (lane == 0) s[kAmkWarps] = w;
  }
  amk_sync();
  const float r = s[kAmkWarps];
  amk_sync();
  return r;
}
__device__ __forceinline__ float amk_block_sum(float v, unsigned char* scratch) {
  return amk_block_reduce<false>(v, scratch);
}
__device__ __forceinline__ float amk_block_max(float v, unsigned char* scratch) {
  return amk_block_reduce<true>(v, scratch);
}
