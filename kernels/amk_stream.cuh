// Weight streaming: gemv weights copied into shared memory ahead of the dependency waits.
//
// A decode step is a chain of dependent phases, each a few GEMVs of 16-500 KiB per block. With
// loads issued only once a phase's inputs are ready, every phase pays the dependency hop, then
// the ramp of an idle memory pipe, then the stream. But weights depend on nothing the program
// computes: the planner (src/plan/streams.cpp) lists, per queue, the gemv steps whose weights no
// instruction writes, with their tiling, and the block copies those weights with the bulk copy
// engine (cp.async.bulk, one instruction per tile) into a ring of `stream_slots` slots of
// AMK_STREAM_SLOT_BYTES in dynamic shared memory, in queue order, as far ahead as the ring
// allows -- across the waits of the steps in between.
//
// Ownership. Tile number `seq` (counted over the whole launch) lives in slot seq % S, and slot s
// belongs to warp s % C (C = min(S, warps)): that warp issues every tile of the slot and is the
// only one that reads it. A slot is reused only by its owner, after it consumed the previous
// tile, so the only barrier per slot is `full` (count 1: the owner's arrive.expect_tx; the copy
// engine completes the transaction), and no warp ever waits for another one. Every warp tops up
// its own slots without blocking at every step with work (before the step's waits) and between
// its tiles; nothing is issued past the last listed step, so a launch that completes has
// consumed every copy it started; a block that stops early waits for its copies before exiting.
//
// Consumer. Each tile is read by its owner alone (a tile is a few whole rows, or one chunk of a
// long row): the warp's dot products go to the instruction's row sums in shared memory (red.add,
// as chunks of one row may belong to several warps); after the last tile a barrier, then the
// rows are finished (rmsnorm scale, GLU, residual) and stored.
//
// History: a first ring had every warp copy and read a share of every tile (16-byte cp.async per
// lane, full and empty barriers across warps): per 16 KiB tile each warp spent ~1450 cycles
// issuing and ~1660 reading, so the ring ran at a third of the plain gemv's speed.
#ifndef AMK_STREAM_CUH
#define AMK_STREAM_CUH

#include "amk_device.cuh"
#include "amk_ops_gemv.cuh"

#ifndef AMK_WEIGHT_STREAMS
#define AMK_WEIGHT_STREAMS 0
#endif

#if AMK_WEIGHT_STREAMS && AMK_USE_OP_GEMV

// Ring slots: a compile-time count (the generated source defines it with the streams), so the
// per-tile slot and phase arithmetic is shifts and multiplies. The host launches with exactly
// this many slots, or with none (prog.stream_slots 0: streams off for the launch).
#ifndef AMK_STREAM_SLOTS
#define AMK_STREAM_SLOTS 8
#endif
constexpr uint32_t kAmkSlots = AMK_STREAM_SLOTS;
static_assert(kAmkSlots >= 2 && kAmkSlots <= 64, "AMK_STREAM_SLOTS in [2, 64]");
constexpr uint32_t kAmkStreamAccFloats = 2 * AMK_STREAM_MAX_ROWS;  // w's rows, then w2's
// x of the widest streamed gemv (the generated source sets it; the host sizes the ring with it).
#ifndef AMK_STREAM_X_FLOATS
#define AMK_STREAM_X_FLOATS 0
#endif
constexpr uint32_t kAmkStreamXBytes = (4 * AMK_STREAM_X_FLOATS + 127) / 128 * 128;
constexpr uint32_t kAmkStreamNone = 0xFFFFFFFFu;
// The weight and x dtypes with a streamed instantiation: those of the gemv pairs compiled in.
#define AMK_STREAM_W_F32 (AMK_GEMV_F32_F32 || AMK_GEMV_F32_F16 || AMK_GEMV_F32_BF16)
#define AMK_STREAM_W_F16 (AMK_GEMV_F16_F32 || AMK_GEMV_F16_F16 || AMK_GEMV_F16_BF16)
#define AMK_STREAM_W_BF16 (AMK_GEMV_BF16_F32 || AMK_GEMV_BF16_F16 || AMK_GEMV_BF16_BF16)
#define AMK_STREAM_X_F32 (AMK_GEMV_F32_F32 || AMK_GEMV_F16_F32 || AMK_GEMV_BF16_F32)
#define AMK_STREAM_X_F16 (AMK_GEMV_F32_F16 || AMK_GEMV_F16_F16 || AMK_GEMV_BF16_F16)
#define AMK_STREAM_X_BF16 (AMK_GEMV_F32_BF16 || AMK_GEMV_F16_BF16 || AMK_GEMV_BF16_BF16)

