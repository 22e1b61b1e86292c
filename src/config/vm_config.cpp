#include "config/vm_config.hpp"

#include <charconv>
#include <type_traits>

#include "core/error.hpp"

namespace amk {
namespace {

template <auto M>
uint32_t get_field(const VmConfig& c) {
  return static_cast<uint32_t>(c.*M);
}
template <auto M>
void set_field(VmConfig& c, uint32_t v) {
  using T = std::remove_cvref_t<decltype(c.*M)>;
  if constexpr (std::is_same_v<T, bool>)
    c.*M = v != 0;
  else
    c.*M = static_cast<T>(v);
}

using K = VmField::Kind;
#define AMK_FIELD(name, kind, tunable, lo, hi, doc)                                                \
  VmField {                                                                                        \
#name, kind, tunable, lo, hi, doc, &get_field < &VmConfig::name>,                              \
        &set_field < &VmConfig::name>                                                              \
  }

// In amk_vm_config's declaration order. A field added there changes the struct's size: update
// this table (and kernels/README.md) with it.
static_assert(sizeof(VmConfig) == 56, "amk_vm_config changed: update the field table");
constexpr VmField kFields[] = {
    AMK_FIELD(block_threads, K::integer, false, 32, 1024,
              "threads a block (the program's launch.block)"),
    AMK_FIELD(tma_maps, K::integer, false, 0, 64,
              "CUtensorMap parameters after the program (its TMA specs)"),
    AMK_FIELD(tma_gemv, K::boolean, false, 0, 1, "gemv streams the w buffers that have a TMA spec"),
    AMK_FIELD(trace, K::boolean, false, 0, 1,
              "per-instruction timestamps and op marks (amk profile --trace)"),
    AMK_FIELD(step_kernel, K::boolean, false, 0, 1,
              "amk_step, one instruction a launch (amk bench)"),
    AMK_FIELD(stepped, K::boolean, false, 0, 1,
              "stepped-program paths: carried waits, the pass, position operands, feed_token"),
    AMK_FIELD(early_stop, K::boolean, false, 0, 1,
              "blocks end the launch two passes after feed_token met its eos id (the stop word)"),
    AMK_FIELD(buffers, K::integer, false, 0, 0xFFFFFFFFu, "entries of the buffer table"),
    AMK_FIELD(smem_buffers, K::boolean, true, 0, 1,
              "the buffer table copied into shared memory at block start"),
    AMK_FIELD(
        gemv_ring_stages, K::integer, true, 0, 4,
        "gemv weights through a per-warp shared-memory ring of this many batches (0: registers)"),
    AMK_FIELD(gemv_preload, K::integer, true, 0, 4,
              "weight batches a gemv whose weights nothing writes requests before its waits"),
    AMK_FIELD(prefetch_ahead, K::integer, true, 0, 8,
              "streaming steps ahead whose first 32 KiB go to L2"),
    AMK_FIELD(next_ins_l1, K::boolean, true, 0, 1,
              "after a wait, the block's next instruction prefetched into L1"),
    AMK_FIELD(stage_decode_ins, K::boolean, true, 0, 1,
              "waiting attention ops read their instruction from shared memory"),
    AMK_FIELD(gemv_x_batch, K::boolean, true, 0, 1,
              "the unfused gemv loads a batch's x before using any"),
    AMK_FIELD(attn_tile, K::tile, true, 0, 2,
              "the tiled attention's K+V tile: small 16 KiB, wide 32 KiB, large 64 KiB"),
    AMK_FIELD(attn_tile_dynamic, K::boolean, true, 0, 1, "the large tile in dynamic shared memory"),
    AMK_FIELD(attn_pass, K::boolean, true, 0, 1, "attention's streaming pass compiled in"),
    AMK_FIELD(attn_split, K::boolean, true, 0, 1, "the tiled path's split score and output stages"),
    AMK_FIELD(attn_split_heads, K::integer, true, 1, 4,
              "query heads a lane carries in the split stages"),
    AMK_FIELD(attn_row8, K::boolean, true, 0, 1, "one-head chunks: stages with eight lanes a row"),
};
#undef AMK_FIELD

constexpr std::string_view kTileNames[] = {"small", "wide", "large"};

std::optional<uint32_t> parse_value(const VmField& f, std::string_view v) {
  if (f.kind == K::boolean) {
    if (v == "true" || v == "1") return 1;
    if (v == "false" || v == "0") return 0;
    return std::nullopt;
  }
  if (f.kind == K::tile)
    for (uint32_t i = 0; i < 3; ++i)
      if (v == kTileNames[i]) return i;
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty() || n > 0xFFFFFFFFull)
    return std::nullopt;
  return static_cast<uint32_t>(n);
}

// gemv's ring has no one-stage form (amk_vm_config_error: 0 or 2-4), a hole the table's lo..hi
// cannot express.
bool is_ring_hole(const VmField& f, uint32_t v) { return f.name == "gemv_ring_stages" && v == 1; }

std::string accepted(const VmField& f) {
  switch (f.kind) {
    case K::boolean: return "true or false";
    case K::tile: return "small, wide or large";
    default:
      if (is_ring_hole(f, 1)) return "0 or an integer in 2.." + std::to_string(f.hi);
      return "an integer in " + std::to_string(f.lo) + ".." + std::to_string(f.hi);
  }
}

}  // namespace

