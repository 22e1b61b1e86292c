// The VM with roles (roles_pages != 0): one persistent block a queue whose warps do different
// work, so that the weights of the next instructions stream while the current one computes.
//
//  - The controller (the last warp) walks the queue 32 steps at a time, skips plain nops, and
//    copies each remaining instruction into the next of kAmkRoleSlots instruction slots, with its
//    step (pass and queue position) beside it; after the last step an end slot.
//  - The loader (lane 0 of the warp before it) reads each slot and, for a gemv, streams the
//    instruction's rows of w into the ring of roles_pages 16 KiB pages with bulk copies, one page
//    at a time in ring order, as soon as the consumers have freed it. It never waits on a
//    dependency counter: the chooser takes this VM only where no instruction writes a gemv's
//    weights.
//  - The consumers (the block_threads threads of the program's block) run each slot's
//    instruction: its counter waits (warp 0), the op (gemv from the pages, with its norm, GLU and
//    attention-merge fusions; every other op as the lockstep VM runs it, synchronized on named
//    barrier 1, reading the slot's copy of its instruction), then its signals (release, after a
//    barrier that orders every consumer's stores). Each consumer warp frees a page when it is
//    done with it and a slot when the step is done. Stepped programs: carried waits, each warp's
//    pass, and the stop word at each pass's first step, as in the lockstep VM. With the trace,
//    every instruction's start (its waits over) and end, and gemv's marks: x' staged, the first
//    page landed.
//
// Every wait on a page or a slot ends when the block stops (amk_state.stop: an op's refusal, a
// counter wait past the deadline or the abort flag, which it also reads) and is bounded by the
// launch deadline plus kAmkRoleGraceNs, naming the slot or page it waited on (diag.detail): a
// block stuck behind a counter names the counter first. A stopping loader waits for the copies
// it has in flight before its lane ends, so that no copy lands in a finished block.
#pragma once

#include "amk_vm.cuh"

static_assert(kAmkRoles, "amk_vm_roles.cuh is the VM of configs with roles_pages");
constexpr uint32_t kAmkPages = kAmkCfg.roles_pages;
constexpr uint32_t kAmkLoaderWarp = kAmkWarps;
constexpr uint32_t kAmkControllerWarp = kAmkWarps + 1;
constexpr uint32_t kAmkSlotEnd = 0xFFFFFFFFu;  // a slot's step after the queue's last
// gemv's pieces: a warp reduces 512 contiguous bytes of a page at a time (16 a lane).
constexpr uint32_t kAmkPieceBytes = kAmkWarpSize * kAmkVectorBytes;
constexpr uint32_t kAmkPieceStride = kAmkWarps * kAmkPieceBytes;
constexpr uint64_t kAmkRoleGraceNs = 1000000;

// The dynamic shared memory (amk_roles_smem_bytes): pages, staged x', row sums, slots, slot
// steps, then the mbarriers (shared-window addresses, 8 bytes apart).
struct amk_roles_smem {
  unsigned char* pages;
  float* xs;
  float* acc;
  amk_instruction_t* slots;
  uint32_t* slot_step;
  uint32_t page_full, page_free, slot_full, slot_free;
  __device__ __forceinline__ uint32_t bar(uint32_t base, uint32_t i) const { return base + 8 * i; }
};
__device__ __forceinline__ amk_roles_smem amk_roles_layout() {
  constexpr amk_roles_offsets o = amk_roles_layout_of(kAmkPages, kAmkCfg.roles_x_floats);
  amk_roles_smem s;
  unsigned char* p = amk_dynamic_smem;
  s.pages = p;
  s.xs = reinterpret_cast<float*>(p + o.xs);
  s.acc = reinterpret_cast<float*>(p + o.acc);
  s.slots = reinterpret_cast<amk_instruction_t*>(p + o.slots);
  s.slot_step = reinterpret_cast<uint32_t*>(p + o.slot_step);
  s.page_full = amk_smem_addr(p + o.bars);
  s.page_free = s.page_full + 8 * kAmkPages;
  s.slot_full = s.page_free + 8 * kAmkPages;
  s.slot_free = s.slot_full + 8 * kAmkRoleSlots;
  return s;
}

