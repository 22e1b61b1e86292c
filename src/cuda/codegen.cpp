// The VM translation unit for one program: macros that switch on only the ops (and dtype pairs)
// the program uses, the TMA geometry table, trusted custom op sources, then kernels/amk_vm.cuh.
// Program text reaches NVRTC only through custom op sources: everything else emitted here is a
// number derived from the program (plus tuning macros from the environment: validated names,
// integer values).
#include "cuda/codegen.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <set>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

constexpr uint32_t kTmaStages = 4;           // kAmkTmaMaxStages in kernels/amk_ops_tma.cuh
constexpr uint32_t kTmaAlign = 128;          // kAmkTmaAlign
constexpr uint32_t kTmaBarrierBytes = 64;    // kAmkTmaBarrierBytes
constexpr uint32_t kVmStaticSmemSlack = 4096;  // the VM's static shared memory, rounded up
constexpr uint32_t kVectorBytes = 16;

// Macro suffix of each built-in op id (AMK_USE_OP_<NAME>).
constexpr std::array<std::string_view, 19> kOpMacros = {
    "NOP",     "COPY",      "FILL",      "ADD",          "MUL",
    "SCALE",   "SILU_MUL",  "RMSNORM",   "SOFTMAX",      "GEMV",
    "ARGMAX",  "EMBEDDING", "ROPE",      "KV_APPEND",    "ATTENTION_DECODE",
    "ATTENTION_COMBINE", "GEMV_SPLITK", "ATTENTION_COMBINE_SPLITK", "GEMV_T"};

// Ops whose device code lives in kernels/amk_ops_attention.cuh (attention_combine_splitk's header
// includes it itself for the merge).
bool is_attention_op(uint16_t id) {
  return id >= static_cast<uint16_t>(OpId::rope) &&
         id <= static_cast<uint16_t>(OpId::attention_combine);
}
// Static shared memory attention_decode adds (amk_attn_merge: kAmkAttnMergeFloats floats at
// 8 warps, 4 heads per pass, 130 floats per head; the new row's 16 scores and 256 values; the
// tiled path's staged q, scores and rotated k_new, 256 floats each, and 3 x 16 per-head floats).
constexpr uint32_t kAttentionMergeBytes = 8 * 4 * 130 * 4 + (16 + 256) * 4 + (3 * 256 + 3 * 16) * 4;
// With the wide tiled attention (AMK_ATTN_TILED_WIDE=1): the merge buffer holds 32 KiB (a chunk's K
// and V) and the staged q 512 floats.
constexpr uint32_t kAttentionWideMergeBytes =
    8192 * 4 + (16 + 256) * 4 + (512 + 2 * 256 + 3 * 16) * 4;
// The large tile (AMK_ATTN_TILED_WIDE=2): 64 KiB.
constexpr uint32_t kAttentionLargeMergeBytes = kAttentionWideMergeBytes + 8192 * 4;
// Static shared memory the norm-fused gemv adds (amk_gemv_xs: kAmkGemvStageFloats floats, and
// amk_gemv_ss: one float per warp, at most 32 warps).
constexpr uint32_t kGemvStageBytes = 4096 * 4 + 32 * 4;
// Static shared memory attention_combine_splitk adds (amk_combine_xs: kCombineSplitkMaxK floats,
// passed to the kernel as AMK_COMBINE_SPLITK_MAX_K).
constexpr uint32_t kCombineSplitkBytes = 4 * static_cast<uint32_t>(kCombineSplitkMaxK);
// AMK_SMEM_BUFFERS: the most buffers whose table a block holds in shared memory (8 bytes each).
constexpr size_t kSmemBufferCap = 1024;

// A gemv that stages x' in shared memory: the norm-fused ones and the merging ones (param head_dim).
bool has_norm_gemv(const Plan& plan) {
  for (const amk_instruction_t& ins : plan.instructions)
    if (ins.op == static_cast<uint16_t>(OpId::gemv) &&
        ((ins.n_operands > 4 && ins.operands[4].buffer != AMK_NO_BUFFER) || ins.params[1] != 0))
      return true;
  return false;
}

std::string_view float_macro(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    default: return {};
  }
}

bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > 200) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

uint32_t round_up(uint32_t v, uint32_t to) { return (v + to - 1) / to * to; }

// The dtype of operand k of an instruction, if it names a buffer of the program.
std::optional<DType> operand_dtype(const Program& program, const amk_instruction_t& ins,
                                   uint32_t k) {
  if (k >= ins.n_operands) return std::nullopt;
  const uint32_t b = ins.operands[k].buffer;
  if (b == AMK_NO_BUFFER || b >= program.buffers.size()) return std::nullopt;
  return program.buffers[b].dtype;
}

uint32_t block_threads(const Program& program, const Plan& plan) {
  const uint32_t block = plan.block != 0 ? plan.block : program.launch.block;
  if (block < 32 || block > 1024 || block % 32 != 0)
    throw Error(ErrorKind::program, "launch.block", "/launch/block",
                "block must be a multiple of 32 in [32, 1024], got " + std::to_string(block));
  return block;
}

// Op ids the plan uses (the plan's list, or derived from its instructions).
std::set<uint16_t> used_ops(const Plan& plan) {
  std::set<uint16_t> ops(plan.ops_used.begin(), plan.ops_used.end());
  if (ops.empty())
    for (const amk_instruction_t& ins : plan.instructions) ops.insert(ins.op);
  return ops;
}

uint32_t stage_bytes(const TmaGemvSpec& s) {
  return round_up(s.box_k * s.box_rows * s.elem_bytes, kTmaAlign);
}
uint32_t head_bytes(const TmaGemvSpec& s) {
  return round_up(kTmaBarrierBytes + s.box_rows * 4, kTmaAlign);
}

}  // namespace

