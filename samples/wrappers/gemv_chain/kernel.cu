// gemv_chain: h = relu(s1 * W1 x), y = s2 * W2 h, as a dataflow compiler emits it for amk's
// wrapper ABI (schemas/wrapper.md). Each block walks its queue of tile tasks. A task computes
// GC_TM rows of one layer, streaming its weight rows through a ring of shared-memory slots in
// chunks of GC_KC columns: one 1-D bulk copy per row, all completing on the slot's mbarrier.
// Layer-2 chunks wait for the layer-1 tiles that wrote their part of h through counters in
// `flags` (release/acquire at gpu scope); every wait polls the abort word.
#include "amk_wrapper.h"

#if !defined(GC_TM) || !defined(GC_KC) || !defined(GC_THREADS)
#error "GC_TM, GC_KC and GC_THREADS are defined by the wrapper program"
#endif

constexpr int kWarps = GC_THREADS / 32;
constexpr int kRowsPerWarp = GC_TM / kWarps;
constexpr uint32_t kRowBytes = GC_KC * 2;  // one weight row of a chunk, bf16
constexpr int kMaxSlots = 8;
static_assert(GC_THREADS % 32 == 0 && GC_TM % kWarps == 0, "whole rows per warp");
static_assert(GC_KC == 32 * 8, "each lane reads 8 bf16 (16 bytes) of a row");
static_assert(GC_TM <= 32, "one lane of warp 0 issues each row's copy");

constexpr uint32_t kOpGemvTile = 1;
constexpr uint32_t kSlotBulkStage = 1;

// Package records (make.py packs the same layouts).
struct gc_task {  // instructions: 16 bytes
  uint32_t op, layer, tile, coord;
};
struct gc_coord {  // task_coords: 32 bytes
  int32_t row0, rows, k0, k_chunks;
  int32_t wait_first;   // flag word of chunk 0's counter; 0: no dependency
  int32_t wait_target;  // producer tiles per chunk
  int32_t signal_word;  // counter bumped once the tile's rows are written; 0: none
  int32_t pad;
};
struct gc_slot {  // slots: 32 bytes
  uint32_t kind, smem_offset, bytes, mbar_offset, arrive_count, pad[3];
};
struct gc_layer {  // part of args: 32 bytes
  uint32_t w_arg, in_arg;
  int32_t out_arg;  // tensor argument, or -1: global staging
  uint32_t relu;
  float scale;
  uint32_t k, m, pad;
};
struct gc_args {  // args: 80 bytes
  uint32_t exit_word, counter_first, counter_count, tensor_args;
  gc_layer layer[2];
};

// ---- PTX helpers ----

static __device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
static __device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
static __device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes,
                                                 uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
static __device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float bf16_hi(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}

// True when tensor argument `a` is a contiguous rank-`rank` tensor of `dtype` with these sizes.
static __device__ bool arg_is(const amk_wrapper_tensor_arg_t& a, uint32_t dtype, uint32_t rank,
                              uint64_t d0, uint64_t d1) {
  return a.data != 0 && (a.data & 15) == 0 && a.dtype == dtype && a.rank == rank &&
         a.shape[0] == d0 && (rank < 2 || (a.shape[1] == d1 && a.strides[0] == (int64_t)d1));
}

