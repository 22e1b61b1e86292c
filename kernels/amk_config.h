// The VM's typed configuration, compiled by the host and by NVRTC.
//
// amk_vm_config holds every choice the VM is compiled with: the program's shape (derived, not
// tunable) and the tuning fields, each a bool, a ranged integer or an enum. The defaults are the
// member initializers below, written here only. The host's chooser (src/config/choose.cpp) sets
// every field from the program's facts and the device's capabilities; the generated source
// spells the result out as the constant kAmkCfg, and the device code reads it with `if constexpr`.
// amk_vm_ops lists what the program uses, so that only those ops and dtype paths are compiled.
// kernels/README.md describes each field.
#pragma once

#include "amk_abi.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define AMK_HD __host__ __device__
#else
#define AMK_HD
#endif

// The tiled attention's K+V tile: 16, 32 or 64 KiB (group x head_dim up to 256, 512, 512).
enum class amk_attn_tile : uint32_t { small = 0, wide = 1, large = 2 };

struct amk_vm_config {
  // ---- the program's shape: derived by amk, never tuned ----
  uint32_t block_threads = 256;  // threads a block, a multiple of 32 in [32, 1024]
  uint32_t tma_maps = 0;         // CUtensorMap parameters after the program
  bool tma_gemv = false;         // gemv streams the w buffers that have a TMA spec
  bool trace = false;            // per-instruction timestamps and op marks
  bool step_kernel = false;      // amk_step (one instruction a launch) compiled in
  bool stepped = false;          // stepped-program paths: carried waits, the pass, positions
  bool early_stop = false;       // feed_token may end the launch at eos (the stop word)
  uint32_t buffers = 0;          // entries of the buffer table (smem_buffers)

  // ---- tuning: the chooser picks each; `--vm FIELD=VALUE` overrides ----
  bool smem_buffers = false;      // the buffer table copied into shared memory at block start
  uint32_t gemv_ring_stages = 0;  // 0: gemv weights in registers; 2-4: a per-warp smem ring
  uint32_t gemv_preload = 0;      // weight batches a waiting gemv requests before its wait
  uint32_t prefetch_ahead = 1;    // streaming steps ahead whose first bytes go to L2
  bool next_ins_l1 = false;       // after a wait, the next step's instruction into L1
  bool stage_decode_ins = false;  // waiting attention ops read their instruction from smem
  bool gemv_x_batch = false;      // the unfused gemv loads a batch's x before using any
  amk_attn_tile attn_tile = amk_attn_tile::small;
  bool attn_tile_dynamic = false;  // the large tile in dynamic shared memory
  bool attn_pass = true;           // attention's streaming pass compiled in
  bool attn_split = false;         // the tiled path's split score and output stages
  uint32_t attn_split_heads = 4;   // query heads a lane carries in the split stages
  bool attn_row8 = false;          // one-head chunks: stages with eight lanes a row
};

// What the program uses: the ops and the dtype paths the VM compiles in.
struct amk_vm_ops {
  uint32_t ops = 0;              // bit i: built-in op i
  uint32_t gemv_pairs = 0;       // amk_gemv_pair_bit(w, x): a vector gemv for that dtype pair
  uint32_t gemv_plain_only = 0;  // pairs whose gemvs are all plain: no fused instantiations
  uint32_t gemv_fusions = 0;     // AMK_GEMV_FUSE_* bits the program's gemvs use
  uint32_t attn_kv = 0;          // amk_dtype_bit: attention_decode's vector K/V loaders
  uint32_t elt = 0;              // amk_dtype_bit: stored dtypes of the elementwise fast paths
};

#define AMK_GEMV_FUSE_NORM 1u      // rmsnorm of x folded in
#define AMK_GEMV_FUSE_GLU 2u       // a second matrix, silu(W x) * (W2 x)
#define AMK_GEMV_FUSE_NORM_GLU 4u  // both
#define AMK_GEMV_FUSE_COMBINE 8u   // x merged from attention partials

AMK_HD constexpr uint32_t amk_dtype_bit(uint32_t dtype) { return 1u << dtype; }
// Float dtypes only (AMK_DTYPE_F32, F16, BF16: 0, 1, 2).
AMK_HD constexpr uint32_t amk_gemv_pair_bit(uint32_t w, uint32_t x) { return 1u << (w * 3 + x); }
AMK_HD constexpr bool amk_uses_op(const amk_vm_ops& o, amk_op op) {
  return ((o.ops >> static_cast<uint32_t>(op)) & 1u) != 0;
}