std::vector<TmaGemvSpec> tma_gemv_specs(const Program& program) {
  std::vector<TmaGemvSpec> out;
  std::set<uint32_t> covered;
  for (size_t i = 0; i < program.tma.size(); ++i) {
    const TmaSpec& t = program.tma[i];
    if (t.buffer >= program.buffers.size() || covered.count(t.buffer)) continue;
    const DType dt = program.buffers[t.buffer].dtype;
    if (!dtype_is_float(dt)) continue;
    const uint32_t esize = static_cast<uint32_t>(dtype_size(dt));
    if (t.dims.size() != 2 || t.box.size() != 2) continue;
    if (t.swizzle != TmaSwizzle::none || t.interleave != TmaInterleave::none) continue;
    if (!std::all_of(t.element_strides.begin(), t.element_strides.end(),
                     [](uint32_t s) { return s == 1; }))
      continue;
    if (!t.strides.empty() && t.strides[0] != t.dims[0] * esize) continue;
    if (t.box[0] == 0 || t.box[1] == 0 || (t.box[0] * esize) % kVectorBytes != 0) continue;
    if (t.dims[0] > 0xFFFFFFFFull) continue;
    TmaGemvSpec s;
    s.slot = static_cast<uint32_t>(i);
    s.buffer = t.buffer;
    s.box_k = t.box[0];
    s.box_rows = t.box[1];
    s.elem_bytes = esize;
    s.dim_k = t.dims[0];
    s.dim_rows = t.dims[1];
    s.offset = t.offset;
    out.push_back(s);
    covered.insert(t.buffer);
  }
  return out;
}

std::optional<int64_t> tuning_value(const CompileOptions& options, std::string_view name) {
  for (const auto& [n, value] : options.tuning)
    if (n == name) return value;
  return std::nullopt;
}

namespace {

// Which path an attention_decode instruction takes in the VM at 256 threads a block, mirroring
// amk_op_attention_decode and amk_attn_tile_fits (kernels/amk_ops_attention.cuh): no work, the
// tiled path at the default tile, the tiled path only at the wide tile, or the streaming pass.
enum class AttnPath { none, tile, wide_tile, large_tile, pass };

AttnPath attention_path(const Program& program, const amk_instruction_t& ins) {
  constexpr uint32_t kMaxHeadDim = 256;  // kAmkAttnMaxHeadDim
  const uint32_t hd = ins.params[0];
  if (ins.n_operands < 4 || hd == 0 || hd > kMaxHeadDim) return AttnPath::none;
  auto present = [&](uint32_t k) {
    return k < ins.n_operands && ins.operands[k].buffer != AMK_NO_BUFFER &&
           ins.operands[k].buffer < program.buffers.size();
  };
  const bool cached = present(1) && ins.operands[1].extent >= hd;
  const bool has_new = present(4) && present(5) && ins.operands[4].extent >= hd &&
                       ins.operands[5].extent >= hd;
  if (!cached && !has_new) return AttnPath::none;
  if (!cached || !present(0) || !present(2)) return AttnPath::pass;
  const auto q = operand_dtype(program, ins, 0), k = operand_dtype(program, ins, 1),
             v = operand_dtype(program, ins, 2);
  if (q != DType::f32 || (k != DType::bf16 && k != DType::f16) || v != k) return AttnPath::pass;
  if (has_new && (operand_dtype(program, ins, 4) != DType::f32 ||
                  operand_dtype(program, ins, 5) != DType::f32))
    return AttnPath::pass;
  // 16-byte aligned K and V rows: buffers are 256-byte aligned, so the offsets decide.
  const uint64_t esize = dtype_size(*k);
  if (hd % 8 != 0 || (ins.operands[1].offset * esize) % 16 != 0 ||
      (ins.operands[2].offset * esize) % 16 != 0)
    return AttnPath::pass;
  const uint64_t len = ins.operands[1].extent / hd;
  const uint32_t group = static_cast<uint32_t>(ins.operands[0].extent / hd);
  if (len < 1 || ins.operands[2].extent / hd < len || group < 1 || group > 16 ||
      uint64_t{group} * len > 256)
    return AttnPath::pass;
  const uint64_t kv = 4ull * len * hd, gh = uint64_t{group} * hd;
  if (kv <= 16384 && gh <= 256) return AttnPath::tile;
  if (kv <= 32768 && gh <= 512) return AttnPath::wide_tile;
  if (kv <= 65536 && gh <= 512) return AttnPath::large_tile;
  return AttnPath::pass;
}

// AMK_ATTN_TILED_WIDE's level: 2 where some chunk needs the large tile (64 KiB), 1 the wide one
// (32 KiB), else 0.
int attention_tile_level(const Program& program, const Plan& plan, const CompileOptions& options) {
  if (const auto t = tuning_value(options, "AMK_ATTN_TILED_WIDE"))
    return static_cast<int>(std::clamp<int64_t>(*t, 0, 2));
  if (block_threads(program, plan) != 256) return 0;  // the tiled path's block
  int level = 0;
  for (const amk_instruction_t& ins : plan.instructions)
    if (ins.op == static_cast<uint16_t>(OpId::attention_decode)) {
      const AttnPath path = attention_path(program, ins);
      if (path == AttnPath::large_tile) level = 2;
      if (path == AttnPath::wide_tile) level = std::max(level, 1);
    }
  return level;
}

// Every attention_decode chunk has one query head (`amk gen llama --combine oproj`).
bool attention_single_heads(const Plan& plan) {
  bool any = false;
  for (const amk_instruction_t& ins : plan.instructions)
    if (ins.op == static_cast<uint16_t>(OpId::attention_decode)) {
      if (ins.params[0] == 0 || ins.n_operands < 1 || ins.operands[0].extent != ins.params[0])
        return false;
      any = true;
    }
  return any;
}

}  // namespace

bool attention_wide_tiles(const Program& program, const Plan& plan,
                          const CompileOptions& options) {
  return attention_tile_level(program, plan, options) != 0;
}

bool attention_pass_needed(const Program& program, const Plan& plan,
                           const CompileOptions& options) {
  if (const auto t = tuning_value(options, "AMK_ATTN_PASS")) return *t != 0;
  if (tuning_value(options, "AMK_ATTN_TILED").value_or(1) == 0) return true;
  if (block_threads(program, plan) != 256) return true;
  const int level = attention_tile_level(program, plan, options);
  for (const amk_instruction_t& ins : plan.instructions) {
    if (ins.op != static_cast<uint16_t>(OpId::attention_decode)) continue;
    const AttnPath path = attention_path(program, ins);
    if (path == AttnPath::pass || (path == AttnPath::wide_tile && level < 1) ||
        (path == AttnPath::large_tile && level < 2))
      return true;
  }
  return false;
}

