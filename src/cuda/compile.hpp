// Compiling the VM for one program with NVRTC (kernels/ embedded at build time), with an
// on-disk cubin cache. Works without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "program/program.hpp"

namespace amk {

struct CompileOptions {
  std::string arch = "sm_90a";           // --gpu-architecture
  bool trust_custom_ops = false;         // custom op sources are compiled only with this
  bool use_cache = true;
  std::optional<std::filesystem::path> cache_dir;  // default: $AMK_CACHE_DIR, else XDG cache
  bool line_info = false;
  bool trace = false;                    // compile in per-instruction timestamps
  // Also emit kStepKernelName (kernels/amk_step.cuh): one instruction per launch, for `amk bench`.
  // Changes the source, hence the cache key.
  bool step_kernel = false;
  std::vector<std::string> extra_options;
  // Tuning macros for the VM (AMK_PREFETCH_BYTES, AMK_VM_SUBS, ...), defined before the kernels
  // are included; part of the source, hence of the cache key. From $AMK_VM_TUNING in the CLI.
  std::vector<std::pair<std::string, int64_t>> tuning;
};

// Parses "NAME=INT[,NAME=INT...]" (names AMK_[A-Z0-9_]+); throws a usage error naming `where`.
[[nodiscard]] std::vector<std::pair<std::string, int64_t>> parse_vm_tuning(std::string_view text,
                                                                          const std::string& where);

// One arm of `amk profile --tuning-arms`: its label (the text as given) and its tuning.
struct TuningArm {
  std::string name;
  std::vector<std::pair<std::string, int64_t>> tuning;
};
inline constexpr size_t kMaxTuningArms = 16;
// Parses "ARM;ARM;..." (2..kMaxTuningArms arms), each a parse_vm_tuning text or "default" (no
// tuning); throws a usage error naming `where` and the arm.
[[nodiscard]] std::vector<TuningArm> parse_tuning_arms(std::string_view text,
                                                       const std::string& where);

// The second entry point compiled in with CompileOptions::step_kernel: amk_step(prog, instruction
// [, tensor maps]) runs one instruction's op on one block, without waits or signals.
inline constexpr const char* kStepKernelName = "amk_step";

// The result of an NVRTC compilation: a failure is a result, not an exception.
struct CompileOutput {
  bool ok = false;
  std::vector<std::byte> cubin;
  std::string kernel_name;               // extern "C" entry point
  std::string arch;
  std::string log;                       // always kept
  std::vector<std::string> options;
  std::string nvrtc_version;             // "13.0"
  std::string source_fingerprint;        // sha256 of source + headers + options + versions
  bool cache_hit = false;
  double compile_ms = 0.0;
  uint32_t tma_count = 0;                // CUtensorMap parameters after the program struct
};

// The generated translation unit for a program (specialized to the ops it uses).
[[nodiscard]] std::string vm_source(const Program& program, const Plan& plan,
                                    const CompileOptions& options);

// Compiles (or fetches from the cache) the VM for a program. Throws Error(kind nvrtc) with the
// log, arch, options and NVRTC version in the message/detail when compilation fails, and
// Error(kind program, custom.untrusted) when custom ops are present without trust.
[[nodiscard]] CompileOutput compile_vm(const Program& program, const Plan& plan,
                                       const CompileOptions& options);

// The VM's PTX for the virtual architecture of options.arch (sm_90a -> compute_90a): what NVRTC
// hands ptxas, to read the front end's code for an op without a GPU or a disassembler. Never
// cached. Throws like compile_vm.
[[nodiscard]] std::string vm_ptx(const Program& program, const Plan& plan,
                                 const CompileOptions& options);

// "13.0"; throws Error(kind nvrtc) if NVRTC cannot be queried.
[[nodiscard]] std::string nvrtc_version_string();

}  // namespace amk
