// Weight streaming: gemv weights copied into shared memory ahead of the dependency waits.
//
// A decode step is a chain of dependent phases, each a few GEMVs of 16-500 KiB per block. With
// loads issued only once a phase's inputs are ready, every phase pays the dependency hop, then
// the ramp of an idle memory pipe, then the stream. But weights depend on nothing the program
// computes: the planner (src/plan/streams.cpp) lists, per queue, the gemv steps whose weights no
// instruction writes, with their tiling, and the block copies those weights into a ring of
// `stream_slots` slots of AMK_STREAM_SLOT_BYTES in dynamic shared memory, in queue order, as far
// ahead as the ring allows -- across the waits of the steps in between.
//
// Ring. Tile number `seq` (counted over the whole launch) lives in slot seq % S. Slot s has a
// `full` mbarrier (one arrival per thread, made by cp.async.mbarrier.arrive.noinc once that
// thread's copies of the tile landed) and an `empty` one (one arrival per warp once the warp is
// done reading). Use u = seq / S of a slot waits for full's phase u and, before any copy into
// it, empty's phase u - 1.
//
// Issue. Every warp copies its own share of every tile (16-byte cp.async per lane) and keeps
// its own cursor. Each warp tops the ring up without blocking at every step with work, before
// the step's waits, and inside a streamed gemv before each tile; before it reads tile `seq` it
// makes sure it issued its share of `seq`, waiting for the slot if needed (the other warps only
// need tiles issued before, so this always completes). Nothing is issued past the last listed
// step, so a launch that completes has consumed every copy it started; a block that stops early
// waits for its copies (cp.async.wait_all) before it exits.
//
// Status: correct (checked against the CPU backend on the GPU), but slower than the plain gemv
// on the H200 (8 x 4096x4096: 216 vs 72 us; Llama-3.2-1B step 2.58 vs 1.84 ms), so it is off
// unless the VM tuning sets AMK_STREAM_SLOTS. Per 16 KiB tile a warp spent ~1450 cycles issuing
// (cp.async back-pressure), ~1660 reading the tile from shared memory and ~260 waiting for it
// (clock64 per phase, before the per-tile divisions were removed); see the README.
//
// Consumer. Every warp reads every tile: a tile of rows_per_tile >= warps whole rows gives each
// warp whole rows; fewer rows (or one chunk of a long row) are split into column parts. A warp's
// partial dot product goes to the instruction's row sums in shared memory (atomic add); after
// the last tile a barrier, then the rows are finished (rmsnorm scale, GLU, residual) and stored.
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

// Dynamic shared memory: [full bars | empty bars] (128-byte aligned), row sums, x, the slots.
// The host sizes it the same way (src/cuda/executor.cpp).
__device__ __forceinline__ uint32_t amk_stream_bars_bytes(uint32_t slots) {
  return (16 * slots + 127) / 128 * 128;
}

// Where a walk over an entry's tiles stands: tile `it` is matrix `mat` (0: w, 1: w2), first row
// `r`, chunk `c` of that row (0 when tiles hold whole rows). Advanced without divisions.
struct amk_tile_pos {
  uint32_t it, mat, r, c;
};
__device__ __forceinline__ void amk_tile_next(amk_tile_pos& p, const amk_stream_entry_t& e) {
  ++p.it;
  if (e.chunks_per_row == 1) {
    p.r += e.rows_per_tile;
  } else if (++p.c == e.chunks_per_row) {
    p.c = 0;
    ++p.r;
  }
  if (p.r >= e.rows) {
    p.r = 0;
    ++p.mat;
  }
}

// A warp's issue cursor: each warp copies its share of every tile, in order.
struct amk_stream_issue {
  uint32_t ie;         // entry being issued (absolute)
  uint32_t issued;     // tiles issued so far
  uint32_t cur_tiles;  // tiles of entry ie over both matrices
  uint32_t pad;
  amk_tile_pos pos;    // next tile of entry ie
  amk_stream_entry_t cur;
};