// Waits for phase `parity` of the mbarrier at `bar`: true when it completed, false when the block
// is stopping (this thread raised the timeout, naming `detail`, or another thread stopped it).
__device__ __forceinline__ bool amk_roles_wait(const amk_device_program_t& prog,
                                               const amk_instruction_t& ins, uint32_t queue_pos,
                                               uint32_t bar, uint32_t parity, uint32_t detail) {
  if (amk_mbar_try_wait(bar, parity)) return true;
  const uint64_t wait_start = amk_globaltimer();
  for (uint32_t i = 1;; ++i) {
    if (amk_mbar_try_wait(bar, parity)) return true;
    if (*static_cast<volatile uint32_t*>(&amk_state.stop) != 0) return false;
    if (i % 64 == 0) {
      if (amk_ld_relaxed(prog.abort_flag) != 0) {
        *static_cast<volatile uint32_t*>(&amk_state.stop) = 1;
        return false;
      }
      const uint64_t now = amk_globaltimer();
      if (prog.timeout_ns != 0 && now - amk_state.block_start > prog.timeout_ns + kAmkRoleGraceNs) {
        amk_raise_at(prog, ins, queue_pos, AMK_STATUS_TIMEOUT, kAmkCounterNone, 0, 0,
                     now - wait_start, detail);
        return false;
      }
    }
  }
}

// The gemv instruction's streamed bytes, which the loader and the consumers both derive from the
// slot: its rows of w, then (GLU) the same rows of w2. K = extent(x), or heads * head_dim where x
// is attention partials (params 1 and 2); rows = extent(w) / K.
struct amk_roles_gemv_shape {
  amk_view w, w2;
  uint32_t k, rows, row_bytes, bytes, mats;
  __device__ __forceinline__ const unsigned char* mat(uint32_t m) const {
    return m == 0 ? w.ptr : w2.ptr;
  }
};
__device__ __forceinline__ amk_roles_gemv_shape amk_roles_gemv_of(const amk_instruction_t& ins) {
  amk_roles_gemv_shape g;
  g.w = amk_operand(ins, 0);
  g.w2 = amk_operand(ins, 5);
  const bool merges = amk_gemv_fuses(AMK_GEMV_FUSE_COMBINE) && ins.params[1] != 0;
  const uint32_t x_n =
      ins.n_operands > 1 && ins.operands[1].buffer != AMK_NO_BUFFER ? ins.operands[1].extent : 0u;
  g.k = merges ? ins.params[1] * ins.params[2] : x_n;
  g.rows = g.k != 0 ? g.w.n / g.k : 0u;
  g.row_bytes = g.k * amk_dtype_size(g.w.dtype);
  g.bytes = g.rows * g.row_bytes;  // (the facts: below 4 GiB, whole 16-byte vectors)
  g.mats = g.w2.present() ? 2u : 1u;
  return g;
}

