// Compiles the VM with NVRTC for sm_90a (no GPU needed): every op, every gemv weight dtype, the
// TMA gemv, gemv's norm / w2 fusions, trace on and off, custom ops with and without trust, and
// the on-disk cubin cache.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda/cache.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compile.hpp"
#include "cuda/embedded.hpp"
#include "io/load.hpp"
#include "plan/plan.hpp"
#include "ptxas_log.hpp"
#include "report/trace.hpp"
#include "nvrtc_program_builder.hpp"
#include "ops/registry.hpp"

namespace fs = std::filesystem;
using namespace amk;
using namespace amk::test;

namespace {

uint16_t id(OpId op) { return static_cast<uint16_t>(op); }

// Every built-in op; gemv with f32, f16 and bf16 weights (f32 and bf16 x, with and without a
// residual) and a bf16 matrix covered by a TMA spec.
Built all_ops_program() {
  Builder b;
  const uint32_t k = 256, rows = 64;
  const uint32_t x = b.buffer("x", DType::f32, {k});
  const uint32_t xb = b.buffer("x_bf16", DType::bf16, {k});
  const uint32_t wf = b.buffer("w_f32", DType::f32, {rows, k});
  const uint32_t wh = b.buffer("w_f16", DType::f16, {rows, k});
  const uint32_t wb = b.buffer("w_bf16", DType::bf16, {rows, k});
  const uint32_t wt = b.buffer("w_tma", DType::bf16, {512, k});
  const uint32_t y = b.buffer("y", DType::f32, {rows});
  const uint32_t yt = b.buffer("y_tma", DType::f32, {512});
  const uint32_t yb = b.buffer("y_bf16", DType::bf16, {rows});
  const uint32_t res = b.buffer("residual", DType::f32, {rows});
  const uint32_t h = b.buffer("h", DType::f32, {k});
  const uint32_t hb = b.buffer("h_bf16", DType::bf16, {k});
  const uint32_t norm_w = b.buffer("norm_w", DType::bf16, {k});
  const uint32_t ids = b.buffer("ids", DType::i32, {4});
  const uint32_t table = b.buffer("table", DType::f32, {100, 64});
  const uint32_t emb = b.buffer("emb", DType::f32, {4 * 64});
  const uint32_t idx = b.buffer("idx", DType::i64, {1});
  const uint32_t counts = b.buffer("counts", DType::u32, {16});
  const uint32_t none = AMK_NO_BUFFER;

  b.instruction(id(OpId::nop), {});
  b.instruction(id(OpId::fill), {counts}, {f32_bits(3.0f)});
  b.instruction(id(OpId::fill), {h}, {f32_bits(0.5f)});
  b.instruction(id(OpId::copy), {x, h});
  b.instruction(id(OpId::copy), {h, hb});
  b.instruction(id(OpId::add), {x, h, h});
  b.instruction(id(OpId::add), {hb, hb, hb});
  b.instruction(id(OpId::mul), {x, h, h});
  b.instruction(id(OpId::scale), {h, h}, {f32_bits(0.25f)});
  b.instruction(id(OpId::silu_mul), {hb, hb, hb});
  b.instruction(id(OpId::rmsnorm), {h, norm_w, h}, {f32_bits(1e-5f)});
  b.instruction(id(OpId::softmax), {h, h}, {0, f32_bits(1.0f)});
  b.instruction(id(OpId::gemv), {wf, x, y, none});
  b.instruction(id(OpId::gemv), {wh, x, y, res});
  b.instruction(id(OpId::gemv), {wb, x, yb, res});
  b.instruction(id(OpId::gemv), {wb, xb, y, none});
  b.instruction(id(OpId::gemv), {wt, x, yt, none});
  b.instruction(id(OpId::argmax), {y, idx});
  b.instruction(id(OpId::embedding), {table, ids, emb});

  TmaSpec spec;
  spec.name = "w_tma";
  spec.buffer = wt;
  spec.dims = {k, 512};
  spec.box = {128, 32};
  b.program().tma.push_back(spec);
  return b.finish();
}

// gemv with its fusions (norm + w2 + residual, bf16 w, f32 x) next to a plain gemv: vector rows,
// rows whose bytes are not a multiple of 16 (scalar path), norm in every float dtype, and a TMA
// spec over w, which the fused instructions must not take.
Built fused_gemv_program() {
  Builder b;
  const uint32_t k = 2048, rows = 40, k_odd = 136 + 4;  // k_odd * 2 bytes: not 16-byte rows
  const uint32_t x = b.buffer("x", DType::f32, {k});
  const uint32_t w = b.buffer("w", DType::bf16, {rows, k});
  const uint32_t w2 = b.buffer("w2", DType::bf16, {rows, k});
  const uint32_t norm_b = b.buffer("norm_bf16", DType::bf16, {k});
  const uint32_t norm_f = b.buffer("norm_f32", DType::f32, {k});
  const uint32_t norm_h = b.buffer("norm_f16", DType::f16, {k});
  const uint32_t res = b.buffer("residual", DType::f32, {rows});
  const uint32_t y = b.buffer("y", DType::f32, {rows});
  const uint32_t xo = b.buffer("x_odd", DType::f32, {k_odd});
  const uint32_t wo = b.buffer("w_odd", DType::bf16, {rows / 2, k_odd});
  const uint32_t w2o = b.buffer("w2_odd", DType::bf16, {rows / 2, k_odd});
  const uint32_t no = b.buffer("norm_odd", DType::bf16, {k_odd});
  const uint32_t yo = b.buffer("y_odd", DType::bf16, {rows / 2});
  const uint32_t none = AMK_NO_BUFFER;
  const uint32_t eps = f32_bits(1e-5f);
  b.instruction(id(OpId::gemv), {w, x, y, res, none, none}, {eps});
  b.instruction(id(OpId::gemv), {w, x, y, res, norm_b, w2}, {eps});
  b.instruction(id(OpId::gemv), {w, x, y, none, norm_f, none}, {eps});
  b.instruction(id(OpId::gemv), {w, x, y, none, none, w2}, {eps});
  b.instruction(id(OpId::gemv), {w2, x, y, res, norm_h, w}, {eps});
  b.instruction(id(OpId::gemv), {wo, xo, yo, none, no, w2o}, {eps});
  TmaSpec spec;
  spec.name = "w";
  spec.buffer = w;
  spec.dims = {k, rows};
  spec.box = {128, 8};
  b.program().tma.push_back(spec);
  return b.finish();
}

// One tiny op: for the cache tests, which compile several times.
Built small_program() {
  Builder b;
  const uint32_t y = b.buffer("y", DType::f32, {64});
  b.instruction(id(OpId::fill), {y}, {f32_bits(1.0f)});
  return b.finish(128);
}

// A program with one custom op named `twice` whose source is `source`.
Built custom_program(const std::string& source) {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, {1024});
  b.instruction(kCustomOpBase, {x, x});
  CustomOp op;
  op.name = "twice";
  op.operands = {"x", "y"};
  op.source = source;
  b.program().custom_ops.push_back(op);
  return b.finish(128);
}