// Dynamic shared memory: the full mbarriers (16 bytes reserved a slot, 128-byte aligned), row
// sums, x, the slots. The host sizes it the same way (src/cuda/codegen.cpp, stream_smem_bytes).
__device__ __forceinline__ uint32_t amk_stream_bars_bytes(uint32_t slots) {
  return (16 * slots + 127) / 128 * 128;
}

// Tile t of an entry (t < tiles: w's, then w2's): its first row, rows, and the byte offset and
// length of its part of each row (a whole row unless rows are longer than a slot).
struct amk_tile_geom {
  uint32_t mat, r0, nr, off, bytes;  // bytes: of one row's part
};
__device__ __forceinline__ amk_tile_geom amk_tile_at(const amk_stream_entry_t& e, uint32_t t) {
  amk_tile_geom g;
  g.mat = t >= e.tiles ? 1u : 0u;
  const uint32_t tt = t - g.mat * e.tiles;
  if (e.chunks_per_row == 1) {
    g.r0 = tt * e.rows_per_tile;
    g.nr = min(e.rows_per_tile, e.rows - g.r0);
    g.off = 0;
    g.bytes = e.row_bytes;
  } else {
    g.r0 = tt / e.chunks_per_row;
    g.nr = 1;
    g.off = (tt - g.r0 * e.chunks_per_row) * e.chunk_bytes;
    g.bytes = min(e.chunk_bytes, e.row_bytes - g.off);
  }
  return g;
}

// Consumer warps: slot s belongs to warp s % kAmkStreamWarps, a divisor of the slot count, so
// warp w owns the tiles seq = w (mod kAmkStreamWarps). A warp with one slot cannot read a tile
// while its next one lands, so by default each owns two or more: the largest divisor of the
// slots that is at most half of them and at most the block's warps (AMK_STREAM_WARPS asks for
// another bound).
#ifndef AMK_STREAM_WARPS
#define AMK_STREAM_WARPS (AMK_STREAM_SLOTS / 2)
#endif
__host__ __device__ constexpr uint32_t amk_stream_warps(uint32_t slots, uint32_t want, uint32_t warps) {
  uint32_t d = want < warps ? want : warps;
  if (d > slots) d = slots;
  while (d > 1 && slots % d != 0) --d;
  return d < 1 ? 1u : d;
}
constexpr uint32_t kAmkStreamWarps = amk_stream_warps(kAmkSlots, AMK_STREAM_WARPS, kAmkWarps);
static_assert(kAmkSlots % kAmkStreamWarps == 0, "stream warps divide the slots");

// The warp that owns (issues and reads) ring tile `seq`.
__device__ __forceinline__ uint32_t amk_stream_owner(uint32_t seq) { return seq % kAmkStreamWarps; }

// A warp's issue cursor (its lane 0 reads and writes it): its next tile to issue is ring tile
// `seq`, tile `t` of entry `ie`; own tiles below `consumed` have been read.
struct amk_stream_issue {
  uint32_t ie;         // entry of the walk (absolute); total when every tile is issued
  uint32_t seq;        // ring sequence number of the next own tile
  uint32_t t;          // its tile in entry ie (w's, then w2's)
  uint32_t cur_tiles;  // tiles of entry ie over both matrices
  uint32_t consumed;   // own tiles below this sequence number have been read
  uint32_t pad[3];
  amk_stream_entry_t cur;
};

// The ring, in static shared memory: constants set once (thread 0, before the VM's first
// barrier), and one issue cursor per warp.
struct amk_stream_ring {
  const amk_stream_entry_t* entries;  // this queue's
  uint32_t n;                         // entries per pass
  uint32_t total;                     // n * passes
  uint32_t len;                       // queue length (steps per pass)
  uint32_t bars;                      // shared address of full[0]; full[s] at bars + 8 s
  uint32_t slot0;                     // shared address of slot 0
  float* acc;                         // kAmkStreamAccFloats row sums, zero between instructions
  float* xs;                          // AMK_STREAM_X_FLOATS: the running gemv's x (times norm)
  float ss[kAmkWarps];                // per-warp sums of x^2 (the norm's scale)
  amk_stream_issue warp[kAmkWarps];
};
__shared__ amk_stream_ring amk_ring;

