// Compiles the VM with NVRTC for sm_90a (no GPU needed): every op in one VM (every gemv weight
// dtype, the TMA gemv), trace on and off; the generated source; custom ops with and without trust;
// the on-disk cubin cache.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda/cache.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compile.hpp"
#include "cuda/embedded.hpp"
#include "io/load.hpp"
#include "ptxas_log.hpp"
#include "report/trace.hpp"
#include "nvrtc_program_builder.hpp"
#include "ops/registry.hpp"

namespace fs = std::filesystem;
using namespace amk;
using namespace amk::test;

namespace {

uint16_t id(OpId op) { return static_cast<uint16_t>(op); }

// Every built-in op but feed_token; gemv with f32, f16 and bf16 weights (f32 and bf16 x, with and
// without a residual) and a bf16 matrix covered by a TMA spec. `stepped` adds feed_token (with
// eos), the position operand of rope, kv_append (with RoPE) and attention_decode, and a carried
// wait: the VM's stepped and early-stop paths.
Program all_ops_program(bool stepped = false) {
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
  // The decode-step ops: RoPE on 4 heads of 64, a KV append, an attention chunk of 32 cached
  // positions (bf16) for 4 query heads with the new row, and the combine of two chunks.
  const uint32_t q = b.buffer("q", DType::f32, {4 * 64});
  const uint32_t kn = b.buffer("k_new", DType::f32, {64});
  const uint32_t vn = b.buffer("v_new", DType::f32, {64});
  const uint32_t kc = b.buffer("k_cache", DType::bf16, {32, 64});
  const uint32_t vc = b.buffer("v_cache", DType::bf16, {32, 64});
  const uint32_t part = b.buffer("partials", DType::f32, {2, 4, 66});
  const uint32_t attn = b.buffer("attn", DType::f32, {4 * 64});
  const uint32_t rope_params[] = {
      64, 5, f32_bits(10000.0f), f32_bits(0.0f), f32_bits(1.0f), f32_bits(4.0f), 8192};
  // (stepped: each at the position operand's position, kv_append rotated like rope, the
  // attention chunk's rows from position 16 on.)
  const uint32_t pos = stepped ? b.buffer("pos", DType::u32, {1}) : none;
  std::vector<uint32_t> rope_ops = {q, q}, append_ops = {kn, kc}, append_params = {64, 3, 32};
  std::vector<uint32_t> attn_ops = {q, kc, vc, part, kn, vn};
  std::vector<uint32_t> attn_params = {
      64, 0, 31, f32_bits(10000.0f), f32_bits(0.0f), f32_bits(1.0f), f32_bits(4.0f), 8192};
  if (stepped) {
    rope_ops.push_back(pos);
    append_ops.push_back(pos);
    append_params.insert(append_params.end(), {f32_bits(10000.0f), f32_bits(0.0f), f32_bits(1.0f),
                                               f32_bits(4.0f), 8192});
    attn_ops.push_back(pos);
    attn_params.push_back(16);
  }
  b.instruction(id(OpId::rope), rope_ops, {std::begin(rope_params), std::end(rope_params)});
  b.instruction(id(OpId::kv_append), append_ops, append_params);
  b.instruction(id(OpId::attention_decode), attn_ops, attn_params);
  b.instruction(id(OpId::attention_combine), {part, attn}, {64, 1});
  if (stepped) {
    const uint32_t prompt = b.buffer("prompt", DType::i32, {3});
    const uint32_t token = b.buffer("token", DType::i32, {1});
    const uint32_t gen = b.buffer("generated", DType::i64, {8});
    const uint32_t all = b.buffer("all_logits", DType::f32, {8, rows});
    const uint32_t eos = b.buffer("eos", DType::i32, {1});  // (the VM's early_stop paths too)
    b.instruction(id(OpId::feed_token), {idx, prompt, token, gen, y, all, eos});
    // The first instruction waits for the previous pass's last one.
    const uint32_t n = static_cast<uint32_t>(b.program().instructions.size());
    b.program().instructions[0].waits.push_back({0, n, true});
  }

  TmaSpec spec;
  spec.name = "w_tma";
  spec.buffer = wt;
  spec.dims = {k, 512};
  spec.box = {128, 32};
  b.program().tma.push_back(spec);
  return b.finish();
}

// One tiny op: for the cache tests, which compile several times.
Program small_program() {
  Builder b;
  const uint32_t y = b.buffer("y", DType::f32, {64});
  b.instruction(id(OpId::fill), {y}, {f32_bits(1.0f)});
  return b.finish(128);
}

// A program with one custom op named `twice` whose source is `source`.
Program custom_program(const std::string& source) {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, {1024});
  b.instruction(static_cast<uint16_t>(kCustomOpBase), {x, x});
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
  for (uint32_t i = threadIdx.x; i < y.n; i += kAmkBlockThreads)
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

TEST_CASE("generated source: the config spelled out, only numbers, the TMA table, entry points") {
  const Program b = all_ops_program();
  const std::string src = vm_source(b, choose_for(b), false);
  CHECK(src.find("c.block_threads = 256u;") != std::string::npos);
  CHECK(src.find("c.tma_maps = 1u;") != std::string::npos);
  CHECK(src.find("c.tma_gemv = true;") != std::string::npos);
  CHECK(src.find("c.trace = false;") != std::string::npos);
  for (const VmField& f : vm_fields()) {  // every field, each once
    const std::string set = "  c." + std::string(f.name) + " = ";
    CAPTURE(f.name);
    const size_t at = src.find(set);
    CHECK(at != std::string::npos);
    CHECK(src.find(set, at + 1) == std::string::npos);
  }
  CHECK(src.find("case 5u: g.slot = 0u;") != std::string::npos);  // w_tma is buffer 5
  CHECK(src.find("__launch_bounds__(256, 1)\n    amk_vm(") != std::string::npos);
  CHECK(src.find("const __grid_constant__ amk_tma_table_t tma) {\n  amk_vm_main(prog, &tma);") !=
        std::string::npos);
  CHECK(src.find("amk_step") == std::string::npos);
  CHECK(src.find("#define") == std::string::npos);  // typed config, no macros
  CHECK(src.find("secret_program_name") == std::string::npos);
  CHECK(src.find("w_tma") == std::string::npos);
  // Every built-in op but feed_token and the comm ops (programs with ranks run on the CPU
  // backend only) is in the program's list; not a stepped VM.
  const uint32_t retired = 7u << 16, feed = 1u << static_cast<uint32_t>(OpId::feed_token);
  const uint32_t comm = 7u << static_cast<uint32_t>(OpId::all_reduce);
  CHECK(choose_for(b).ops.ops == (1u << AMK_OP_ID_END) - 1 - retired - feed - comm);
  CHECK(src.find("c.stepped = false;") != std::string::npos);
  CHECK(src.find("c.early_stop = false;") != std::string::npos);
  // The stepped variant: every built-in op, the stepped and early-stop paths on.
  const Program st = all_ops_program(true);
  CHECK(choose_for(st).ops.ops == (1u << AMK_OP_ID_END) - 1 - retired - comm);
  const std::string st_src = vm_source(st, choose_for(st), false);
  CHECK(st_src.find("c.stepped = true;") != std::string::npos);
  CHECK(st_src.find("c.early_stop = true;") != std::string::npos);

  const Program s = small_program();
  const std::string small = vm_source(s, choose_for(s), false);
  CHECK(small.find("c.block_threads = 128u;") != std::string::npos);
  CHECK(small.find("c.tma_gemv = false;") != std::string::npos);
  CHECK(small.find("amk_vm_main(prog, nullptr);") != std::string::npos);
  CHECK(small.find("(void)buffer;") != std::string::npos);  // an empty TMA lookup
}

TEST_CASE("every op compiles for sm_90a in one VM, trace off and on") {
  const Program b = all_ops_program();
  for (bool trace : {false, true}) {
    CAPTURE(trace);
    ChooseOptions c;
    c.trace = trace;
    const CompileOutput out = compile_program(b, c);
    CHECK(out.ok);
    CHECK(is_elf(out.cubin));
    CHECK(out.kernel_name == "amk_vm");
    CHECK(out.arch == "sm_90a");
    CHECK(out.tma_count == 1);
    CHECK(out.source_fingerprint.size() == 64);
    CHECK(out.log.find("Used") != std::string::npos);  // ptxas -v kept in the log
    // (A VM with every op and fusion at once spills a little; the chooser's rows do not.)
    CHECK(amk::test::vm_number_before(out.log, " bytes stack frame") < 512);
    std::printf("[nvrtc] all ops, trace=%d: %s %.0f ms, cubin %zu bytes (NVRTC %s)\n%s",
                trace ? 1 : 0, out.cache_hit ? "cache hit" : "compiled", out.compile_ms,
                out.cubin.size(), out.nvrtc_version.c_str(), resource_lines(out.log).c_str());
  }
}

TEST_CASE("every op with the stepped and early-stop paths compiles for sm_90a in one VM") {
  const Program b = all_ops_program(true);
  const CompileOutput out = compile_program(b);
  CHECK(out.ok);
  CHECK(is_elf(out.cubin));
  CHECK(choose_for(b).config.stepped);
  CHECK(choose_for(b).config.early_stop);
  // (A VM with every op and fusion at once spills a little; the chooser's rows do not.)
  CHECK(amk::test::vm_number_before(out.log, " bytes stack frame") < 512);
  std::printf("[nvrtc] all ops, stepped: %s %.0f ms, cubin %zu bytes\n%s",
              out.cache_hit ? "cache hit" : "compiled", out.compile_ms, out.cubin.size(),
              resource_lines(out.log).c_str());
}

TEST_CASE("the VM's trace layout is the one the host reads") {
  // kernels/amk_device.cuh writes kAmkTraceWords words an instruction; report/trace.cpp reads
  // kTraceWordsPerInstruction.
  bool found = false;
  for (const EmbeddedFile& f : embedded_kernel_files())
    if (f.name == "amk_device.cuh")
      found =
          f.text.find("constexpr uint32_t kAmkTraceWords = " +
                      std::to_string(kTraceWordsPerInstruction) + ";") != std::string_view::npos;
  CHECK(found);
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

TEST_CASE("custom ops: compiled with trust, refused without, errors keep the log") {
  const Program ok = custom_program(kTwiceSource);
  const CompileOutput out = compile_program(ok, {}, uncached(), true);
  CHECK(out.ok);
  CHECK(is_elf(out.cubin));
  CHECK(vm_source(ok, choose_for(ok), true)
            .find("case 1000: amk_custom_twice(P, I, S); return true;") != std::string::npos);

  try {
    (void)compile_program(ok, {}, uncached(), false);
    FAIL("an untrusted custom op compiled");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::program);
    CHECK(e.code() == "custom.untrusted");
    CHECK(e.where() == "/custom_ops/0");
  }

  const Program bad = custom_program(std::string(kTwiceSource) + "\nthis is not C++;\n");
  try {
    (void)compile_program(bad, {}, uncached(), true);
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

TEST_CASE("cubin cache: hit, miss on a different option or config, corrupt entry rebuilt") {
  TempDir tmp;
  REQUIRE(setenv("AMK_CACHE_DIR", tmp.path.c_str(), 1) == 0);
  const Program b = small_program();
  CompileOptions o;  // cache on, directory from the environment
  CHECK(resolve_cache_dir(o) == tmp.path);

  const CompileOutput first = compile_program(b, {}, o);
  CHECK(first.ok);
  CHECK_FALSE(first.cache_hit);
  const fs::path cubin = tmp.path / (first.source_fingerprint + ".cubin");
  CHECK(fs::exists(cubin));
  CHECK(fs::exists(tmp.path / (first.source_fingerprint + ".json")));
  std::printf("[nvrtc] small program: cold compile %.0f ms\n", first.compile_ms);

  const CompileOutput second = compile_program(b, {}, o);
  CHECK(second.cache_hit);
  CHECK(second.cubin == first.cubin);
  CHECK(second.log == first.log);
  CHECK(second.source_fingerprint == first.source_fingerprint);
  std::printf("[nvrtc] small program: cache hit %.1f ms\n", second.compile_ms);

  CompileOptions other = o;
  other.line_info = true;
  const CompileOutput third = compile_program(b, {}, other);
  CHECK_FALSE(third.cache_hit);
  CHECK(third.source_fingerprint != first.source_fingerprint);
  // Another config is another source, so another key (--vm is part of it).
  ChooseOptions tuned;
  tuned.overrides = parse_vm_overrides("prefetch_ahead=2", "test");
  CHECK(compile_program(b, tuned, o).source_fingerprint != first.source_fingerprint);

  {  // truncate the cubin: the entry no longer verifies and is rebuilt
    std::ofstream corrupt(cubin, std::ios::binary | std::ios::trunc);
    corrupt << "\x7f"
               "ELF";
  }
  const CompileOutput rebuilt = compile_program(b, {}, o);
  CHECK_FALSE(rebuilt.cache_hit);
  CHECK(rebuilt.cubin == first.cubin);
  const CompileOutput again = compile_program(b, {}, o);
  CHECK(again.cache_hit);
  CHECK(again.cubin == first.cubin);

  {  // garbage sidecar: ignored as well
    std::ofstream corrupt(tmp.path / (first.source_fingerprint + ".json"), std::ios::trunc);
    corrupt << "{not json";
  }
  CHECK_FALSE(compile_program(b, {}, o).cache_hit);

  CompileOptions off = o;
  off.use_cache = false;
  CHECK_FALSE(compile_program(b, {}, off).cache_hit);
  unsetenv("AMK_CACHE_DIR");
}
