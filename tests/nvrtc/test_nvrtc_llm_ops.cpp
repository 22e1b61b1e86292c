// The ops of a Llama decode step (rope, kv_append, attention_decode, attention_combine) compile
// for sm_90a with NVRTC: in a harness kernel per op (resource usage per op, no spills, no stack)
// and through the VM of a program that uses all four.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cuda/codegen.hpp"
#include "cuda/compile.hpp"
#include "cuda/embedded.hpp"
#include "cuda/nvrtc.hpp"
#include "gen/llama.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"
#include "plan/plan.hpp"
#include "ptxas_log.hpp"

using namespace amk;

namespace {

uint16_t id(OpId op) { return static_cast<uint16_t>(op); }

// A decode-step slice: rope on q and k, the k append, two attention chunks and their combine;
// then the fused form: attention_decode rotating q and the new token's k itself, over a cache
// chunk and over an empty chunk that holds only the new token's row.
struct Built {
  Program program;
  Plan plan;
};

Built llm_program() {
  Built b;
  auto buffer = [&](const std::string& name, DType dtype, uint64_t n) {
    Buffer buf;
    buf.name = name;
    buf.dtype = dtype;
    buf.shape = {n};
    b.program.buffers.push_back(buf);
    amk_buffer_t ab{};
    ab.elements = n;
    ab.bytes = buf.bytes();
    ab.dtype = static_cast<uint32_t>(dtype);
    b.plan.buffers.push_back(ab);
    return static_cast<uint32_t>(b.program.buffers.size() - 1);
  };
  const uint32_t hd = 128, group = 4, n_kv = 8, max_len = 512, chunk = 256;
  const uint32_t q = buffer("q", DType::f32, n_kv * group * hd);
  const uint32_t k = buffer("k", DType::f32, n_kv * hd);
  const uint32_t kb = buffer("k_bf16", DType::bf16, n_kv * hd);
  const uint32_t kc = buffer("k_cache", DType::bf16, uint64_t{n_kv} * max_len * hd);
  const uint32_t vc = buffer("v_cache", DType::bf16, uint64_t{n_kv} * max_len * hd);
  const uint32_t part = buffer("partials", DType::f32, 2 * group * (hd + 2));
  const uint32_t attn = buffer("attn", DType::f32, group * hd);
  const uint32_t q_raw = buffer("q_unrotated", DType::f32, n_kv * group * hd);
  const uint32_t v = buffer("v", DType::f32, n_kv * hd);
  const uint32_t fused_part = buffer("fused_partials", DType::f32, 2 * group * (hd + 2));

  auto add = [&](uint16_t op, std::vector<amk_operand_t> operands, std::vector<uint32_t> params) {
    amk_instruction_t ins{};
    ins.op = op;
    ins.index = static_cast<uint32_t>(b.plan.instructions.size());
    ins.n_operands = static_cast<uint8_t>(operands.size());
    for (size_t i = 0; i < operands.size(); ++i) ins.operands[i] = operands[i];
    ins.n_params = static_cast<uint8_t>(params.size());
    for (size_t i = 0; i < params.size(); ++i) ins.params[i] = params[i];
    if (ins.index > 0) {
      ins.n_waits = 1;
      ins.waits[0] = {0, ins.index};
    }
    ins.n_signals = 1;
    ins.signals[0] = {0, 1};
    b.plan.instructions.push_back(ins);
    Instruction in;
    in.op = op;
    b.program.instructions.push_back(in);
  };
  auto whole = [&](uint32_t buf) {
    return amk_operand_t{0, static_cast<uint32_t>(b.program.buffers[buf].elements()), buf};
  };
  const uint32_t pos = 300;
  add(id(OpId::rope), {whole(q), whole(q)},
      {hd, pos, f32_bits(500000.0f), f32_bits(32.0f), f32_bits(1.0f), f32_bits(4.0f), 8192});
  add(id(OpId::rope), {whole(k), whole(kb)},
      {hd, pos, f32_bits(500000.0f), f32_bits(0.0f), f32_bits(1.0f), f32_bits(4.0f), 8192});
  add(id(OpId::kv_append), {whole(kb), whole(kc)}, {hd, pos, max_len});
  for (uint32_t c = 0; c < 2; ++c)  // kv head 0, chunks [0, 256) and [256, 512)
    add(id(OpId::attention_decode),
        {amk_operand_t{0, group * hd, q}, amk_operand_t{uint64_t{c} * chunk * hd, chunk * hd, kc},
         amk_operand_t{uint64_t{c} * chunk * hd, chunk * hd, vc},
         amk_operand_t{uint64_t{c} * group * (hd + 2), group * (hd + 2), part}},
        {hd, 0});
  add(id(OpId::attention_combine), {whole(part), whole(attn)}, {hd, 1});
  const std::vector<uint32_t> fused = {hd, 0, pos, f32_bits(500000.0f), f32_bits(32.0f),
                                       f32_bits(1.0f), f32_bits(4.0f), 8192};
  for (uint32_t c = 0; c < 2; ++c)  // cache rows [0, 256) + the new token; no cache rows + it
    add(id(OpId::attention_decode),
        {amk_operand_t{0, group * hd, q_raw}, amk_operand_t{0, c == 0 ? chunk * hd : 0, kc},
         amk_operand_t{0, c == 0 ? chunk * hd : 0, vc},
         amk_operand_t{uint64_t{c} * group * (hd + 2), group * (hd + 2), fused_part},
         amk_operand_t{0, hd, k}, amk_operand_t{0, hd, v}},
        fused);
  add(id(OpId::attention_combine), {whole(fused_part), whole(attn)}, {hd, 1});

  b.program.counters.push_back(Counter{"chain"});
  b.plan.n_counters = 1;
  b.plan.grid = 1;
  b.plan.block = 256;
  b.plan.queue_offsets = {0, static_cast<uint32_t>(b.plan.instructions.size())};
  for (uint32_t i = 0; i < b.plan.instructions.size(); ++i) b.plan.queue_items.push_back(i);
  b.plan.ops_used = {id(OpId::rope), id(OpId::kv_append), id(OpId::attention_decode),
                     id(OpId::attention_combine)};
  b.program.launch.block = 256;
  return b;
}

// One kernel per op (and one through the dispatch macro), each running instruction 0 of the
// program as the VM would.
std::string harness_source(uint32_t block) {
  std::string s = "#define AMK_BLOCK_THREADS " + std::to_string(block) + "\n";
  s += R"(#define AMK_USE_OP_ROPE 1
#define AMK_USE_OP_KV_APPEND 1
#define AMK_USE_OP_ATTENTION_DECODE 1
#define AMK_USE_OP_ATTENTION_COMBINE 1
#include "amk_device.cuh"
#include "amk_ops_attention.cuh"

__shared__ __align__(16) unsigned char amk_test_scratch[AMK_SCRATCH_BYTES];

// The block state the VM sets up before it runs an op; the op reads instruction 0 in place.
__device__ __forceinline__ const amk_instruction_t& amk_test_stage(const amk_device_program_t& prog) {
  if (threadIdx.x == 0) {
    amk_state.stop = 0;
    amk_state.buffers = prog.buffers;
  }
  __syncthreads();
  return prog.instructions[0];
}

#define AMK_TEST_KERNEL(NAME)                                                              \
  extern "C" __global__ void __launch_bounds__(AMK_BLOCK_THREADS, 1)                       \
      amk_test_##NAME(const __grid_constant__ amk_device_program_t prog) {                 \
    amk_op_##NAME(prog, amk_test_stage(prog), amk_test_scratch);                           \
  }
AMK_TEST_KERNEL(rope)
AMK_TEST_KERNEL(kv_append)
AMK_TEST_KERNEL(attention_decode)
AMK_TEST_KERNEL(attention_combine)

extern "C" __global__ void __launch_bounds__(AMK_BLOCK_THREADS, 1)
    amk_test_dispatch(const __grid_constant__ amk_device_program_t prog) {
  const amk_instruction_t& ins = amk_test_stage(prog);
  switch (ins.op) {
    AMK_ATTENTION_DISPATCH(prog, ins, amk_test_scratch)
    default: break;
  }
}
)";
  return s;
}