// What every thread of the block tracks (registers, uniform): the next streamed step.
struct amk_stream_cursor {
  uint32_t ce;         // next entry to consume (absolute)
  uint32_t next_step;  // its absolute step, kAmkStreamNone when none is left
  uint32_t consumed;   // tiles consumed so far (the ring sequence number of ce's first tile)
};

__device__ __forceinline__ const amk_stream_entry_t* amk_stream_entry(uint32_t e) {
  return amk_ring.entries + e % amk_ring.n;
}

__device__ __forceinline__ uint32_t amk_stream_entry_step(uint32_t e) {
  if (e >= amk_ring.total) return kAmkStreamNone;
  return amk_ldg_nc(&amk_stream_entry(e)->step) + (e / amk_ring.n) * amk_ring.len;
}

__device__ __forceinline__ uint32_t amk_stream_mats(const amk_stream_entry_t& e) {
  return e.w2_buffer != AMK_NO_BUFFER ? 2u : 1u;
}

// One bulk copy global -> shared of `bytes` (a multiple of 16, both ends 16-byte aligned) that
// completes `bytes` of the transaction of the mbarrier at `bar` (marked L2 evict-first).
__device__ __forceinline__ void amk_bulk_copy(uint32_t dst, uint64_t src, uint32_t bytes,
                                              uint32_t bar, uint64_t policy) {
#if AMK_STREAM_EVICT_FIRST
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
#else
  (void)policy;
  amk_bulk_g2s(dst, reinterpret_cast<const void*>(src), bytes, bar);
#endif
}

// Moves a warp's cursor `k` tiles on (across entries; ie == total past the last tile).
__device__ __forceinline__ void amk_stream_advance(amk_stream_issue& w, uint32_t k) {
  w.seq += k;
  uint32_t t = w.t + k;
  while (t >= w.cur_tiles) {
    t -= w.cur_tiles;
    if (++w.ie >= amk_ring.total) break;
    w.cur = *amk_stream_entry(w.ie);
    w.cur_tiles = w.cur.tiles * amk_stream_mats(w.cur);
  }
  w.t = t;
}

// Lane 0 of a consumer warp: issues this warp's tiles in ring order while their slots are free
// (the owner read the slot's previous tile). Never waits.
__device__ __noinline__ void amk_stream_pump() {
  amk_stream_issue& w = amk_ring.warp[threadIdx.x / kAmkWarpSize];
  const uint32_t limit = w.consumed + kAmkSlots;
  uint64_t policy = 0;
#if AMK_STREAM_EVICT_FIRST
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  // The warp's reads of a slot it refills are ordered before this lane by the caller's
  // __syncwarp (they completed: their values fed the row sums); as in the usual TMA pipelines, no
  // proxy fence between those reads and the copy engine's writes.
  while (w.ie < amk_ring.total && w.seq < limit) {  // else: the slot holds an unread tile
    const amk_stream_entry_t& e = w.cur;
    const amk_tile_geom g = amk_tile_at(e, w.t);
    const uint64_t src = (g.mat != 0 ? e.w2 : e.w) + static_cast<uint64_t>(g.r0) * e.row_bytes + g.off;
    const uint32_t bytes = g.nr * g.bytes;  // whole rows are contiguous; a chunk is one piece
    const uint32_t slot = w.seq % kAmkSlots;
    const uint32_t bar = amk_ring.bars + 8 * slot;
    const uint32_t dst = amk_ring.slot0 + slot * AMK_STREAM_SLOT_BYTES;
    // One bulk copy a tile: splitting it in 4 measured no faster (8 x 4096^2: 95.6 vs 93.6 us).
    amk_mbar_expect_tx(bar, bytes);
    amk_bulk_copy(dst, src, bytes, bar, policy);
    amk_stream_advance(w, kAmkStreamWarps);
  }
}

