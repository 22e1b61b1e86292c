// Generation of the VM translation unit (kernels/amk_vm.cuh specialized to one program), and
// what the launch side needs to know about it. No CUDA needed.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "cuda/compile.hpp"

namespace amk {

// Bumped whenever the generated source or the cache layout changes meaning (part of the key).
inline constexpr uint32_t kVmCodegenVersion = 1;

// How the TMA gemv streams a matrix covered by one TMA spec.
struct TmaGemvSpec {
  uint32_t slot = 0;        // index into program.tma == position of the map in the kernel param
  uint32_t buffer = 0;
  uint32_t box_k = 0;       // elements per tile row
  uint32_t box_rows = 0;
  uint32_t elem_bytes = 0;
  uint64_t dim_k = 0;
  uint64_t dim_rows = 0;
  uint64_t offset = 0;      // elements
};

// The program's TMA specs that gemv can stream (rank 2, rows contiguous, no swizzle or
// interleave, unit element strides, float dtype, 16-byte tile rows), first spec per buffer.
[[nodiscard]] std::vector<TmaGemvSpec> tma_gemv_specs(const Program& program);

// Dynamic shared memory (bytes) the TMA gemv wants for its pipeline (kernels/amk_ops_tma.cuh:
// alignment pad + mbarriers/row partials + up to 4 stages of the largest box), capped so that it
// fits next to the VM's static shared memory in `smem_optin` bytes; 0 when the program has no
// TMA gemv. The kernel reads %dynamic_smem_size and takes the plain gemv path when it was given
// less than two stages' worth, so any value is safe; launch with max(program.launch.dynamic_smem,
// this).
[[nodiscard]] uint32_t vm_dynamic_smem_bytes(const Program& program, const Plan& plan,
                                             uint32_t smem_optin = 232448,
                                             const CompileOptions& options = {});

// Whether the VM is built with the wide tiled attention (AMK_ATTN_TILED_WIDE=1: 32 KiB of K+V and
// group x head_dim up to 512 in shared memory, ~17 KiB more static shared memory): the tuning's
// value when it names the macro, else whether some attention_decode chunk of the plan fits the
// tiled path only at the wide size (at 256 threads a block, 16-bit caches, f32 q).
[[nodiscard]] bool attention_wide_tiles(const Program& program, const Plan& plan,
                                        const CompileOptions& options);

// Whether the VM is built with attention_decode's streaming pass (AMK_ATTN_PASS): the tuning's
// value when it names the macro; else whether some attention_decode instruction of the plan would
// take it (a chunk the tiled path does not fit at the tile the VM gets, the tiled path off by
// tuning, or a block other than 256 threads). Without it a chunk reaching the pass stops the
// launch with a bad_operand status.
[[nodiscard]] bool attention_pass_needed(const Program& program, const Plan& plan,
                                         const CompileOptions& options);

// Whether the VM holds the buffer table in shared memory (AMK_SMEM_BUFFERS, kernels/
// amk_device.cuh): never for more than 1024 buffers; else the tuning's value when it names the
// macro; else whether some step of the plan waits (a wait's acquire fence invalidates L1, so the
// operand decode after it would read the global table from L2; without waits L1 serves it, and
// the shared table's registers could cost a VM its second block an SM, as measured on the GEMV
// benchmark: 128 -> 139 registers).
[[nodiscard]] bool smem_buffer_table(const Program& program, const Plan& plan,
                                     const CompileOptions& options);

// Whether the VM is built with the gemv preload (AMK_GEMV_PRELOAD, kernels/amk_sync.cuh): the
// tuning's value when it names the macro, else whether some gemv of the plan waits and reads
// weights no instruction writes (AMK_INS_CONST_WEIGHTS), the only steps that preload. Without it
// the source sets the macro to 0 (same results; the preload's registers can cost occupancy).
[[nodiscard]] bool gemv_preload_needed(const Plan& plan, const CompileOptions& options);

// Whether attention steps read a copy of their instruction from shared memory
// (AMK_STAGE_DECODE_INS, kernels/amk_vm.cuh): the tuning's value when it names the macro, else
// whether some attention_decode or attention_combine step waits, no attention_combine_splitk is
// compiled in (that VM spills with the copy) and the VM has the default attention tile, not the
// wide one (attention_wide_tiles: the Llama-3.1-8B step, which measured faster without the copy on
// the H200, `amk profile --events --tuning-arms`, two calls: 4.512 -> 4.480 and 4.510 -> 4.477
// ms, while the 1B step measured slower without it, 1.034 -> 1.040). Without it the source sets
// the macro to 0. attention_preload: the VM's attention_decode steps whose K/V no instruction
// writes run their own waits (vm_choices' attention_preload with gemv's preload), so are never
// staged; where those are all the waiting attention steps, nothing is staged and the copy is out.
[[nodiscard]] bool stage_decode_ins(const Program& program, const Plan& plan,
                                    const CompileOptions& options, bool attention_preload);

// gemv's weight ring (AMK_GEMV_SMEM_STAGES, kernels/amk_ops_gemv.cuh): each warp streams its
// weight batches (kGemvSlotBytes each) through this many slots of dynamic shared memory with
// cp.async instead of holding two batches in registers. The tuning's value when it names the
// macro; else kGemvSmemStagesDefault where the gemv preload is compiled in (some gemv waits on
// weights no instruction writes: the decode steps, whose VM runs one block an SM) and 0 elsewhere
// (the GEMV benchmarks, two blocks an SM, measured faster on registers); 0 (the register path)
// where the program has a TMA gemv, weight streams or dynamic shared memory of its own (all of
// them use the same memory), and fewer stages while the ring would exceed kGemvRingCap (below 2:
// 0). Measured on the H200 (`amk profile --events --tuning-arms`, one process): Llama-3.2-1B step
// 1.089 ms on registers, 1.036 with 2 stages, 1.039 with 3, 1.064 with 4; Llama-3.1-8B 4.868,
// 4.509, 4.527; GEMV 8 x 4096^2 (no waits) 71.5 us on registers, 76.1 / 78.1 / 87.6 on the ring.
inline constexpr uint32_t kGemvSmemStagesDefault = 2;
inline constexpr uint32_t kGemvSlotBytes = 32 * 8 * 16;  // kAmkGemvBatch x 16-byte vectors
inline constexpr uint32_t kGemvRingCap = 128 * 1024;
[[nodiscard]] uint32_t gemv_smem_stages(const Program& program, const Plan& plan,
                                        const CompileOptions& options);
// Dynamic shared memory the ring takes: warps x stages x kGemvSlotBytes (0 without it).
[[nodiscard]] uint32_t gemv_ring_bytes(const Program& program, const Plan& plan,
                                       const CompileOptions& options);

// A tuning's value for `name`, if it names it (its first entry, as the generated source decides).
[[nodiscard]] std::optional<int64_t> tuning_value(const CompileOptions& options,
                                                  std::string_view name);

// What the generated source decides for a program's VM, beside the ops and dtypes it lists
// (`amk compile` prints it; its JSON has it as "vm"). -1: the op is not in the program.
struct VmChoices {
  int gemv_preload = -1;         // weight batches a waiting gemv requests first (0: off)
  bool smem_buffer_table = false;
  int attention_wide_tile = -1;  // 0 / 1 / 2 (AMK_ATTN_TILED_WIDE: default, wide, large tile)
  int attention_pass = -1;       // 0 / 1: attention's streaming pass compiled in
  int stage_decode_ins = -1;     // 0 / 1 with attention ops: instruction read from shared memory
  bool weight_streams = false;
  int gemv_smem_stages = -1;     // with gemv: weight batches a warp in shared memory (0: registers)
  int prefetch_ahead = -1;       // streaming steps ahead whose first bytes a step asks L2 for
  int combine_smem = -1;         // 0 / 1 with attention_combine: partials staged in shared memory
  int attention_preload = -1;    // 0 / 1 with attention_decode: K/V copies issued before the waits
  int attention_row8 = -1;       // 0 / 1 with attention_decode: one-head stages, eight lanes a row
};
// Whether attention_combine stages its partials in the launch's dynamic shared memory
// (AMK_COMBINE_SMEM; the tuning decides where the VM could).
[[nodiscard]] bool combine_staged(const Program& program, const Plan& plan,
                                  const CompileOptions& options);
// Dynamic shared memory an attention_combine instruction stages (its partials, then a weight for
// each of their head_dim + 2 rows).
[[nodiscard]] uint64_t combine_smem_bytes(const amk_instruction_t& ins);
[[nodiscard]] VmChoices vm_choices(const Program& program, const Plan& plan,
                                   const CompileOptions& options);

// Weight-stream ring (kernels/amk_stream.cuh). Slots wanted: the AMK_STREAM_SLOTS tuning value
// when given, else kStreamSlots; 0 is off. Off by default: measured slower than the plain gemv
// on the Llama step on the H200 (README, performance section); AMK_VM_TUNING=AMK_STREAM_SLOTS=10
// turns it on (the ring must fit beside the widest x, else it is off with a warning).
inline constexpr uint32_t kStreamSlots = 0;
[[nodiscard]] uint32_t stream_slots_wanted(const CompileOptions& options);
// Whether vm_source compiles the weight streams in: the plan has some and the tuning wants slots.
[[nodiscard]] bool streams_compiled(const Plan& plan, const CompileOptions& options);
// Floats of x the ring stages: the widest streamed gemv's K (AMK_STREAM_X_FLOATS).
[[nodiscard]] uint32_t stream_x_floats(const Plan& plan);
// Dynamic shared memory a ring of `slots` slots takes: alignment pad, 2 mbarriers per slot
// (rounded to 128 bytes), the row sums, x (`x_floats`, rounded to 128 bytes), the slots.
[[nodiscard]] uint64_t stream_smem_bytes(uint32_t slots, uint32_t x_floats);
// `wanted` when a ring of that many slots (2..64; the kernel is compiled for exactly that
// count) fits in `avail` bytes, else 0 (streams off for the launch).
[[nodiscard]] uint32_t stream_slots_fitting(uint32_t wanted, uint32_t x_floats, uint64_t avail);

}  // namespace amk