const char* const kTwiceSource = R"(
__device__ void amk_custom_twice(const amk_device_program_t& prog, const amk_instruction_t& ins,
                                 unsigned char* smem) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view y = amk_operand(ins, 1);
  for (uint32_t i = threadIdx.x; i < y.n; i += AMK_BLOCK_THREADS)
    amk_store_f32(y, i, 2.0f * amk_load_f32(x, i));
}
)";

bool is_elf(const std::vector<std::byte>& cubin) {
  return cubin.size() > 4 && cubin[0] == std::byte{0x7f} && cubin[1] == std::byte{'E'} &&
         cubin[2] == std::byte{'L'} && cubin[3] == std::byte{'F'};
}

// The ptxas lines about the kernel entry (registers, spills, stack).
std::string resource_lines(const std::string& log) {
  std::string out;
  size_t at = log.find("Function properties for amk_vm");
  if (at == std::string::npos) return log;
  for (int lines = 0; lines < 3 && at < log.size(); ++lines) {
    size_t end = log.find('\n', at);
    if (end == std::string::npos) end = log.size();
    out += "  " + log.substr(at, end - at) + "\n";
    at = end + 1;
  }
  return out;
}

CompileOptions uncached() {
  CompileOptions o;
  o.use_cache = false;
  return o;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "amk_nvrtc_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("generated source: only the ops used, numbers only, TMA table") {
  const Built b = all_ops_program();
  const std::string src = vm_source(b.program, b.plan, uncached());
  CHECK(src.find("#define AMK_BLOCK_THREADS 256") != std::string::npos);
  CHECK(src.find("#define AMK_USE_OP_GEMV 1") != std::string::npos);
  CHECK(src.find("#define AMK_USE_OP_EMBEDDING 1") != std::string::npos);
  CHECK(src.find("#define AMK_TMA_COUNT 1") != std::string::npos);
  CHECK(src.find("#define AMK_TMA_GEMV 1") != std::string::npos);
  CHECK(src.find("#define AMK_GEMV_BF16_F32 1") != std::string::npos);
  CHECK(src.find("#define AMK_GEMV_F32_BF16 1") == std::string::npos);
  CHECK(src.find("case 5u: g.slot = 0u;") != std::string::npos);  // w_tma is buffer 5
  CHECK(src.find("AMK_TRACE") == std::string::npos);
  CHECK(src.find("secret_program_name") == std::string::npos);
  CHECK(src.find("w_tma") == std::string::npos);

  const Built s = small_program();
  const std::string small = vm_source(s.program, s.plan, uncached());
  CHECK(small.find("AMK_USE_OP_FILL 1") != std::string::npos);
  CHECK(small.find("AMK_USE_OP_GEMV") == std::string::npos);
  CHECK(small.find("AMK_TMA_GEMV") == std::string::npos);

  CHECK(vm_dynamic_smem_bytes(b.program, b.plan) > 4 * 128 * 32 * 2);
  CHECK(vm_dynamic_smem_bytes(s.program, s.plan) == 0);
}

TEST_CASE("every op compiles for sm_90a, trace off and on") {
  const Built b = all_ops_program();
  for (bool trace : {false, true}) {
    CAPTURE(trace);
    CompileOptions o = uncached();
    o.trace = trace;
    const CompileOutput out = compile_vm(b.program, b.plan, o);
    CHECK(out.ok);
    CHECK_FALSE(out.cache_hit);
    CHECK(is_elf(out.cubin));
    CHECK(out.kernel_name == "amk_vm");
    CHECK(out.arch == "sm_90a");
    CHECK(out.tma_count == 1);
    CHECK(out.source_fingerprint.size() == 64);
    CHECK(out.log.find("Used") != std::string::npos);  // ptxas -v kept in the log
    CHECK(amk::test::no_spills(out.log));
    std::printf("[nvrtc] all ops, trace=%d: cold compile %.0f ms, cubin %zu bytes (NVRTC %s)\n%s",
                trace ? 1 : 0, out.compile_ms, out.cubin.size(), out.nvrtc_version.c_str(),
                resource_lines(out.log).c_str());
  }
}

TEST_CASE("the VM's trace layout is the one the host reads") {
  // kernels/amk_device.cuh writes kAmkTraceWords words an instruction; report/trace.cpp reads
  // kTraceWordsPerInstruction.
  bool found = false;
  for (const EmbeddedFile& f : embedded_kernel_files())
    if (f.name == "amk_device.cuh")
      found = f.text.find("constexpr uint32_t kAmkTraceWords = " +
                          std::to_string(kTraceWordsPerInstruction) + ";") != std::string_view::npos;
  CHECK(found);
}

