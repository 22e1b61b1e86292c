// The VM config's chooser (config/choose.cpp, config/facts.cpp): made-up programs and made-up
// devices in, every field's value and its reason out. No GPU, no NVRTC.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config/choose.hpp"
#include "config/facts.hpp"
#include "config/vm_config.hpp"
#include "core/error.hpp"

#include "common/program_builder.hpp"

using namespace amk;
using namespace amk::test;

namespace {

constexpr DeviceCaps kH100{90, 232448};
constexpr DeviceCaps kA100{80, 166912};

VmChoice choose_for(const Program& p, const DeviceCaps& caps = kH100, const std::string& vm = "") {
  ChooseOptions o;
  if (!vm.empty()) o.overrides = parse_vm_overrides(vm, "--vm");
  return choose(program_facts(p), caps, o);
}

// Error of `expr` with this kind, code and location.
#define CHECK_REFUSED(expr, kind_, code_, where_)                                                  \
  do {                                                                                             \
    auto err_ = ::amk::test::error_of([&] { (void)(expr); });                                      \
    if (err_) {                                                                                    \
      CHECK_MESSAGE(err_->kind() == (kind_), err_->what());                                        \
      CHECK_MESSAGE(err_->code() == std::string(code_), err_->what());                             \
      CHECK_MESSAGE(err_->where() == std::string(where_), err_->what());                           \
    }                                                                                              \
  } while (0)

void check_every_why(const VmChoice& c) {
  for (const VmField& f : vm_fields()) CHECK_MESSAGE(!choice_why(c, f.name).empty(), f.name);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Two 64 x 64 gemvs, x0 -> x1 -> x2, whose weights no instruction writes. With `waits` the
// second waits for the first (a decode step's chain); without, they are independent.
struct GemvChain {
  Builder b;
  uint32_t w0 = 0, w1 = 0;
};
GemvChain gemv_chain(bool waits, uint32_t block = 256) {
  GemvChain g;
  Builder& b = g.b;
  g.w0 = b.buffer("w0", DType::bf16, 64 * 64);
  g.w1 = b.buffer("w1", DType::bf16, 64 * 64);
  const uint32_t x0 = b.buffer("x0", DType::f32, 64);
  const uint32_t x1 = b.buffer("x1", DType::f32, 64);
  const uint32_t x2 = b.buffer("x2", DType::f32, 64);
  const uint32_t c = b.counter("c");
  b.add("gemv", {b.whole(g.w0), b.whole(x0), b.whole(x1), none(), none(), none()}, {}, {{c, 1}});
  b.add("gemv",
        {b.whole(g.w1), waits ? b.whole(x1) : b.whole(x0), b.whole(x2), none(), none(), none()},
        waits ? std::vector<Wait>{{c, 1}} : std::vector<Wait>{});
  b.p.launch.block = block;
  return g;
}

// One attention_decode chunk: one query head of 64 (f32 q) over 256 cached positions of bf16 K
// and V, added to `b`.
void add_attention_chunk(Builder& b) {
  const uint32_t q = b.buffer("q", DType::f32, 64);
  const uint32_t k = b.buffer("k", DType::bf16, 256 * 64);
  const uint32_t v = b.buffer("v", DType::bf16, 256 * 64);
  const uint32_t out = b.buffer("out", DType::f32, 64 + 2);
  b.add("attention_decode", {b.whole(q), b.whole(k), b.whole(v), b.whole(out), none(), none()});
  b.last().params[0] = 64;  // head_dim
}

Program attention_chunk(uint32_t block = 256) {
  Builder b;
  add_attention_chunk(b);
  b.p.launch.block = block;
  return b.p;
}

}  // namespace

TEST_CASE("a waiting gemv chain on weights nothing writes preloads through a two-stage ring") {
  const VmChoice c = choose_for(gemv_chain(true).b.p);
  CHECK(c.config.gemv_ring_stages == 2);
  CHECK(c.config.gemv_preload == 1);
  CHECK(c.config.prefetch_ahead == 0);
  CHECK(c.config.next_ins_l1);
  CHECK(c.config.smem_buffers);
  CHECK(c.config.gemv_x_batch);
  CHECK(c.config.block_threads == 256);
  CHECK(c.config.buffers == 5);
  CHECK(c.dynamic_smem == 8 * 2 * kAmkGemvSlotBytes);  // warps x stages x slot
  CHECK(c.ops.gemv_pairs == amk_gemv_pair_bit(AMK_DTYPE_BF16, AMK_DTYPE_F32));
  check_every_why(c);
}

TEST_CASE("the same gemvs without waits stream on registers") {
  const VmChoice c = choose_for(gemv_chain(false).b.p);
  CHECK(c.config.gemv_ring_stages == 0);
  CHECK(c.config.gemv_preload == 0);
  CHECK(c.config.prefetch_ahead == 1);
  CHECK_FALSE(c.config.next_ins_l1);
  CHECK_FALSE(c.config.smem_buffers);
  CHECK_FALSE(c.config.gemv_x_batch);
  CHECK(c.dynamic_smem == 0);
  check_every_why(c);
}

TEST_CASE("a waiting gemv whose weights an instruction writes does not preload") {
  GemvChain g = gemv_chain(true);
  // A fill of the second matrix ahead of the chain: its weights are no longer constant.
  g.b.p.instructions.insert(g.b.p.instructions.begin(), Instruction{});
  Instruction& fill = g.b.p.instructions.front();
  fill.op = static_cast<uint16_t>(OpId::fill);
  fill.operands = {slice(g.w1, 0, 64)};
  fill.params = {f32_bits(0.0f)};
  const VmChoice c = choose_for(g.b.p);
  CHECK(c.config.gemv_ring_stages == 0);
  CHECK(c.config.gemv_preload == 0);
  CHECK(c.config.prefetch_ahead == 1);
  CHECK(c.config.smem_buffers);  // it still waits
  check_every_why(c);
}

TEST_CASE("1024 threads a block drop the ring; 512 keep it; an override shrinks to fit 128 KiB") {
  const VmChoice big = choose_for(gemv_chain(true, 1024).b.p);
  CHECK(big.config.gemv_ring_stages == 0);  // 32 warps x 2 x 4 KiB = 256 KiB
  CHECK(big.config.gemv_preload == 2);      // two register batches instead
  CHECK(big.config.prefetch_ahead == 0);
  CHECK(big.dynamic_smem == 0);

  const VmChoice half = choose_for(gemv_chain(true, 512).b.p);
  CHECK(half.config.gemv_ring_stages == 2);  // 16 warps x 2 x 4 KiB = 128 KiB
  CHECK(half.dynamic_smem == kGemvRingCap);

  const VmChoice shrunk = choose_for(gemv_chain(true, 512).b.p, kH100, "gemv_ring_stages=4");
  CHECK(shrunk.config.gemv_ring_stages == 2);
  CHECK(amk_gemv_ring_bytes(shrunk.config) <= kGemvRingCap);

  const VmChoice dropped = choose_for(gemv_chain(true, 1024).b.p, kH100, "gemv_ring_stages=4");
  CHECK(dropped.config.gemv_ring_stages == 0);
  CHECK(dropped.dynamic_smem == 0);

  const VmChoice four = choose_for(gemv_chain(true, 128).b.p, kH100, "gemv_ring_stages=4");
  CHECK(four.config.gemv_ring_stages == 4);  // 4 warps x 4 x 4 KiB = 64 KiB
  CHECK(four.dynamic_smem == 4 * 4 * kAmkGemvSlotBytes);
}

TEST_CASE("a program with its own dynamic shared memory or a TMA spec gets no ring") {
  GemvChain own = gemv_chain(true);
  own.b.p.launch.dynamic_smem = 1024;
  const VmChoice c = choose_for(own.b.p);
  CHECK(c.config.gemv_ring_stages == 0);
  CHECK(c.config.gemv_preload == 2);
  CHECK(choice_why(c, "gemv_ring_stages").find("dynamic shared memory") != std::string::npos);
  CHECK_REFUSED(choose_for(own.b.p, kH100, "gemv_ring_stages=2"), ErrorKind::usage, "usage.vm",
                "--vm gemv_ring_stages");
  CHECK(choose_for(own.b.p, kH100, "gemv_ring_stages=0").config.gemv_ring_stages == 0);

  GemvChain tma = gemv_chain(true);
  TmaSpec t;
  t.name = "w0";
  t.buffer = tma.w0;
  t.dims = {64, 64};
  t.box = {64, 8};
  tma.b.p.tma.push_back(t);
  const VmChoice d = choose_for(tma.b.p);
  CHECK(d.config.tma_gemv);
  CHECK(d.config.tma_maps == 1);
  CHECK(d.config.gemv_ring_stages == 0);
  CHECK(d.dynamic_smem == 0);
  check_every_why(d);
  CHECK_REFUSED(choose_for(tma.b.p, kH100, "gemv_ring_stages=2"), ErrorKind::usage, "usage.vm",
                "--vm gemv_ring_stages");
  // The TMA gemv's bulk copies need sm_90.
  CHECK_REFUSED(choose_for(tma.b.p, kA100), ErrorKind::device, "device.arch", "sm_80");
  // A TMA spec that gemv cannot stream (swizzled) leaves the ring in place.
  tma.b.p.tma[0].swizzle = TmaSwizzle::b128;
  const VmChoice e = choose_for(tma.b.p, kA100);
  CHECK_FALSE(e.config.tma_gemv);
  CHECK(e.config.tma_maps == 1);
  CHECK(e.config.gemv_ring_stages == 2);
}

TEST_CASE(
    "the buffer table goes to shared memory only when steps wait and it has 1..1024 entries") {
  CHECK(choose_for(gemv_chain(true).b.p).config.smem_buffers);
  CHECK_FALSE(choose_for(gemv_chain(false).b.p).config.smem_buffers);

  GemvChain many = gemv_chain(true);
  while (many.b.p.buffers.size() < 1024) many.b.buffer("pad", DType::f32, 4);
  CHECK(choose_for(many.b.p).config.smem_buffers);
  many.b.buffer("pad", DType::f32, 4);  // 1025
  const VmChoice c = choose_for(many.b.p);
  CHECK_FALSE(c.config.smem_buffers);
  CHECK(c.config.buffers == 1025);
  // An override cannot take it past the VM's limit.
  CHECK_REFUSED(choose_for(many.b.p, kH100, "smem_buffers=true"), ErrorKind::usage, "usage.vm",
                "--vm");

  Builder none_at_all;  // waits, no buffers
  const uint32_t k = none_at_all.counter("k");
  none_at_all.add("nop", {}, {}, {{k, 1}});
  none_at_all.add("nop", {}, {{k, 1}});
  const VmChoice n = choose_for(none_at_all.p);
  CHECK_FALSE(n.config.smem_buffers);
  CHECK(choice_why(n, "smem_buffers") == "no buffers");
  check_every_why(n);
}

TEST_CASE("a one-head chunk over 256 positions takes the large tile and the row8 stages") {
  const VmChoice c = choose_for(attention_chunk());
  CHECK(c.config.attn_tile == amk_attn_tile::large);
  CHECK_FALSE(c.config.attn_pass);
  CHECK(c.config.attn_row8);
  CHECK(c.config.attn_split_heads == 1);
  CHECK(c.config.attn_split);
  CHECK_FALSE(c.config.attn_tile_dynamic);  // no gemv, no ring
  CHECK_FALSE(c.config.stage_decode_ins);   // it does not wait
  CHECK(c.ops.attn_kv == amk_dtype_bit(AMK_DTYPE_BF16));
  check_every_why(c);
  // The tiled attention's bulk copies need sm_90.
  CHECK_REFUSED(choose_for(attention_chunk(), kA100), ErrorKind::device, "device.arch", "sm_80");
}

TEST_CASE("chunks of several heads keep the four-head split stages and no row8") {
  // Four query heads of 64 over 64 positions: 16 KiB of K+V and 256 staged q floats.
  Builder b;
  const uint32_t q = b.buffer("q", DType::f32, 4 * 64);
  const uint32_t k = b.buffer("k", DType::bf16, 64 * 64);
  const uint32_t v = b.buffer("v", DType::bf16, 64 * 64);
  const uint32_t out = b.buffer("out", DType::f32, 4 * (64 + 2));
  b.add("attention_decode", {b.whole(q), b.whole(k), b.whole(v), b.whole(out), none(), none()});
  b.last().params[0] = 64;
  const VmChoice c = choose_for(b.p);
  CHECK(c.config.attn_tile == amk_attn_tile::small);
  CHECK_FALSE(c.config.attn_pass);
  CHECK_FALSE(c.config.attn_row8);
  CHECK(c.config.attn_split_heads == 4);
  CHECK_FALSE(c.config.attn_split);
  check_every_why(c);
}

TEST_CASE("at 128 threads the chunk gets the small tile and the streaming pass") {
  const VmChoice c = choose_for(attention_chunk(128));
  CHECK(c.config.attn_tile == amk_attn_tile::small);
  CHECK(c.config.attn_pass);
  CHECK_FALSE(c.config.attn_row8);
  CHECK(c.config.attn_split_heads == 1);
  CHECK_FALSE(c.config.attn_split);
  check_every_why(c);
  // No tiled path, so no sm_90 bulk copies.
  CHECK(choose_for(attention_chunk(128), kA100).config.attn_pass);
}

TEST_CASE("a forced smaller tile turns the streaming pass on") {
  for (const char* vm : {"attn_tile=wide", "attn_tile=small"}) {
    CAPTURE(vm);
    const VmChoice c = choose_for(attention_chunk(), kH100, vm);
    CHECK(c.config.attn_tile != amk_attn_tile::large);
    CHECK(c.config.attn_pass);
    CHECK_FALSE(c.config.attn_tile_dynamic);
    CHECK(starts_with(choice_why(c, "attn_tile"), "--vm attn_tile"));
  }
}

TEST_CASE("the large tile goes to dynamic shared memory only with a ring of 64 KiB or more") {
  // The chunk beside a waiting gemv chain: a two-stage ring of 8 warps is 64 KiB.
  GemvChain g = gemv_chain(true);
  add_attention_chunk(g.b);
  const VmChoice c = choose_for(g.b.p);
  CHECK(c.config.gemv_ring_stages == 2);
  CHECK(amk_gemv_ring_bytes(c.config) == 65536);
  CHECK(c.config.attn_tile == amk_attn_tile::large);
  CHECK(c.config.attn_tile_dynamic);
  CHECK_FALSE(c.config.gemv_x_batch);  // beside the one-head stages

  // Beside gemvs that do not wait: no ring, the tile stays static.
  GemvChain s = gemv_chain(false);
  add_attention_chunk(s.b);
  CHECK_FALSE(choose_for(s.b.p).config.attn_tile_dynamic);
  // A ring forced onto them gives the 64 KiB back.
  CHECK(choose_for(s.b.p, kH100, "gemv_ring_stages=2").config.attn_tile_dynamic);
  // Forced without the ring: the tile would have no memory.
  CHECK_REFUSED(choose_for(s.b.p, kH100, "attn_tile_dynamic=true"), ErrorKind::usage, "usage.vm",
                "--vm attn_tile_dynamic");
  // Forced without the large tile: an invalid config.
  CHECK_REFUSED(choose_for(g.b.p, kH100, "attn_tile=wide,attn_tile_dynamic=true"), ErrorKind::usage,
                "usage.vm", "--vm");
}

TEST_CASE("overrides win over the chooser and say so") {
  GemvChain g = gemv_chain(true);
  add_attention_chunk(g.b);
  const Program& p = g.b.p;
  const VmChoice base = choose_for(p);
  for (const VmField& f : vm_fields()) {
    if (!f.tunable) continue;
    CAPTURE(f.name);
    const uint32_t chosen = f.get(base.config);
    const uint32_t other = chosen == f.lo ? f.hi : f.lo;
    const std::string vm = std::string(f.name) + "=" + std::to_string(other);
    const VmChoice c = choose_for(p, kH100, vm);
    CHECK(f.get(c.config) == other);
    CHECK(starts_with(choice_why(c, f.name), "--vm " + std::string(f.name)));
    // The rest keep a reason (their own or the override's consequence).
    check_every_why(c);
  }
  // Without an override no reason mentions --vm.
  for (const VmField& f : vm_fields())
    CHECK_MESSAGE(!starts_with(choice_why(base, f.name), "--vm"), f.name);
}

TEST_CASE("the chooser refuses a block the VM cannot take and a ring the device cannot hold") {
  for (const uint32_t block : {0u, 16u, 48u, 1056u, 2048u}) {
    CAPTURE(block);
    CHECK_REFUSED(choose_for(gemv_chain(false, block).b.p), ErrorKind::program, "launch.block",
                  "/launch/block");
  }
  // 64 KiB of ring on a device that lets a block opt into 48 KiB.
  CHECK_REFUSED(choose_for(gemv_chain(true).b.p, DeviceCaps{90, 49152}), ErrorKind::device,
                "device.smem", "--vm");
  CHECK(choose_for(gemv_chain(true).b.p, DeviceCaps{90, 65536}).dynamic_smem == 65536);
}

TEST_CASE("an architecture's shared memory a block may opt into") {
  CHECK(caps_for_arch(90).smem_optin == 232448);
  CHECK(caps_for_arch(100).smem_optin == 232448);
  CHECK(caps_for_arch(80).smem_optin == 166912);
  CHECK(caps_for_arch(86).smem_optin == 101376);
  CHECK(caps_for_arch(120).smem_optin == 101376);
  CHECK(caps_for_arch(86).arch == 86);
}

TEST_CASE("choice_why of an unknown field is empty") {
  const VmChoice c = choose_for(gemv_chain(false).b.p);
  CHECK(choice_why(c, "no_such_field").empty());
  CHECK(choice_why(c, "gemv_ring_stages") ==
        "gemvs stream on registers (two blocks an SM where they fit)");
}

TEST_CASE("stepped: on for a carried wait, a position operand, feed_token or kv_append's RoPE") {
  const uint32_t theta = *encode_param(ParamType::f32, 10000.0);
  auto stepped = [](const Builder& b) { return choose_for(b.p).config.stepped; };
  auto rope = [](bool position) {
    Builder b;
    const uint32_t x = b.buffer("x", DType::f32, 128);
    const uint32_t pos = b.buffer("pos", DType::u32, 1);
    b.add("rope", {b.whole(x), b.whole(x), position ? b.whole(pos) : none()});
    b.last().params[0] = 64;  // head_dim
    return b;
  };
  CHECK_FALSE(stepped(rope(false)));
  CHECK(choice_why(choose_for(rope(false).p), "stepped") == "none of the stepped-program features");
  CHECK(stepped(rope(true)));

  auto append = [](bool position, uint32_t theta_bits) {
    Builder b;
    const uint32_t x = b.buffer("x", DType::f32, 64);
    const uint32_t cache = b.buffer("cache", DType::f32, 8 * 64);
    const uint32_t pos = b.buffer("pos", DType::i32, 1);
    b.add("kv_append", {b.whole(x), b.whole(cache), position ? b.whole(pos) : none()});
    b.last().params[0] = 64;  // head_dim
    b.last().params[2] = 8;   // max_len
    b.last().params[3] = theta_bits;
    return b;
  };
  CHECK_FALSE(stepped(append(false, 0)));
  CHECK_FALSE(stepped(append(false, 0x80000000u)));  // theta -0: no rotation either
  CHECK(stepped(append(false, theta)));
  CHECK(stepped(append(true, 0)));

  Builder chunk;
  add_attention_chunk(chunk);
  CHECK_FALSE(stepped(chunk));
  const uint32_t pos = chunk.buffer("pos", DType::u32, 1);
  chunk.last().operands.push_back(chunk.whole(pos));  // slot 6
  CHECK(stepped(chunk));

  auto nops = [](bool carried) {
    Builder b;
    const uint32_t c = b.counter("c");
    b.add("nop", {}, {}, {{c, 1}});
    b.add("nop", {}, {{c, 1, carried}});
    return b;
  };
  CHECK_FALSE(stepped(nops(false)));
  CHECK(stepped(nops(true)));

  Builder feed;
  const uint32_t index = feed.buffer("index", DType::i32, 1);
  const uint32_t prompt = feed.buffer("prompt", DType::i32, 4);
  const uint32_t token = feed.buffer("token", DType::i32, 1);
  feed.add("feed_token", {feed.whole(index), feed.whole(prompt), feed.whole(token), none(), none(),
                          none(), none()});
  CHECK(stepped(feed));
  CHECK_FALSE(choose_for(feed.p).config.early_stop);
  check_every_why(choose_for(feed.p));
  // With an eos operand feed_token may end the launch: the VM reads the stop word each pass.
  feed.last().operands[6] = feed.whole(feed.buffer("eos", DType::i32, 1));
  CHECK(choose_for(feed.p).config.early_stop);
  CHECK(choose_for(feed.p).config.stepped);
}