// The ring, in static shared memory: constants set once (thread 0, before the VM's first
// barrier), and one issue cursor per warp (its lane 0 writes it).
struct amk_stream_ring {
  const amk_stream_entry_t* entries;  // this queue's
  uint32_t n;                         // entries per pass
  uint32_t total;                     // n * passes
  uint32_t len;                       // queue length (steps per pass)
  uint32_t bars;                      // shared address of full[0]; empty[s] at bars + 8 (S + s)
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
  uint32_t consumed;   // tiles consumed so far
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

// One 16-byte asynchronous copy global -> shared that skips L1 (marked L2 evict-first).
__device__ __forceinline__ void amk_cp_async16(uint32_t dst, uint64_t src, uint64_t policy) {
#if AMK_STREAM_EVICT_FIRST
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "l"(policy)
               : "memory");
#else
  (void)policy;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#endif
}

// Whole warp: copies this warp's share of tiles in order. Tiles before `need` are issued even if
// that means waiting for their slot; after those, only while slots are already free (never
// waiting: this warp may be one still reading the slot). False if the block is stopping.
// (A first version had one thread issue one 16 KiB cp.async.bulk per tile; with its other
// costs it measured no faster, see the README's performance notes.)
__device__ __noinline__ bool amk_stream_pump(uint32_t need) {
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  amk_stream_issue& w = amk_ring.warp[warp];
  const uint32_t total = amk_ring.total, bars = amk_ring.bars, slot0 = amk_ring.slot0;
  uint32_t ie = w.ie, issued = w.issued;
  amk_tile_pos pos = w.pos;
  uint64_t policy = 0;
#if AMK_STREAM_EVICT_FIRST
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  bool ok = true;
  while (ie < total) {
    const uint32_t slot = issued % kAmkSlots;
    const uint32_t use = issued / kAmkSlots;
    if (use > 0) {
      const uint32_t empty = bars + 8 * (kAmkSlots + slot);
      const uint32_t parity = (use - 1) & 1u;
      // Every lane observes the slot's release before its copies overwrite it.
      bool free;
      if (issued < need) {
        while (!(free = amk_mbar_try_wait(empty, parity)))
          if (*static_cast<volatile uint32_t*>(&amk_state.stop) != 0) break;
      } else {
        free = amk_mbar_test_wait(empty, parity);
      }
      if (!__all_sync(kAmkFullMask, free)) {
        ok = issued >= need;
        break;
      }
    }
    const amk_stream_entry_t& e = w.cur;
    uint64_t src = (pos.mat != 0 ? e.w2 : e.w) + static_cast<uint64_t>(pos.r) * e.row_bytes;
    uint32_t bytes;
    if (e.chunks_per_row == 1) {
      bytes = min(e.rows_per_tile, e.rows - pos.r) * e.row_bytes;
    } else {
      const uint32_t off = pos.c * e.chunk_bytes;
      src += off;
      bytes = min(e.chunk_bytes, e.row_bytes - off);
    }
    // This warp's share: vectors [lo, hi) of the tile.
    const uint32_t vecs = bytes / kAmkVectorBytes;
    const uint32_t lo = vecs * warp / kAmkWarps, hi = vecs * (warp + 1) / kAmkWarps;
    const uint32_t dst = slot0 + slot * AMK_STREAM_SLOT_BYTES;
    for (uint32_t v = lo + lane; v < hi; v += kAmkWarpSize)
      amk_cp_async16(dst + v * kAmkVectorBytes, src + static_cast<uint64_t>(v) * kAmkVectorBytes,
                     policy);
    // full[slot] gets this thread's arrival once its copies (all before this point) landed.
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bars + 8 * slot)
                 : "memory");
    ++issued;
    amk_tile_next(pos, e);
    if (pos.it == w.cur_tiles) {
      pos = amk_tile_pos{0, 0, 0, 0};
      if (++ie < total) {
        __syncwarp();
        if (lane == 0) {
          w.cur = *amk_stream_entry(ie);
          w.cur_tiles = w.cur.tiles * amk_stream_mats(w.cur);
        }
        __syncwarp();
      }
    }
  }
  __syncwarp();
  if (lane == 0) {
    w.ie = ie;
    w.issued = issued;
    w.pos = pos;
  }
  __syncwarp();
  return ok;
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
    w.ie = 0;
    w.issued = 0;
    w.pos = amk_tile_pos{0, 0, 0, 0};
    w.cur = prog.stream_entries[first];
    w.cur_tiles = w.cur.tiles * amk_stream_mats(w.cur);
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
    for (uint32_t i = 0; i < slots; ++i) {
      amk_mbar_init(r.bars + 8 * i, AMK_BLOCK_THREADS);  // one cp.async arrival per thread
      amk_mbar_init(r.bars + 8 * (slots + i), kAmkWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  c.next_step = amk_ldg_nc(&prog.stream_entries[first].step);
  return c;
}

// Every warp tops the ring up without waiting (each step with work, before its waits).
__device__ __forceinline__ void amk_stream_top_up() {
  if (amk_ring.total != 0 && amk_ring.warp[threadIdx.x / kAmkWarpSize].ie < amk_ring.total)
    amk_stream_pump(0);
}

// Before a block that stopped early exits: its copies still landing in its memory.
__device__ __forceinline__ void amk_stream_drain() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// x' = x * norm (or x) as f32 in the ring's x region, and with a norm the rmsnorm scale
// 1 / sqrt(mean(x^2) + eps), as amk_op_rmsnorm computes it (1 without). Every thread; ends with
// a barrier. x is read once per instruction here instead of once per tile from L1: measured on
// the H200, the tile loop reading x from global memory took ~2200 cycles a 16 KiB tile.
template <uint32_t X>
__device__ __noinline__ float amk_stream_stage_x(const amk_view x, const amk_view norm,
                                                 float eps) {
  typedef amk_ftype<X> TX;
  constexpr uint32_t kPer = TX::per_vec;
  constexpr uint32_t kUnroll = 4;
  const uint32_t k = x.n;
  const uint32_t vecs = k / kPer;
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
          *reinterpret_cast<float4*>(xs + i * kPer + q) = make_float4(f[q], f[q + 1], f[q + 2], f[q + 3]);
      }
    }
  }
  for (uint32_t i = vecs * kPer + threadIdx.x; i < k; i += AMK_BLOCK_THREADS) {  // tail
    const float f = amk_load_f32(x, i);
    ss = fmaf(f, f, ss);
    xs[i] = norm.present() ? f * amk_load_f32(norm, i) : f;
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

// One warp's share of the tile at `pos` of entry e (in `tile`): partial row sums into the ring's
// row sums.
template <uint32_t W>
__device__ __forceinline__ void amk_stream_tile(const amk_stream_entry_t& e,
                                                const amk_tile_pos& pos, uint32_t tile_s) {
  typedef amk_ftype<W> TW;
  constexpr uint32_t kPer = TW::per_vec;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  uint32_t nr, c0v, wv;
  if (e.chunks_per_row == 1) {
    nr = min(e.rows_per_tile, e.rows - pos.r);
    c0v = 0;
    wv = e.row_bytes / kAmkVectorBytes;
  } else {
    nr = 1;
    const uint32_t off = pos.c * e.chunk_bytes;
    c0v = off / kAmkVectorBytes;
    wv = min(e.chunk_bytes, e.row_bytes - off) / kAmkVectorBytes;
  }
  // This warp's rows j, j + jstep, ... below nr, vectors [v0, v1) of each. With fewer rows
  // than warps, each row is split into `parts` (a power of two: 8 / nr rounded down to one).
  uint32_t j = warp, jstep = kAmkWarps, v0 = 0, v1 = wv;
  if (nr < kAmkWarps) {
    const uint32_t shift = nr == 1 ? 3u : nr < 4 ? (nr == 2 ? 2u : 1u) : nr < 8 ? (nr == 4 ? 1u : 0u) : 0u;
    const uint32_t parts = 1u << shift;
    j = warp >> shift;
    jstep = kAmkWarps;  // one row at most
    const uint32_t part = warp & (parts - 1);
    v0 = (wv * part) >> shift;
    v1 = (wv * (part + 1)) >> shift;
  }
  // Shared-window addresses: explicit ld.shared.v4 and red.shared (a generic pointer to
  // amk_vec16 compiled to four 32-bit generic loads).
  const uint32_t acc_s =
      amk_smem_addr(amk_ring.acc) + 4 * (pos.mat * AMK_STREAM_MAX_ROWS + pos.r);
  const uint32_t xs_s = amk_smem_addr(amk_ring.xs) + 4 * c0v * kPer;
  for (; j < nr; j += jstep) {
    const uint32_t trow = tile_s + j * wv * kAmkVectorBytes;
    float a0 = 0.0f, a1 = 0.0f;
#pragma unroll 4
    for (uint32_t v = v0 + lane; v < v1; v += kAmkWarpSize) {
      amk_vec16 wvec;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(wvec.w[0]), "=r"(wvec.w[1]), "=r"(wvec.w[2]), "=r"(wvec.w[3])
                   : "r"(trow + v * kAmkVectorBytes));
      float wf[kPer];
      TW::unpack(wvec, wf);
#pragma unroll
      for (uint32_t q = 0; q < kPer; q += 4) {
        float x0, x1, x2, x3;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(x0), "=f"(x1), "=f"(x2), "=f"(x3)
                     : "r"(xs_s + 4 * (v * kPer + q)));
        a0 = fmaf(wf[q], x0, a0);
        a1 = fmaf(wf[q + 1], x1, a1);
        a0 = fmaf(wf[q + 2], x2, a0);
        a1 = fmaf(wf[q + 3], x3, a1);
      }
    }
    const float sum = amk_warp_sum(a0 + a1);
    if (lane == 0) asm volatile("red.shared.add.f32 [%0], %1;" ::"r"(acc_s + 4 * j), "f"(sum) : "memory");
  }
}