TEST_CASE("the gemv preload (default 2; 1, 0 by tuning) compiles without spills, trace off and on") {
  // gemv_waits.json: every gemv form (plain, norm, GLU, both, residual, f32/bf16 weights) behind a
  // wait on another block.
  const Program program = load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" /
                                            "programs" / "gemv_waits.json");
  const Plan plan = make_plan(program);
  // Every gemv has its weights flagged and keeps its wait (the copies run on another block).
  for (const amk_instruction_t& i : plan.instructions)
    if (i.op == static_cast<uint16_t>(OpId::gemv)) {
      CHECK((i.flags & AMK_INS_CONST_WEIGHTS) != 0);
      CHECK(i.n_waits == 1);
    }
  // level -1: no tuning (the default, two batches). Untraced cubins by level, to tell the default.
  std::map<int, std::vector<std::byte>> cubins;
  for (const auto& [trace, level] :
       {std::pair{false, -1}, {true, -1}, {false, 2}, {false, 1}, {true, 1}, {false, 0}}) {
    CAPTURE(trace);
    CAPTURE(level);
    CompileOptions o = uncached();
    o.trace = trace;
    if (level >= 0) o.tuning = {{"AMK_GEMV_PRELOAD", level}};
    const CompileOutput out = compile_vm(program, plan, o);
    INFO(out.log);
    CHECK(out.ok);
    CHECK(amk::test::no_spills(out.log));
    if (!trace) cubins[level] = out.cubin;
  }
  // The default VM is the two-batch one, and the levels differ.
  REQUIRE(cubins.size() == 4);
  CHECK(cubins[-1] == cubins[2]);
  CHECK(cubins[-1] != cubins[1]);
  CHECK(cubins[1] != cubins[0]);
}

namespace {

// Two plain bf16 gemvs (f32 x): the GEMV benchmark's VM. With `waits`, the builder's chain (each
// step waits for the one before) and the planner's const-weights flag, as in a decode step.
Built plain_gemvs(bool waits, uint32_t extra_buffers = 0) {
  Builder b;
  const uint32_t k = 4096, rows = 64;
  const uint32_t x = b.buffer("x", DType::f32, {k});
  for (int m = 0; m < 2; ++m) {
    const uint32_t w = b.buffer("w" + std::to_string(m), DType::bf16, {rows, k});
    const uint32_t y = b.buffer("y" + std::to_string(m), DType::f32, {rows});
    b.instruction(id(OpId::gemv), {w, x, y, AMK_NO_BUFFER});
  }
  for (uint32_t e = 0; e < extra_buffers; ++e)
    b.buffer("unused" + std::to_string(e), DType::f32, {4});
  Built built = b.finish();
  for (amk_instruction_t& i : built.plan.instructions) {
    if (!waits) i.n_waits = 0;
    i.flags |= AMK_INS_CONST_WEIGHTS;
  }
  return built;
}

}  // namespace

TEST_CASE("steps without waits: no gemv preload, no shared buffer table; the gemv VM keeps two blocks an SM") {
  const CompileOptions o = uncached();
  auto defines = [](const std::string& src, const std::string& name) {
    size_t n = 0;
    for (size_t at = src.find("#define " + name + " "); at != std::string::npos;
         at = src.find("#define " + name + " ", at + 1))
      ++n;
    return n;
  };
  const Built free = plain_gemvs(false);
  const Built chained = plain_gemvs(true);
  CHECK_FALSE(gemv_preload_needed(free.plan, o));
  CHECK_FALSE(smem_buffer_table(free.program, free.plan, o));
  CHECK(gemv_preload_needed(chained.plan, o));
  CHECK(smem_buffer_table(chained.program, chained.plan, o));
  const std::string free_src = vm_source(free.program, free.plan, o);
  CHECK(free_src.find("#define AMK_GEMV_PRELOAD 0\n") != std::string::npos);
  CHECK(defines(free_src, "AMK_SMEM_BUFFERS") == 0);
  const std::string chained_src = vm_source(chained.program, chained.plan, o);
  // Through the ring (the default where gemvs wait): one batch before the wait, defined once;
  // weights in registers: the header's default, two batches.
  CHECK(defines(chained_src, "AMK_GEMV_PRELOAD") == 1);
  CHECK(chained_src.find("#define AMK_GEMV_PRELOAD 1\n") != std::string::npos);
  CHECK(chained_src.find("#define AMK_GEMV_SMEM_STAGES 2\n") != std::string::npos);
  {
    CompileOptions regs = o;
    regs.tuning = {{"AMK_GEMV_SMEM_STAGES", 0}};
    const std::string regs_src = vm_source(chained.program, chained.plan, regs);
    CHECK(defines(regs_src, "AMK_GEMV_PRELOAD") == 0);
    CHECK(vm_choices(chained.program, chained.plan, regs).gemv_preload == 2);
    CompileOptions three = o;
    three.tuning = {{"AMK_GEMV_PRELOAD", 3}};  // a tuning that names it decides, ring or not
    CHECK(vm_choices(chained.program, chained.plan, three).gemv_preload == 3);
    CHECK(defines(vm_source(chained.program, chained.plan, three), "AMK_GEMV_PRELOAD") == 1);
  }
  CHECK(chained_src.find("#define AMK_SMEM_BUFFERS 1\n#define AMK_SMEM_BUFFER_CAP 5\n") !=
        std::string::npos);
  // Waits on gemvs whose weights some instruction writes: no preload, but the table.
  {
    Built written = plain_gemvs(true);
    for (amk_instruction_t& i : written.plan.instructions) i.flags = 0;
    CHECK_FALSE(gemv_preload_needed(written.plan, o));
    CHECK(smem_buffer_table(written.program, written.plan, o));
  }
  // The tunings decide when they name the macros, each defined once.
  CompileOptions on = o, off = o;
  on.tuning = {{"AMK_GEMV_PRELOAD", 2}, {"AMK_SMEM_BUFFERS", 1}};
  off.tuning = {{"AMK_GEMV_PRELOAD", 0}, {"AMK_SMEM_BUFFERS", 0}};
  CHECK(gemv_preload_needed(free.plan, on));
  CHECK(smem_buffer_table(free.program, free.plan, on));
  CHECK_FALSE(gemv_preload_needed(chained.plan, off));
  CHECK_FALSE(smem_buffer_table(chained.program, chained.plan, off));
  const std::string forced = vm_source(free.program, free.plan, on);
  CHECK(defines(forced, "AMK_GEMV_PRELOAD") == 1);
  CHECK(defines(forced, "AMK_SMEM_BUFFERS") == 1);
  CHECK(defines(vm_source(chained.program, chained.plan, off), "AMK_SMEM_BUFFERS") == 0);
  // The table holds every buffer or none: past 1024 buffers it stays global, tuning or not.
  {
    const Built many = plain_gemvs(true, 1020);
    CHECK(many.program.buffers.size() == 1025);
    CHECK_FALSE(smem_buffer_table(many.program, many.plan, o));
    CHECK_FALSE(smem_buffer_table(many.program, many.plan, on));
    CHECK(defines(vm_source(many.program, many.plan, on), "AMK_SMEM_BUFFERS") == 0);
    CHECK(smem_buffer_table(plain_gemvs(true, 1019).program, plain_gemvs(true, 1019).plan, o));
  }
  // What `amk compile` reports: the same decisions, and the preload level the kernels default to.
  {
    const VmChoices f = vm_choices(free.program, free.plan, o);
    CHECK(f.gemv_preload == 0);
    CHECK_FALSE(f.smem_buffer_table);
    CHECK(f.attention_wide_tile == -1);
    CHECK(f.attention_pass == -1);
    CHECK_FALSE(f.weight_streams);
    const VmChoices c = vm_choices(chained.program, chained.plan, o);
    CHECK(c.gemv_preload == 1);
    CHECK(c.gemv_smem_stages == 2);
    CHECK(c.smem_buffer_table);
    CompileOptions named = o;
    named.tuning = {{"AMK_GEMV_PRELOAD", c.gemv_preload}};
    const CompileOutput by_default = compile_vm(chained.program, chained.plan, o);
    const CompileOutput by_name = compile_vm(chained.program, chained.plan, named);
    REQUIRE(by_default.ok);
    REQUIRE(by_name.ok);
    CHECK(by_default.cubin == by_name.cubin);  // the reported level is the one compiled
    CHECK(vm_choices(chained.program, chained.plan, off).gemv_preload == 0);
    CHECK_FALSE(vm_choices(chained.program, chained.plan, off).smem_buffer_table);
  }
  // Without them the plain gemv VM fits 128 registers a thread, two 256-thread blocks an SM
  // (measured on the H200: 8 x 4096^2 in 73 us at two blocks, 98.5 us at one).
  const CompileOutput out = compile_vm(free.program, free.plan, o);
  INFO(out.log);
  REQUIRE(out.ok);
  CHECK(amk::test::no_spills(out.log));
  const int regs = amk::test::vm_registers(out.log);
  CHECK(regs > 0);
  CHECK(regs <= 128);
  // Both on, weights in registers (forcing the preload would bring the ring too): more registers
  // (what the default spares such a VM); compiled and spill-free.
  CompileOptions on_regs = on;
  on_regs.tuning.push_back({"AMK_GEMV_SMEM_STAGES", 0});
  const CompileOutput both = compile_vm(free.program, free.plan, on_regs);
  INFO(both.log);
  REQUIRE(both.ok);
  CHECK(amk::test::no_spills(both.log));
  CHECK(amk::test::vm_registers(both.log) > regs);
}

