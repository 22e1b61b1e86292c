#include "cuda/nvrtc.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "core/error.hpp"
#include "cuda/embedded.hpp"

#ifndef AMK_NVRTC_INCLUDES
#define AMK_NVRTC_INCLUDES ""
#endif

namespace amk {
namespace {

[[noreturn]] void throw_nvrtc(nvrtcResult r, const std::string& call) {
  throw Error(ErrorKind::nvrtc, "nvrtc.api", call,
              call + " failed: " + nvrtcGetErrorString(r) + " (" + std::to_string(r) + ")");
}

void check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) throw_nvrtc(r, call);
}

// Owns one nvrtcProgram.
class NvrtcProgram {
public:
  NvrtcProgram(const std::string& source, const char* name,
               const std::vector<const char*>& header_texts,
               const std::vector<const char*>& header_names) {
    check(nvrtcCreateProgram(&program_, source.c_str(), name, static_cast<int>(header_texts.size()),
                             header_texts.data(), header_names.data()),
          "nvrtcCreateProgram");
  }
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;
  ~NvrtcProgram() {
    if (program_ != nullptr) nvrtcDestroyProgram(&program_);
  }
  [[nodiscard]] nvrtcProgram get() const noexcept { return program_; }

private:
  nvrtcProgram program_ = nullptr;
};

std::vector<std::string> split_paths(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(':', start), list.size());
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string nvrtc_version_string() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtc_include_dirs() {
  if (const char* env = std::getenv("AMK_CUDA_INCLUDE"); env != nullptr && *env != '\0')
    return split_paths(env);
  return split_paths(AMK_NVRTC_INCLUDES);
}

std::vector<std::string> nvrtc_options(const CompileOptions& options) {
  std::vector<std::string> o;
  o.push_back("--gpu-architecture=" + options.arch);
  o.push_back("-std=c++17");
  // Registers, spills and stack frame of amk_vm land in the log (kept with the cubin).
  o.push_back("--ptxas-options=-v");
  if (options.line_info) o.push_back("-lineinfo");
  for (const std::string& dir : nvrtc_include_dirs()) o.push_back("-I" + dir);
  for (const std::string& extra : options.extra_options) o.push_back(extra);
  return o;
}

NvrtcResult nvrtc_compile(const std::string& source, const std::vector<std::string>& options,
                          const std::string& file_name) {
  std::vector<const char*> header_texts, header_names;
  // NVRTC wants NUL-terminated texts; the embedded views are (scripts/embed_kernels.cmake).
  std::vector<std::string> owned;
  const auto files = embedded_kernel_files();
  owned.reserve(files.size() * 2);
  for (const EmbeddedFile& f : files) {
    owned.emplace_back(f.name);
    header_names.push_back(owned.back().c_str());
    owned.emplace_back(f.text);
    header_texts.push_back(owned.back().c_str());
  }
  NvrtcProgram program(source, file_name.c_str(), header_texts, header_names);

  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());

  NvrtcResult result;
  size_t log_size = 0;
  check(nvrtcGetProgramLogSize(program.get(), &log_size), "nvrtcGetProgramLogSize");
  if (log_size > 1) {
    result.log.resize(log_size);
    check(nvrtcGetProgramLog(program.get(), result.log.data()), "nvrtcGetProgramLog");
    while (!result.log.empty() && result.log.back() == '\0') result.log.pop_back();
  }
  if (compiled != NVRTC_SUCCESS) {
    if (result.log.empty()) result.log = nvrtcGetErrorString(compiled);
    return result;
  }
  const bool virtual_arch = std::any_of(options.begin(), options.end(), [](const std::string& o) {
    return o.rfind("--gpu-architecture=compute_", 0) == 0;
  });
  if (virtual_arch) {
    size_t ptx_size = 0;
    check(nvrtcGetPTXSize(program.get(), &ptx_size), "nvrtcGetPTXSize");
    result.ptx.resize(ptx_size);
    check(nvrtcGetPTX(program.get(), result.ptx.data()), "nvrtcGetPTX");
    while (!result.ptx.empty() && result.ptx.back() == '\0') result.ptx.pop_back();
    result.ok = !result.ptx.empty();
    return result;
  }
  size_t cubin_size = 0;
  check(nvrtcGetCUBINSize(program.get(), &cubin_size), "nvrtcGetCUBINSize");
  result.cubin.resize(cubin_size);
  check(nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(result.cubin.data())),
        "nvrtcGetCUBIN");
  result.ok = !result.cubin.empty();
  return result;
}

}  // namespace amk