// ptxas's resource lines of one kernel ("Function properties for <name>" and the next two).
std::string resources_of(const std::string& log, const std::string& kernel) {
  const size_t at = log.find("Function properties for " + kernel + "\n");
  if (at == std::string::npos) return {};
  size_t end = at;
  for (int lines = 0; lines < 3 && end != std::string::npos; ++lines) end = log.find('\n', end + 1);
  return log.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The static shared memory ptxas reports for `kernel` ("..., N bytes smem"), 0 if not found.
uint64_t smem_of(const std::string& log, const std::string& kernel) {
  const std::string lines = resources_of(log, kernel);
  const size_t at = lines.find(" bytes smem");
  if (at == std::string::npos) return 0;
  size_t from = at;
  while (from > 0 && std::isdigit(static_cast<unsigned char>(lines[from - 1]))) --from;
  return std::stoull(lines.substr(from, at - from));
}

// Whether kernels/amk_vm.cuh dispatches the attention ops (its own cases or the macro).
bool embedded_vm_dispatches_attention() {
  for (const EmbeddedFile& f : embedded_kernel_files())
    if (f.name == "amk_vm.cuh")
      return f.text.find("AMK_ATTENTION_DISPATCH") != std::string_view::npos ||
             f.text.find("amk_op_attention_decode(") != std::string_view::npos;
  return false;
}

// A generated decode step (`amk gen llama`) of `layers` layers at `context` positions.
// `tweak` sets the layout options (default: the generator's own choices).
Program llama_step(const char* preset, uint32_t layers = 1, uint32_t context = 1024,
                   const std::function<void(gen::LlamaOptions&)>& tweak = {}) {
  gen::LlamaOptions o;
  o.preset = preset;
  o.layers = layers;
  o.context = context;
  if (tweak) tweak(o);
  return gen::generate_llama(o);
}
// The layout with attention_combine steps (`--combine steps`; the 1B step's default before the
// twenty-seventh session, still the 8B step's), where a test is about those steps' VM choices.
void combine_steps(gen::LlamaOptions& o) { o.combine_oproj = false; }

}  // namespace

TEST_CASE("attention ops compile for sm_90a: no spills, no stack, per-op registers") {
  for (uint32_t block : {256u, 128u, 512u}) {
    CAPTURE(block);
    CompileOptions options;
    options.use_cache = false;
    const NvrtcResult r = nvrtc_compile(harness_source(block), nvrtc_options(options));
    INFO(r.log);
    REQUIRE(r.ok);
    for (const char* kernel : {"amk_test_rope", "amk_test_kv_append", "amk_test_attention_decode",
                               "amk_test_attention_combine", "amk_test_dispatch"}) {
      CAPTURE(kernel);
      const std::string lines = resources_of(r.log, kernel);
      REQUIRE_FALSE(lines.empty());
      CHECK(lines.find("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") !=
            std::string::npos);
      if (block == 256) std::printf("[nvrtc] block %u %s\n", block, lines.c_str());
    }
  }
}

