// The VM config's field table (kernels/amk_config.h mirrored by src/config/vm_config.cpp) and the
// `--vm` / `--tuning-arms` texts built on it.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/vm_config.hpp"
#include "core/error.hpp"

using namespace amk;

namespace {

struct Member {
  std::string_view name;
  size_t offset;
};

// amk_vm_config's members in declaration order, with their offsets (the order the table promises
// and the generated source relies on). A field added to the struct but not here fails the size
// assertion below.
#define AMK_MEMBER(m)                                                                              \
  Member { #m, offsetof(amk_vm_config, m) }
constexpr Member kMembers[] = {
    AMK_MEMBER(block_threads),     AMK_MEMBER(tma_maps),
    AMK_MEMBER(tma_gemv),          AMK_MEMBER(trace),
    AMK_MEMBER(step_kernel),       AMK_MEMBER(stepped),
    AMK_MEMBER(early_stop),        AMK_MEMBER(buffers),
    AMK_MEMBER(smem_buffers),      AMK_MEMBER(gemv_ring_stages),
    AMK_MEMBER(gemv_preload),      AMK_MEMBER(prefetch_ahead),
    AMK_MEMBER(next_ins_l1),       AMK_MEMBER(stage_decode_ins),
    AMK_MEMBER(gemv_x_batch),      AMK_MEMBER(attn_tile),
    AMK_MEMBER(attn_tile_dynamic), AMK_MEMBER(attn_pass),
    AMK_MEMBER(attn_split),        AMK_MEMBER(attn_split_heads),
    AMK_MEMBER(attn_row8),
};
#undef AMK_MEMBER
static_assert(sizeof(amk_vm_config) == 56, "amk_vm_config changed: update kMembers");

// The member at `offset` of c, read as the table's kind says it is stored.
uint32_t member_at(const VmConfig& c, size_t offset, VmField::Kind kind) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&c) + offset;
  if (kind == VmField::Kind::boolean) {
    bool b;
    std::memcpy(&b, bytes, sizeof b);
    return b ? 1u : 0u;
  }
  uint32_t v;
  std::memcpy(&v, bytes, sizeof v);
  return v;
}

std::string config_error(const VmConfig& c) {
  const char* e = amk_vm_config_error(c);
  return e == nullptr ? "" : e;
}

// The amk::Error `f` throws (a failed check and nullopt if none).
std::optional<Error> error_of(const std::function<void()>& f, const char* expr) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL_CHECK("expected an amk::Error from " << std::string(expr));
  return std::nullopt;
}

#define CHECK_USAGE(expr, code_, where_)                                                           \
  do {                                                                                             \
    const auto err_ = error_of([&] { (void)(expr); }, #expr);                                      \
    if (err_) {                                                                                    \
      CHECK_MESSAGE(err_->kind() == ErrorKind::usage, err_->what());                               \
      CHECK_MESSAGE(err_->code() == std::string(code_), err_->what());                             \
      CHECK_MESSAGE(err_->where() == std::string(where_), err_->what());                           \
    }                                                                                              \
  } while (0)

uint32_t value_of(const VmOverrides& o, std::string_view name) {
  const std::optional<uint32_t> v = override_of(o, name);
  REQUIRE_MESSAGE(v.has_value(), "no override of " << std::string(name));
  return *v;
}

}  // namespace

TEST_CASE("the field table has every field of amk_vm_config once, in declaration order") {
  for (size_t i = 1; i < std::size(kMembers); ++i)
    CHECK(kMembers[i - 1].offset < kMembers[i].offset);  // (this list is in declaration order)
  const auto fields = vm_fields();
  REQUIRE(fields.size() == std::size(kMembers));
  for (size_t i = 0; i < fields.size(); ++i) {
    CAPTURE(i);
    CHECK(fields[i].name == kMembers[i].name);
    CHECK(find_vm_field(kMembers[i].name) == &fields[i]);
    CHECK(!fields[i].doc.empty());
    CHECK(fields[i].lo <= fields[i].hi);
  }
  CHECK(find_vm_field("no_such_field") == nullptr);
  // The shape fields come first and are not tunable; every field after them is.
  for (size_t i = 0; i < fields.size(); ++i)
    CHECK_MESSAGE(fields[i].tunable == (i >= 8), fields[i].name);
}