// Sets up the ring; the VM's first barrier follows. Returns the consumer's cursor.
__device__ __forceinline__ amk_stream_cursor amk_stream_init(const amk_device_program_t& prog,
                                                             uint32_t queue, uint32_t len,
                                                             uint32_t passes) {
  amk_stream_cursor c;
  c.ce = 0;
  c.consumed = 0;
  c.next_step = kAmkStreamNone;
  const uint32_t slots =
      prog.stream_offsets != nullptr && prog.stream_slots == kAmkSlots ? kAmkSlots : 0;
  uint32_t n = 0, first = 0;
  if (slots != 0) {
    first = prog.stream_offsets[queue];
    n = prog.stream_offsets[queue + 1] - first;
  }
  if (n == 0) {
    if (threadIdx.x == 0) amk_ring.total = 0;
    return c;
  }
  const uint32_t base = amk_smem_addr(amk_dynamic_smem);
  const uint32_t pad = (128 - base % 128) % 128;
  float* acc = reinterpret_cast<float*>(amk_dynamic_smem + pad + amk_stream_bars_bytes(slots));
  for (uint32_t i = threadIdx.x; i < kAmkStreamAccFloats; i += AMK_BLOCK_THREADS) acc[i] = 0.0f;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  if (threadIdx.x % kAmkWarpSize == 0) {
    amk_stream_issue& w = amk_ring.warp[warp];
    // The warp's first own tile is ring tile `warp` (amk_ring is not set up yet: local walk).
    const amk_stream_entry_t* entries = prog.stream_entries + first;
    const uint32_t total = warp < kAmkStreamWarps ? n * passes : 0;
    uint32_t ie = 0, t = warp;
    w.cur = entries[0];
    w.cur_tiles = w.cur.tiles * amk_stream_mats(w.cur);
    while (ie < total && t >= w.cur_tiles) {
      t -= w.cur_tiles;
      if (++ie < total) {
        w.cur = entries[ie % n];
        w.cur_tiles = w.cur.tiles * amk_stream_mats(w.cur);
      }
    }
    w.ie = warp < kAmkStreamWarps ? ie : n * passes;
    w.seq = warp;
    w.t = t;
    w.consumed = 0;
  }
  if (threadIdx.x == 0) {
    amk_stream_ring& r = amk_ring;
    r.entries = prog.stream_entries + first;
    r.n = n;
    r.total = n * passes;
    r.len = len;
    r.bars = base + pad;
    r.acc = acc;
    r.xs = acc + kAmkStreamAccFloats;
    r.slot0 = amk_smem_addr(acc + kAmkStreamAccFloats) + kAmkStreamXBytes;
    for (uint32_t i = 0; i < slots; ++i) amk_mbar_init(r.bars + 8 * i, 1);  // the owner's arrival
    amk_mbar_init_fence();
  }
  c.next_step = amk_ldg_nc(&prog.stream_entries[first].step);
  return c;
}

// Every consumer warp tops its slots up without waiting (each step with work, before its waits).
// The ring's constants and cursors are set before the VM's first barrier.
__device__ __forceinline__ void amk_stream_top_up() {
  if (amk_ring.total != 0 && threadIdx.x % kAmkWarpSize == 0 &&
      threadIdx.x / kAmkWarpSize < kAmkStreamWarps)
    amk_stream_pump();
}

// Before a block that stopped early exits: each owner waits for the copies still landing in its
// slots (issued, not yet read: its tiles in [consumed, seq), at most one per slot). Bounded: a
// copy of verified weights lands within microseconds.
__device__ __forceinline__ void amk_stream_drain() {
  if (amk_ring.total == 0 || threadIdx.x % kAmkWarpSize != 0) return;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  if (warp >= kAmkStreamWarps) return;
  const amk_stream_issue& w = amk_ring.warp[warp];
  const uint64_t give_up = amk_globaltimer() + 100000000ull;  // 100 ms
  for (uint32_t seq = w.consumed; seq < w.seq; ++seq) {
    if (amk_stream_owner(seq) != warp) continue;
    const uint32_t bar = amk_ring.bars + 8 * (seq % kAmkSlots);
    while (!amk_mbar_try_wait(bar, (seq / kAmkSlots) & 1u) && amk_globaltimer() < give_up) {
    }
  }
}