// ---- the controller ----
template <class = void>
__device__ __forceinline__ void amk_roles_controller(const amk_device_program_t& prog,
                                                     const amk_roles_smem& s, const uint32_t* items,
                                                     uint32_t len, uint32_t total) {
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  uint32_t filled = 0;
  auto fill = [&](uint32_t item, uint32_t step) -> bool {
    const uint32_t slot = filled % kAmkRoleSlots;
    const amk_instruction_t& ins = step != kAmkSlotEnd ? prog.instructions[item] : s.slots[slot];
    const uint32_t qpos = step != kAmkSlotEnd ? step % len : len;
    // Lane 0 waits; the warp's barrier then orders the other lanes' stores after its acquire.
    bool ok = true;
    if (lane == 0)
      ok = amk_roles_wait(prog, ins, qpos, s.bar(s.slot_free, slot),
                          ((filled / kAmkRoleSlots) & 1u) ^ 1u, kAmkDetailSlotFree | slot);
    if (__shfl_sync(kAmkFullMask, ok ? 1u : 0u, 0) == 0) return false;
    if (step != kAmkSlotEnd) {
      // 256 bytes: 8 a lane.
      uint32_t a, b;
      amk_ldg_nc2(reinterpret_cast<const uint2*>(prog.instructions + item) + lane, a, b);
      uint2 v;
      v.x = a;
      v.y = b;
      reinterpret_cast<uint2*>(s.slots + slot)[lane] = v;
    }
    if (lane == 0) s.slot_step[slot * 4] = step;
    amk_mbar_arrive(s.bar(s.slot_full, slot));  // every lane, after its stores (release)
    ++filled;
    return true;
  };
  auto load_item = [&](uint32_t step) -> uint32_t {
    return step < total ? amk_ldg_nc(items + step % len) : kAmkNoItem;
  };
  uint32_t next = load_item(lane);
  for (uint32_t base = 0; base < total; base += kAmkWarpSize) {
    const uint32_t item = next;
    uint32_t w0 = 0, w1 = 0;
    if (item != kAmkNoItem) amk_ldg_nc2(prog.instructions + item, w0, w1);
    next = load_item(base + kAmkWarpSize + lane);
    uint32_t work = __ballot_sync(kAmkFullMask, item != kAmkNoItem && amk_pack_header(w0, w1) != 0);
    while (work != 0) {
      const uint32_t l = __ffs(work) - 1;
      work &= work - 1;
      if (!fill(__shfl_sync(kAmkFullMask, item, l), base + l)) return;
    }
  }
  fill(kAmkNoItem, kAmkSlotEnd);
}

// ---- the loader ----
// One lane, slot by slot; `issued` counts pages in ring order. At the end it waits for the last
// ring's worth of copies.
template <class = void>
__device__ __forceinline__ void amk_roles_loader(const amk_device_program_t& prog,
                                                 const amk_roles_smem& s, uint32_t len) {
  uint32_t issued = 0;
  for (uint32_t k = 0;; ++k) {
    const uint32_t slot = k % kAmkRoleSlots;
    const amk_instruction_t& ins = s.slots[slot];
    if (!amk_roles_wait(prog, ins, len, s.bar(s.slot_full, slot), (k / kAmkRoleSlots) & 1u,
                        kAmkDetailSlotFull | slot))
      break;
    const uint32_t step = *static_cast<volatile uint32_t*>(&s.slot_step[slot * 4]);
    if (step == kAmkSlotEnd) break;
    bool stop = false;
    if (ins.op == amk_op_bits(amk_op::gemv)) {
      const amk_roles_gemv_shape g = amk_roles_gemv_of(ins);
      for (uint32_t m = 0; m < g.mats && !stop; ++m) {
        for (uint32_t off = 0; off < g.bytes; off += kAmkPageBytes, ++issued) {
          const uint32_t page = issued % kAmkPages;
          if (!amk_roles_wait(prog, ins, step % len, s.bar(s.page_free, page),
                              ((issued / kAmkPages) & 1u) ^ 1u, kAmkDetailPageFree | page)) {
            stop = true;
            break;
          }
          const uint32_t n = min(kAmkPageBytes, g.bytes - off);
          amk_mbar_expect_tx(s.bar(s.page_full, page), n);
          amk_bulk_g2s(amk_smem_addr(s.pages + page * kAmkPageBytes), g.mat(m) + off, n,
                       s.bar(s.page_full, page));
        }
      }
    }
    if (stop) break;
    amk_mbar_arrive(s.bar(s.slot_free, slot));
  }
  // Copies still in flight (the consumers had not taken them when the block stopped) land before
  // the warp ends.
  for (uint32_t c = issued > kAmkPages ? issued - kAmkPages : 0u; c < issued; ++c)
    while (!amk_mbar_try_wait(s.bar(s.page_full, c % kAmkPages), (c / kAmkPages) & 1u)) {
    }
}