TEST_CASE("the L2 prefetch of the next streaming step: off where gemvs wait and preload") {
  // AMK_PREFETCH_AHEAD (kernels/amk_vm.cuh; codegen's vm_choices): the decode steps (gemvs that
  // wait on others and preload) get 0, independent gemvs keep the kernel's default (1); a tuning
  // decides, its value defined once.
  const CompileOptions o = uncached();
  const std::string key = "#define AMK_PREFETCH_AHEAD ";
  auto define = [&](const std::string& src) {
    const size_t at = src.find(key);
    if (at == std::string::npos) return -1;
    CHECK(src.find(key, at + 1) == std::string::npos);
    return std::atoi(src.c_str() + at + key.size());
  };
  const Built chained = plain_gemvs(true);
  const Built free = plain_gemvs(false);
  CHECK(vm_choices(chained.program, chained.plan, o).prefetch_ahead == 0);
  CHECK(define(vm_source(chained.program, chained.plan, o)) == 0);
  CHECK(vm_choices(free.program, free.plan, o).prefetch_ahead == 1);
  CHECK(define(vm_source(free.program, free.plan, o)) == -1);
  CompileOptions two = o;
  two.tuning = {{"AMK_PREFETCH_AHEAD", 2}};
  CHECK(vm_choices(chained.program, chained.plan, two).prefetch_ahead == 2);
  CHECK(define(vm_source(chained.program, chained.plan, two)) == 2);
  const CompileOutput out = compile_vm(chained.program, chained.plan, o);
  INFO(out.log);
  CHECK(out.ok);
}