TEST_CASE("each field's setter writes its own member and the getter reads it back") {
  const auto fields = vm_fields();
  REQUIRE(fields.size() == std::size(kMembers));
  for (size_t i = 0; i < fields.size(); ++i) {
    const VmField& f = fields[i];
    CAPTURE(f.name);
    // Every value of a small range, the ends and the middle of a large one.
    std::vector<uint32_t> values;
    if (f.hi - f.lo <= 64)
      for (uint32_t v = f.lo; v <= f.hi; ++v) values.push_back(v);
    else
      values = {f.lo, f.lo + 1, f.lo + (f.hi - f.lo) / 2, f.hi - 1, f.hi};
    for (const uint32_t v : values) {
      const VmConfig defaults{};
      VmConfig c{};
      f.set(c, v);
      CHECK(f.get(c) == v);
      CHECK(member_at(c, kMembers[i].offset, f.kind) == v);
      // No other field moved.
      for (const VmField& g : vm_fields())
        if (&g != &f) CHECK_MESSAGE(g.get(c) == g.get(defaults), g.name);
    }
  }
  const VmField* ring = find_vm_field("gemv_ring_stages");
  REQUIRE(ring != nullptr);
  VmConfig c{};
  ring->set(c, 3);
  CHECK(c.gemv_ring_stages == 3);
  const VmField* tile = find_vm_field("attn_tile");
  REQUIRE(tile != nullptr);
  tile->set(c, 2);
  CHECK(c.attn_tile == amk_attn_tile::large);
  CHECK(vm_field_text(*tile, c) == "large");
  CHECK(vm_field_source(*tile, c) == "amk_attn_tile::large");
  CHECK(vm_field_source(*ring, c) == "3u");
  CHECK(vm_field_text(*ring, c) == "3");
  CHECK(vm_field_source(*find_vm_field("attn_pass"), c) == "true");
}

TEST_CASE("the ranges are those amk_vm_config_error accepts") {
  for (const VmField& f : vm_fields()) {
    if (!f.tunable) continue;
    CAPTURE(f.name);
    for (const uint32_t v : {f.lo, f.hi}) {
      VmConfig c{};
      f.set(c, v);
      // The fields whose validity depends on another one get a partner that allows them.
      if (f.name == "attn_tile_dynamic") c.attn_tile = amk_attn_tile::large;
      if (f.name == "smem_buffers") c.buffers = 1;
      CHECK(config_error(c) == "");
    }
    if (f.kind != VmField::Kind::boolean && f.hi < 0xFFFFFFFFu) {
      VmConfig c{};
      f.set(c, f.hi + 1);
      CHECK(config_error(c) != "");
    }
  }
}

TEST_CASE("--vm accepts booleans, integers and tile names") {
  const VmOverrides o = parse_vm_overrides(
      "smem_buffers=true,next_ins_l1=0,attn_pass=1,gemv_x_batch=false,gemv_ring_stages=3,"
      "prefetch_ahead=8,attn_tile=wide",
      "--vm");
  REQUIRE(o.size() == 7);
  CHECK(value_of(o, "smem_buffers") == 1);
  CHECK(value_of(o, "next_ins_l1") == 0);
  CHECK(value_of(o, "attn_pass") == 1);
  CHECK(value_of(o, "gemv_x_batch") == 0);
  CHECK(value_of(o, "gemv_ring_stages") == 3);
  CHECK(value_of(o, "prefetch_ahead") == 8);
  CHECK(value_of(o, "attn_tile") == 1);
  CHECK(!override_of(o, "attn_row8").has_value());
  CHECK(value_of(parse_vm_overrides("attn_tile=small", "--vm"), "attn_tile") == 0);
  CHECK(value_of(parse_vm_overrides("attn_tile=large", "--vm"), "attn_tile") == 2);
  CHECK(value_of(parse_vm_overrides("attn_tile=2", "--vm"), "attn_tile") == 2);
  CHECK(value_of(parse_vm_overrides("gemv_ring_stages=0", "--vm"), "gemv_ring_stages") == 0);
}

TEST_CASE("--vm keeps the last value of a field given twice") {
  const VmOverrides o = parse_vm_overrides("gemv_preload=1,attn_row8=true,gemv_preload=3", "--vm");
  REQUIRE(o.size() == 2);
  CHECK(value_of(o, "gemv_preload") == 3);
  CHECK(value_of(o, "attn_row8") == 1);
  CHECK(overrides_text(o) == "attn_row8=true,gemv_preload=3");
}

