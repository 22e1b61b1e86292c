// What the VM's configuration depends on in a program: read once from the verified program, never
// from a plan (the plan comes later, for the grid the compiled kernel can co-reside).
#pragma once

#include <cstdint>
#include <vector>

#include "config/vm_config.hpp"
#include "program/program.hpp"

namespace amk {

// How an attention_decode chunk runs at 256 threads a block: no work, the tiled path at each
// tile size, or the streaming pass.
enum class AttnPath : uint8_t { none, small_tile, wide_tile, large_tile, pass };

// A program's TMA spec that gemv can stream (rank 2, rows contiguous, no swizzle or interleave,
// unit element strides, float dtype, 16-byte tile rows), the first spec of its buffer.
struct TmaGemvSpec {
  uint32_t slot = 0;  // index into program.tma == position of the map in the kernel parameter
  uint32_t buffer = 0;
  uint32_t box_k = 0;  // elements per tile row
  uint32_t box_rows = 0;
  uint32_t elem_bytes = 0;
  uint64_t dim_k = 0;
  uint64_t dim_rows = 0;
  uint64_t offset = 0;  // elements
};
[[nodiscard]] std::vector<TmaGemvSpec> tma_gemv_specs(const Program& program);

// The most dynamic shared memory gemv's ring (and the staging that shares it) takes a block.
inline constexpr uint64_t kGemvRingCap = 128 * 1024;

struct ProgramFacts {
  uint32_t block = 256;  // launch.block
  uint32_t buffers = 0;
  uint32_t tma_maps = 0;      // TMA specs
  uint32_t dynamic_smem = 0;  // launch.dynamic_smem (the program's own)
  bool custom_ops = false;
  VmOps ops;                     // what the program uses (ops, dtype pairs, fusions)
  bool tma_gemv = false;         // some TMA spec gemv can stream
  bool any_wait = false;         // some instruction waits
  bool gemv_preloads = false;    // some gemv waits and reads weights no instruction writes
  bool attention_waits = false;  // some attention_decode or attention_combine waits
  // The stepped-program paths: a carried wait, a position operand, feed_token, or kv_append's
  // RoPE (theta != 0).
  bool stepped = false;
  // feed_token with an eos operand: the launch may end early (the stop word).
  bool early_stop = false;
  // attention_decode at 256 threads: the largest tile a chunk needs (small when none), whether
  // some chunk needs the streaming pass, and whether every chunk has one query head.
  amk_attn_tile attn_tile_needed = amk_attn_tile::small;
  bool attn_pass_needed = false;
  bool attn_single_heads = false;
  // The largest attention_combine staging (amk_combine_smem_bytes) that fits kGemvRingCap.
  uint64_t combine_staging = 0;
};

[[nodiscard]] ProgramFacts program_facts(const Program& program);

// The path of one attention_decode instruction at 256 threads a block (mirrors the device's
// amk_attn_tile_fits).
[[nodiscard]] AttnPath attention_path(const Program& program, const Instruction& in);

}  // namespace amk