// ---- gemv from the pages (the consumers) ----
// One 16-byte vector of the page (dtype W) against x[col..], col a multiple of its elements.
template <uint32_t W>
__device__ __forceinline__ float amk_roles_dot(const unsigned char* page, uint32_t at,
                                               const float* xs) {
  typedef amk_ftype<W> TW;
  const uint4 u = *reinterpret_cast<const uint4*>(page + at);
  amk_vec16 v;
  v.w[0] = u.x;
  v.w[1] = u.y;
  v.w[2] = u.z;
  v.w[3] = u.w;
  float f[TW::per_vec];
  TW::unpack(v, f);
  float d = 0.0f;
#pragma unroll
  for (uint32_t q = 0; q < TW::per_vec / 4; ++q) {
    const float4 x4 = reinterpret_cast<const float4*>(xs)[q];
    d = fmaf(f[4 * q], x4.x, d);
    d = fmaf(f[4 * q + 1], x4.y, d);
    d = fmaf(f[4 * q + 2], x4.z, d);
    d = fmaf(f[4 * q + 3], x4.w, d);
  }
  return d;
}

// y[r] = v[r] (+ residual[r]) with v[r] = sum_k w[r, k] * x'[k], or with w2 (GLU)
// silu(v[r]) * sum_k w2[r, k] * x'[k]: x' = x staged as f32 in s.xs, times norm with the
// rmsnorm fusion (each row's sum then scaled by 1 / rms once), or the merge of attention partials
// (params head_dim and heads). Each page's 512-byte pieces are reduced warp by warp into the row
// sums in shared memory (w's rows, then w2's), the page freed, then the rows stored. `consumed`:
// pages taken so far (the loader's ring order). Returns false when the block is stopping (every
// consumer thread reaches the same return).
template <class = void>
__device__ __forceinline__ bool amk_roles_gemv(const amk_device_program_t& prog,
                                               const amk_instruction_t& ins,
                                               const amk_roles_smem& s, uint32_t& consumed) {
  const amk_roles_gemv_shape g = amk_roles_gemv_of(ins);
  const amk_view x = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const amk_view res = amk_operand(ins, 3);
  const amk_view norm = amk_operand(ins, 4);
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  const uint32_t esize = amk_dtype_size(g.w.dtype);
  for (uint32_t r = threadIdx.x; r < g.mats * g.rows; r += kAmkBlockThreads) s.acc[r] = 0.0f;
  float inv_rms = 1.0f;
  if (amk_gemv_fuses(AMK_GEMV_FUSE_COMBINE) && ins.params[1] != 0) {
    amk_gemv_fuse fuse{};
    fuse.combine_hd = ins.params[1];
    fuse.combine_heads = ins.params[2];
    fuse.combine_chunks = x.n / (ins.params[2] * (ins.params[1] + 2));
    amk_gemv_stage_combine<4>(reinterpret_cast<const float*>(x.ptr), g.k, fuse, s.xs);
  } else if (norm.present()) {
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < g.k; i += kAmkBlockThreads) {
      const float v = amk_load_f32(x, i);
      ss = fmaf(v, v, ss);
      s.xs[i] = v * amk_load_f32(norm, i);
    }
    ss = amk_block_sum(ss, amk_scratch);
    inv_rms = 1.0f / sqrtf(ss / static_cast<float>(g.k) + __uint_as_float(ins.params[0]));
  } else {
    for (uint32_t i = threadIdx.x; i < g.k; i += kAmkBlockThreads) s.xs[i] = amk_load_f32(x, i);
  }
  amk_sync();
  amk_trace_mark(0);  // x' staged
  // Pieces lie within one row when rows are whole pieces: one warp sum a piece, else a shared
  // add a lane.
  const bool whole = g.row_bytes % kAmkPieceBytes == 0;
  bool ok = true;
  for (uint32_t m = 0; m < g.mats; ++m) {
    float* acc = s.acc + m * g.rows;
    for (uint32_t off = 0; off < g.bytes; off += kAmkPageBytes, ++consumed) {
      const uint32_t page = consumed % kAmkPages;
      if (ok)
        ok = amk_roles_wait(prog, ins, amk_state.queue_pos[warp], s.bar(s.page_full, page),
                            (consumed / kAmkPages) & 1u, kAmkDetailPageFull | page);
      ok = __all_sync(kAmkFullMask, ok);          // (the warp's shuffles below need every lane)
      if (m == 0 && off == 0) amk_trace_mark(1);  // the first page landed
      if (ok) {
        const unsigned char* pg = s.pages + page * kAmkPageBytes;
        const uint32_t n = min(kAmkPageBytes, g.bytes - off);
        uint32_t at = off + warp * kAmkPieceBytes + lane * kAmkVectorBytes;
        uint32_t row = at / g.row_bytes, col = at - row * g.row_bytes;  // (col in bytes)
        for (uint32_t piece = warp * kAmkPieceBytes; piece < n; piece += kAmkPieceStride) {
          const uint32_t in_page = piece + lane * kAmkVectorBytes;
          float d = 0.0f;
          if (in_page < n) {
            const float* xs = s.xs + col / esize;
            switch (g.w.dtype) {
              case AMK_DTYPE_BF16: d = amk_roles_dot<AMK_DTYPE_BF16>(pg, in_page, xs); break;
              case AMK_DTYPE_F16: d = amk_roles_dot<AMK_DTYPE_F16>(pg, in_page, xs); break;
              default: d = amk_roles_dot<AMK_DTYPE_F32>(pg, in_page, xs); break;
            }
          }
          if (whole) {
            d = amk_warp_sum(d);
            if (lane == 0) atomicAdd(&acc[row], d);
          } else if (in_page < n) {
            atomicAdd(&acc[row], d);
          }
          col += kAmkPieceStride;
          while (col >= g.row_bytes) {
            col -= g.row_bytes;
            ++row;
          }
        }
      }
      __syncwarp();
      if (lane == 0) amk_mbar_arrive(s.bar(s.page_free, page));
    }
  }
  if (amk_sync_or(!ok)) return false;
  for (uint32_t r = threadIdx.x; r < g.rows; r += kAmkBlockThreads) {
    float v = s.acc[r] * inv_rms;
    if (g.mats == 2) v = amk_gemv_glu(v, s.acc[g.rows + r] * inv_rms);
    amk_gemv_store_row(y, res, r, v);
  }
  return true;
}