bool smem_buffer_table(const Program& program, const Plan& plan, const CompileOptions& options) {
  if (program.buffers.empty() || program.buffers.size() > kSmemBufferCap) return false;
  if (const auto t = tuning_value(options, "AMK_SMEM_BUFFERS")) return *t != 0;
  return std::any_of(plan.instructions.begin(), plan.instructions.end(),
                     [](const amk_instruction_t& ins) { return ins.n_waits != 0; });
}

// AMK_GEMV_PRELOAD's default in kernels/amk_sync.cuh (two batches), and the level the generated
// source sets where gemv's weights go through the ring. Measured on the H200 (`amk profile
// --events --tuning-arms`, one process, twenty-third session): one batch before the wait instead
// of two, Llama-3.2-1B step 0.9876 -> 0.9780 ms (three rounds, every one lower), Llama-3.1-8B
// 4.3330 -> 4.3249 (two). Half the bytes each block puts in flight at a phase boundary, where the
// latency-bound steps' round trips queue behind them (an L2 round trip under 32 KiB a block in
// flight: ~525 ns; under 64 KiB: ~820 ns, the seventeenth session's probe).
constexpr int kGemvPreloadDefault = 2;
constexpr int kGemvPreloadRing = 1;

bool gemv_preload_needed(const Plan& plan, const CompileOptions& options) {
  if (const auto t = tuning_value(options, "AMK_GEMV_PRELOAD")) return *t != 0;
  for (const amk_instruction_t& ins : plan.instructions)
    if (ins.op == static_cast<uint16_t>(OpId::gemv) && ins.n_waits != 0 &&
        (ins.flags & AMK_INS_CONST_WEIGHTS) != 0)
      return true;
  return false;
}

// AMK_STAGE_DECODE_INS (kernels/amk_vm.cuh): on where attention_decode or attention_combine
// steps wait, unless attention_combine_splitk is compiled in too (that VM spills with it: the
// --o-proj split layout, measured slower anyway). With the wide attention tile (the 8B step) it
// was off from the eighteenth session to the twentieth, which measured it on again three times,
// -1.0 to -1.1% (README, twentieth session). An attention_decode that runs its own waits
// (attention_preload: AMK_ATTN_PRELOAD with gemv's preload machinery, on its steps whose K/V no
// instruction writes) is never staged, so where every waiting attention step is such a one (the
// 1B step's `--combine oproj` layout) the copy is left out: the ops then read their instruction
// through one path, measured 0.994x and 0.995x of the staging VM's time there (twenty-ninth
// session, two calls, `amk profile --events --tuning-arms`).
bool stage_decode_ins(const Program&, const Plan& plan, const CompileOptions& options,
                      bool attention_preload) {
  if (const auto t = tuning_value(options, "AMK_STAGE_DECODE_INS")) return *t != 0;
  bool staged = false;
  for (const amk_instruction_t& ins : plan.instructions) {
    if (ins.op == static_cast<uint16_t>(OpId::attention_combine_splitk)) return false;
    const bool runs_own_wait = ins.op == static_cast<uint16_t>(OpId::attention_decode) &&
                               attention_preload && (ins.flags & AMK_INS_CONST_WEIGHTS) != 0;
    if ((ins.op == static_cast<uint16_t>(OpId::attention_decode) ||
         ins.op == static_cast<uint16_t>(OpId::attention_combine)) &&
        ins.n_waits != 0 && !runs_own_wait)
      staged = true;
  }
  return staged;
}

uint32_t gemv_smem_stages(const Program& program, const Plan& plan,
                          const CompileOptions& options) {
  if (!used_ops(plan).count(static_cast<uint16_t>(OpId::gemv))) return 0;
  // The ring lives at the start of dynamic shared memory, which the TMA gemv, the weight streams
  // and a program's own dynamic shared memory use too.
  if (!tma_gemv_specs(program).empty() || streams_compiled(plan, options) ||
      program.launch.dynamic_smem != 0)
    return 0;
  uint32_t stages = static_cast<uint32_t>(tuning_value(options, "AMK_GEMV_SMEM_STAGES")
                                              .value_or(gemv_preload_needed(plan, options)
                                                            ? kGemvSmemStagesDefault
                                                            : 0));
  const uint32_t warps = block_threads(program, plan) / 32;
  while (stages >= 2 && uint64_t{warps} * stages * kGemvSlotBytes > kGemvRingCap) --stages;
  return stages >= 2 ? stages : 0;
}

uint32_t gemv_ring_bytes(const Program& program, const Plan& plan, const CompileOptions& options) {
  return block_threads(program, plan) / 32 * gemv_smem_stages(program, plan, options) *
         kGemvSlotBytes;
}

uint64_t combine_smem_bytes(const amk_instruction_t& ins) {
  const uint64_t n = ins.operands[0].extent, row = uint64_t{ins.params[0]} + 2;
  return ((n + 3) / 4 * 4 + n / row) * 4;  // the partials (16-byte aligned end), a weight a row
}

// AMK_COMBINE_SMEM (kernels/amk_ops_attention.cuh): attention_combine stages its partials in
// the launch's dynamic shared memory where the VM has gemv's ring there (the decode steps), which
// no instruction keeps across instructions (gemv_smem_stages: no TMA gemv, no weight streams, no
// dynamic shared memory the program declares for itself). vm_dynamic_smem_bytes grows the ring
// to the largest combine's staging up to the ring's cap; a larger combine runs the register path.
bool combine_staged(const Program& program, const Plan& plan, const CompileOptions& options) {
  if (!used_ops(plan).count(static_cast<uint16_t>(OpId::attention_combine))) return false;
  if (gemv_ring_bytes(program, plan, options) == 0) return false;
  return tuning_value(options, "AMK_COMBINE_SMEM").value_or(1) != 0;
}