TEST_CASE("a program with the decode-step ops: generated source and VM compile") {
  const Built b = llm_program();
  CompileOptions options;
  options.use_cache = false;
  const std::string src = vm_source(b.program, b.plan, options);
  for (const char* macro : {"#define AMK_USE_OP_ROPE 1", "#define AMK_USE_OP_KV_APPEND 1",
                            "#define AMK_USE_OP_ATTENTION_DECODE 1",
                            "#define AMK_USE_OP_ATTENTION_COMBINE 1",
                            "#include \"amk_ops_attention.cuh\""})
    CHECK(src.find(macro) != std::string::npos);
  CHECK(src.find("AMK_USE_OP_GEMV") == std::string::npos);
  // Only the K/V dtypes the program's attention uses get a vector loader.
  CHECK(src.find("#define AMK_ATTN_KV_LISTED 1") != std::string::npos);
  const int kv_listed = (src.find("#define AMK_ATTN_KV_F32 1") != std::string::npos) +
                        (src.find("#define AMK_ATTN_KV_F16 1") != std::string::npos) +
                        (src.find("#define AMK_ATTN_KV_BF16 1") != std::string::npos);
  CHECK(kv_listed == 1);
  CHECK(src.find("#include \"amk_ops_attention.cuh\"") < src.find("#include \"amk_vm.cuh\""));
  // The program does use the fused form (theta set, k_new and v_new present).
  const auto fused = std::count_if(b.plan.instructions.begin(), b.plan.instructions.end(),
                                   [](const amk_instruction_t& ins) {
                                     return ins.op == id(OpId::attention_decode) &&
                                            ins.n_operands == 6 && ins.params[3] != 0;
                                   });
  CHECK(fused == 2);

  const CompileOutput out = compile_vm(b.program, b.plan, options);
  INFO(out.log);
  CHECK(out.ok);
  CHECK(out.arch == "sm_90a");
  CHECK(amk::test::no_spills(out.log));
  // Without the cases in kernels/amk_vm.cuh the VM compiles but does not run these ops (they
  // report "op not compiled in"): fail rather than pass quietly.
  CHECK_MESSAGE(embedded_vm_dispatches_attention(),
                "kernels/amk_vm.cuh does not dispatch ops 12-15 (AMK_ATTENTION_DISPATCH)");
  std::printf("[nvrtc] decode-step program: %s\n", resources_of(out.log, "amk_vm").c_str());

  // The wide tiled attention forced on (AMK_ATTN_TILED_WIDE=1; this program's 256-position
  // chunks fit neither tile, so it is off by default here): compiles without spills, and its
  // larger K/V tile and staged q are in the VM's static shared memory. (Attention's instruction
  // copy, which the wide tile turns off by default, is kept as the default VM has it.)
  CompileOptions wide = options;
  wide.tuning = {{"AMK_ATTN_TILED_WIDE", 1},
                 {"AMK_STAGE_DECODE_INS", vm_choices(b.program, b.plan, options).stage_decode_ins}};
  const CompileOutput w = compile_vm(b.program, b.plan, wide);
  INFO(w.log);
  CHECK(w.ok);
  CHECK(amk::test::no_spills(w.log));
  CHECK(smem_of(w.log, "amk_vm") >= smem_of(out.log, "amk_vm") + 32768 - 8 * 4 * 130 * 4 + 256 * 4);
  std::printf("[nvrtc] decode-step program, wide tiled attention: %s\n",
              resources_of(w.log, "amk_vm").c_str());
}

TEST_CASE("the wide tiled attention is compiled in exactly for programs whose chunks need it") {
  CompileOptions options;
  options.use_cache = false;
  auto wide_in = [&](const Program& program, const CompileOptions& o) {
    const Plan plan = make_plan(program);
    const bool on = vm_source(program, plan, o).find("#define AMK_ATTN_TILED_WIDE 1") !=
                    std::string::npos;
    CHECK(on == attention_wide_tiles(program, plan, o));
    return on;
  };
  // Llama-3.1-8B: 64-position chunks of 4 heads of 128 (K+V 32 KiB, group x head_dim 512).
  // Llama-3.2-1B and tiny with combine steps: their chunks fit the default tile.
  for (const auto& [preset, want] : {std::pair{"llama-3.1-8b", true}, {"llama-3.2-1b", false},
                                     {"tiny", false}}) {
    CAPTURE(preset);
    const Program p = llama_step(preset, 1, 1024, combine_steps);
    CHECK(wide_in(p, options) == want);
    // The tuning decides when it names the macro (and the source defines it once).
    CompileOptions off = options, on = options;
    off.tuning = {{"AMK_ATTN_TILED_WIDE", 0}};
    on.tuning = {{"AMK_ATTN_TILED_WIDE", 1}};
    CHECK_FALSE(wide_in(p, off));
    CHECK(wide_in(p, on));
    const std::string src = vm_source(p, make_plan(p), on);
    CHECK(src.find("AMK_ATTN_TILED_WIDE", src.find("AMK_ATTN_TILED_WIDE") + 1) == std::string::npos);
  }
  const std::filesystem::path dir = std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "gpu" / "programs";
  // attention_rope's head_dim-128 chunk of 44 positions (K+V 22 KiB) needs the wide tile;
  // attention_tiled's chunks sit at the default tile's edges or beyond the wide one.
  CHECK(wide_in(load_program_file(dir / "attention_tiled_wide.json"), options));
  CHECK(wide_in(load_program_file(dir / "attention_rope.json"), options));
  CHECK_FALSE(wide_in(load_program_file(dir / "attention_tiled.json"), options));
}

