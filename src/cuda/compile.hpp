// Compiling the VM for one program with NVRTC (kernels/ embedded at build time), with an
// on-disk cubin cache. Works without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace amk {

struct CompileOptions {
  std::string arch = "sm_90a";  // --gpu-architecture
  bool use_cache = true;
  std::optional<std::filesystem::path> cache_dir;  // default: $AMK_CACHE_DIR, else XDG cache
  bool line_info = false;                          // -lineinfo (for ncu's source view)
  std::vector<std::string> extra_options;
  // --cubin FILE: load this ahead-of-time cubin (amk compile -o FILE) instead of compiling, once
  // its record FILE.json matches what this compile would produce (load_vm_artifact).
  std::optional<std::filesystem::path> cubin_file;
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

// One translation unit for compile_unit: amk's VM or a wrapper's own source.
struct CompileUnit {
  std::string source;
  std::string file_name = "amk_vm.cu";  // NVRTC's name for it (in the log)
  std::string kernel_name;              // extern "C" entry point
  uint32_t tma_count = 0;               // CUtensorMap parameters (recorded, not compiled in)
  std::vector<std::string> defines;     // "-DNAME[=VALUE]", after amk's own options
  // What wrote the source, part of the cache key: the VM's codegen version, or "wrapper/" and
  // amk's version for a wrapper.
  std::string generator;
};

// Compiles (or fetches from the cache) one unit: amk's NVRTC options for options.arch, then the
// unit's defines, with every embedded kernels/ header available to #include. Throws
// Error(nvrtc, nvrtc.compile) with the log in the detail when NVRTC fails. With
// options.cubin_file, nothing is compiled: the artifact is loaded once its record matches.
[[nodiscard]] CompileOutput compile_unit(const CompileUnit& unit, const CompileOptions& options);

// True when `cubin` defines the kernel `name` (an entry point, as extern "C" __global__ gives it
// under its own name), read from its ELF symbol table; false for anything malformed.
[[nodiscard]] bool cubin_has_entry(const std::vector<std::byte>& cubin, std::string_view name);

// One parameter of a kernel in a cubin: its position, byte offset and size.
struct KernelParam {
  uint32_t ordinal = 0;
  uint32_t offset = 0;
  uint32_t size = 0;
};
// The parameters of kernel `name`, in order, from the cubin's .nv.info.<name> section; nullopt
// when the section is missing or malformed.
[[nodiscard]] std::optional<std::vector<KernelParam>> cubin_kernel_params(
    const std::vector<std::byte>& cubin, std::string_view name);

// Compiles (or fetches from the cache) a VM translation unit (cuda/codegen.hpp's vm_source) whose
// kernel takes `tma_count` tensor maps. Throws Error(kind nvrtc) with the log, arch, options and
// NVRTC version in the message/detail when compilation fails. With options.cubin_file, nothing is
// compiled and the cache is not used: the cubin is load_vm_artifact's.
[[nodiscard]] CompileOutput compile_vm(const std::string& source, uint32_t tma_count,
                                       const CompileOptions& options);

// The VM's PTX for the virtual architecture of options.arch (sm_90a -> compute_90a): what NVRTC
// hands ptxas, to read the front end's code for an op without a GPU or a disassembler. Never
// cached. Throws like compile_vm.
[[nodiscard]] std::string vm_ptx(const std::string& source, const CompileOptions& options);

// `amk compile -o FILE` (a VM or a wrapper): writes the cubin to FILE and the record of what it was built for
// (report/artifact.hpp) to FILE.json, each atomically, the record last. Returns FILE.json's path.
// Throws Error(io, io.write).
std::filesystem::path write_cubin_artifact(const std::filesystem::path& file,
                                           const CompileOutput& out,
                                           const std::string& program_fingerprint);

// Fills out.cubin from the artifact FILE (+ FILE.json) once its record matches `out` (arch,
// kernel name, tma_count, NVRTC options and version, amk version, source fingerprint: filled by
// compile_vm as for a compile) and the cubin its recorded size and sha256. Throws read_artifact's
// Error(io, io.*) for a missing or malformed file, Error(device, artifact.mismatch) listing every
// difference otherwise; nothing reaches the driver before it returns.
void load_vm_artifact(const std::filesystem::path& file, CompileOutput& out);

// "13.0"; throws Error(kind nvrtc) if NVRTC cannot be queried.
[[nodiscard]] std::string nvrtc_version_string();

}  // namespace amk
