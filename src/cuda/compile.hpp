// Compiling the VM for one program with NVRTC (kernels/ embedded at build time), with an
// on-disk cubin cache. Works without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace amk {

struct CompileOptions {
  std::string arch = "sm_90a";  // --gpu-architecture
  bool use_cache = true;
  std::optional<std::filesystem::path> cache_dir;  // default: $AMK_CACHE_DIR, else XDG cache
  bool line_info = false;                          // -lineinfo (for ncu's source view)
  std::vector<std::string> extra_options;
};

// The result of an NVRTC compilation: a failure is a result, not an exception.
struct CompileOutput {
  bool ok = false;
  std::vector<std::byte> cubin;
  std::string kernel_name;  // extern "C" entry point
  std::string arch;
  std::string log;  // always kept
  std::vector<std::string> options;
  std::string nvrtc_version;       // "13.0"
  std::string source_fingerprint;  // sha256 of source + headers + options + versions
  bool cache_hit = false;
  double compile_ms = 0.0;
  uint32_t tma_count = 0;  // CUtensorMap parameters after the program struct
};

// Compiles (or fetches from the cache) a VM translation unit (cuda/codegen.hpp's vm_source) whose
// kernel takes `tma_count` tensor maps. Throws Error(kind nvrtc) with the log, arch, options and
// NVRTC version in the message/detail when compilation fails.
[[nodiscard]] CompileOutput compile_vm(const std::string& source, uint32_t tma_count,
                                       const CompileOptions& options);

// The VM's PTX for the virtual architecture of options.arch (sm_90a -> compute_90a): what NVRTC
// hands ptxas, to read the front end's code for an op without a GPU or a disassembler. Never
// cached. Throws like compile_vm.
[[nodiscard]] std::string vm_ptx(const std::string& source, const CompileOptions& options);

// "13.0"; throws Error(kind nvrtc) if NVRTC cannot be queried.
[[nodiscard]] std::string nvrtc_version_string();

}  // namespace amk