TEST_CASE("attention's streaming pass is left out exactly when no chunk of the program takes it") {
  CompileOptions options;
  options.use_cache = false;
  auto pass_in = [&](const Program& program, const CompileOptions& o) {
    const Plan plan = make_plan(program);
    const std::string src = vm_source(program, plan, o);
    const bool out = src.find("#define AMK_ATTN_PASS 0") != std::string::npos;
    CHECK(out != attention_pass_needed(program, plan, o));
    return !out;
  };
  // The Llama steps' chunks all fit the tiled path (the 8B's at the wide tile; with combine
  // steps, the 1B's and tiny's at the default one).
  for (const char* preset : {"llama-3.1-8b", "llama-3.2-1b", "tiny"}) {
    CAPTURE(preset);
    const Program p = llama_step(preset, 1, 1024, combine_steps);
    CHECK_FALSE(pass_in(p, options));
    // What `amk compile` reports for the step.
    const VmChoices vm = vm_choices(p, make_plan(p), options);
    CHECK(vm.attention_pass == 0);
    CHECK(vm.attention_wide_tile == (std::string_view(preset) == "llama-3.1-8b" ? 1 : 0));
    CHECK(vm.gemv_preload == 1);  // through the ring: one batch before the wait
    CHECK(vm.gemv_smem_stages == 2);
    CHECK(vm.smem_buffer_table);
    // The tiled path off, or (8B) its wide tile off: the pass is needed.
    CompileOptions untiled = options;
    untiled.tuning = {{"AMK_ATTN_TILED", 0}};
    CHECK(pass_in(p, untiled));
    CompileOptions narrow = options;
    narrow.tuning = {{"AMK_ATTN_TILED_WIDE", 0}};
    CHECK(pass_in(p, narrow) == (std::string_view(preset) == "llama-3.1-8b"));
    // The tuning decides when it names the macro (and the source defines it once).
    CompileOptions forced = options;
    forced.tuning = {{"AMK_ATTN_PASS", 1}};
    const std::string src = vm_source(p, make_plan(p), forced);
    CHECK(src.find("#define AMK_ATTN_PASS 1") != std::string::npos);
    CHECK(src.find("AMK_ATTN_PASS", src.find("AMK_ATTN_PASS") + 1) == std::string::npos);
  }
  // A step at another block size keeps the pass (the tiled path is built for 256 threads).
  {
    Program p = llama_step("tiny");
    p.launch.block = 128;
    CHECK(pass_in(p, options));
  }
  const std::filesystem::path dir = std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "gpu" / "programs";
  // The attention test programs each hold chunks that only the pass takes (new row only, past
  // the tile, or, in attention_tiled_wide, one row past 32 KiB); without them, the pass goes.
  for (const char* name : {"attention_rope.json", "attention_tiled.json", "attention_tiled_wide.json"}) {
    CAPTURE(name);
    const Program p = load_program_file(dir / name);
    CHECK(pass_in(p, options));
  }
  {
    Program p = load_program_file(dir / "attention_tiled_wide.json");
    // Its chunk of 65 positions of 128 is the one past the wide tile: at 64 positions it fits.
    int past = 0;
    for (Instruction& i : p.instructions)
      if (i.op == static_cast<uint16_t>(OpId::attention_decode) && i.operands[1].extent == 65 * 128) {
        i.operands[1].extent = i.operands[2].extent = 64 * 128;
        ++past;
      }
    CHECK(past == 1);
    CHECK_FALSE(pass_in(p, options));
  }
}

TEST_CASE("the 1B step's VM without the streaming pass compiles without spills") {
  const Program p = llama_step("llama-3.2-1b", 2);
  const Plan plan = make_plan(p);
  CompileOptions options;
  options.use_cache = false;
  const CompileOutput out = compile_vm(p, plan, options);
  INFO(out.log);
  CHECK(out.ok);
  CHECK(vm_source(p, plan, options).find("#define AMK_ATTN_PASS 0") != std::string::npos);
  CHECK(amk::test::no_spills(out.log));
}

TEST_CASE("--mlp-act bf16: the down projection's (bf16, bf16) pair gets its plain instantiation "
          "only; the 1B and 8B VMs compile without spills; other VMs' sources unchanged") {
  auto bf16_mlp = [](gen::LlamaOptions& o) { o.mlp_bf16 = true; };
  CompileOptions options;
  options.use_cache = false;
  for (const char* preset : {"llama-3.2-1b", "llama-3.1-8b"}) {
    CAPTURE(preset);
    const Program p = llama_step(preset, 2, 1024, bf16_mlp);
    const Plan plan = make_plan(p);
    const std::string src = vm_source(p, plan, options);
    CHECK(src.find("#define AMK_GEMV_BF16_BF16 1") != std::string::npos);
    // bit bf16 * 8 + bf16 = 18
    CHECK(src.find("#define AMK_GEMV_PLAIN_ONLY_MASK " + std::to_string(1ull << 18) + "ull") !=
          std::string::npos);
    const CompileOutput out = compile_vm(p, plan, options);
    INFO(out.log);
    CHECK(out.ok);
    CHECK(amk::test::no_spills(out.log));
    // The default layout: one pair, used fused too, so no mask.
    const Program d = llama_step(preset, 2);
    CHECK(vm_source(d, make_plan(d), options).find("AMK_GEMV_PLAIN_ONLY_MASK") == std::string::npos);
  }
}

// The largest attention_combine's staging in bytes: its partials and a float for each of their
// rows of head_dim + 2 (the weights).
uint64_t largest_partials(const Plan& plan) {
  uint64_t most = 0;
  for (const amk_instruction_t& ins : plan.instructions)
    if (ins.op == static_cast<uint16_t>(OpId::attention_combine)) {
      const uint64_t n = ins.operands[0].extent;
      CHECK(combine_smem_bytes(ins) >= (n + n / (ins.params[0] + 2)) * 4);
      most = std::max(most, combine_smem_bytes(ins));
    }
  return most;
}

