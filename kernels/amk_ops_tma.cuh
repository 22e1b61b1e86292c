// gemv through the bulk tensor copy engine (TMA). Used when the instruction's w buffer is covered
// by a rank-2 TMA spec whose rows are the matrix rows (dims = [K, rows], no swizzle, no
// interleave, unit element strides; the generated source lists such specs in
// amk_tma_gemv_lookup, which it always defines). Thread 0 keeps up to kAmkTmaMaxStages box-sized tiles in flight in
// dynamic shared memory, each completing on its own mbarrier; all warps reduce a tile while the
// next ones land. Tiles run row-tile major, so row r's partial sums live in shared memory until
// its last column tile. Returns false (the caller takes the plain path) when the instruction
// does not fit the spec or the launch gave too little dynamic shared memory.
#pragma once

#include "amk_device.cuh"

// (kAmkTmaMaxStages, kAmkTmaAlign, amk_tma_stage_bytes, amk_tma_head_bytes: amk_config.h)

__device__ __forceinline__ void amk_tma_load_2d(uint32_t dst, const amk_tensor_map* map, int32_t c0,
                                                int32_t c1, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}

template <uint32_t W, uint32_t X>
__device__ __forceinline__ void amk_gemv_tma_run(
    const amk_device_program_t& prog, const amk_instruction_t& ins, const amk_tensor_map* map,
    const amk_tma_gemv_geom& g, uint32_t r0, uint32_t rows, const amk_view& x, const amk_view& y,
    const amk_view& res, unsigned char* smem, uint32_t head, uint32_t stages,
    uint32_t stage_bytes) {
  typedef amk_ftype<W> TW;
  constexpr uint32_t kPer = TW::per_vec;
  const uint32_t k = x.n;
  const uint32_t warp = threadIdx.x / kAmkWarpSize;
  const uint32_t lane = threadIdx.x % kAmkWarpSize;
  const uint32_t col_tiles = (k + g.box_k - 1) / g.box_k;
  const uint32_t row_tiles = (rows + g.box_rows - 1) / g.box_rows;
  const uint32_t tiles = col_tiles * row_tiles;
  const uint32_t tile_bytes = g.box_k * g.box_rows * g.elem_bytes;
  const uint32_t vecs_per_tile_row = g.box_k / kPer;
  const uint32_t bars = amk_smem_addr(smem);
  float* acc = reinterpret_cast<float*>(smem + kAmkTmaBarrierBytes);
  unsigned char* stage0 = smem + head;  // stage s at stage0 + s * stage_bytes
  const uint32_t stage0_addr = amk_smem_addr(stage0);

  auto issue = [&](uint32_t t) {
    const uint32_t s = t % stages;
    const int32_t c0 = static_cast<int32_t>((t % col_tiles) * g.box_k);
    const int32_t c1 = static_cast<int32_t>(r0 + (t / col_tiles) * g.box_rows);
    amk_mbar_expect_tx(bars + 8 * s, tile_bytes);
    amk_tma_load_2d(stage0_addr + s * stage_bytes, map, c0, c1, bars + 8 * s);
  };

  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < stages; ++s) amk_mbar_init(bars + 8 * s, 1);
    amk_mbar_init_fence();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  for (uint32_t j = threadIdx.x; j < g.box_rows; j += kAmkBlockThreads) acc[j] = 0.0f;
  amk_sync();
  if (threadIdx.x == 0)
    for (uint32_t t = 0; t < stages && t < tiles; ++t) issue(t);

  for (uint32_t t = 0; t < tiles; ++t) {
    const uint32_t s = t % stages;
    const uint32_t ct = t % col_tiles;
    const uint32_t rt = t / col_tiles;
    const bool ok = amk_mbar_wait(prog, ins, bars + 8 * s, (t / stages) & 1u, t);
    if (ok) {
      const unsigned char* tile = stage0 + s * stage_bytes;
      const uint32_t c0 = ct * g.box_k;
      const uint32_t valid_vecs = min(g.box_k, k - c0) / kPer;
      const uint32_t tile_rows = min(g.box_rows, rows - rt * g.box_rows);
      // Row j of the tile belongs to warp j % kAmkWarps, lane 0: the only thread touching acc[j].
      for (uint32_t j = warp; j < tile_rows; j += kAmkWarps) {
        const unsigned char* trow = tile + j * vecs_per_tile_row * kAmkVectorBytes;
        float a0 = 0.0f, a1 = 0.0f;
        for (uint32_t v = lane; v < valid_vecs; v += kAmkWarpSize) {
          float wf[kPer], xf[kPer];
          TW::unpack(*reinterpret_cast<const amk_vec16*>(trow + v * kAmkVectorBytes), wf);
          amk_load_elems<X, kPer>(x.ptr, c0 + v * kPer, xf);
#pragma unroll
          for (uint32_t e = 0; e < kPer; e += 2) {
            a0 = fmaf(wf[e], xf[e], a0);
            a1 = fmaf(wf[e + 1], xf[e + 1], a1);
          }
        }
        const float part = amk_warp_sum(a0 + a1);
        if (lane == 0) {
          const float total = acc[j] + part;
          if (ct + 1 == col_tiles) {
            amk_gemv_store_row(y, res, rt * g.box_rows + j, total);
            acc[j] = 0.0f;
          } else {
            acc[j] = total;
          }
        }
      }
    }
    // Stage s is free once every warp has read it; a failed wait anywhere stops all threads.
    if (amk_sync_or(!ok)) break;
    if (threadIdx.x == 0 && t + stages < tiles) issue(t + stages);
  }
  amk_sync();
  if (threadIdx.x == 0)
    for (uint32_t s = 0; s < stages; ++s) amk_mbar_inval(bars + 8 * s);
}