// Every tile of entry `ce`, starting at ring sequence `seq0`. False when the block must stop.
template <uint32_t W>
__device__ __noinline__ bool amk_stream_gemv_tiles(const amk_device_program_t& prog,
                                                   const amk_instruction_t& ins, uint32_t ce,
                                                   uint32_t seq0) {
  const amk_stream_entry_t e = *amk_stream_entry(ce);
  const uint32_t n = e.tiles * amk_stream_mats(e);
  const uint32_t bars = amk_ring.bars, slot0 = amk_ring.slot0;
  amk_tile_pos pos{0, 0, 0, 0};
  for (uint32_t t = 0; t < n; ++t) {
    const uint32_t seq = seq0 + t;
    if (!amk_stream_pump(seq + 1)) return false;
    const uint32_t slot = seq % kAmkSlots;
    // Every lane observes the phase (that makes the copied bytes visible to it); the warp
    // leaves together if any lane saw the block stop.
    if (!__all_sync(kAmkFullMask,
                    amk_mbar_wait(prog, ins, bars + 8 * slot, (seq / kAmkSlots) & 1u, t)))
      return false;
    amk_stream_tile<W>(e, pos, slot0 + slot * AMK_STREAM_SLOT_BYTES);
    __syncwarp();
    if (threadIdx.x % kAmkWarpSize == 0) amk_mbar_arrive(bars + 8 * (kAmkSlots + slot));
    amk_tile_next(pos, e);
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
  float inv_rms = 1.0f;
  if (x.dtype == AMK_DTYPE_F32)
    inv_rms = amk_stream_stage_x<AMK_DTYPE_F32>(x, norm, eps);
  else if (x.dtype == AMK_DTYPE_BF16)
    inv_rms = amk_stream_stage_x<AMK_DTYPE_BF16>(x, norm, eps);
  else
    inv_rms = amk_stream_stage_x<AMK_DTYPE_F16>(x, norm, eps);
  bool ok;
  if (w.dtype == AMK_DTYPE_BF16)
    ok = amk_stream_gemv_tiles<AMK_DTYPE_BF16>(prog, ins, c.ce, c.consumed);
  else if (w.dtype == AMK_DTYPE_F16)
    ok = amk_stream_gemv_tiles<AMK_DTYPE_F16>(prog, ins, c.ce, c.consumed);
  else
    ok = amk_stream_gemv_tiles<AMK_DTYPE_F32>(prog, ins, c.ce, c.consumed);
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
