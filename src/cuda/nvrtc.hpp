// NVRTC, in memory: the generated source plus every embedded kernels/ header, straight to a
// cubin for one exact architecture. A failed compilation is a result (with its log), not an
// exception; only NVRTC itself misbehaving throws.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cuda/compile.hpp"

namespace amk {

struct NvrtcResult {
  bool ok = false;
  std::vector<std::byte> cubin;  // for a real architecture (--gpu-architecture=sm_*)
  std::string ptx;               // for a virtual one (--gpu-architecture=compute_*)
  std::string log;               // always fetched (ptxas -v lines included)
};

// Toolkit include directories handed to NVRTC: $AMK_CUDA_INCLUDE (colon-separated) when set,
// else the build's AMK_NVRTC_INCLUDES.
[[nodiscard]] std::vector<std::string> nvrtc_include_dirs();

// The full NVRTC option list for these compile options (order as passed).
[[nodiscard]] std::vector<std::string> nvrtc_options(const CompileOptions& options);

// Compiles `source` (named `file_name` in the log) with the embedded headers.
[[nodiscard]] NvrtcResult nvrtc_compile(const std::string& source,
                                        const std::vector<std::string>& options,
                                        const std::string& file_name = "amk_vm.cu");

}  // namespace amk