TEST_CASE("attention_combine stages its partials in shared memory exactly where gemv's ring is") {
  CompileOptions options;
  for (const char* preset : {"llama-3.2-1b", "llama-3.1-8b"}) {
    CAPTURE(preset);
    const Program p = llama_step(preset, 1, 1024, combine_steps);
    const Plan plan = make_plan(p);
    REQUIRE(gemv_ring_bytes(p, plan, options) != 0);
    CHECK(combine_staged(p, plan, options));
    CHECK(vm_choices(p, plan, options).combine_smem == 1);
    CHECK(vm_source(p, plan, options).find("#define AMK_COMBINE_SMEM 1\n") != std::string::npos);
    // The launch's dynamic shared memory holds every combine's staging: the 8B step's 66 KiB
    // grow its 64 KiB ring.
    const uint64_t partials = largest_partials(plan);
    CHECK(partials > 0);
    CHECK(vm_dynamic_smem_bytes(p, plan, 232448, options) >= partials);
    CHECK(vm_dynamic_smem_bytes(p, plan, 232448, options) >= gemv_ring_bytes(p, plan, options));
    // Turned off by the tuning: no macro, the ring's size alone.
    CompileOptions off;
    off.tuning = {{"AMK_COMBINE_SMEM", 0}};
    CHECK_FALSE(combine_staged(p, plan, off));
    CHECK(vm_choices(p, plan, off).combine_smem == 0);
    CHECK(vm_source(p, plan, off).find("AMK_COMBINE_SMEM") == std::string::npos);
    CHECK(vm_dynamic_smem_bytes(p, plan, 232448, off) == gemv_ring_bytes(p, plan, off));
    // No ring (gemv's weights in registers): the register path, and the tuning cannot force it.
    CompileOptions no_ring;
    no_ring.tuning = {{"AMK_GEMV_SMEM_STAGES", 0}, {"AMK_COMBINE_SMEM", 1}};
    CHECK_FALSE(combine_staged(p, plan, no_ring));
    CHECK(vm_source(p, plan, no_ring).find("AMK_COMBINE_SMEM") == std::string::npos);
  }
  // The GPU test program: a ring from its waiting gemvs; the 141 KB combine is past the ring's
  // cap, so the launch is sized for the others and that one takes the register path.
  const std::filesystem::path dir = std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "gpu" / "programs";
  const Program staged = load_program_file(dir / "attention_combine_staged.json");
  const Plan plan = make_plan(staged);
  CHECK(combine_staged(staged, plan, options));
  CHECK(largest_partials(plan) > kGemvRingCap);
  CHECK(vm_dynamic_smem_bytes(staged, plan, 232448, options) ==
        gemv_ring_bytes(staged, plan, options));
  // Without a gemv (attention_rope.json): no ring, the register path.
  const Program rope = load_program_file(dir / "attention_rope.json");
  const Plan rope_plan = make_plan(rope);
  CHECK_FALSE(combine_staged(rope, rope_plan, options));
  CHECK(vm_choices(rope, rope_plan, options).combine_smem == 0);
}

TEST_CASE("the 1B step with the output projection split by query heads (--o-proj split) "
          "compiles without spills") {
  const Program p = llama_step("llama-3.2-1b", 2, 1024, [](gen::LlamaOptions& o) { o.split_o = true; });
  const Plan plan = make_plan(p);
  CompileOptions options;
  options.use_cache = false;
  const std::string src = vm_source(p, plan, options);
  CHECK(src.find("#define AMK_USE_OP_ATTENTION_COMBINE_SPLITK 1") != std::string::npos);
  CHECK(src.find("#define AMK_USE_OP_ATTENTION_COMBINE 1") == std::string::npos);
  // Its attention steps wait, but the instruction copy stays out: with it this VM spills.
  CHECK(vm_choices(p, plan, options).stage_decode_ins == 0);
  CHECK(src.find("#define AMK_STAGE_DECODE_INS 0\n") != std::string::npos);
  const CompileOutput out = compile_vm(p, plan, options);
  INFO(out.log);
  CHECK(out.ok);
  CHECK(amk::test::no_spills(out.log));
}

TEST_CASE("the 1B step with the o_proj gemvs merging the partials (--combine oproj): the large "
          "tile, one head a split stage, the merge compiled in; no spills, traced too") {
  const Program p =
      llama_step("llama-3.2-1b", 2, 1024, [](gen::LlamaOptions& o) { o.combine_oproj = true; });
  const Plan plan = make_plan(p);
  CompileOptions options;
  options.use_cache = false;
  const std::string src = vm_source(p, plan, options);
  CHECK(src.find("#define AMK_ATTN_TILED_WIDE 2\n") != std::string::npos);
  CHECK(src.find("#define AMK_ATTN_SPLIT_HEADS 1\n") != std::string::npos);
  CHECK(src.find("#define AMK_GEMV_FUSE_COMBINE 1\n") != std::string::npos);
  CHECK(src.find("#define AMK_ATTN_PASS 0\n") != std::string::npos);  // every chunk tiled
  CHECK(src.find("#define AMK_USE_OP_ATTENTION_COMBINE 1") == std::string::npos);
  CHECK(vm_choices(p, plan, options).attention_wide_tile == 2);
  // The merge's 8-byte loads (AMK_GEMV_COMBINE_LD8, the kernel's default) and its 4-byte ones
  // compile without spills, the knob reaching the VM.
  {
    CompileOptions co = options;
    const CompileOutput on = compile_vm(p, plan, co);
    co.tuning = {{"AMK_GEMV_COMBINE_LD8", 0}};
    const CompileOutput off = compile_vm(p, plan, co);
    INFO(off.log);
    REQUIRE(on.ok);
    REQUIRE(off.ok);
    CHECK(amk::test::no_spills(off.log));
    CHECK(on.cubin != off.cubin);
  }
  // Combine steps have none of the three.
  const Program d =
      llama_step("llama-3.2-1b", 2, 1024, combine_steps);
  const std::string dsrc = vm_source(d, make_plan(d), options);
  CHECK(dsrc.find("AMK_ATTN_TILED_WIDE") == std::string::npos);
  CHECK(dsrc.find("AMK_ATTN_SPLIT_HEADS") == std::string::npos);
  CHECK(dsrc.find("AMK_GEMV_FUSE_COMBINE") == std::string::npos);
  for (bool trace : {false, true}) {
    CAPTURE(trace);
    options.trace = trace;
    const CompileOutput out = compile_vm(p, plan, options);
    INFO(out.log);
    CHECK(out.ok);
    CHECK(amk::test::no_spills(out.log));
  }
}

