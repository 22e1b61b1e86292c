// The one place the VM's configuration is decided: a pure function of the program's facts, the
// device's capabilities and the user's overrides. Unit-tested with made-up programs and devices.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "config/facts.hpp"
#include "config/vm_config.hpp"

namespace amk {

// What the chooser needs of a device (device/device.hpp's snapshot, or an arch's defaults for
// `amk compile` without a GPU).
struct DeviceCaps {
  uint32_t arch = 90;            // compute capability, major * 10 + minor
  uint64_t smem_optin = 232448;  // shared memory a block may opt into
};

// The capabilities of architecture sm_<arch> (`amk compile` without a device): the shared memory a
// block may opt into (sm_90 and sm_100: 227 KiB; sm_80: 163 KiB; sm_86, sm_89, sm_120: 99 KiB).
[[nodiscard]] DeviceCaps caps_for_arch(uint32_t arch);

struct VmChoice {
  VmConfig config;
  VmOps ops;
  std::array<std::string, 32> why{};  // per field (vm_fields() order): why it has its value
  // Dynamic shared memory the VM needs from the config alone (gemv's ring, grown to the largest
  // attention_combine staging); the TMA gemv's stages are sized after compile, from what the
  // compiled kernel leaves.
  uint32_t dynamic_smem = 0;
};

struct ChooseOptions {
  VmOverrides overrides;
  bool trace = false;
  bool step_kernel = false;
};

// Throws Error(program, launch.block) for a block size the VM cannot take, Error(usage, usage.vm)
// for an override the program cannot take (gemv's ring beside the program's own dynamic shared
// memory or the TMA gemv, the dynamic tile without a 64 KiB ring, a config amk_vm_config_error
// refuses), Error(device, device.arch / device.smem) for what the device cannot run. A tile
// smaller than a chunk needs is not refused: that chunk takes the streaming pass.
[[nodiscard]] VmChoice choose(const ProgramFacts& facts, const DeviceCaps& caps,
                              const ChooseOptions& options = {});

// The `why` of field `name` in a choice.
[[nodiscard]] const std::string& choice_why(const VmChoice& c, std::string_view name);

}  // namespace amk