// Where x element i lives in the ring's x region. For 16-bit weights (8 per 16-byte vector) x
// is split in two planes of k / 2 floats: elements 8v..8v+3 at plane 0 [4v, 4v + 4), 8v+4..8v+7
// at plane 1, so the 32 lanes reading vector v = lane + 32 j read 512 contiguous bytes of each
// plane (no bank conflicts; interleaved, lanes 32 bytes apart conflict two-way). k is a multiple
// of 8 then (rows are multiples of 16 bytes).
__device__ __forceinline__ uint32_t amk_xs_index(uint32_t i, uint32_t half, bool split) {
  return split ? ((i & 4u) != 0 ? half : 0u) + (i >> 3) * 4 + (i & 3u) : i;
}

// x' = x * norm (or x) as f32 in the ring's x region (split in planes for 16-bit weights), and
// with a norm the rmsnorm scale 1 / sqrt(mean(x^2) + eps), as amk_op_rmsnorm computes it (1
// without). Every thread; ends with a barrier. x is read once per instruction here instead of
// once per tile from L1: measured on the H200, the tile loop reading x from global memory took
// ~2200 cycles a 16 KiB tile.
template <uint32_t X>
__device__ __noinline__ float amk_stream_stage_x(const amk_view x, const amk_view norm,
                                                 float eps, bool split) {
  typedef amk_ftype<X> TX;
  constexpr uint32_t kPer = TX::per_vec;
  constexpr uint32_t kUnroll = 4;
  const uint32_t k = x.n;
  const uint32_t vecs = k / kPer;
  const uint32_t half = k / 2;
  float* xs = amk_ring.xs;
  float ss = 0.0f;
  for (uint32_t base = threadIdx.x; base < vecs; base += kUnroll * AMK_BLOCK_THREADS) {
    amk_vec16 v[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + u * AMK_BLOCK_THREADS;
      if (i < vecs) v[u] = amk_ld16(x.ptr + static_cast<uint64_t>(i) * kAmkVectorBytes);
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + u * AMK_BLOCK_THREADS;
      if (i < vecs) {
        float f[kPer];
        TX::unpack(v[u], f);
        if (norm.present()) {
          float nf[kPer];
          amk_load_elems_dt<kPer>(norm.ptr, norm.dtype, i * kPer, nf);
#pragma unroll
          for (uint32_t q = 0; q < kPer; ++q) {
            ss = fmaf(f[q], f[q], ss);
            f[q] *= nf[q];
          }
        }
#pragma unroll
        for (uint32_t q = 0; q < kPer; q += 4)
          *reinterpret_cast<float4*>(xs + amk_xs_index(i * kPer + q, half, split)) =
              make_float4(f[q], f[q + 1], f[q + 2], f[q + 3]);
      }
    }
  }
  for (uint32_t i = vecs * kPer + threadIdx.x; i < k; i += AMK_BLOCK_THREADS) {  // tail
    const float f = amk_load_f32(x, i);
    ss = fmaf(f, f, ss);
    xs[amk_xs_index(i, half, split)] = norm.present() ? f * amk_load_f32(norm, i) : f;
  }
  if (norm.present()) {
    ss = amk_warp_sum(ss);
    if (threadIdx.x % kAmkWarpSize == 0) amk_ring.ss[threadIdx.x / kAmkWarpSize] = ss;
  }
  __syncthreads();
  if (!norm.present()) return 1.0f;
  float total = 0.0f;
#pragma unroll
  for (uint32_t w = 0; w < kAmkWarps; ++w) total += amk_ring.ss[w];
  return 1.0f / sqrtf(total / static_cast<float>(k) + eps);
}