std::span<const VmField> vm_fields() noexcept { return kFields; }

const VmField* find_vm_field(std::string_view name) noexcept {
  for (const VmField& f : kFields)
    if (f.name == name) return &f;
  return nullptr;
}

std::string vm_field_source(const VmField& f, const VmConfig& c) {
  const uint32_t v = f.get(c);
  switch (f.kind) {
    case K::boolean: return v != 0 ? "true" : "false";
    case K::tile: return "amk_attn_tile::" + std::string(kTileNames[v < 3 ? v : 0]);
    default: return std::to_string(v) + "u";
  }
}

std::string vm_field_text(const VmField& f, const VmConfig& c) {
  const uint32_t v = f.get(c);
  switch (f.kind) {
    case K::boolean: return v != 0 ? "true" : "false";
    case K::tile: return std::string(kTileNames[v < 3 ? v : 0]);
    default: return std::to_string(v);
  }
}

VmOverrides parse_vm_overrides(std::string_view text, const std::string& where) {
  VmOverrides out;
  size_t pos = 0;
  for (;;) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw Error(ErrorKind::usage, "usage.vm", where,
                  "expected FIELD=VALUE[,FIELD=VALUE...], got '" + std::string(item) +
                      "' (amk compile --explain lists the fields)");
    const std::string_view name = item.substr(0, eq), value = item.substr(eq + 1);
    const VmField* f = find_vm_field(name);
    if (f == nullptr)
      throw Error(ErrorKind::usage, "usage.vm", where,
                  "no VM field '" + std::string(name) + "' (amk compile --explain lists them)");
    if (!f->tunable)
      throw Error(ErrorKind::usage, "usage.vm", where,
                  std::string(name) + " is derived from the program, not a tuning");
    const std::optional<uint32_t> v = parse_value(*f, value);
    if (!v || *v < f->lo || *v > f->hi || is_ring_hole(*f, *v))
      throw Error(ErrorKind::usage, "usage.vm", where,
                  std::string(name) + " (" + std::string(f->doc) + ") is " + accepted(*f) +
                      ", got '" + std::string(value) + "'");
    std::erase_if(out, [&](const VmOverride& o) { return o.field == f; });
    out.push_back({f, *v});
    if (comma == text.size()) break;
    pos = comma + 1;
  }
  return out;
}

std::optional<uint32_t> override_of(const VmOverrides& o, std::string_view name) {
  for (const VmOverride& x : o)
    if (x.field->name == name) return x.value;
  return std::nullopt;
}

std::string overrides_text(const VmOverrides& o) {
  std::string s;
  VmConfig c{};
  for (const VmOverride& x : o) {
    x.field->set(c, x.value);
    if (!s.empty()) s += ',';
    s += std::string(x.field->name) + "=" + vm_field_text(*x.field, c);
  }
  return s;
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
                  "FIELD=VALUE[,FIELD=VALUE...]");
    arms.push_back(
        {std::string(arm), arm == "default" ? VmOverrides{} : parse_vm_overrides(arm, at)});
    if (semi == text.size()) break;
    pos = semi + 1;
  }
  if (arms.size() < 2 || arms.size() > kMaxTuningArms)
    throw Error(ErrorKind::usage, "usage.tuning_arms", where,
                "expected 2.." + std::to_string(kMaxTuningArms) + " arms separated by ';', got " +
                    std::to_string(arms.size()));
  return arms;
}

}  // namespace amk