TEST_CASE("gemv's weight ring: on where a gemv preloads, sized by the block, off beside TMA") {
  // AMK_GEMV_SMEM_STAGES (kernels/amk_ops_gemv.cuh; codegen's gemv_smem_stages): 2 stages of
  // 4 KiB a warp in dynamic shared memory where the gemv preload is compiled in (the decode steps),
  // none elsewhere; the executor sizes the launch's dynamic shared memory by gemv_ring_bytes.
  const CompileOptions o = uncached();
  auto stages_define = [](const std::string& src) {
    const std::string key = "#define AMK_GEMV_SMEM_STAGES ";
    const size_t at = src.find(key);
    return at == std::string::npos ? -1 : std::atoi(src.c_str() + at + key.size());
  };
  const Built chained = plain_gemvs(true);
  const Built free = plain_gemvs(false);
  CHECK(gemv_smem_stages(chained.program, chained.plan, o) == kGemvSmemStagesDefault);
  CHECK(kGemvSmemStagesDefault == 2);
  CHECK(gemv_ring_bytes(chained.program, chained.plan, o) == 8 * 2 * kGemvSlotBytes);
  CHECK(vm_dynamic_smem_bytes(chained.program, chained.plan, 232448, o) == 8 * 2 * 4096);
  CHECK(vm_choices(chained.program, chained.plan, o).gemv_smem_stages == 2);
  CHECK(stages_define(vm_source(chained.program, chained.plan, o)) == 2);
  CHECK(vm_source(chained.program, chained.plan, o).find("#define AMK_GEMV_RING_SLOT_BYTES 4096\n") !=
        std::string::npos);
  CHECK(gemv_smem_stages(free.program, free.plan, o) == 0);
  CHECK(vm_dynamic_smem_bytes(free.program, free.plan, 232448, o) == 0);
  CHECK(vm_choices(free.program, free.plan, o).gemv_smem_stages == 0);
  CHECK(stages_define(vm_source(free.program, free.plan, o)) == -1);
  // The tuning decides, each value defined once (the copy of the tuning is not emitted).
  CompileOptions three = o, none = o;
  three.tuning = {{"AMK_GEMV_SMEM_STAGES", 3}};
  none.tuning = {{"AMK_GEMV_SMEM_STAGES", 0}};
  const std::string forced = vm_source(free.program, free.plan, three);
  CHECK(stages_define(forced) == 3);
  CHECK(forced.find("#define AMK_GEMV_SMEM_STAGES", forced.find("#define AMK_GEMV_SMEM_STAGES") + 1) ==
        std::string::npos);
  CHECK(gemv_ring_bytes(free.program, free.plan, three) == 8 * 3 * 4096);
  CHECK(gemv_smem_stages(chained.program, chained.plan, none) == 0);
  CHECK(stages_define(vm_source(chained.program, chained.plan, none)) == -1);
  // One stage is no ring; 1024 threads: 32 warps x 2 x 4 KiB exceeds the 128 KiB cap (0), and 4
  // stages at 256 threads fit exactly.
  CompileOptions one = o, four = o;
  one.tuning = {{"AMK_GEMV_SMEM_STAGES", 1}};
  four.tuning = {{"AMK_GEMV_SMEM_STAGES", 4}};
  CHECK(gemv_smem_stages(chained.program, chained.plan, one) == 0);
  CHECK(gemv_ring_bytes(chained.program, chained.plan, four) == kGemvRingCap);
  {
    Built wide = plain_gemvs(true);
    wide.program.launch.block = 1024;
    wide.plan.block = 1024;
    CHECK(gemv_smem_stages(wide.program, wide.plan, o) == 0);
    CHECK(gemv_smem_stages(wide.program, wide.plan, four) == 0);
    wide.program.launch.block = 512;
    wide.plan.block = 512;
    CHECK(gemv_smem_stages(wide.program, wide.plan, four) == 2);  // 16 warps: 2 stages fit
  }
  // Dynamic shared memory the program asks for itself, or a TMA gemv: no ring, tuning or not.
  {
    Built own = plain_gemvs(true);
    own.program.launch.dynamic_smem = 1024;
    CHECK(gemv_smem_stages(own.program, own.plan, three) == 0);
    const Program tma = load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" /
                                          "programs" / "tma_gemv.json");
    CHECK(gemv_smem_stages(tma, make_plan(tma), three) == 0);
  }
  // A program without gemv reports none.
  {
    const Program attn = load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" /
                                           "programs" / "attention_tiled.json");
    const Plan plan = make_plan(attn);
    CHECK(vm_choices(attn, plan, three).gemv_smem_stages == -1);
    CHECK(gemv_ring_bytes(attn, plan, three) == 0);
  }
  // The ring's VM compiles spill-free, and differs from the register path's.
  const CompileOutput ring = compile_vm(chained.program, chained.plan, o);
  const CompileOutput regs = compile_vm(chained.program, chained.plan, none);
  INFO(ring.log);
  REQUIRE(ring.ok);
  REQUIRE(regs.ok);
  CHECK(amk::test::no_spills(ring.log));
  CHECK(ring.cubin != regs.cubin);
}

TEST_CASE("vm_registers reads the VM's line of a ptxas log") {
  const std::string log =
      "ptxas info    : Function properties for amk_raise_at\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 40 registers\n"
      "ptxas info    : Function properties for amk_vm\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 128 registers, used 1 barriers, 56 bytes smem\n";
  CHECK(amk::test::vm_registers(log) == 128);
  CHECK(amk::test::vm_registers("ptxas info    : Function properties for amk_vm\n") == -1);
  CHECK(amk::test::vm_registers(
            "ptxas info    : Function properties for amk_vm\nptxas info    : Function "
            "properties for f\nptxas info    : Used 9 registers\n") == -1);
}

TEST_CASE("gemv with norm, w2 and residual compiles for sm_90a without spills") {
  const Built b = fused_gemv_program();
  const std::string src = vm_source(b.program, b.plan, uncached());
  CHECK(src.find("#define AMK_GEMV_BF16_F32 1") != std::string::npos);
  CHECK(src.find("#define AMK_TMA_GEMV 1") != std::string::npos);
  // norm's dtypes add no (w, x) pair: only bf16 x f32 is instantiated.
  CHECK(src.find("#define AMK_GEMV_BF16_BF16") == std::string::npos);
  CHECK(src.find("#define AMK_GEMV_F32_F32") == std::string::npos);
  const CompileOutput out = compile_vm(b.program, b.plan, uncached());
  CHECK(out.ok);
  CHECK(is_elf(out.cubin));
  CHECK(amk::test::no_spills(out.log));
  std::printf("[nvrtc] gemv with fusions: cold compile %.0f ms\n%s", out.compile_ms,
              resource_lines(out.log).c_str());

  // The batch-loop variants off by default (kernels/amk_ops_gemv.cuh): two batches an iteration
  // with the buffers swapping roles, and conditional weight loads.
  CompileOptions variants = uncached();
  variants.tuning = {{"AMK_GEMV_PINGPONG", 1}, {"AMK_GEMV_CLAMPED_LOADS", 0}};
  const CompileOutput alt = compile_vm(b.program, b.plan, variants);
  CHECK(alt.ok);
  CHECK(is_elf(alt.cubin));
  CHECK(amk::test::no_spills(alt.log));
  std::printf("[nvrtc] gemv with fusions, ping-pong batches and conditional loads: cold compile "
              "%.0f ms\n%s",
              alt.compile_ms, resource_lines(alt.log).c_str());

  // The TMA pipeline's dynamic shared memory leaves room for the VM's static shared memory,
  // which the norm fusion grows by its x stage (16 KiB + the per-warp sums): at every opt-in limit
  // the request plus that static part fits, and some limits do get a pipeline.
  constexpr uint32_t kStatic = 4096 + 4096 * 4 + 32 * 4;  // slack + stage (src/cuda/codegen.cpp)
  bool some = false;
  for (uint32_t optin = 8 * 1024; optin <= 96 * 1024; optin += 512) {
    CAPTURE(optin);
    const uint32_t dyn = vm_dynamic_smem_bytes(b.program, b.plan, optin);
    CHECK((dyn == 0 || dyn + kStatic <= optin));
    some = some || dyn != 0;
  }
  CHECK(some);
}