TEST_CASE("the diagnostic marks (AMK_TRACE_MARKS_EARLY=1 to 8) and the global buffer table compile without spills") {
  CompileOptions options;
  options.use_cache = false;
  const Program tiny = llama_step("tiny", 2, 16);
  const Program one_b = llama_step("llama-3.2-1b", 2);  // one-head chunks on the large tile
  const Program rope = load_program_file(std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "gpu" /
                                         "programs" / "attention_rope.json");
  struct Case {
    const Program* program;
    bool trace;
    std::vector<std::pair<std::string, int64_t>> tuning;
  };
  for (const Case& c : {Case{&tiny, true, {{"AMK_TRACE_MARKS_EARLY", 1}}},
                        Case{&rope, true, {{"AMK_TRACE_MARKS_EARLY", 2}}},
                        Case{&tiny, true, {{"AMK_TRACE_MARKS_EARLY", 3}}},
                        Case{&tiny, true, {{"AMK_TRACE_MARKS_EARLY", 4}}},
                        Case{&one_b, true, {{"AMK_TRACE_MARKS_EARLY", 5}}},
                        Case{&one_b, true, {{"AMK_TRACE_MARKS_EARLY", 6}}},
                        Case{&one_b, true, {{"AMK_TRACE_MARKS_EARLY", 7}}},
                        Case{&one_b, true, {{"AMK_TRACE_MARKS_EARLY", 8}}},
                        Case{&tiny, false, {{"AMK_SMEM_BUFFERS", 0}}}}) {
    CAPTURE(c.tuning[0].first);
    CompileOptions co = options;
    co.trace = c.trace;
    co.tuning = c.tuning;
    const CompileOutput out = compile_vm(*c.program, make_plan(*c.program), co);
    INFO(out.log);
    CHECK(out.ok);
    CHECK(amk::test::no_spills(out.log));
    // Each level moves a mark (and the knob reaches the VM): not the default VM.
    CompileOptions plain = co;
    plain.tuning.clear();
    CHECK(compile_vm(*c.program, make_plan(*c.program), plain).cubin != out.cubin);
  }
}

TEST_CASE("attention's K/V before its wait (AMK_ATTN_PRELOAD): set by the generated source for "
          "chunks of one query head on the large tile only when their stages of eight lanes a row "
          "are off; both values compile without spills, traced too") {
  CompileOptions options;
  options.use_cache = false;
  const Program one_b = llama_step("llama-3.2-1b", 2);  // --combine auto: one-head chunks
  const Program one_b_steps = llama_step("llama-3.2-1b", 2, 1024, combine_steps);
  const Program eight_b = llama_step("llama-3.1-8b", 2);
  // The planner marks every chunk: the appends write the new position, which no chunk's view holds.
  const Plan plan_1b = make_plan(one_b);
  uint32_t chunks = 0, marked = 0;
  for (const amk_instruction_t& ins : plan_1b.instructions)
    if (ins.op == static_cast<uint16_t>(OpId::attention_decode)) {
      ++chunks;
      if ((ins.flags & AMK_INS_CONST_WEIGHTS) != 0 && ins.n_waits != 0) ++marked;
    }
  CHECK(chunks > 0);
  CHECK(marked == chunks);
  // The one-head chunks (64 KiB copies) take the stages of eight lanes a row, and with them the
  // copies after the wait (the kernel's default, 0: nothing emitted), reported by vm_choices;
  // with those stages off (AMK_ATTN_ROW8=0) the copies come before the wait.
  CHECK(vm_source(one_b, plan_1b, options).find("AMK_ATTN_PRELOAD") == std::string::npos);
  CHECK(vm_choices(one_b, plan_1b, options).attention_preload == 0);
  CHECK(vm_choices(one_b, plan_1b, options).attention_row8 == 1);
  CompileOptions split = options;
  split.tuning = {{"AMK_ATTN_ROW8", 0}};
  CHECK(vm_source(one_b, plan_1b, split).find("#define AMK_ATTN_PRELOAD 1\n") != std::string::npos);
  CHECK(vm_choices(one_b, plan_1b, split).attention_preload == 1);
  CHECK(vm_choices(one_b, plan_1b, split).attention_row8 == 0);
  for (const Program* p : {&one_b_steps, &eight_b}) {
    CHECK(vm_source(*p, make_plan(*p), options).find("AMK_ATTN_PRELOAD") == std::string::npos);
    CHECK(vm_choices(*p, make_plan(*p), options).attention_preload == 0);
    CHECK(vm_choices(*p, make_plan(*p), options).attention_row8 == 0);
    CHECK(vm_choices(*p, make_plan(*p), split).attention_preload == 0);
  }
  // A tuning decides it either way.
  CompileOptions tuned = options;
  tuned.tuning = {{"AMK_ATTN_PRELOAD", 1}};
  CHECK(vm_choices(one_b, plan_1b, tuned).attention_preload == 1);
  CHECK(vm_source(one_b, plan_1b, tuned).find("#define AMK_ATTN_PRELOAD 1\n") != std::string::npos);
  CompileOptions split_off = split;
  split_off.tuning.push_back({"AMK_ATTN_PRELOAD", 0});
  CHECK(vm_choices(one_b, plan_1b, split_off).attention_preload == 0);
  // Chunks that run their own waits are never staged: with the preload the 1B step's VM has no
  // instruction copy (every waiting attention step preloads); without it, it has.
  CHECK(vm_choices(one_b, plan_1b, options).stage_decode_ins == 1);
  CHECK(vm_choices(one_b, plan_1b, tuned).stage_decode_ins == 0);
  CHECK(vm_source(one_b, plan_1b, tuned).find("#define AMK_STAGE_DECODE_INS 0\n") != std::string::npos);
  CHECK(vm_choices(one_b, plan_1b, split).stage_decode_ins == 0);
  CompileOptions no_gemv_preload = options;  // (the attention preload needs gemv's machinery)
  no_gemv_preload.tuning = {{"AMK_GEMV_PRELOAD", 0}, {"AMK_ATTN_PRELOAD", 1}};
  CHECK(vm_choices(one_b, plan_1b, no_gemv_preload).stage_decode_ins == 1);
  for (const Program* p : {&one_b_steps, &eight_b})
    CHECK(vm_choices(*p, make_plan(*p), options).stage_decode_ins == 1);
  for (const Program* p : {&one_b, &eight_b}) {
    for (bool trace : {false, true}) {
      CAPTURE(trace);
      CompileOptions co = options;
      co.trace = trace;
      co.tuning = {{"AMK_ATTN_PRELOAD", 1}};
      const CompileOutput on = compile_vm(*p, make_plan(*p), co);
      INFO(on.log);
      REQUIRE(on.ok);
      CHECK(amk::test::no_spills(on.log));
      co.tuning = {{"AMK_ATTN_PRELOAD", 0}};
      const CompileOutput off = compile_vm(*p, make_plan(*p), co);
      REQUIRE(off.ok);
      CHECK(on.cubin != off.cubin);  // the knob reaches the VM
    }
  }
}