// Rows [j, j + kRows) of a tile held by one warp: dot products of the tile's vectors [0, wv)
// with x from xs_s (16 bytes a vector; for 16-bit weights the second half of each vector's x one
// plane further); lane 0 adds them to the row sums at acc_s. kRows = 2 reads x once for both.
template <uint32_t W, uint32_t kRows>
__device__ __forceinline__ void amk_stream_rows(uint32_t trow, uint32_t wv, uint32_t xs_s,
                                                uint32_t plane, uint32_t acc_s) {
  typedef amk_ftype<W> TW;
  constexpr uint32_t kPer = TW::per_vec;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  const uint32_t row_s = wv * kAmkVectorBytes;
  float a[kRows][2];
#pragma unroll
  for (uint32_t q = 0; q < kRows; ++q) a[q][0] = a[q][1] = 0.0f;
#pragma unroll 2
  for (uint32_t v = lane; v < wv; v += kAmkWarpSize) {
    // Explicit ld.shared.v4: a generic pointer to amk_vec16 compiled to four 32-bit loads.
    float wf[kRows][kPer];
#pragma unroll
    for (uint32_t q = 0; q < kRows; ++q) {
      amk_vec16 wvec;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(wvec.w[0]), "=r"(wvec.w[1]), "=r"(wvec.w[2]), "=r"(wvec.w[3])
                   : "r"(trow + q * row_s + v * kAmkVectorBytes));
      TW::unpack(wvec, wf[q]);
    }
#pragma unroll
    for (uint32_t e = 0; e < kPer; e += 4) {
      float x0, x1, x2, x3;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(x0), "=f"(x1), "=f"(x2), "=f"(x3)
                   : "r"(xs_s + v * kAmkVectorBytes + (e / 4) * plane));
#pragma unroll
      for (uint32_t q = 0; q < kRows; ++q) {
        a[q][0] = fmaf(wf[q][e], x0, a[q][0]);
        a[q][1] = fmaf(wf[q][e + 1], x1, a[q][1]);
        a[q][0] = fmaf(wf[q][e + 2], x2, a[q][0]);
        a[q][1] = fmaf(wf[q][e + 3], x3, a[q][1]);
      }
    }
  }
  float sum[kRows];
#pragma unroll
  for (uint32_t q = 0; q < kRows; ++q) sum[q] = a[q][0] + a[q][1];
#pragma unroll
  for (uint32_t off = kAmkWarpSize / 2; off > 0; off /= 2) {
#pragma unroll
    for (uint32_t q = 0; q < kRows; ++q) sum[q] += __shfl_xor_sync(kAmkFullMask, sum[q], off);
  }
  if (lane == 0) {
#pragma unroll
    for (uint32_t q = 0; q < kRows; ++q)
      asm volatile("red.shared.add.f32 [%0], %1;" ::"r"(acc_s + 4 * q), "f"(sum[q]) : "memory");
  }
}

// Tile t of entry e (in the slot at tile_s), read by one warp: partial row sums into the ring's
// row sums.
template <uint32_t W>
__device__ __forceinline__ void amk_stream_tile(const amk_stream_entry_t& e, uint32_t t,
                                                uint32_t tile_s) {
  static_assert(amk_ftype<W>::per_vec == 4 || amk_ftype<W>::per_vec == 8, "x layout");
  const amk_tile_geom g = amk_tile_at(e, t);
  const uint32_t wv = g.bytes / kAmkVectorBytes;
  const uint32_t acc_s = amk_smem_addr(amk_ring.acc) + 4 * (g.mat * AMK_STREAM_MAX_ROWS + g.r0);
  const uint32_t xs_s = amk_smem_addr(amk_ring.xs) + g.off;  // 16 bytes a vector, each plane
  const uint32_t plane = 2 * (e.row_bytes / amk_dtype_size(W));  // k / 2 floats
  uint32_t j = 0;
  for (; j + 2 <= g.nr; j += 2)
    amk_stream_rows<W, 2>(tile_s + j * g.bytes, wv, xs_s, plane, acc_s + 4 * j);
  if (j < g.nr) amk_stream_rows<W, 1>(tile_s + j * g.bytes, wv, xs_s, plane, acc_s + 4 * j);
}

// This warp's tiles of entry `ce`, whose first tile is ring sequence `seq0`. False when the block
// must stop.
template <uint32_t W>
__device__ __noinline__ bool amk_stream_gemv_tiles(const amk_device_program_t& prog,
                                                   const amk_instruction_t& ins, uint32_t ce,
                                                   uint32_t seq0) {
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  if (warp >= kAmkStreamWarps) return true;
  const bool lead = threadIdx.x % kAmkWarpSize == 0;
  const amk_stream_entry_t e = *amk_stream_entry(ce);
  const uint32_t n = e.tiles * amk_stream_mats(e);
  // This warp's tiles: seq0 + t = warp (mod kAmkStreamWarps). Each was issued by the pump that
  // followed the read of this warp's previous tile (or by a top-up before this step).
  for (uint32_t t = (warp + kAmkStreamWarps - seq0 % kAmkStreamWarps) % kAmkStreamWarps; t < n;
       t += kAmkStreamWarps) {
    const uint32_t seq = seq0 + t;
    const uint32_t slot = seq % kAmkSlots;
    // Every lane observes the phase (that makes the copied bytes visible to it); the warp
    // leaves together if any lane saw the block stop.
    if (!__all_sync(kAmkFullMask, amk_mbar_wait(prog, ins, amk_ring.bars + 8 * slot,
                                                (seq / kAmkSlots) & 1u, t)))
      return false;
    amk_stream_tile<W>(e, t, amk_ring.slot0 + slot * AMK_STREAM_SLOT_BYTES);
    __syncwarp();
    if (lead) {
      amk_ring.warp[warp].consumed = seq + 1;
      amk_stream_pump();  // the slot just read takes this warp's next tile
    }
    __syncwarp();
  }
  return true;
}

