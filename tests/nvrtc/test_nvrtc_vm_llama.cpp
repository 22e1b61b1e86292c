// The chooser's rows for the Llama decode steps (amk gen llama): each distinct VM configuration
// compiled once for sm_90a (no GPU needed), with the config fields that make it distinct, and
// no spills or stack.
#include <doctest/doctest.h>

#include <cstdio>

#include "gen/llama.hpp"
#include "nvrtc_program_builder.hpp"
#include "ptxas_log.hpp"

using namespace amk;
using namespace amk::test;

namespace {

Program llama(const char* preset, bool fused = true, bool rope_ops = false) {
  gen::LlamaOptions o;
  o.preset = preset;
  o.fused = fused;
  o.rope_ops = rope_ops;
  return gen::generate_llama(o);
}

// Compiles the row and checks it compiled (clean: without spills or stack); returns the VM's
// registers a thread.
int compile_row(const char* name, const Program& p, const ChooseOptions& c = {},
                bool clean = true) {
  const CompileOutput out = compile_program(p, c);
  CHECK(out.ok);
  if (clean) CHECK(no_spills(out.log));
  const int regs = vm_registers(out.log);
  std::printf("[nvrtc] %s: %d registers, %s in %.0f ms\n", name, regs,
              out.cache_hit ? "cache hit" : "compiled", out.compile_ms);
  return regs;
}

}  // namespace

TEST_CASE(
    "Llama-3.2-1B step: one-head chunks on the large tile, gemv's ring, preload of one batch") {
  const Program p = llama("llama-3.2-1b");
  const VmChoice c = choose_for(p);
  CHECK(c.config.attn_tile == amk_attn_tile::large);
  CHECK(c.config.attn_tile_dynamic);
  CHECK(c.config.attn_row8);
  CHECK(c.config.attn_split_heads == 1);
  CHECK_FALSE(c.config.attn_pass);
  CHECK(c.config.gemv_ring_stages == 2);
  CHECK(c.config.gemv_preload == 1);
  CHECK(c.config.prefetch_ahead == 0);
  CHECK(c.config.stage_decode_ins);
  CHECK(c.config.smem_buffers);
  CHECK(c.dynamic_smem == 65536);  // the ring: 8 warps x 2 stages x 4 KiB
  CHECK(compile_row("llama-3.2-1b", p) <= 255);
  ChooseOptions traced;
  traced.trace = true;
  CHECK(compile_row("llama-3.2-1b traced", p, traced) <= 255);
}

TEST_CASE("Llama-3.1-8B step: the wide tile with split stages, combine steps staged in the ring") {
  const Program p = llama("llama-3.1-8b");
  const VmChoice c = choose_for(p);
  CHECK(c.config.attn_tile == amk_attn_tile::wide);
  CHECK(c.config.attn_split);
  CHECK(c.config.attn_split_heads == 4);
  CHECK_FALSE(c.config.attn_row8);
  CHECK_FALSE(c.config.gemv_x_batch);
  CHECK(c.dynamic_smem > 65536);  // the ring grown to the largest combine's partials
  CHECK(compile_row("llama-3.1-8b", p) <= 255);
}

TEST_CASE("the tiny step, fused and unfused with RoPE ops of their own") {
  const Program fused = llama("tiny");
  CHECK(compile_row("tiny fused", fused) <= 255);
  const Program unfused = llama("tiny", false, true);
  const VmChoice c = choose_for(unfused);
  CHECK(amk_uses_op(c.ops, amk_op::rope));
  CHECK(amk_uses_op(c.ops, amk_op::kv_append));
  CHECK(amk_uses_op(c.ops, amk_op::silu_mul));
  // (The unfused layer's VM holds every op's fast path at once and spills a few bytes.)
  CHECK(compile_row("tiny unfused, rope ops", unfused, {}, false) <= 255);
}

// Each vector gemv instantiation is inlined into the VM once, whichever fusion reaches it: the
// merging (o_proj) gemv shares the norm instantiation, so the combine fusion adds its staging to
// the VM but no loop of its own. Counted in the PTX by the ring's 16-byte cp.async copies, of
// which every inlined copy of the loop has its own.
TEST_CASE("Llama-3.2-1B step: the merging gemv adds no vector gemv loop of its own") {
  const Program p = llama("llama-3.2-1b");
  const VmChoice chosen = choose_for(p);
  REQUIRE(chosen.config.gemv_ring_stages > 0);
  REQUIRE((chosen.ops.gemv_fusions & AMK_GEMV_FUSE_COMBINE) != 0);
  auto ring_copies = [&](uint32_t fusions) {
    VmChoice c = chosen;
    c.ops.gemv_fusions = fusions;
    const std::string ptx = vm_ptx(vm_source(p, c, false), CompileOptions{});
    size_t n = 0;
    for (size_t at = ptx.find("cp.async.cg"); at != std::string::npos;
         at = ptx.find("cp.async.cg", at + 1))
      ++n;
    return n;
  };
  const size_t plain = ring_copies(0);
  const size_t norm = ring_copies(AMK_GEMV_FUSE_NORM);
  const size_t merge = ring_copies(AMK_GEMV_FUSE_NORM | AMK_GEMV_FUSE_COMBINE);
  REQUIRE(norm > plain);               // the norm instantiation: one more loop
  CHECK(merge - norm < norm - plain);  // the merge: less than one more
}
