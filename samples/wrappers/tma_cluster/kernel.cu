// tma_cluster: y = s * W x (W bf16 [M, K], x f32 [K]) on clusters of TC_CLUSTER blocks, as a
// dataflow compiler emits it for amk's wrapper ABI (schemas/wrapper.md). The blocks of a cluster
// take the same row tiles and split K: each streams its part of a tile through a ring of
// shared-memory slots with 2-D TMA loads (one box of 256 x 16 per stage, completing on the slot's
// mbarrier), reduces its rows to partial sums in an exchange slot, and after a cluster barrier the
// leader (rank 0) adds its peers' partials through distributed shared memory and writes y and
// global staging. Every mbarrier wait polls the abort word; the cluster barriers never wait on
// anything but the peers' arrivals, and every block passes all of them, aborted or not.
#include "amk_wrapper.h"

#if !defined(TC_CLUSTER) || !defined(TC_THREADS)
#error "TC_CLUSTER and TC_THREADS are defined by the wrapper program"
#endif

constexpr int kBoxK = 256, kBoxRows = 16;  // the TMA spec's box: [256, 16], innermost first
constexpr int kWarps = TC_THREADS / 32;
constexpr int kRowsPerWarp = kBoxRows / kWarps;
constexpr uint32_t kRowBytes = kBoxK * 2;
constexpr uint32_t kStageBytes = kBoxRows * kRowBytes;
constexpr int kMaxSlots = 8;
static_assert(TC_THREADS % 32 == 0 && kBoxRows % kWarps == 0, "whole rows per warp");
static_assert(kBoxK == 32 * 8, "each lane reads 8 bf16 (16 bytes) of a row");

constexpr uint32_t kOpRowTile = 1;
constexpr uint32_t kSlotTmaStage = 1, kSlotExchange = 2;

// instructions: 16 bytes; xslot is the exchange slot of the task's partial sums.
struct tc_task {
  uint32_t op, tile, coord, xslot;
};
struct tc_coord {  // task_coords: 16 bytes
  int32_t row0, k0, k_boxes, pad;
};
struct tc_slot {  // slots: 32 bytes
  uint32_t kind, smem_offset, bytes, mbar_offset, arrive_count, pad[3];
};
struct tc_args {  // args: 32 bytes
  uint32_t cluster_size, tensor_args, w_arg, x_arg, y_arg, k, m;
  float scale;
};

// ---- PTX helpers ----

static __device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
static __device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
static __device__ __forceinline__ uint32_t cluster_blocks() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
// All threads of all blocks of the cluster; orders shared-memory writes before peers' reads.
static __device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
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
static __device__ __forceinline__ void tma_load_2d(uint32_t dst,
                                                   const amk_wrapper_tensor_map_t* map, int32_t c0,
                                                   int32_t c1, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}