// ---- sizes the host and the device share ----
// attention_decode's widest head (the verifier's limit too).
constexpr uint32_t kAmkAttnMaxHeadDim = 256;
// Query heads of a chunk whose new-row scores fit the shared arrays (the tiled path's limit).
constexpr uint32_t kAmkAttnNewHeads = 16;
// Scores (group x positions) the tiled path holds.
constexpr uint32_t kAmkAttnTileScores = 256;
// The tiled attention's K+V bytes and staged-q floats (group x head_dim) at each tile.
AMK_HD constexpr uint32_t amk_attn_tile_bytes(amk_attn_tile t) {
  return t == amk_attn_tile::large ? 65536u : t == amk_attn_tile::wide ? 32768u : 16384u;
}
AMK_HD constexpr uint32_t amk_attn_tile_q_floats(amk_attn_tile t) {
  return t == amk_attn_tile::small ? 256u : 512u;
}
// gemv's weight batch: 8 16-byte vectors a lane, a warp's batch one ring slot.
constexpr uint32_t kAmkGemvUnroll = 8;
constexpr uint32_t kAmkGemvSlotBytes = 32 * kAmkGemvUnroll * 16;
// Dynamic shared memory of gemv's ring: warps x stages x slots.
AMK_HD constexpr uint32_t amk_gemv_ring_bytes(const amk_vm_config& c) {
  return c.block_threads / 32 * c.gemv_ring_stages * kAmkGemvSlotBytes;
}
// attention_combine's staging in gemv's ring: n partials floats (to a
// 16-byte boundary), then a weight for each of their rows of `row` floats.
AMK_HD constexpr uint64_t amk_combine_smem_bytes(uint64_t n, uint64_t row) {
  return ((n + 3) / 4 * 4 + n / row) * 4;
}
// The TMA gemv's pipeline in dynamic shared memory: an alignment pad, the mbarriers (or the row
// partials, whichever is larger), then up to kAmkTmaMaxStages box tiles.
constexpr uint32_t kAmkTmaMaxStages = 4;
constexpr uint32_t kAmkTmaAlign = 128;        // TMA destination alignment (covers swizzle modes)
constexpr uint32_t kAmkTmaBarrierBytes = 64;  // kAmkTmaMaxStages 8-byte mbarriers, padded
AMK_HD constexpr uint32_t amk_tma_stage_bytes(uint32_t box_k, uint32_t box_rows,
                                              uint32_t elem_bytes) {
  return (box_k * box_rows * elem_bytes + kAmkTmaAlign - 1) / kAmkTmaAlign * kAmkTmaAlign;
}
AMK_HD constexpr uint32_t amk_tma_head_bytes(uint32_t box_rows) {
  return (kAmkTmaBarrierBytes + box_rows * 4 + kAmkTmaAlign - 1) / kAmkTmaAlign * kAmkTmaAlign;
}
// x' of the norm-fused and merging gemvs, staged in shared memory (a Llama-3.1-8B hidden state;
// the verifier's limit on a merging gemv's K).
constexpr uint32_t kAmkGemvStageFloats = 4096;

// The first field out of its range, or null. The host refuses such a config before it reaches
// NVRTC; the VM static_asserts the same.
AMK_HD constexpr const char* amk_vm_config_error(const amk_vm_config& c) {
  if (c.block_threads < 32 || c.block_threads > 1024 || c.block_threads % 32 != 0)
    return "block_threads: a multiple of 32 in [32, 1024]";
  if (c.tma_maps > 64) return "tma_maps: at most 64";
  if (c.tma_gemv && c.tma_maps == 0) return "tma_gemv: needs tensor maps";
  if (c.smem_buffers && (c.buffers == 0 || c.buffers > 1024))
    return "smem_buffers: 1 to 1024 buffers";
  if (c.gemv_ring_stages == 1 || c.gemv_ring_stages > 4) return "gemv_ring_stages: 0 or 2-4";
  if (c.gemv_preload > 4) return "gemv_preload: 0-4";
  if (c.prefetch_ahead > 8) return "prefetch_ahead: 0-8";
  if (static_cast<uint32_t>(c.attn_tile) > 2) return "attn_tile: small, wide or large";
  if (c.attn_tile_dynamic && c.attn_tile != amk_attn_tile::large)
    return "attn_tile_dynamic: only with the large tile";
  if (c.attn_split_heads < 1 || c.attn_split_heads > 4) return "attn_split_heads: 1-4";
  if (c.attn_row8 && c.block_threads != 256) return "attn_row8: 256 threads a block only";
  return nullptr;
}