// The pipeline for dtype pair (W, X), where the program uses the pair; false otherwise.
template <uint32_t W, uint32_t X>
__device__ __forceinline__ bool amk_gemv_tma_pair(
    const amk_device_program_t& prog, const amk_instruction_t& ins, const amk_tensor_map* map,
    const amk_tma_gemv_geom& g, uint64_t r0, uint32_t rows, const amk_view& w, const amk_view& x,
    const amk_view& y, const amk_view& res, unsigned char* smem, uint32_t head, uint32_t stages,
    uint32_t stage_bytes) {
  if constexpr ((kAmkOps.gemv_pairs & amk_gemv_pair_bit(W, X)) != 0) {
    if (w.dtype == W && x.dtype == X) {
      amk_gemv_tma_run<W, X>(prog, ins, map, g, r0, rows, x, y, res, smem, head, stages,
                             stage_bytes);
      return true;
    }
  }
  return false;
}

__device__ __forceinline__ bool amk_gemv_tma(const amk_device_program_t& prog,
                                             const amk_instruction_t& ins, const amk_view& w,
                                             const amk_view& x, const amk_view& y,
                                             const amk_view& res, const amk_tma_table_t* tma) {
  amk_tma_gemv_geom g;
  if (!amk_tma_gemv_lookup(ins.operands[0].buffer, g)) return false;
  const uint32_t k = x.n;
  const uint64_t offset = ins.operands[0].offset;
  if (k == 0 || g.dim_k != k || offset < g.offset || (offset - g.offset) % k != 0) return false;
  if (g.elem_bytes != amk_dtype_size(w.dtype) || !amk_aligned16(x.ptr)) return false;
  if ((static_cast<uint64_t>(k) * g.elem_bytes) % kAmkVectorBytes != 0) return false;
  const uint64_t r0 = (offset - g.offset) / k;
  const uint32_t rows = w.n / k;
  if (rows == 0 || r0 + rows > g.dim_rows || r0 + rows > 0x7FFFFFFFull) return false;

  // Dynamic shared memory: [mbarriers | row partials] then the stages, each 128-byte aligned.
  const uint32_t base = amk_smem_addr(amk_dynamic_smem);
  const uint32_t pad = (kAmkTmaAlign - base % kAmkTmaAlign) % kAmkTmaAlign;
  unsigned char* smem = amk_dynamic_smem + pad;
  const uint32_t dyn = amk_dynamic_smem_size();
  const uint32_t stage_bytes = amk_tma_stage_bytes(g.box_k, g.box_rows, g.elem_bytes);
  const uint32_t head = amk_tma_head_bytes(g.box_rows);
  if (dyn < pad + head + 2 * stage_bytes) return false;
  const uint32_t stages = min(kAmkTmaMaxStages, (dyn - pad - head) / stage_bytes);
  const amk_tensor_map* map = &tma->maps[g.slot];

  constexpr uint32_t F32 = AMK_DTYPE_F32, F16 = AMK_DTYPE_F16, BF16 = AMK_DTYPE_BF16;
  return amk_gemv_tma_pair<F32, F32>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                     stage_bytes) ||
         amk_gemv_tma_pair<F32, F16>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                     stage_bytes) ||
         amk_gemv_tma_pair<F32, BF16>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                      stage_bytes) ||
         amk_gemv_tma_pair<F16, F32>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                     stage_bytes) ||
         amk_gemv_tma_pair<F16, F16>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                     stage_bytes) ||
         amk_gemv_tma_pair<F16, BF16>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                      stage_bytes) ||
         amk_gemv_tma_pair<BF16, F32>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                      stage_bytes) ||
         amk_gemv_tma_pair<BF16, F16>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head, stages,
                                      stage_bytes) ||
         amk_gemv_tma_pair<BF16, BF16>(prog, ins, map, g, r0, rows, w, x, y, res, smem, head,
                                       stages, stage_bytes);
}