// A float at shared address `addr` of cluster block `rank` (the same offset in its smem).
static __device__ __forceinline__ float ld_peer(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
static __device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float bf16_hi(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}

// Checks this block's records before any barrier exists; uniform across the block.
static __device__ bool block_ok(const tc_task* tasks, int n, const tc_coord* coords,
                                const tc_slot* slots, const int32_t* ring, int ns, const tc_args& a,
                                const amk_wrapper_tensor_arg_t* targs) {
  if (blockDim.x != TC_THREADS || cluster_blocks() != a.cluster_size ||
      a.cluster_size != TC_CLUSTER || ns < 1 || ns > kMaxSlots || a.w_arg >= a.tensor_args ||
      a.x_arg >= a.tensor_args || a.y_arg >= a.tensor_args)
    return false;
  const amk_wrapper_tensor_arg_t &w = targs[a.w_arg], &x = targs[a.x_arg], &y = targs[a.y_arg];
  if (w.dtype != AMK_DTYPE_BF16 || w.rank != 2 || w.shape[0] != a.m || w.shape[1] != a.k ||
      x.dtype != AMK_DTYPE_F32 || x.rank != 1 || x.shape[0] != a.k || (x.data & 15) != 0 ||
      y.dtype != AMK_DTYPE_F32 || y.rank != 1 || y.shape[0] != a.m)
    return false;
  for (int i = 0; i < ns; ++i) {
    const tc_slot s = slots[ring[i]];
    if (s.kind != kSlotTmaStage || s.bytes < kStageBytes || s.smem_offset % 128 != 0 ||
        s.mbar_offset % 8 != 0 || s.arrive_count != 1)
      return false;
  }
  for (int i = 0; i < n; ++i) {
    const tc_task t = tasks[i];
    const tc_coord c = coords[t.coord];
    const tc_slot x = slots[t.xslot];
    if (t.op != kOpRowTile || x.kind != kSlotExchange || x.bytes < kBoxRows * 4 ||
        x.smem_offset % 16 != 0 || c.row0 < 0 || uint32_t(c.row0 + kBoxRows) > a.m || c.k0 < 0 ||
        c.k0 % kBoxK != 0 || c.k_boxes < 1 || uint32_t(c.k0 + c.k_boxes * kBoxK) > a.k)
      return false;
  }
  return true;
}

extern "C" __global__ void __launch_bounds__(TC_THREADS)
    tc_main(const tc_task* instructions, const int32_t* queue_offsets, const int32_t* queue_lengths,
            const tc_slot* slots, const uint8_t* comms, const int32_t* barrier_init_offsets,
            const int32_t* barrier_init_lengths, const int32_t* barrier_init_indices,
            const tc_args* args_in, const amk_wrapper_tensor_arg_t* targs,
            const uint8_t* input_slots, const tc_coord* coords, float* global_staging,
            uint32_t* flags, const __grid_constant__ amk_wrapper_tensor_map_t w_map) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, q = blockIdx.x;
  const tc_args& a = *args_in;
  const tc_task* tasks = instructions + queue_offsets[q];
  const int n = queue_lengths[q];
  const int32_t* ring = barrier_init_indices + barrier_init_offsets[q];
  const int ns = barrier_init_lengths[q];
  const uint32_t rank = cluster_rank();

  // Every block of the cluster passes the same number of cluster barriers: one per task of the
  // cluster's longest queue, whatever its own queue or checks say.
  const int cluster_first = q - int(rank);
  int rounds = 0;
  for (uint32_t r = 0; r < cluster_blocks(); ++r)
    rounds = max(rounds, queue_lengths[cluster_first + r]);
  bool live = block_ok(tasks, n, coords, slots, ring, ns, a, targs);

  if (tid == 0 && live) {
    for (int i = 0; i < ns; ++i)
      mbar_init(smem_u32(smem + slots[ring[i]].mbar_offset), slots[ring[i]].arrive_count);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  cluster_sync();  // the inits are visible, and every peer's shared memory exists

  // Stage s = (task, box) in queue order uses ring slot s % ns, mbarrier parity (s / ns) & 1.
  // Thread 0 issues; `issued` counts the stages it has issued, (pt, pb) is the next one.
  const float* x = reinterpret_cast<const float*>(targs[a.x_arg].data);
  float* y = reinterpret_cast<float*>(targs[a.y_arg].data);
  int pt = 0, pb = 0;
  uint32_t issued = 0;
  auto issue = [&] {
    const tc_coord c = coords[tasks[pt].coord];
    const tc_slot sl = slots[ring[issued % ns]];
    const uint32_t bar = smem_u32(smem + sl.mbar_offset);
    mbar_expect_tx(bar, kStageBytes);
    tma_load_2d(smem_u32(smem + sl.smem_offset), &w_map, c.k0 + pb * kBoxK, c.row0, bar);
    ++issued;
    if (++pb == c.k_boxes) pb = 0, ++pt;
  };
  if (tid == 0 && live)
    while (issued < uint32_t(ns) && pt < n) issue();

  uint32_t s = 0;
  for (int i = 0; i < rounds; ++i) {
    live = live && i < n;
    const tc_task t = live ? tasks[i] : tc_task{};
    const tc_coord c = live ? coords[t.coord] : tc_coord{};
    float acc[kRowsPerWarp] = {};
    for (int b = 0; live && b < c.k_boxes; ++b, ++s) {
      const tc_slot sl = slots[ring[s % ns]];
      int stop = 0;
      while (!mbar_try_wait(smem_u32(smem + sl.mbar_offset), (s / ns) & 1))
        if (amk_wrapper_abort_requested(flags)) {
          stop = 1;
          break;
        }
      if (__syncthreads_or(stop)) {
        live = false;  // aborted: no more work, but the cluster barriers still follow
        break;
      }
      const float4* v4 = reinterpret_cast<const float4*>(x + c.k0 + b * kBoxK + lane * 8);
      const float4 u = __ldg(v4), v = __ldg(v4 + 1);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const uint4 w = *reinterpret_cast<const uint4*>(
            smem + sl.smem_offset + (warp * kRowsPerWarp + r) * kRowBytes + lane * 16);
        acc[r] += bf16_lo(w.x) * u.x + bf16_hi(w.x) * u.y + bf16_lo(w.y) * u.z +
                  bf16_hi(w.y) * u.w + bf16_lo(w.z) * v.x + bf16_hi(w.z) * v.y +
                  bf16_lo(w.w) * v.z + bf16_hi(w.w) * v.w;
      }
      __syncthreads();  // the slot is consumed: refill it
      if (tid == 0 && pt < n) issue();
    }

    // This block's partial sums of the tile's rows go to its exchange slot; the leader reads
    // every block's slot at the same offset once all have arrived.
    const uint32_t xoff = live ? slots[t.xslot].smem_offset : 0;
    float* part = reinterpret_cast<float*>(smem + xoff);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float v = acc[r];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (live && lane == 0) part[warp * kRowsPerWarp + r] = v;
    }
    cluster_sync();
    if (live && rank == 0 && tid < kBoxRows) {
      float sum = 0.0f;
      for (uint32_t r = 0; r < TC_CLUSTER; ++r) sum += ld_peer(smem_u32(part + tid), r);
      y[c.row0 + tid] = a.scale * sum;
      global_staging[c.row0 + tid] = a.scale * sum;
    }
    // The next round writes the other exchange slot; the one read here is rewritten two rounds
    // on, after a barrier the leader reaches only once these reads are done.
  }
  cluster_sync();  // no block exits while the leader may still read its shared memory
}