TEST_CASE("the tiled attention's split stages (AMK_ATTN_SPLIT: by default exactly with the wide "
          "tile) and its K/V bulk copies (AMK_ATTN_BULK, on by default) compile without spills") {
  CompileOptions options;
  options.use_cache = false;
  for (const char* preset : {"llama-3.2-1b", "llama-3.1-8b"}) {
    CAPTURE(preset);
    const bool wide = std::string_view(preset) == "llama-3.1-8b";
    const Program p = llama_step(preset, 2, 1024, combine_steps);
    const Plan plan = make_plan(p);
    // The generated source leaves both to the kernel's defaults.
    const std::string src = vm_source(p, plan, options);
    CHECK(src.find("AMK_ATTN_SPLIT") == std::string::npos);
    CHECK(src.find("AMK_ATTN_BULK") == std::string::npos);
    CHECK((src.find("#define AMK_ATTN_TILED_WIDE 1") != std::string::npos) == wide);
    CompileOptions co = options;
    const CompileOutput def = compile_vm(p, plan, co);
    INFO(def.log);
    REQUIRE(def.ok);
    CHECK(amk::test::no_spills(def.log));
    std::vector<std::vector<std::byte>> cubins;
    for (const char* knob : {"AMK_ATTN_SPLIT", "AMK_ATTN_BULK"})
      for (int64_t value : {0, 1}) {
        CAPTURE(knob);
        CAPTURE(value);
        co.tuning = {{knob, value}};
        const CompileOutput out = compile_vm(p, plan, co);
        INFO(out.log);
        REQUIRE(out.ok);
        CHECK(amk::test::no_spills(out.log));
        cubins.push_back(out.cubin);
      }
    CHECK(cubins[0] != cubins[1]);  // each knob reaches the VM
    CHECK(cubins[2] != cubins[3]);
    CHECK(def.cubin == cubins[wide ? 1 : 0]);  // split: the wide tile's default only
    CHECK(def.cubin == cubins[3]);             // bulk copies: the default
  }
}

// A 0/1 VM tuning whose default is `def_value`, on the 1B and 8B steps, traced and untraced: the
// generated source leaves it to the kernel's default, both values compile without spills, the
// other value reaches the VM and `def_value` gives the default's cubin.
namespace {
// `emitted`: the generated source defines it to `def_value` for these steps (codegen's choice)
// instead of leaving it to the kernel.
void check_knob(const char* knob, int64_t def_value, bool emitted = false,
                std::initializer_list<const char*> presets = {"llama-3.2-1b", "llama-3.1-8b"}) {
  CompileOptions options;
  options.use_cache = false;
  for (const char* preset : presets) {
    CAPTURE(preset);
    const Program p = llama_step(preset, 2);
    const Plan plan = make_plan(p);
    const std::string define = "#define " + std::string(knob) + " " + std::to_string(def_value) + "\n";
    if (emitted)
      CHECK(vm_source(p, plan, options).find(define) != std::string::npos);
    else
      CHECK(vm_source(p, plan, options).find(knob) == std::string::npos);
    for (bool trace : {false, true}) {
      CAPTURE(trace);
      CompileOptions co = options;
      co.trace = trace;
      const CompileOutput def = compile_vm(p, plan, co);
      REQUIRE(def.ok);
      CHECK(amk::test::no_spills(def.log));
      co.tuning = {{knob, 1 - def_value}};
      const CompileOutput other = compile_vm(p, plan, co);
      INFO(other.log);
      REQUIRE(other.ok);
      CHECK(amk::test::no_spills(other.log));
      CHECK(other.cubin != def.cubin);  // the knob reaches the VM
      co.tuning = {{knob, def_value}};
      const CompileOutput same = compile_vm(p, plan, co);
      REQUIRE(same.ok);
      CHECK(same.cubin == def.cubin);  // the kernel's default
    }
  }
}
// A knob the generated source decides from the one-head attention stages: on the 1B step it
// emits `one_b_value`, on the 8B step (chunks of four query heads) and the 1B step with
// attention_combine steps it leaves the kernel's default, `kernel_value`, alone.
void check_one_head_knob(const char* knob, int64_t one_b_value, int64_t kernel_value) {
  check_knob(knob, one_b_value, /*emitted=*/true, {"llama-3.2-1b"});
  check_knob(knob, kernel_value, /*emitted=*/false, {"llama-3.1-8b"});
  CompileOptions options;
  options.use_cache = false;
  const Program steps = llama_step("llama-3.2-1b", 2, 1024, combine_steps);
  CHECK(vm_source(steps, make_plan(steps), options).find(knob) == std::string::npos);
}
}  // namespace