TEST_CASE("--vm refuses unknown fields, shape fields, values out of range and malformed items") {
  CHECK_USAGE(parse_vm_overrides("no_such_field=1", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("block_threads=128", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("tma_maps=0", "here"), "usage.vm", "here");
  CHECK_USAGE(parse_vm_overrides("buffers=4", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("stepped=true", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("gemv_preload=9", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("gemv_ring_stages=1", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("gemv_ring_stages=5", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_split_heads=0", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_tile=huge", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_tile=3", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_pass=yes", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_pass=2", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("prefetch_ahead=-1", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("prefetch_ahead=2x", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("prefetch_ahead=99999999999", "--vm"), "usage.vm", "--vm");
  // Malformed: no '=', an empty name, an empty value, an empty item.
  CHECK_USAGE(parse_vm_overrides("attn_pass", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("=1", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_pass=", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_pass=1,", "--vm"), "usage.vm", "--vm");
  CHECK_USAGE(parse_vm_overrides("attn_pass=1,,attn_row8=1", "--vm"), "usage.vm", "--vm");
}

TEST_CASE("overrides_text round-trips") {
  for (const char* text :
       {"smem_buffers=true", "gemv_ring_stages=4,gemv_preload=0,attn_tile=large",
        "attn_tile=small,attn_split=false,attn_split_heads=2,prefetch_ahead=0,next_ins_l1=true"}) {
    CAPTURE(text);
    const VmOverrides o = parse_vm_overrides(text, "--vm");
    CHECK(overrides_text(o) == text);
    const VmOverrides again = parse_vm_overrides(overrides_text(o), "--vm");
    REQUIRE(again.size() == o.size());
    for (size_t i = 0; i < o.size(); ++i) {
      CHECK(again[i].field == o[i].field);
      CHECK(again[i].value == o[i].value);
    }
  }
  // Spellings normalize: 1 -> true, 2 -> large.
  CHECK(overrides_text(parse_vm_overrides("attn_pass=1,attn_tile=2", "--vm")) ==
        "attn_pass=true,attn_tile=large");
  CHECK(overrides_text({}).empty());
}

TEST_CASE("--tuning-arms: 2 to 16 arms, each 'default' or overrides") {
  const std::vector<TuningArm> arms = parse_tuning_arms(
      "default;gemv_ring_stages=2,gemv_preload=1;attn_tile=wide", "--tuning-arms");
  REQUIRE(arms.size() == 3);
  CHECK(arms[0].name == "default");
  CHECK(arms[0].overrides.empty());
  CHECK(arms[1].name == "gemv_ring_stages=2,gemv_preload=1");
  CHECK(value_of(arms[1].overrides, "gemv_ring_stages") == 2);
  CHECK(value_of(arms[1].overrides, "gemv_preload") == 1);
  CHECK(value_of(arms[2].overrides, "attn_tile") == 1);

  std::string sixteen = "default";
  for (int i = 1; i < 16; ++i) sixteen += ";prefetch_ahead=" + std::to_string(i % 9);
  CHECK(parse_tuning_arms(sixteen, "--tuning-arms").size() == 16);
  CHECK_USAGE(parse_tuning_arms(sixteen + ";default", "--tuning-arms"), "usage.tuning_arms",
              "--tuning-arms");
  CHECK_USAGE(parse_tuning_arms("default", "--tuning-arms"), "usage.tuning_arms", "--tuning-arms");
  CHECK_USAGE(parse_tuning_arms("attn_pass=0", "--tuning-arms"), "usage.tuning_arms",
              "--tuning-arms");
}

TEST_CASE("--tuning-arms names a bad arm by its number") {
  CHECK_USAGE(parse_tuning_arms("default;gemv_preload=9", "--tuning-arms"), "usage.vm",
              "--tuning-arms arm 2");
  CHECK_USAGE(parse_tuning_arms("default;attn_pass=1;block_threads=64", "--tuning-arms"),
              "usage.vm", "--tuning-arms arm 3");
  CHECK_USAGE(parse_tuning_arms("default;;attn_pass=1", "--tuning-arms"), "usage.tuning_arms",
              "--tuning-arms arm 2");
  CHECK_USAGE(parse_tuning_arms("default;", "--tuning-arms"), "usage.tuning_arms",
              "--tuning-arms arm 2");
  CHECK_USAGE(parse_tuning_arms(";default", "--tuning-arms"), "usage.tuning_arms",
              "--tuning-arms arm 1");
}