// ---- the consumers ----
template <class = void>
__device__ __forceinline__ void amk_roles_consumers(const amk_device_program_t& prog,
                                                    const amk_roles_smem& s, uint32_t len) {
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  uint32_t consumed = 0;      // pages
  bool dirty = false;         // a data op ran since the last consumer barrier
  uint32_t stop_checked = 1;  // early_stop: the last pass whose start read the stop word
  amk_no_wait no_wait;
  for (uint32_t k = 0;; ++k) {
    const uint32_t slot = k % kAmkRoleSlots;
    const amk_instruction_t& ins = s.slots[slot];
    bool stop = !amk_roles_wait(prog, ins, len, s.bar(s.slot_full, slot), (k / kAmkRoleSlots) & 1u,
                                kAmkDetailSlotFull | slot);
    if (amk_sync_or(stop)) return;  // (uniform: the slot is read after every thread saw it full)
    const uint32_t step = s.slot_step[slot * 4];
    if (step == kAmkSlotEnd) return;
    const uint32_t pass = step / len + 1, qpos = step % len;
    if constexpr (kAmkCfg.early_stop) {
      // As the lockstep VM: the block's first step of a pass ends it once feed_token met eos two
      // or more passes before (the loader and the controller then stop at their next wait).
      if (pass != stop_checked) {
        stop_checked = pass;
        if (amk_stop_word_ends(prog, pass)) {
          if (threadIdx.x == 0) *static_cast<volatile uint32_t*>(&amk_state.stop) = 1;
          return;
        }
        dirty = false;
      }
    }
    const uint32_t op = ins.op;
    const uint32_t n_waits = min(static_cast<uint32_t>(ins.n_waits), AMK_MAX_WAITS);
    const uint32_t n_signals = min(static_cast<uint32_t>(ins.n_signals), AMK_MAX_SIGNALS);
    if (n_waits != 0) {
      if (warp == 0 && lane < n_waits) {
        uint32_t counter = ins.waits[lane].counter;
        uint32_t need = ins.waits[lane].value * pass;
        if constexpr (kAmkCfg.stepped) need = amk_wait_need(counter, ins.waits[lane].value, pass);
        if (!amk_wait(prog, ins, counter, need, qpos)) stop = true;
      }
      if (amk_sync_or(stop)) return;
      dirty = false;
    }
    // The trace: the step starts when its waits are over and ends after a barrier behind its op.
    uint64_t t_start = 0;
    if constexpr (kAmkCfg.trace) {
      if (threadIdx.x == 0) {
        t_start = amk_globaltimer();
        amk_trace.marks = prog.trace != nullptr
                              ? prog.trace + static_cast<uint64_t>(ins.index) * kAmkTraceWords + 2
                              : nullptr;
      }
    }
    if (op != 0) {
      if (dirty && amk_sync_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) return;
      amk_state.queue_pos[warp] = qpos;
      if constexpr (kAmkCfg.stepped) amk_pass[warp] = pass;
      if (op == amk_op_bits(amk_op::gemv)) {
        if constexpr (amk_vm_uses(amk_op::gemv)) {
          if (!amk_roles_gemv(prog, ins, s, consumed)) return;
        }
      } else {
        amk_dispatch(prog, ins, nullptr, no_wait);
      }
      dirty = true;
    }
    if constexpr (kAmkCfg.trace) {
      if (amk_sync_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) return;
      dirty = false;
      if (threadIdx.x == 0 && prog.trace != nullptr) {
        prog.trace[static_cast<uint64_t>(ins.index) * kAmkTraceWords] = t_start;
        prog.trace[static_cast<uint64_t>(ins.index) * kAmkTraceWords + 1] = amk_globaltimer();
      }
    }
    if (n_signals != 0) {
      if (dirty) {
        if (amk_sync_or(*static_cast<volatile uint32_t*>(&amk_state.stop) != 0)) return;
        dirty = false;
      }
      if (warp == kAmkSignalWarp && lane < n_signals) {
        const amk_signal_t g = ins.signals[lane];
        amk_red_release(prog.counters + g.counter, g.add);
      }
    }
    __syncwarp();
    if (lane == 0) amk_mbar_arrive(s.bar(s.slot_free, slot));
  }
}