TEST_CASE("custom ops: compiled with trust, refused without, errors keep the log") {
  const Built ok = custom_program(kTwiceSource);
  CompileOptions trusted = uncached();
  trusted.trust_custom_ops = true;
  const CompileOutput out = compile_vm(ok.program, ok.plan, trusted);
  CHECK(out.ok);
  CHECK(is_elf(out.cubin));
  CHECK(vm_source(ok.program, ok.plan, trusted).find("case 1000: amk_custom_twice") !=
        std::string::npos);

  try {
    (void)compile_vm(ok.program, ok.plan, uncached());
    FAIL("an untrusted custom op compiled");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::program);
    CHECK(e.code() == "custom.untrusted");
    CHECK(e.where() == "/custom_ops/0");
  }

  const Built bad = custom_program(std::string(kTwiceSource) + "\nthis is not C++;\n");
  try {
    (void)compile_vm(bad.program, bad.plan, trusted);
    FAIL("a custom op with a syntax error compiled");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::nvrtc);
    CHECK(e.code() == "nvrtc.compile");
    CHECK(e.where() == "sm_90a");
    CHECK(std::string(e.what()).find("sm_90a") != std::string::npos);
    CHECK(e.detail().find("custom_op_twice.cu") != std::string::npos);
    CHECK(e.detail().find("error") != std::string::npos);
  }
}

TEST_CASE("cubin cache: hit, miss on a different option, corrupt entry rebuilt") {
  TempDir tmp;
  REQUIRE(setenv("AMK_CACHE_DIR", tmp.path.c_str(), 1) == 0);
  const Built b = small_program();
  CompileOptions o;  // cache on, directory from the environment
  CHECK(resolve_cache_dir(o) == tmp.path);

  const CompileOutput first = compile_vm(b.program, b.plan, o);
  CHECK(first.ok);
  CHECK_FALSE(first.cache_hit);
  const fs::path cubin = tmp.path / (first.source_fingerprint + ".cubin");
  CHECK(fs::exists(cubin));
  CHECK(fs::exists(tmp.path / (first.source_fingerprint + ".json")));
  std::printf("[nvrtc] small program: cold compile %.0f ms\n", first.compile_ms);

  const CompileOutput second = compile_vm(b.program, b.plan, o);
  CHECK(second.cache_hit);
  CHECK(second.cubin == first.cubin);
  CHECK(second.log == first.log);
  CHECK(second.source_fingerprint == first.source_fingerprint);
  std::printf("[nvrtc] small program: cache hit %.1f ms\n", second.compile_ms);

  CompileOptions other = o;
  other.line_info = true;
  const CompileOutput third = compile_vm(b.program, b.plan, other);
  CHECK_FALSE(third.cache_hit);
  CHECK(third.source_fingerprint != first.source_fingerprint);

  {  // truncate the cubin: the entry no longer verifies and is rebuilt
    std::ofstream corrupt(cubin, std::ios::binary | std::ios::trunc);
    corrupt << "\x7f" "ELF";
  }
  const CompileOutput rebuilt = compile_vm(b.program, b.plan, o);
  CHECK_FALSE(rebuilt.cache_hit);
  CHECK(rebuilt.cubin == first.cubin);
  const CompileOutput again = compile_vm(b.program, b.plan, o);
  CHECK(again.cache_hit);
  CHECK(again.cubin == first.cubin);

  {  // garbage sidecar: ignored as well
    std::ofstream corrupt(tmp.path / (first.source_fingerprint + ".json"), std::ios::trunc);
    corrupt << "{not json";
  }
  CHECK_FALSE(compile_vm(b.program, b.plan, o).cache_hit);

  CompileOptions off = o;
  off.use_cache = false;
  CHECK_FALSE(compile_vm(b.program, b.plan, off).cache_hit);
  unsetenv("AMK_CACHE_DIR");
}