// Every record this block reads, checked before any barrier exists: a bad package leaves the
// outputs at their poison instead of reading out of bounds. Uniform across the block.
static __device__ bool queue_ok(const gc_task* tasks, int n, const gc_coord* coords,
                                const gc_args& args, const amk_wrapper_tensor_arg_t* targs) {
  for (int i = 0; i < n; ++i) {
    const gc_task t = tasks[i];
    if (t.op != kOpGemvTile || t.layer > 1) return false;
    const gc_coord c = coords[t.coord];
    const gc_layer& L = args.layer[t.layer];
    if (L.w_arg >= args.tensor_args || L.in_arg >= args.tensor_args ||
        (L.out_arg >= 0 && uint32_t(L.out_arg) >= args.tensor_args) || L.k % 8 != 0)
      return false;
    if (!arg_is(targs[L.w_arg], AMK_DTYPE_BF16, 2, L.m, L.k) ||
        !arg_is(targs[L.in_arg], AMK_DTYPE_F32, 1, L.k, 0) ||
        (L.out_arg >= 0 && !arg_is(targs[L.out_arg], AMK_DTYPE_F32, 1, L.m, 0)))
      return false;
    if (c.rows < 1 || c.rows > GC_TM || c.row0 < 0 || uint32_t(c.row0 + c.rows) > L.m || c.k0 < 0 ||
        c.k_chunks < 1 || c.k0 % GC_KC != 0 || uint32_t(c.k0 + c.k_chunks * GC_KC) > L.k)
      return false;
    const uint32_t first = args.counter_first, end = first + args.counter_count;
    if ((c.wait_first > 0 &&
         (uint32_t(c.wait_first) < first || uint32_t(c.wait_first + c.k_chunks) > end)) ||
        (c.signal_word > 0 && (uint32_t(c.signal_word) < first || uint32_t(c.signal_word) >= end)))
      return false;
  }
  return true;
}

// Warp 0 issues stage `s` (task `t`, chunk `c`) into its ring slot: lane 0 arms the mbarrier
// with the stage's bytes, then lane r copies weight row r of the chunk.
static __device__ void issue_stage(uint8_t* smem, const gc_slot* slots, const int32_t* ring, int ns,
                                   uint32_t s, const gc_task& t, int c, const gc_coord* coords,
                                   const gc_args& args, const amk_wrapper_tensor_arg_t* targs,
                                   int lane) {
  const gc_slot sl = slots[ring[s % ns]];
  const gc_coord co = coords[t.coord];
  const gc_layer& L = args.layer[t.layer];
  const uint16_t* w = reinterpret_cast<const uint16_t*>(targs[L.w_arg].data);
  const uint32_t bar = smem_u32(smem + sl.mbar_offset);
  if (lane == 0) mbar_expect_tx(bar, co.rows * kRowBytes);
  __syncwarp();
  if (lane < co.rows)
    bulk_copy(smem_u32(smem + sl.smem_offset + lane * kRowBytes),
              w + size_t(co.row0 + lane) * L.k + co.k0 + c * GC_KC, kRowBytes, bar);
}