// The VM's body: block blockIdx.x runs queue blockIdx.x, iterations passes.
template <class = void>
__device__ __forceinline__ void amk_vm_roles_main(const amk_device_program_t& prog) {
  if (blockIdx.x >= prog.n_queues) return;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t begin = prog.queue_offsets[blockIdx.x];
  const uint32_t len = prog.queue_offsets[blockIdx.x + 1] - begin;
  if (len == 0) return;
  const uint32_t total = len * (prog.iterations > 0 ? prog.iterations : 1u);
  const amk_roles_smem s = amk_roles_layout();
  if (threadIdx.x == 0) {
    amk_state.stop = 0;
    amk_state.rope_valid = 0;
    amk_attn_block_init();  // (attention's K/V copy barrier, where the tiled path has one)
    amk_state.block_start = amk_globaltimer();
    for (uint32_t i = 0; i < kAmkPages; ++i) {
      amk_mbar_init(s.bar(s.page_full, i), 1);
      amk_mbar_init(s.bar(s.page_free, i), kAmkWarps);
    }
    for (uint32_t i = 0; i < kAmkRoleSlots; ++i) {
      amk_mbar_init(s.bar(s.slot_full, i), kAmkWarpSize);   // the controller's lanes
      amk_mbar_init(s.bar(s.slot_free, i), kAmkWarps + 1);  // the consumer warps and the loader
    }
    amk_mbar_init_fence();
  }
  if (warp < kAmkWarps) amk_buffers_init(prog);
  __syncthreads();  // (the whole block, once: the roles part here)
  if (warp == kAmkControllerWarp)
    amk_roles_controller(prog, s, prog.queue_items + begin, len, total);
  else if (warp == kAmkLoaderWarp) {
    if (threadIdx.x % kAmkWarpSize == 0) amk_roles_loader(prog, s, len);
  } else
    amk_roles_consumers(prog, s, len);
}