TEST_CASE("weight streams: ring sizing, off by default, the streamed VM compiles for sm_90a") {
  // Ring: pad + 2 mbarriers a slot (128-byte rounded) + row sums + x (128-byte rounded) + slots.
  CHECK(stream_smem_bytes(12, 2048) ==
        128 + 256 + 8 * AMK_STREAM_MAX_ROWS + 8192 + 12 * AMK_STREAM_SLOT_BYTES);
  CHECK(stream_smem_bytes(2, 33) == 128 + 128 + 8 * AMK_STREAM_MAX_ROWS + 256 + 2 * AMK_STREAM_SLOT_BYTES);
  // The kernel is compiled for exactly the slots wanted: those, or none.
  CHECK(stream_slots_fitting(12, 2048, stream_smem_bytes(12, 2048)) == 12);
  CHECK(stream_slots_fitting(12, 2048, stream_smem_bytes(12, 2048) - 1) == 0);
  CHECK(stream_slots_fitting(2, 64, stream_smem_bytes(2, 64)) == 2);
  CHECK(stream_slots_fitting(1, 64, 1u << 20) == 0);
  CHECK(stream_slots_fitting(0, 64, 1u << 20) == 0);

  const Program program =
      load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" / "programs" / "gemv_stream.json");
  const Plan plan = make_plan(program);
  REQUIRE(plan.has_streams());
  // Off unless the tuning asks for slots.
  CHECK(stream_slots_wanted(uncached()) == 0);
  CHECK(vm_source(program, plan, uncached()).find("AMK_WEIGHT_STREAMS") == std::string::npos);
  CompileOptions on = uncached();
  on.tuning = {{"AMK_STREAM_SLOTS", 12}};
  CHECK(stream_slots_wanted(on) == 12);
  const std::string src = vm_source(program, plan, on);
  CHECK(src.find("#define AMK_WEIGHT_STREAMS 1") != std::string::npos);
  CHECK(stream_x_floats(plan) == 16384);  // the widest streamed x (32 KiB rows of bf16)
  CHECK(src.find("#define AMK_STREAM_X_FLOATS 16384") != std::string::npos);
  const CompileOutput out = compile_vm(program, plan, on);
  CHECK(out.ok);
  CHECK(is_elf(out.cubin));
  std::printf("[nvrtc] weight streams: cold compile %.0f ms\n%s", out.compile_ms,
              resource_lines(out.log).c_str());
  // Consumer warps are rounded down to a divisor of the slots (the kernel static_asserts that a
  // warp's tiles are every W-th): 3 of 10 slots compiles as 2 warps of 5 slots each.
  CompileOptions odd = uncached();
  odd.tuning = {{"AMK_STREAM_SLOTS", 10}, {"AMK_STREAM_WARPS", 3}};
  const CompileOutput odd_out = compile_vm(program, plan, odd);
  CHECK(odd_out.ok);
  if (!odd_out.ok) std::printf("%s\n", odd_out.log.c_str());
  // 12 slots do not fit beside this program's 64 KiB of x on the H200 (232448 bytes of shared
  // memory a block, ~20 KiB of them static): scripts/gpu_check.sh runs it with 8.
  CHECK(stream_slots_fitting(12, 16384, 232448 - 20000) == 0);
  CHECK(stream_slots_fitting(8, 16384, 232448 - 20000) == 8);
}

TEST_CASE("gemv_splitk compiles for sm_90a: the VM and the op's own call without spills") {
  const Program program =
      load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" / "programs" / "gemv_splitk.json");
  const Plan plan = make_plan(program);
  CHECK(vm_source(program, plan, uncached()).find("#define AMK_USE_OP_GEMV_SPLITK 1") !=
        std::string::npos);
  {  // the helper itself: every function clean, and the VM reported
    const std::string vm = "ptxas info    : Function properties for amk_vm\nptxas         .     0 bytes "
                           "stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    const std::string f = "ptxas info    : Function properties for f\nptxas         .     8 bytes "
                          "stack frame, 120 bytes spill stores, 120 bytes spill loads\n";
    CHECK(amk::test::no_spills(vm));
    CHECK_FALSE(amk::test::no_spills(vm + f));
    CHECK_FALSE(amk::test::no_spills(f + vm));
    CHECK_FALSE(amk::test::no_spills(""));
  }
  // The defaults, then each knob the README lists (kernels/amk_ops_gemv_splitk.cuh).
  const std::vector<std::vector<std::pair<std::string, int64_t>>> tunings = {
      {},
      {{"AMK_SPLITK_UNROLL", 8}, {"AMK_SPLITK_PREFETCH", 1}},
      {{"AMK_SPLITK_ROTATE", 0}, {"AMK_SPLITK_RED_V4", 0}}};
  for (const auto& t : tunings) {
    CAPTURE(t.size());
    CompileOptions o = uncached();
    o.tuning = t;
    const CompileOutput out = compile_vm(program, plan, o);
    INFO(out.log);
    CHECK(out.ok);
    CHECK(is_elf(out.cubin));
    CHECK(out.log.find("amk_op_gemv_splitk") != std::string::npos);  // a call: its own properties
    CHECK(amk::test::no_spills(out.log));
  }
}

TEST_CASE("gemv_t compiles for sm_90a: a call of its own, no spills") {
  const Program program =
      load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" / "programs" / "gemv_t.json");
  const Plan plan = make_plan(program);
  CHECK(vm_source(program, plan, uncached()).find("#define AMK_USE_OP_GEMV_T 1") !=
        std::string::npos);
  // The default batch (4 rows, two in flight), then the knob at 8 and 16.
  for (const int64_t unroll : {int64_t{0}, int64_t{8}, int64_t{16}}) {
    CAPTURE(unroll);
    CompileOptions o = uncached();
    if (unroll != 0) o.tuning = {{"AMK_GEMV_T_UNROLL", unroll}};
    // (At 16 rows the VM is at 255 registers: the next step's lookup for the L1 prefetch, on by
    // default since the twenty-sixth session, made it spill 8 bytes, and the unfused gemv's
    // batched x loads (AMK_GEMV_X_BATCH, since the twenty-seventh) 152; both are off there.)
    if (unroll == 16) {
      o.tuning.push_back({"AMK_NEXT_INS_L1", 0});
      o.tuning.push_back({"AMK_GEMV_X_BATCH", 0});
    }
    const CompileOutput out = compile_vm(program, plan, o);
    INFO(out.log);
    CHECK(out.ok);
    CHECK(is_elf(out.cubin));
    CHECK(out.log.find("amk_op_gemv_t") != std::string::npos);  // a call: its own properties
    CHECK(amk::test::no_spills(out.log));
  }
}