VmChoices vm_choices(const Program& program, const Plan& plan, const CompileOptions& options) {
  const std::set<uint16_t> ops = used_ops(plan);
  VmChoices c;
  if (ops.count(static_cast<uint16_t>(OpId::gemv))) {
    c.gemv_smem_stages = static_cast<int>(gemv_smem_stages(program, plan, options));
    // Batches a waiting gemv requests before its wait: two in registers (the kernel's default),
    // one through the ring (kGemvPreloadRing).
    const int level = c.gemv_smem_stages > 0 ? kGemvPreloadRing : kGemvPreloadDefault;
    c.gemv_preload = static_cast<int>(tuning_value(options, "AMK_GEMV_PRELOAD")
                                          .value_or(gemv_preload_needed(plan, options) ? level
                                                                                       : 0));
  }
  c.smem_buffer_table = smem_buffer_table(program, plan, options);
  if (ops.count(static_cast<uint16_t>(OpId::attention_decode))) {
    c.attention_wide_tile = attention_tile_level(program, plan, options);
    c.attention_pass = attention_pass_needed(program, plan, options) ? 1 : 0;
    // AMK_ATTN_ROW8 (kernels/amk_ops_attention.cuh; 0 there): where every chunk has one query
    // head, the tiled path's stages with eight lanes a row (head_dim 64 or 128).
    const bool single = attention_single_heads(plan);
    c.attention_row8 =
        static_cast<int>(tuning_value(options, "AMK_ATTN_ROW8").value_or(single ? 1 : 0) != 0);
    // AMK_ATTN_PRELOAD (kernels/amk_sync.cuh; 0 there): chunks of one query head on the large
    // tile copy 64 KiB of K/V each, and where the preload's machinery is in (gemvs that wait and
    // preload) they issued those copies before their waits, measured faster there with the split
    // stages (twenty-eighth session). With the stages of eight lanes a row the copies after the
    // wait measured faster (thirty-first session, `amk profile --events --tuning-arms`, the 1B
    // step, three rounds: 0.8880 ms with the copies before, 0.8821 after, 0.993x), so the preload
    // is on only where those stages are off.
    const bool preload = c.attention_wide_tile == 2 && c.gemv_preload > 0 && single &&
                         c.attention_row8 == 0;
    c.attention_preload =
        static_cast<int>(tuning_value(options, "AMK_ATTN_PRELOAD").value_or(preload ? 1 : 0) != 0);
  }
  if (ops.count(static_cast<uint16_t>(OpId::attention_decode)) ||
      ops.count(static_cast<uint16_t>(OpId::attention_combine)) ||
      ops.count(static_cast<uint16_t>(OpId::attention_combine_splitk)))
    c.stage_decode_ins =
        stage_decode_ins(program, plan, options, c.attention_preload == 1 && c.gemv_preload > 0)
            ? 1
            : 0;
  c.weight_streams = streams_compiled(plan, options);
  // AMK_PREFETCH_AHEAD (kernels/amk_vm.cuh): the L2 prefetch of the next streaming step's first
  // bytes pays where steps stream independently (the GEMV benchmarks); where gemvs wait and
  // preload (the decode steps) it measured slower on the H200 (README, nineteenth session).
  constexpr int kPrefetchAheadDefault = 1;  // AMK_PREFETCH_AHEAD's default in kernels/amk_vm.cuh
  c.prefetch_ahead = static_cast<int>(tuning_value(options, "AMK_PREFETCH_AHEAD")
                                          .value_or(gemv_preload_needed(plan, options)
                                                        ? 0
                                                        : kPrefetchAheadDefault));
  if (ops.count(static_cast<uint16_t>(OpId::attention_combine)))
    c.combine_smem = combine_staged(program, plan, options) ? 1 : 0;
  return c;
}

uint32_t vm_dynamic_smem_bytes(const Program& program, const Plan& plan, uint32_t smem_optin,
                               const CompileOptions& options) {
  const std::set<uint16_t> ops = used_ops(plan);
  if (!ops.count(static_cast<uint16_t>(OpId::gemv))) return 0;
  // The gemv ring (only where no TMA gemv is: gemv_smem_stages), grown to the largest staged
  // attention_combine's partials up to the ring's cap (the Llama-3.1-8B step's 65 KiB against a
  // 64 KiB ring; such a VM runs one block an SM either way).
  if (const uint32_t ring = gemv_ring_bytes(program, plan, options); ring != 0) {
    uint64_t partials = 0;
    if (combine_staged(program, plan, options))
      for (const amk_instruction_t& ins : plan.instructions)
        if (ins.op == static_cast<uint16_t>(OpId::attention_combine))
          if (const uint64_t need = combine_smem_bytes(ins); need <= kGemvRingCap)
            partials = std::max(partials, need);
    return std::max(ring, static_cast<uint32_t>(partials));
  }
  uint32_t best = 0;
  uint32_t slack = kVmStaticSmemSlack;
  if (ops.count(static_cast<uint16_t>(OpId::attention_decode))) {
    const int level = attention_tile_level(program, plan, options);
    slack += level == 2 ? kAttentionLargeMergeBytes
             : level == 1 ? kAttentionWideMergeBytes
                          : kAttentionMergeBytes;
  }
  if (has_norm_gemv(plan)) slack += kGemvStageBytes;
  if (ops.count(static_cast<uint16_t>(OpId::attention_combine_splitk)))
    slack += kCombineSplitkBytes;
  if (smem_buffer_table(program, plan, options))
    slack += 8 * static_cast<uint32_t>(program.buffers.size());
  const uint32_t budget = smem_optin > slack ? smem_optin - slack : 0;
  for (const TmaGemvSpec& s : tma_gemv_specs(program)) {
    for (uint32_t stages = kTmaStages; stages >= 2; --stages) {
      const uint64_t need = uint64_t{kTmaAlign} + head_bytes(s) + uint64_t{stages} * stage_bytes(s);
      if (need <= budget) {
        best = std::max(best, static_cast<uint32_t>(need));
        break;
      }
    }
  }
  return best;
}

uint32_t stream_slots_wanted(const CompileOptions& options) {
  for (const auto& [name, value] : options.tuning)
    if (name == "AMK_STREAM_SLOTS")
      return value >= 2 && value <= 64 ? static_cast<uint32_t>(value) : 0u;  // parse_vm_tuning checked
  return kStreamSlots;
}

uint32_t stream_x_floats(const Plan& plan) {
  uint32_t k = 0;
  for (const amk_stream_entry_t& e : plan.stream_entries)
    if (e.item < plan.instructions.size())
      k = std::max(k, plan.instructions[e.item].operands[1].extent);
  return k;
}

bool streams_compiled(const Plan& plan, const CompileOptions& options) {
  return plan.has_streams() && stream_slots_wanted(options) != 0;
}

