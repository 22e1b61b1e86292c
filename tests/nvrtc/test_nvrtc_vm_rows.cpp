// The chooser's other rows: the GEMV benchmark (no waits: registers, two blocks an SM), a chain of
// dependent nops (the hop benchmark), attention at 128 and 512 threads a block (the streaming
// pass), the TMA gemv, a stepped decode (several passes a launch). Each compiled once for sm_90a,
// no spills or stack.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>

#include "io/load.hpp"
#include "nvrtc_program_builder.hpp"
#include "ptxas_log.hpp"

using namespace amk;
using namespace amk::test;

namespace {

// Compiles the row and checks it compiled (clean: without spills or stack); returns the VM's
// registers a thread.
int compile_row(const std::string& name, const Program& p, bool clean = true) {
  const CompileOutput out = compile_program(p);
  CHECK(out.ok);
  if (clean) CHECK(no_spills(out.log));
  const int regs = vm_registers(out.log);
  std::printf("[nvrtc] %s: %d registers, %s in %.0f ms\n", name.c_str(), regs,
              out.cache_hit ? "cache hit" : "compiled", out.compile_ms);
  return regs;
}

Program test_program(const std::string& name) {
  return load_program_file(std::filesystem::path(AMK_SOURCE_DIR) / "tests/gpu/programs" /
                               (name + ".json"),
                           LoadOptions{});
}

}  // namespace

TEST_CASE(
    "the GEMV benchmark: weights in registers, no preload, 128 registers (two blocks an SM)") {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, {4096});
  for (int m = 0; m < 2; ++m) {
    const uint32_t w = b.buffer("w", DType::bf16, {4096, 4096});
    const uint32_t y = b.buffer("y", DType::f32, {4096});
    b.instruction(OpId::gemv, {w, x, y});
  }
  Program p = b.finish();
  for (Instruction& in : p.instructions) in.waits.clear();  // independent row ranges
  const VmChoice c = choose_for(p);
  CHECK(c.config.gemv_ring_stages == 0);
  CHECK(c.config.gemv_preload == 0);
  CHECK(c.config.prefetch_ahead == 1);
  CHECK_FALSE(c.config.next_ins_l1);
  CHECK_FALSE(c.config.smem_buffers);
  CHECK(c.dynamic_smem == 0);
  CHECK(compile_row("gemv benchmark", p) <= 128);
}

TEST_CASE("a chain of dependent nops: the VM loop alone") {
  Builder b;
  for (int i = 0; i < 8; ++i) b.instruction(OpId::nop, {});
  const Program p = b.finish();
  const VmChoice c = choose_for(p);
  CHECK(c.ops.ops == 1u);  // nop only
  CHECK(compile_row("nop chain", p) <= 128);
}

TEST_CASE("attention at 128 and 512 threads a block takes the streaming pass") {
  for (const uint32_t block : {128u, 512u}) {
    CAPTURE(block);
    Program p = test_program("attention_rope");
    p.launch.block = block;
    const VmChoice c = choose_for(p);
    CHECK(c.config.attn_pass);
    CHECK(c.config.attn_tile == amk_attn_tile::small);
    CHECK_FALSE(c.config.attn_row8);
    // (At 512 threads a thread has 128 registers, and the pass spills a little there.)
    compile_row("attention_rope at " + std::to_string(block) + " threads", p, block <= 256);
  }
}

TEST_CASE("the TMA gemv: the tensor-map parameter, no ring") {
  const Program p = test_program("tma_gemv");
  const VmChoice c = choose_for(p);
  CHECK(c.config.tma_gemv);
  CHECK(c.config.tma_maps == p.tma.size());
  CHECK(c.config.gemv_ring_stages == 0);
  compile_row("tma_gemv", p);
}

TEST_CASE("a stepped decode: carried waits, position operands and feed_token in one VM") {
  const Program p = test_program("stepped_decode");
  CHECK(p.launch.passes == 3);
  const VmChoice c = choose_for(p);
  CHECK(c.config.stepped);
  CHECK(amk_uses_op(c.ops, amk_op::feed_token));
  CHECK(amk_uses_op(c.ops, amk_op::kv_append));
  CHECK(vm_source(p, c, false).find("c.stepped = true;") != std::string::npos);
  compile_row("stepped_decode", p);
}