TEST_CASE("the signals released by warp 1 (AMK_SIGNAL_WARP, on by default) and by warp 0 compile "
          "without spills for the 1B and 8B steps, traced too") {
  check_knob("AMK_SIGNAL_WARP", 1);
}

TEST_CASE("a preloading gemv's first poll when it starts (AMK_EARLY_POLL, on in the kernel; off "
          "where the attention chunks take the stages of eight lanes a row, the 1B step) and "
          "without it compile without spills for the 1B and 8B steps, traced too") {
  check_one_head_knob("AMK_EARLY_POLL", 0, 1);
}

TEST_CASE("the next step's instruction prefetched into L1 after a wait (AMK_NEXT_INS_L1, on by "
          "default) and without it compile without spills for the 1B and 8B steps, traced too") {
  check_knob("AMK_NEXT_INS_L1", 1);
}

TEST_CASE("the norm-fused gemv's staging in one round trip (AMK_GEMV_STAGE_ONE_TRIP, on by "
          "default) and a quad a pass compile without spills for the 1B and 8B steps, traced too") {
  check_knob("AMK_GEMV_STAGE_ONE_TRIP", 1);
}

TEST_CASE("gemv's loop for rows of whole batches (AMK_GEMV_WHOLE): set by the generated source "
          "where the ring is in (the 1B and 8B steps); no spills") {
  CompileOptions options;
  options.use_cache = false;
  const Program one_b = llama_step("llama-3.2-1b", 2);
  const Program eight_b = llama_step("llama-3.1-8b", 2);
  const Plan plan_1b = make_plan(one_b), plan_8b = make_plan(eight_b);
  CHECK(vm_source(one_b, plan_1b, options).find("#define AMK_GEMV_WHOLE 1\n") != std::string::npos);
  CHECK(vm_source(eight_b, plan_8b, options).find("#define AMK_GEMV_WHOLE 1\n") !=
        std::string::npos);
  // No ring (gemv_fused.json: no gemv waits, as the GEMV benchmarks): the kernel's default, off.
  const Program fused = load_program_file(std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "gpu" /
                                          "programs" / "gemv_fused.json");
  CHECK(vm_source(fused, make_plan(fused), options).find("AMK_GEMV_WHOLE") == std::string::npos);
  // A tuning decides it either way (and names it once).
  CompileOptions off = options;
  off.tuning = {{"AMK_GEMV_WHOLE", 0}};
  const std::string src_off = vm_source(one_b, plan_1b, off);
  CHECK(src_off.find("#define AMK_GEMV_WHOLE 0\n") != std::string::npos);
  CHECK(src_off.find("AMK_GEMV_WHOLE", src_off.find("AMK_GEMV_WHOLE") + 1) == std::string::npos);
  CompileOptions traced = options;
  traced.trace = true;
  const CompileOutput on = compile_vm(one_b, plan_1b, options);
  const CompileOutput without = compile_vm(one_b, plan_1b, off);
  const CompileOutput on_traced = compile_vm(one_b, plan_1b, traced);
  const CompileOutput eight = compile_vm(eight_b, plan_8b, options);
  for (const CompileOutput* out : {&on, &without, &on_traced, &eight}) {
    INFO(out->log);
    REQUIRE(out->ok);
    CHECK(amk::test::no_spills(out->log));
  }
  CHECK(without.cubin != on.cubin);  // the knob reaches the VM
}

TEST_CASE("the unfused gemv's batched x loads (AMK_GEMV_X_BATCH): set by the generated source "
          "where gemvs wait and preload, except with the wide attention tile (the 8B step) and "
          "with the one-head stages of eight lanes a row (the 1B step); both values compile "
          "without spills") {
  // Each step's VM is the one measured as its AMK_GEMV_X_BATCH=0 arm, byte for byte.
  check_knob("AMK_GEMV_X_BATCH", 0, /*emitted=*/false, {"llama-3.2-1b", "llama-3.1-8b"});
  CompileOptions options;
  options.use_cache = false;
  // The 1B step with attention_combine steps (chunks of four query heads): on.
  const Program steps = llama_step("llama-3.2-1b", 2, 1024, combine_steps);
  CHECK(vm_source(steps, make_plan(steps), options).find("#define AMK_GEMV_X_BATCH 1\n") !=
        std::string::npos);
  // No gemv that waits (gemv_fused.json, like the GEMV benchmarks): the kernel's default, off.
  const Program fused = load_program_file(std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "gpu" /
                                          "programs" / "gemv_fused.json");
  CHECK(vm_source(fused, make_plan(fused), options).find("AMK_GEMV_X_BATCH") == std::string::npos);
}

TEST_CASE("the tiled attention's stages with eight lanes a row (AMK_ATTN_ROW8): set by the "
          "generated source where every attention chunk has one query head (the 1B step's "
          "layout), not where chunks carry several (the 8B step, the combine-steps layout); both "
          "values compile without spills, traced too") {
  // (The 8B step's VM is the one without the stages: its chunks have four query heads.)
  check_one_head_knob("AMK_ATTN_ROW8", 1, 0);
  CompileOptions options;
  options.use_cache = false;
  // The GPU program of one-head chunks (head_dim 64 and 128, 1 to 200 positions) gets them.
  const Program one_head = load_program_file(std::filesystem::path(AMK_SOURCE_DIR) / "tests" /
                                             "gpu" / "programs" / "attention_one_head.json");
  CHECK(vm_source(one_head, make_plan(one_head), options).find("#define AMK_ATTN_ROW8 1\n") !=
        std::string::npos);
}