uint64_t stream_smem_bytes(uint32_t slots, uint32_t x_floats) {
  const uint64_t bars = (16ull * slots + 127) / 128 * 128;
  const uint64_t xs = (4ull * x_floats + 127) / 128 * 128;
  return 128 + bars + 8ull * AMK_STREAM_MAX_ROWS + xs + uint64_t{slots} * AMK_STREAM_SLOT_BYTES;
}

uint32_t stream_slots_fitting(uint32_t wanted, uint32_t x_floats, uint64_t avail) {
  return wanted >= 2 && wanted <= 64 && stream_smem_bytes(wanted, x_floats) <= avail ? wanted : 0;
}

namespace {

// Tuning macros whose values outside a range would not compile, or compile into a VM that hangs
// (AMK_COMBINE_BATCH=0 never leaves its loop): their range, and what the value means.
struct TuningRange {
  std::string_view name;
  int64_t lo, hi;
  std::string_view meaning;
};
constexpr TuningRange kTuningRanges[] = {
    {"AMK_COMBINE_BATCH", 1, 32, "attention_combine's chunks loaded at once"},
    {"AMK_GEMV_PRELOAD", 0, 4, "0 (off) or the gemv weight batches requested before the wait"},
    {"AMK_ATTN_TILED_WIDE", 0, 2, "0, 1 or 2 (the tiled attention's 16, 32 or 64 KiB tile)"},
    {"AMK_ATTN_TILE_DYNAMIC", 0, 1, "0 or 1 (the 64 KiB attention tile in dynamic shared memory)"},
    {"AMK_ATTN_SPLIT_HEADS", 1, 4, "1 to 4 (query heads a lane carries in the split attention stages)"},
    {"AMK_ATTN_PASS", 0, 1, "0 or 1 (attention's streaming pass compiled in)"},
    {"AMK_SMEM_BUFFERS", 0, 1, "0 or 1 (the buffer table in shared memory, up to 1024 buffers)"},
    {"AMK_STAGE_DECODE_INS", 0, 1, "0 or 1 (attention ops read their instruction from smem)"},
    {"AMK_GEMV_SMEM_STAGES", 0, 4, "0 (off) or 2-4 gemv weight batches a warp in shared memory"},
    {"AMK_COMBINE_SMEM", 0, 1, "0 or 1 (attention_combine stages its partials in shared memory)"},
    {"AMK_ATTN_PRELOAD", 0, 1, "0 or 1 (attention_decode copies its K/V before its waits)"},
    {"AMK_SIGNAL_WARP", 0, 1, "0 or 1 (the warp that releases a step's signals)"},
    {"AMK_EARLY_POLL", 0, 1, "0 or 1 (a preloading gemv reads its counters when it starts)"},
    {"AMK_ATTN_BULK", 0, 1, "0 or 1 (the tiled attention's K/V through two bulk copies)"},
    {"AMK_ATTN_SPLIT", 0, 1, "0 or 1 (the tiled attention's score and output stages split over lanes)"},
    {"AMK_ATTN_ROW8", 0, 1, "0 or 1 (the tiled attention's stages for one query head with eight lanes a row)"},
    {"AMK_NEXT_INS_L1", 0, 1, "0 or 1 (a wait's end prefetches the next step's instruction into L1)"},
    {"AMK_GEMV_X_BATCH", 0, 1, "0 or 1 (the unfused gemv loads a batch's x before its multiply-adds)"},
    {"AMK_GEMV_COMBINE_LD8", 0, 1, "0 or 1 (the o_proj merge reads its partials with 8-byte loads)"},
    {"AMK_GEMV_STAGE_ONE_TRIP", 0, 1, "0 or 1 (the norm-fused gemv reads x and norm in one round trip)"},
    {"AMK_TRACE_MARKS_EARLY", 0, 8, "0 to 8 (a traced VM's diagnostic mark points)"},
    {"AMK_GEMV_WHOLE", 0, 1, "0 or 1 (gemv's ring: rows of whole batches in a loop of their own)"},
};

// Macros the generated source derives from the program (block size, ops and dtypes used, table
// sizes): a tuning that defined one would give the VM a shape the launch does not have.
bool derived_macro(std::string_view name) {
  for (std::string_view exact :
       {"AMK_BLOCK_THREADS", "AMK_TMA_COUNT", "AMK_TRACE", "AMK_SMEM_BUFFER_CAP",
        "AMK_GEMV_RING_SLOT_BYTES",
        "AMK_STREAM_X_FLOATS", "AMK_WEIGHT_STREAMS", "AMK_TMA_GEMV", "AMK_STEP_KERNEL",
        "AMK_GEMV_PAIRS_LISTED", "AMK_GEMV_PLAIN_ONLY_MASK", "AMK_GEMV_FUSIONS_LISTED", "AMK_ATTN_KV_LISTED",
        "AMK_ELT_DTYPES_LISTED", "AMK_COMBINE_SPLITK_MAX_K"})
    if (name == exact) return true;
  for (std::string_view prefix : {"AMK_USE_OP_", "AMK_GEMV_FUSE_"})
    if (name.substr(0, prefix.size()) == prefix) return true;
  for (std::string_view t : {"F32", "F16", "BF16"}) {
    for (std::string_view prefix : {"AMK_ATTN_KV_", "AMK_ELT_"})
      if (name.size() == prefix.size() + t.size() && name.substr(0, prefix.size()) == prefix &&
          name.substr(prefix.size()) == t)
        return true;
    for (std::string_view x : {"F32", "F16", "BF16"})
      if (name == "AMK_GEMV_" + std::string(t) + "_" + std::string(x)) return true;
  }
  return false;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> parse_vm_tuning(std::string_view text,
                                                             const std::string& where) {
  std::vector<std::pair<std::string, int64_t>> out;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    const std::string_view name = item.substr(0, std::min(eq, item.size()));
    bool ok = eq != std::string_view::npos && name.size() > 4 && name.substr(0, 4) == "AMK_" &&
              std::all_of(name.begin(), name.end(), [](char c) {
                return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
              });
    int64_t value = 0;
    if (ok) {
      const std::string_view v = item.substr(eq + 1);
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
      ok = ec == std::errc() && end == v.data() + v.size() && !v.empty();
    }
    if (!ok)
      throw Error(ErrorKind::usage, "usage.vm_tuning", where,
                  "expected NAME=INTEGER[,NAME=INTEGER...] with names AMK_[A-Z0-9_]+, got '" +
                      std::string(item) + "'");
    if (derived_macro(name))
      throw Error(ErrorKind::usage, "usage.vm_tuning", where,
                  std::string(name) + " is set by amk from the program, not a tuning");
    if (name == "AMK_STREAM_SLOTS" && value != 0 && (value < 2 || value > 64))
      throw Error(ErrorKind::usage, "usage.vm_tuning", where,
                  "AMK_STREAM_SLOTS is 0 (weight streams off) or a slot count in 2..64, got " +
                      std::to_string(value));
    for (const TuningRange& r : kTuningRanges)
      if (name == r.name && (value < r.lo || value > r.hi))
        throw Error(ErrorKind::usage, "usage.vm_tuning", where,
                    std::string(r.name) + " is " + std::string(r.meaning) + ", in " +
                        std::to_string(r.lo) + ".." + std::to_string(r.hi) + ", got " +
                        std::to_string(value));
    out.emplace_back(std::string(name), value);
    pos = comma + 1;
  }
  return out;
}

std::vector<TuningArm> parse_tuning_arms(std::string_view text, const std::string& where) {
  std::vector<TuningArm> arms;
  size_t pos = 0;
  for (;;) {
    const size_t semi = std::min(text.find(';', pos), text.size());
    const std::string_view arm = text.substr(pos, semi - pos);
    const std::string at = where + " arm " + std::to_string(arms.size() + 1);
    if (arm.empty())
      throw Error(ErrorKind::usage, "usage.tuning_arms", at,
                  "an arm is empty; expected ARM;ARM;... with each arm 'default' or "
                  "NAME=INTEGER[,NAME=INTEGER...]");
    arms.push_back({std::string(arm), arm == "default" ? std::vector<std::pair<std::string, int64_t>>{}
                                                       : parse_vm_tuning(arm, at)});
    if (semi == text.size()) break;
    pos = semi + 1;
  }
  if (arms.size() < 2 || arms.size() > kMaxTuningArms)
    throw Error(ErrorKind::usage, "usage.tuning_arms", where,
                "expected 2.." + std::to_string(kMaxTuningArms) + " arms separated by ';', got " +
                    std::to_string(arms.size()));
  return arms;
}

std::string vm_source(const Program& program, const Plan& plan, const CompileOptions& options) {
  if (!program.custom_ops.empty() && !options.trust_custom_ops)
    throw Error(ErrorKind::program, "custom.untrusted", "/custom_ops/0",
                "the program carries " + std::to_string(program.custom_ops.size()) +
                    " custom op source(s) (first: '" + program.custom_ops[0].name +
                    "'); they are compiled only with --trust-custom-ops");
  for (size_t k = 0; k < program.custom_ops.size(); ++k)
    if (!is_identifier(program.custom_ops[k].name))
      throw Error(ErrorKind::program, "custom.name", "/custom_ops/" + std::to_string(k) + "/name",
                  "a custom op name must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)");

  const uint32_t block = block_threads(program, plan);
  const std::set<uint16_t> ops = used_ops(plan);
  const bool gemv = ops.count(static_cast<uint16_t>(OpId::gemv)) != 0;

  // dtype pairs of gemv (w, x) and stored dtypes of the arithmetic elementwise ops.
  std::set<std::pair<DType, DType>> gemv_pairs;
  std::set<DType> elt_dtypes;
  std::set<int> gemv_fusions;  // bit 0: norm, bit 1: w2 (GLU); 4: x merged from attention partials
  std::set<std::pair<DType, DType>> gemv_fused_pairs;  // pairs some norm or GLU instruction uses
  std::set<DType> attn_kv;     // K (= V) dtypes of attention_decode's vector paths
  for (const amk_instruction_t& ins : plan.instructions) {
    const auto id = static_cast<OpId>(ins.op);
    if (id == OpId::gemv) {
      auto w = operand_dtype(program, ins, 0), x = operand_dtype(program, ins, 1);
      if (w && x && dtype_is_float(*w) && dtype_is_float(*x)) gemv_pairs.insert({*w, *x});
      const bool norm = ins.n_operands > 4 && ins.operands[4].buffer != AMK_NO_BUFFER;
      const bool glu = ins.n_operands > 5 && ins.operands[5].buffer != AMK_NO_BUFFER;
      if (ins.params[1] != 0)
        gemv_fusions.insert(4);  // (the verifier: no norm, no w2 with it)
      else if (norm || glu)
        gemv_fusions.insert((norm ? 1 : 0) | (glu ? 2 : 0));
      if ((norm || glu) && w && x) gemv_fused_pairs.insert({*w, *x});
    }
    if (id == OpId::attention_decode)
      if (auto k = operand_dtype(program, ins, 1); k && dtype_is_float(*k)) attn_kv.insert(*k);
    int y_slot = -1;
    if (id == OpId::add || id == OpId::mul || id == OpId::silu_mul) y_slot = 2;
    if (id == OpId::scale) y_slot = 1;
    if (id == OpId::fill) y_slot = 0;
    if (y_slot >= 0)
      if (auto y = operand_dtype(program, ins, static_cast<uint32_t>(y_slot));
          y && dtype_is_float(*y))
        elt_dtypes.insert(*y);
  }
  const std::vector<TmaGemvSpec> tma_specs =
      gemv ? tma_gemv_specs(program) : std::vector<TmaGemvSpec>{};

  std::string s;
  s += "// Generated by amk (codegen format " + std::to_string(kVmCodegenVersion) +
       "). Do not edit.\n";
  s += "#define AMK_BLOCK_THREADS " + std::to_string(block) + "\n";
  s += "#define AMK_TMA_COUNT " + std::to_string(program.tma.size()) + "\n";
  if (options.trace) s += "#define AMK_TRACE 1\n";
  for (const auto& [name, value] : options.tuning)
    if (name != "AMK_SMEM_BUFFERS" && name != "AMK_GEMV_SMEM_STAGES" &&
        name != "AMK_COMBINE_SMEM")  // (decided below)
      s += "#define " + name + " " + std::to_string(value) + "\n";
  // The program-dependent choices (vm_choices, which `amk compile` reports); a tuning that names
  // one was copied above and decides it.
  const VmChoices vm = vm_choices(program, plan, options);
  // A program whose steps wait: the buffer table in shared memory (see smem_buffer_table).
  if (vm.smem_buffer_table)
    s += "#define AMK_SMEM_BUFFERS 1\n#define AMK_SMEM_BUFFER_CAP " +
         std::to_string(program.buffers.size()) + "\n";
  // Attention chunks too large for the tiled path's default tile but within its wide one (the
  // Llama-3.1-8B step's 64 positions of 4 heads of 128): the VM gets the wide tile.
  // (2: chunks of 64 KiB, `amk gen llama --combine oproj`'s one query head over 256 positions.)
  if (vm.attention_wide_tile >= 1 && !tuning_value(options, "AMK_ATTN_TILED_WIDE"))
    s += "#define AMK_ATTN_TILED_WIDE " + std::to_string(vm.attention_wide_tile) + "\n";
  // The large tile in the launch's dynamic shared memory, where gemv's ring makes it 64 KiB
  // (vm_dynamic_smem_bytes): a 64 KiB static tile measured slower (kernels/amk_ops_attention.cuh).
  if (vm.attention_wide_tile == 2 && gemv_ring_bytes(program, plan, options) >= 65536 &&
      !tuning_value(options, "AMK_ATTN_TILE_DYNAMIC"))
    s += "#define AMK_ATTN_TILE_DYNAMIC 1\n";
  // Chunks of one query head each: the split stages carry one head, not four.
  if (ops.count(static_cast<uint16_t>(OpId::attention_decode)) && attention_single_heads(plan) &&
      !tuning_value(options, "AMK_ATTN_SPLIT_HEADS"))
    s += "#define AMK_ATTN_SPLIT_HEADS 1\n";
  // ...and take the stages with eight lanes a row (AMK_ATTN_ROW8, vm_choices) where the chunk's
  // head_dim is 64 or 128.
  if (vm.attention_row8 == 1 && !tuning_value(options, "AMK_ATTN_ROW8"))
    s += "#define AMK_ATTN_ROW8 1\n";
  // Attention chunks that copy their K/V before their waits (vm_choices).
  if (vm.attention_preload == 1 && !tuning_value(options, "AMK_ATTN_PRELOAD"))
    s += "#define AMK_ATTN_PRELOAD 1\n";
  // Every attention chunk takes the tiled path (the 1B and 8B steps): the VM leaves the
  // streaming pass out (~190 KiB of code, and the VM loop's spills with it).
  if (vm.attention_pass == 0 && !tuning_value(options, "AMK_ATTN_PASS"))
    s += "#define AMK_ATTN_PASS 0\n";
  // No gemv step both waits and reads weights that no instruction writes (the GEMV benchmarks,
  // independent row ranges): the preload would never run, and its registers alone took such a VM
  // from 128 to 150 a thread, from two blocks an SM to one (measured 73 -> 98.5 us for 8 x 4096^2).
  if (vm.gemv_preload == 0 && !tuning_value(options, "AMK_GEMV_PRELOAD"))
    s += "#define AMK_GEMV_PRELOAD 0\n";
  // Gemvs that wait and preload through the ring: one batch before the wait (vm_choices).
  if (vm.gemv_preload > 0 && vm.gemv_preload != kGemvPreloadDefault &&
      !tuning_value(options, "AMK_GEMV_PRELOAD"))
    s += "#define AMK_GEMV_PRELOAD " + std::to_string(vm.gemv_preload) + "\n";
  // Gemvs that wait and preload: no L2 prefetch of the next streaming step (vm_choices).
  if (vm.prefetch_ahead == 0 && !tuning_value(options, "AMK_PREFETCH_AHEAD"))
    s += "#define AMK_PREFETCH_AHEAD 0\n";
  // The next step's instruction prefetched into L1 after each wait (AMK_NEXT_INS_L1, the kernel's
  // default) where gemvs wait and preload: the decode steps, where it was measured faster. Elsewhere
  // it is left out: its lookup costs registers (the GEMV benchmark's VM, whose steps never wait,
  // would go past 128 a thread and lose its second block an SM).
  if (vm.gemv_preload == 0 && !tuning_value(options, "AMK_NEXT_INS_L1"))
    s += "#define AMK_NEXT_INS_L1 0\n";
  // The unfused gemv's x loads of a batch issued together (AMK_GEMV_X_BATCH) where gemvs wait and
  // preload: there the VM holds the most code, and ptxas's own scheduling of those loads moved
  // with the rest of it (kernels/amk_ops_gemv.cuh). Not with the wide attention tile (the 8B
  // step, whose VM is at the 255-register limit): measured there 0.4% slower with it (twenty-eighth
  // session, `amk profile --tuning-arms`, two rounds: 4.361 / 4.364 ms against 4.347 / 4.347).
  // Nor with the one-head attention stages of eight lanes a row (the 1B step's layout since the
  // thirty-first session), where it measured 0.3% slower (`amk profile --events --tuning-arms`,
  // three rounds: 0.8858 ms with it, 0.8829 without), and where a preloading gemv's early first
  // poll (AMK_EARLY_POLL, on in the kernel) measured 0.3% slower too (0.8832 without; both off
  // 0.8814, 0.995x; on the 8B step the early poll still pays: 4.2425 ms with, 4.2482 without).
  if (vm.gemv_preload > 0 && vm.attention_wide_tile != 1 && vm.attention_row8 != 1 &&
      !tuning_value(options, "AMK_GEMV_X_BATCH"))
    s += "#define AMK_GEMV_X_BATCH 1\n";
  if (vm.gemv_preload > 0 && vm.attention_row8 == 1 && !tuning_value(options, "AMK_EARLY_POLL"))
    s += "#define AMK_EARLY_POLL 0\n";
  // gemv's ring streams rows of whole batches in a loop of their own, without a bound check or
  // clamp a vector (AMK_GEMV_WHOLE; 0 in the kernel), where the ring is in. Measured on the H200
  // (`amk profile --events --tuning-arms`, three rounds): the 1B step 0.9417 / 0.9418 / 0.9420 ms
  // without, 0.9231 / 0.9228 / 0.9228 with (0.980x; twenty-ninth session); a warp's batch from
  // landed to reduced 0.70 -> 0.59 us in q/k/v, 0.96 -> 0.70 in o_proj, 0.93 -> 0.79 in down. The
  // 8B step (thirtieth session) 4.2875 / 4.2981 / 4.2946 without, 4.2347 / 4.2385 / 4.2368 with
  // (0.987x).
  if (vm.gemv_smem_stages > 0 && !tuning_value(options, "AMK_GEMV_WHOLE"))
    s += "#define AMK_GEMV_WHOLE 1\n";
  // Attention steps read their instruction from shared memory where they wait (the kernel's
  // default); elsewhere the copy is left out.
  if (vm.stage_decode_ins != 1 && !tuning_value(options, "AMK_STAGE_DECODE_INS"))
    s += "#define AMK_STAGE_DECODE_INS 0\n";
  // gemv's weights through a per-warp ring in dynamic shared memory (gemv_smem_stages; the
  // executor sizes the launch's dynamic shared memory by gemv_ring_bytes), with the slot size the
  // launch was sized by, which the kernel checks against its own batch.
  if (vm.gemv_smem_stages > 0)
    s += "#define AMK_GEMV_SMEM_STAGES " + std::to_string(vm.gemv_smem_stages) +
         "\n#define AMK_GEMV_RING_SLOT_BYTES " + std::to_string(kGemvSlotBytes) + "\n";
  // attention_combine stages its partials in dynamic shared memory (combine_staged).
  if (vm.combine_smem == 1) s += "#define AMK_COMBINE_SMEM 1\n";
  for (uint16_t id : ops)
    if (id > 0 && id < kOpMacros.size())
      s += "#define AMK_USE_OP_" + std::string(kOpMacros[id]) + " 1\n";
  // The verifier's limit on attention_combine_splitk's K sizes the kernel's x array (one number).
  if (ops.count(static_cast<uint16_t>(OpId::attention_combine_splitk)))
    s += "#define AMK_COMBINE_SPLITK_MAX_K " + std::to_string(kCombineSplitkMaxK) + "\n";
  s += "#define AMK_GEMV_PAIRS_LISTED 1\n";
  for (const auto& [w, x] : gemv_pairs)
    s += "#define AMK_GEMV_" + std::string(float_macro(w)) + "_" + std::string(float_macro(x)) +
         " 1\n";
  // Pairs with only plain instructions get no fused instantiations (AMK_GEMV_PLAIN_ONLY_MASK, bit
  // w * 8 + x; left out where it is 0, so such VMs' sources are unchanged).
  uint64_t plain_only = 0;
  if (!gemv_fusions.empty())
    for (const auto& pair : gemv_pairs)
      if (!gemv_fused_pairs.count(pair))
        plain_only |= 1ull << (static_cast<uint32_t>(pair.first) * 8 + static_cast<uint32_t>(pair.second));
  if (plain_only != 0) s += "#define AMK_GEMV_PLAIN_ONLY_MASK " + std::to_string(plain_only) + "ull\n";
  // Fused gemv variants the program uses (a variant not listed runs the scalar path).
  s += "#define AMK_GEMV_FUSIONS_LISTED 1\n";
  for (int f : gemv_fusions)
    s += std::string("#define AMK_GEMV_FUSE_") +
         (f == 1 ? "NORM" : f == 2 ? "GLU" : f == 4 ? "COMBINE" : "NORM_GLU") + " 1\n";
  // attention_decode's vector loaders for the K/V dtypes the program uses (others: the
  // element-by-element loader). Each one is a large unrolled body in the one VM kernel.
  s += "#define AMK_ATTN_KV_LISTED 1\n";
  for (DType t : attn_kv) s += "#define AMK_ATTN_KV_" + std::string(float_macro(t)) + " 1\n";
  s += "#define AMK_ELT_DTYPES_LISTED 1\n";
  for (DType t : elt_dtypes) s += "#define AMK_ELT_" + std::string(float_macro(t)) + " 1\n";
  if (!tma_specs.empty()) s += "#define AMK_TMA_GEMV 1\n";
  if (streams_compiled(plan, options)) {
    s += "#define AMK_WEIGHT_STREAMS 1\n";
    s += "#define AMK_STREAM_X_FLOATS " + std::to_string(stream_x_floats(plan)) + "\n";
  }
  s += "#include \"amk_device.cuh\"\n";
  if (std::any_of(ops.begin(), ops.end(), is_attention_op))
    s += "#include \"amk_ops_attention.cuh\"\n";

  if (!tma_specs.empty()) {
    s += "\n// w buffers that gemv streams through TMA (buffer index -> tensor map slot, geometry).\n";
    s += "__device__ __forceinline__ bool amk_tma_gemv_lookup(uint32_t buffer, "
         "amk_tma_gemv_geom& g) {\n  switch (buffer) {\n";
    for (const TmaGemvSpec& t : tma_specs) {
      s += "    case " + std::to_string(t.buffer) + "u: g.slot = " + std::to_string(t.slot) +
           "u; g.box_k = " + std::to_string(t.box_k) + "u; g.box_rows = " +
           std::to_string(t.box_rows) + "u; g.elem_bytes = " + std::to_string(t.elem_bytes) +
           "u; g.dim_k = " + std::to_string(t.dim_k) + "ull; g.dim_rows = " +
           std::to_string(t.dim_rows) + "ull; g.offset = " + std::to_string(t.offset) +
           "ull; return true;\n";
    }
    s += "    default: return false;\n  }\n}\n";
  }

  if (!program.custom_ops.empty()) {
    std::string dispatch = "#define AMK_CUSTOM_DISPATCH(P, I, S)";
    for (size_t k = 0; k < program.custom_ops.size(); ++k) {
      const CustomOp& op = program.custom_ops[k];
      s += "\n// custom op " + std::to_string(k) + "\n";
      s += "#line 1 \"custom_op_" + op.name + ".cu\"\n";
      s += op.source;
      if (op.source.empty() || op.source.back() != '\n') s += "\n";
      dispatch += " case " + std::to_string(kCustomOpBase + k) + ": amk_custom_" + op.name +
                  "(P, I, S); break;";
    }
    s += "#line 1 \"amk_vm_generated.cu\"\n";
    s += dispatch + "\n";
  }
  s += "#include \"amk_vm.cuh\"\n";
  if (options.step_kernel) {
    s += "#define AMK_STEP_KERNEL 1\n";
    s += "#include \"amk_step.cuh\"\n";
  }
  return s;
}

}  // namespace amk
