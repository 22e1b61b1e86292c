// The host mirror of the VM's typed configuration (kernels/amk_config.h): one table of its
// fields, which drives `--vm FIELD=VALUE`, `amk compile --explain`, report.json and the
// generated source (so the kernel cache key) alike.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amk_config.h"

namespace amk {

using VmConfig = amk_vm_config;
using VmOps = amk_vm_ops;

// One field of amk_vm_config. Shape fields are derived from the program and never tuned.
struct VmField {
  enum class Kind : uint8_t { boolean, integer, tile };
  std::string_view name;
  Kind kind;
  bool tunable;
  uint32_t lo, hi;  // the accepted range (booleans 0..1, tiles 0..2)
  std::string_view doc;
  uint32_t (*get)(const VmConfig&);
  void (*set)(VmConfig&, uint32_t);
};

// Every field, in declaration order.
[[nodiscard]] std::span<const VmField> vm_fields() noexcept;
[[nodiscard]] const VmField* find_vm_field(std::string_view name) noexcept;

// A field's value as the generated source and --explain spell it ("true", "256u",
// "amk_attn_tile::large") and as text for users ("true", "256", "large").
[[nodiscard]] std::string vm_field_source(const VmField& f, const VmConfig& c);
[[nodiscard]] std::string vm_field_text(const VmField& f, const VmConfig& c);

// `--vm FIELD=VALUE[,FIELD=VALUE...]`: values are integers, true/false, or a tile name
// (small|wide|large). A field given twice keeps its last value.
struct VmOverride {
  const VmField* field = nullptr;
  uint32_t value = 0;
};
using VmOverrides = std::vector<VmOverride>;
// Throws Error(usage, usage.vm) at `where` for an unknown field, a shape field, a malformed or
// out-of-range value.
[[nodiscard]] VmOverrides parse_vm_overrides(std::string_view text, const std::string& where);
// The override of `name`, if any.
[[nodiscard]] std::optional<uint32_t> override_of(const VmOverrides& o, std::string_view name);
// "FIELD=VALUE,..." of the overrides (empty for none): the arm names of profile --tuning-arms.
[[nodiscard]] std::string overrides_text(const VmOverrides& o);

// --tuning-arms "ARM;ARM;...": 2 to kMaxTuningArms arms, each "default" or a --vm text.
inline constexpr size_t kMaxTuningArms = 16;
struct TuningArm {
  std::string name;
  VmOverrides overrides;
};
[[nodiscard]] std::vector<TuningArm> parse_tuning_arms(std::string_view text,
                                                       const std::string& where);

}  // namespace amk