TEST_CASE("attention_combine_splitk compiles for sm_90a: a call of its own, no spills") {
  const Program program = load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" /
                                            "programs" / "attention_combine_splitk.json");
  const Plan plan = make_plan(program);
  const std::string src = vm_source(program, plan, uncached());
  CHECK(src.find("#define AMK_USE_OP_ATTENTION_COMBINE_SPLITK 1") != std::string::npos);
  CHECK(src.find("#include \"amk_ops_attention.cuh\"") != std::string::npos);  // the merge
  CHECK(src.find("AMK_USE_OP_ATTENTION_COMBINE 1") == std::string::npos);
  CHECK(src.find("AMK_USE_OP_GEMV_SPLITK") == std::string::npos);
  // The kernel's x array is the verifier's limit, passed from the registry's one number.
  CHECK(src.find("#define AMK_COMBINE_SPLITK_MAX_K " + std::to_string(kCombineSplitkMaxK) + "\n") !=
        std::string::npos);
  const CompileOutput out = compile_vm(program, plan, uncached());
  INFO(out.log);
  CHECK(out.ok);
  CHECK(is_elf(out.cubin));
  CHECK(out.log.find("amk_op_attention_combine_splitk") != std::string::npos);
  CHECK(amk::test::no_spills(out.log));
}

TEST_CASE("attention ops read a copy of their instruction in shared memory; other VMs unchanged") {
  // AMK_STAGE_DECODE_INS (kernels/amk_vm.cuh): on where attention_decode or attention_combine
  // steps wait (two 256-byte slots of static shared memory), with the wide tile too since the
  // twentieth session; off elsewhere and beside attention_combine_splitk (codegen's
  // stage_decode_ins, reported by vm_choices).
  auto load = [](const char* name) {
    return load_program_file(fs::path(AMK_SOURCE_DIR) / "tests" / "gpu" / "programs" / name);
  };
  auto zero_define = [](const std::string& src) {
    return src.find("#define AMK_STAGE_DECODE_INS 0\n") != std::string::npos;
  };
  // What vm_choices reports and what the source defines agree, and say `staged`.
  auto expect_staged = [&](const Program& p, const Plan& plan, const CompileOptions& o,
                           bool staged) {
    CHECK(vm_choices(p, plan, o).stage_decode_ins == (staged ? 1 : 0));
    CHECK(zero_define(vm_source(p, plan, o)) == !staged);
  };
  // attention_rope: its combine waits, and its chunks take the wide tile (as the 8B step's VM):
  // the copy is on, as it is with the wide tile turned off.
  const Program attn = load("attention_rope.json");
  const Plan attn_plan = make_plan(attn);
  CHECK(attention_wide_tiles(attn, attn_plan, uncached()));
  expect_staged(attn, attn_plan, uncached(), true);
  CompileOptions narrow = uncached();
  narrow.tuning = {{"AMK_ATTN_TILED_WIDE", 0}};
  expect_staged(attn, attn_plan, narrow, true);
  const Program tiled = load("attention_tiled.json");  // no step waits: nothing to stage
  const Plan tiled_plan = make_plan(tiled);
  expect_staged(tiled, tiled_plan, uncached(), false);
  // attention_oproj: two of its chunks wait. With their stages of eight lanes a row (the
  // default for one-head chunks) they copy K/V after the VM ran their waits, so they are staged;
  // with the preload (those stages off, or the tuning) they run the waits themselves and nothing
  // is staged.
  const Program oproj = load("attention_oproj.json");
  const Plan oproj_plan = make_plan(oproj);
  CHECK(vm_choices(oproj, oproj_plan, uncached()).attention_preload == 0);
  expect_staged(oproj, oproj_plan, uncached(), true);
  CompileOptions split_stages = uncached();
  split_stages.tuning = {{"AMK_ATTN_ROW8", 0}};
  CHECK(vm_choices(oproj, oproj_plan, split_stages).attention_preload == 1);
  expect_staged(oproj, oproj_plan, split_stages, false);
  CompileOptions with_preload = uncached();
  with_preload.tuning = {{"AMK_ATTN_PRELOAD", 1}};
  expect_staged(oproj, oproj_plan, with_preload, false);
  const Program splitk = load("attention_combine_splitk.json");  // (see test_nvrtc_llm_ops)
  const Plan splitk_plan = make_plan(splitk);
  expect_staged(splitk, splitk_plan, uncached(), false);
  {
    CompileOptions forced = uncached();
    forced.tuning = {{"AMK_STAGE_DECODE_INS", 1}};
    CHECK(vm_choices(tiled, tiled_plan, forced).stage_decode_ins == 1);
    const std::string src = vm_source(tiled, tiled_plan, forced);
    CHECK(src.find("#define AMK_STAGE_DECODE_INS 1\n") != std::string::npos);
    CHECK_FALSE(zero_define(src));
  }
  CompileOptions off = uncached();
  off.tuning = {{"AMK_STAGE_DECODE_INS", 0}};
  CompileOptions narrow_off = narrow;
  narrow_off.tuning.push_back({"AMK_STAGE_DECODE_INS", 0});
  const CompileOutput staged = compile_vm(attn, attn_plan, narrow);
  const CompileOutput plain = compile_vm(attn, attn_plan, narrow_off);
  INFO(staged.log);
  REQUIRE(staged.ok);
  REQUIRE(plain.ok);
  CHECK(amk::test::no_spills(staged.log));
  CHECK(amk::test::vm_smem_bytes(plain.log) > 0);
  CHECK(amk::test::vm_smem_bytes(staged.log) ==
        amk::test::vm_smem_bytes(plain.log) + 2 * static_cast<long>(sizeof(amk_instruction_t)));
  // A VM without attention ops: the default compiles what the knob's 0 compiles.
  const Built gemvs = plain_gemvs(true);
  CHECK(vm_choices(gemvs.program, gemvs.plan, uncached()).stage_decode_ins == -1);
  const CompileOutput g_default = compile_vm(gemvs.program, gemvs.plan, uncached());
  const CompileOutput g_off = compile_vm(gemvs.program, gemvs.plan, off);
  REQUIRE(g_default.ok);
  REQUIRE(g_off.ok);
  CHECK(g_default.cubin == g_off.cubin);
}