extern "C" __global__ void __launch_bounds__(GC_THREADS)
    gc_main(const gc_task* instructions, const int32_t* queue_offsets, const int32_t* queue_lengths,
            const gc_slot* slots, const uint8_t* comms, const int32_t* barrier_init_offsets,
            const int32_t* barrier_init_lengths, const int32_t* barrier_init_indices,
            const gc_args* args_in, const amk_wrapper_tensor_arg_t* targs,
            const uint8_t* input_slots, const gc_coord* coords, float* global_staging,
            uint32_t* flags) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, q = blockIdx.x;
  const gc_args& args = *args_in;
  const gc_task* tasks = instructions + queue_offsets[q];
  const int n = queue_lengths[q];
  const int32_t* ring = barrier_init_indices + barrier_init_offsets[q];
  const int ns = barrier_init_lengths[q];

  // The ring: this block's barrier-init list names its stage slots, in ring order.
  if (blockDim.x != GC_THREADS || ns < 1 || ns > kMaxSlots) return;
  for (int i = 0; i < ns; ++i) {
    const gc_slot sl = slots[ring[i]];
    if (sl.kind != kSlotBulkStage || sl.bytes < GC_TM * kRowBytes || sl.smem_offset % 128 != 0 ||
        sl.mbar_offset % 8 != 0 || sl.arrive_count != 1)
      return;
  }
  if (!queue_ok(tasks, n, coords, args, targs)) return;

  if (tid == 0) {
    for (int i = 0; i < ns; ++i)
      mbar_init(smem_u32(smem + slots[ring[i]].mbar_offset), slots[ring[i]].arrive_count);
    // The inits become visible to the async proxy (bulk copies complete_tx on them).
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  // Stages are the queue's (task, chunk) pairs in order; stage s uses ring slot s % ns in its
  // (s / ns)-th use, so it waits for mbarrier phase parity (s / ns) & 1.
  int pt = 0, pc = 0;  // warp 0's producer cursor: the next stage to issue
  uint32_t issued = 0;
  if (warp == 0) {
    for (; issued < uint32_t(ns) && pt < n; ++issued) {
      issue_stage(smem, slots, ring, ns, issued, tasks[pt], pc, coords, args, targs, lane);
      if (++pc == coords[tasks[pt].coord].k_chunks) pc = 0, ++pt;
    }
  }

  uint32_t s = 0;
  for (int i = 0; i < n; ++i) {
    const gc_task t = tasks[i];
    const gc_coord co = coords[t.coord];
    const gc_layer& L = args.layer[t.layer];
    const float* in = reinterpret_cast<const float*>(targs[L.in_arg].data);
    float acc[kRowsPerWarp] = {};
    for (int c = 0; c < co.k_chunks; ++c, ++s) {
      const gc_slot sl = slots[ring[s % ns]];
      int stop = 0;
      while (!mbar_try_wait(smem_u32(smem + sl.mbar_offset), (s / ns) & 1))
        if (amk_wrapper_abort_requested(flags)) {
          stop = 1;
          break;
        }
      // A dependent chunk reads h written by other blocks: wait for its producers' counter.
      if (tid == 0 && co.wait_first > 0 && !stop)
        while (ld_acquire(flags + co.wait_first + c) < uint32_t(co.wait_target))
          if (amk_wrapper_abort_requested(flags)) {
            stop = 1;
            break;
          }
      if (__syncthreads_or(stop)) return;

      // Lane l covers columns [8l, 8l+8) of the chunk; L1 is bypassed (.cg) since h is written
      // by other blocks during the launch.
      const float4* v4 = reinterpret_cast<const float4*>(in + co.k0 + c * GC_KC + lane * 8);
      const float4 a = __ldcg(v4), b = __ldcg(v4 + 1);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int row = warp * kRowsPerWarp + r;
        if (row >= co.rows) continue;
        const uint4 w =
            *reinterpret_cast<const uint4*>(smem + sl.smem_offset + row * kRowBytes + lane * 16);
        acc[r] += bf16_lo(w.x) * a.x + bf16_hi(w.x) * a.y + bf16_lo(w.y) * a.z +
                  bf16_hi(w.y) * a.w + bf16_lo(w.z) * b.x + bf16_hi(w.z) * b.y +
                  bf16_lo(w.w) * b.z + bf16_hi(w.w) * b.w;
      }
      __syncthreads();  // every thread is done with the slot: refill it
      if (warp == 0 && pt < n) {
        issue_stage(smem, slots, ring, ns, issued++, tasks[pt], pc, coords, args, targs, lane);
        if (++pc == coords[tasks[pt].coord].k_chunks) pc = 0, ++pt;
      }
    }

    // Epilogue: lane 0 of each warp writes its rows; then one release publishes the tile.
    float* out = L.out_arg >= 0 ? reinterpret_cast<float*>(targs[L.out_arg].data) : global_staging;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float v = acc[r];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      const int row = warp * kRowsPerWarp + r;
      if (lane == 0 && row < co.rows) {
        v *= L.scale;
        out[co.row0 + row] = L.relu ? fmaxf(v, 0.0f) : v;
      }
    }
    __syncthreads();
    if (tid == 0 && co.signal_word > 0) {
      __threadfence();
      red_release_add(flags + co.signal_word, 1);
    }
  }

  // The last block out resets the counters, so a second launch starts from zero without the
  // host clearing the flags (amk keeps them between launches unless a comm record asks).
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(flags + args.exit_word, 1u) == gridDim.x - 1) {
      for (uint32_t w = 0; w < args.counter_count; ++w) flags[args.counter_first + w] = 0;
      flags[args.exit_word] = 0;
      __threadfence();
    }
  }
}