// The streamed gemv of entry c.ce (the VM's current step); advances the cursor. False when the
// block must stop.
__device__ __forceinline__ bool amk_stream_gemv(const amk_device_program_t& prog,
                                                const amk_instruction_t& ins,
                                                amk_stream_cursor& c) {
  const amk_view w = amk_operand(ins, 0);
  const amk_view x = amk_operand(ins, 1);
  const amk_view norm = amk_operand(ins, 4);
  const float eps = norm.present() ? __uint_as_float(ins.params[0]) : 0.0f;
  // Only the dtypes of the program's gemvs are compiled in (every streamed gemv is one of them:
  // the generated source lists them all), as each instantiation costs the VM registers.
  const bool split = amk_dtype_size(w.dtype) == 2;  // 16-bit weights: x in two planes
  float inv_rms = 1.0f;
  bool ok = false, ran = false;
#if AMK_STREAM_X_F32
  if (x.dtype == AMK_DTYPE_F32) inv_rms = amk_stream_stage_x<AMK_DTYPE_F32>(x, norm, eps, split);
#endif
#if AMK_STREAM_X_BF16
  if (x.dtype == AMK_DTYPE_BF16) inv_rms = amk_stream_stage_x<AMK_DTYPE_BF16>(x, norm, eps, split);
#endif
#if AMK_STREAM_X_F16
  if (x.dtype == AMK_DTYPE_F16) inv_rms = amk_stream_stage_x<AMK_DTYPE_F16>(x, norm, eps, split);
#endif
#if AMK_STREAM_W_BF16
  if (w.dtype == AMK_DTYPE_BF16) {
    ok = amk_stream_gemv_tiles<AMK_DTYPE_BF16>(prog, ins, c.ce, c.consumed);
    ran = true;
  }
#endif
#if AMK_STREAM_W_F16
  if (w.dtype == AMK_DTYPE_F16) {
    ok = amk_stream_gemv_tiles<AMK_DTYPE_F16>(prog, ins, c.ce, c.consumed);
    ran = true;
  }
#endif
#if AMK_STREAM_W_F32
  if (w.dtype == AMK_DTYPE_F32) {
    ok = amk_stream_gemv_tiles<AMK_DTYPE_F32>(prog, ins, c.ce, c.consumed);
    ran = true;
  }
#endif
  if (!ran && threadIdx.x == 0) amk_fail_operand(prog, ins, 0);  // not reached: see above
  const amk_stream_entry_t* e = amk_stream_entry(c.ce);
  const uint32_t rows = amk_ldg_nc(&e->rows);
  const bool glu = amk_ldg_nc(&e->w2_buffer) != AMK_NO_BUFFER;
  c.consumed += amk_ldg_nc(&e->tiles) * (glu ? 2u : 1u);
  ++c.ce;
  c.next_step = amk_stream_entry_step(c.ce);
  if (__syncthreads_or(!ok)) return false;
  // Every partial sum is in: finish and store the rows, and zero the sums for the next one.
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  float* acc = amk_ring.acc;
  for (uint32_t r = threadIdx.x; r < rows; r += AMK_BLOCK_THREADS) {
    float a = acc[r] * inv_rms;
    acc[r] = 0.0f;
    if (glu) {
      a = amk_gemv_glu(a, acc[AMK_STREAM_MAX_ROWS + r] * inv_rms);
      acc[AMK_STREAM_MAX_ROWS + r] = 0.0f;
    }
    amk_gemv_store_row(y, res, r, a);
  }
  return true;
}


#endif  // AMK_WEIGHT_STREAMS && AMK_USE_OP_GEMV
#endif  // AMK_STREAM_CUH
