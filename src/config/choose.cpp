#include "config/choose.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

bool uses(const VmOps& ops, OpId op) { return amk_uses_op(ops, op); }

// Sets each field once, from an override when the user gave one, and records why.
class Decider {
public:
  Decider(VmChoice& out, const VmOverrides& overrides) : out_(out), overrides_(overrides) {}

  uint32_t operator()(std::string_view name, uint32_t value, std::string why) {
    if (const auto o = override_of(overrides_, name)) {
      value = *o;
      why = "--vm " + std::string(name) + " (the chooser's: " + std::move(why) + ")";
    }
    return fixed(name, value, std::move(why));
  }
  // A value decided here, overrides included.
  uint32_t fixed(std::string_view name, uint32_t value, std::string why) {
    const VmField* f = find_vm_field(name);
    f->set(out_.config, value);
    out_.why[static_cast<size_t>(f - vm_fields().data())] = std::move(why);
    return f->get(out_.config);
  }

private:
  VmChoice& out_;
  const VmOverrides& overrides_;
};

std::string tile_name(amk_attn_tile t) {
  return t == amk_attn_tile::large ? "large" : t == amk_attn_tile::wide ? "wide" : "small";
}

}  // namespace

VmChoice choose(const ProgramFacts& f, const DeviceCaps& caps, const ChooseOptions& opt) {
  if (f.block < 32 || f.block > 1024 || f.block % 32 != 0)
    throw Error(ErrorKind::program, "launch.block", "/launch/block",
                "block must be a multiple of 32 in [32, 1024], got " + std::to_string(f.block));
  VmChoice r;
  r.ops = f.ops;
  VmConfig& c = r.config;
  Decider set(r, opt.overrides);
  const bool gemv = uses(f.ops, OpId::gemv);
  const bool attention = uses(f.ops, OpId::attention_decode);
  const bool combine = uses(f.ops, OpId::attention_combine);
  const uint32_t warps = f.block / 32;

  // ---- the program's shape ----
  set("block_threads", f.block, "the program's launch.block");
  set("tma_maps", f.tma_maps, "the program's TMA specs");
  set("tma_gemv", f.tma_gemv,
      f.tma_gemv ? "a TMA spec covers a gemv's weights" : "no TMA spec a gemv can stream");
  set("trace", opt.trace, opt.trace ? "amk profile --trace" : "not traced");
  set("step_kernel", opt.step_kernel,
      opt.step_kernel ? "amk bench" : "no per-instruction launches");
  set("buffers", f.buffers, "the program's buffers");
  set("stepped", f.stepped,
      f.stepped ? "carried waits, position operands, feed_token or kv_append's RoPE"
                : "none of the stepped-program features");
  set("early_stop", f.early_stop,
      f.early_stop ? "feed_token has an eos operand" : "no instruction ends the launch early");

  // ---- tuning ----
  const bool table_fits = f.buffers >= 1 && f.buffers <= 1024;
  set("smem_buffers", table_fits && f.any_wait,
      f.buffers == 0 ? "no buffers"
      : !table_fits  ? "more than 1024 buffers"
      : f.any_wait   ? "steps wait: after a wait's acquire fence a global table read is an L2 trip"
                     : "no step waits: the global table stays in L1");

  // gemv's preload, its ring and the prefetches that depend on them.
  const auto preload_override = override_of(opt.overrides, "gemv_preload");
  const bool preloads = preload_override ? *preload_override != 0 : f.gemv_preloads;
  uint32_t ring = 0;
  std::string ring_why;
  if (!gemv) {
    ring_why = "no gemv";
  } else if (f.tma_gemv || f.dynamic_smem != 0) {
    ring_why = f.tma_gemv ? "the TMA gemv uses dynamic shared memory"
                          : "the program uses dynamic shared memory of its own";
  } else {
    ring = preloads ? 2 : 0;
    ring_why = preloads ? "gemvs wait and preload: two batches a warp in flight"
                        : "gemvs stream on registers (two blocks an SM where they fit)";
  }
  if (const auto o = override_of(opt.overrides, "gemv_ring_stages")) {
    if (*o != 0 && (!gemv || f.tma_gemv || f.dynamic_smem != 0))
      throw Error(ErrorKind::usage, "usage.vm", "--vm gemv_ring_stages",
                  "gemv's ring cannot be used here: " + ring_why);
    ring = *o;
    ring_why = "--vm gemv_ring_stages";
  }
  while (ring >= 2 && uint64_t{warps} * ring * kAmkGemvSlotBytes > kGemvRingCap) --ring;
  if (ring < 2) ring = 0;
  set.fixed("gemv_ring_stages", ring, ring_why);
  set("gemv_preload",
      !gemv || !f.gemv_preloads ? 0u
      : ring != 0               ? 1u
                                : 2u,
      !gemv              ? "no gemv"
      : !f.gemv_preloads ? "no gemv waits on weights nothing writes"
      : ring != 0        ? "one batch through the ring before the wait"
                         : "two register batches before the wait");
  set("prefetch_ahead", preloads ? 0u : 1u,
      preloads ? "gemvs wait and preload: an L2 prefetch would queue before their reads"
               : "independent streaming steps start on L2 hits");
  set("next_ins_l1", !(gemv && c.gemv_preload == 0),
      gemv && c.gemv_preload == 0 ? "its lookup's registers would cost gemvs their occupancy"
                                  : "a wait's fence empties L1; the next step decodes from it");
  set("stage_decode_ins", f.attention_waits,
      f.attention_waits
          ? "attention steps wait: their instruction read after the wait is an L2 trip"
          : "no attention step waits");

  // attention_decode's tile and paths.
  const amk_attn_tile tile =
      attention && f.block == 256 ? f.attn_tile_needed : amk_attn_tile::small;
  set("attn_tile", static_cast<uint32_t>(tile),
      !attention       ? "no attention_decode"
      : f.block != 256 ? "the tiled path takes 256 threads a block"
                       : "the smallest tile every chunk fits: " + tile_name(tile));
  const amk_attn_tile chosen = c.attn_tile;
  const bool pass = f.block != 256 || f.attn_pass_needed || f.attn_tile_needed > chosen;
  set("attn_pass", !attention || pass,
      !attention ? "no attention_decode"
      : pass     ? "some chunk takes the streaming pass"
                 : "every chunk takes the tiled path");
  const uint32_t ring_bytes = amk_gemv_ring_bytes(c);
  const uint32_t large_bytes = amk_attn_tile_bytes(amk_attn_tile::large);
  set("attn_tile_dynamic", chosen == amk_attn_tile::large && ring_bytes >= large_bytes,
      chosen != amk_attn_tile::large ? "not the large tile"
      : ring_bytes >= large_bytes    ? "gemv's ring gives 64 KiB of dynamic shared memory"
                                     : "no 64 KiB of dynamic shared memory");
  // The tile borrows the ring's memory: without it every chunk would miss the tiled path (and the
  // streaming pass may not be compiled in).
  if (c.attn_tile_dynamic && ring_bytes < large_bytes)
    throw Error(ErrorKind::usage, "usage.vm", "--vm attn_tile_dynamic",
                "the large tile goes to dynamic shared memory only where gemv's ring gives " +
                    std::to_string(large_bytes) + " bytes; this config's ring gives " +
                    std::to_string(ring_bytes));
  set("attn_split", chosen != amk_attn_tile::small,
      chosen != amk_attn_tile::small ? "the wide and large tiles split their stages"
                                     : "the small tile's stages run a thread a score");
  const bool single = attention && f.attn_single_heads;
  set("attn_split_heads", single ? 1u : 4u,
      single ? "every chunk has one query head" : "chunks carry up to four heads a lane");
  set("attn_row8", single && f.block == 256,
      single && f.block == 256 ? "every chunk has one query head" : "chunks of several heads");

  // gemv's remaining forms.
  const bool preloading = c.gemv_preload > 0;
  set("gemv_x_batch", preloading && c.attn_tile != amk_attn_tile::wide && !c.attn_row8,
      !preloading ? "gemvs do not wait and preload"
      : c.attn_tile == amk_attn_tile::wide || c.attn_row8
          ? "measured slower beside the wide tile and the one-head stages"
          : "a batch's x loads in flight together");

  if (const char* e = amk_vm_config_error(c))
    throw Error(ErrorKind::usage, "usage.vm", "--vm",
                std::string("the VM config is invalid: ") + e);
  if (caps.arch < 90 && (c.tma_gemv || (attention && f.block == 256)))
    throw Error(ErrorKind::device, "device.arch", "sm_" + std::to_string(caps.arch),
                "the VM's bulk copies (the TMA gemv, the tiled attention) need sm_90 or newer");
  r.dynamic_smem = ring_bytes;
  if (ring_bytes != 0 && combine)
    r.dynamic_smem = static_cast<uint32_t>(std::max<uint64_t>(ring_bytes, f.combine_staging));
  if (r.dynamic_smem > caps.smem_optin)
    throw Error(ErrorKind::device, "device.smem", "--vm",
                "the VM needs " + std::to_string(r.dynamic_smem) +
                    " bytes of dynamic shared memory, the device gives a block " +
                    std::to_string(caps.smem_optin));
  return r;
}

DeviceCaps caps_for_arch(uint32_t arch) {
  DeviceCaps c;
  c.arch = arch;
  c.smem_optin = arch == 90 || arch == 100 ? 232448 : arch == 80 ? 166912 : 101376;
  return c;
}

const std::string& choice_why(const VmChoice& c, std::string_view name) {
  static const std::string none;
  const VmField* f = find_vm_field(name);
  return f != nullptr ? c.why[static_cast<size_t>(f - vm_fields().data())] : none;
}

}  // namespace amk
