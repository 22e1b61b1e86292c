// The VM translation unit for one program: its chosen configuration (kAmkCfg), what it uses
// (kAmkOps), the TMA geometry table, trusted custom op sources, the kernels/ headers and the
// entry points. No CUDA needed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/choose.hpp"
#include "program/program.hpp"

namespace amk {

// Bumped whenever the generated source or the cache layout changes meaning (part of the key).
inline constexpr uint32_t kVmCodegenVersion = 2;

// The entry points: amk_vm (the persistent VM) and, with config.step_kernel, amk_step (one
// instruction per launch, for `amk bench`).
inline constexpr const char* kKernelName = "amk_vm";
inline constexpr const char* kStepKernelName = "amk_step";

// Throws Error(program, custom.untrusted) when the program carries custom op sources and
// `trust_custom_ops` is false, Error(program, custom.name) for a name that is not a C identifier.
[[nodiscard]] std::string vm_source(const Program& program, const VmChoice& choice,
                                    bool trust_custom_ops);

// Dynamic shared memory the TMA gemv's pipeline wants with `available` bytes left to it (what
// the compiled kernel's static shared memory leaves of the device's opt-in): alignment pad,
// mbarriers or row partials, and up to kAmkTmaMaxStages stages of the largest box; 0 when the
// program has no TMA gemv or two stages do not fit. The kernel reads %dynamic_smem_size and takes
// the plain gemv path when it was given less, so any value is safe.
[[nodiscard]] uint32_t tma_dynamic_smem(const Program& program, uint64_t available);

}  // namespace amk
