// Ahead-of-time VM artifacts from the CUDA layer's side: the record of a CompileOutput (what
// `amk compile -o` writes) and compile_vm's --cubin path, which checks a record against the
// compile it replaces.
#include <spdlog/spdlog.h>

#include "cuda/compile.hpp"
#include "report/artifact.hpp"

namespace amk {
namespace {

// Everything a cubin is compared on, from a compile (or from what compile_vm would compile).
ArtifactRecord record_of(const CompileOutput& out) {
  ArtifactRecord r;
  r.arch = out.arch;
  r.kernel_name = out.kernel_name;
  r.tma_count = out.tma_count;
  r.nvrtc_version = out.nvrtc_version;
  r.amk_version = AMK_VERSION;
  r.source_fingerprint = out.source_fingerprint;
  r.options = out.options;
  return r;
}

}  // namespace

std::filesystem::path write_cubin_artifact(const std::filesystem::path& file,
                                           const CompileOutput& out,
                                           const std::string& program_fingerprint) {
  ArtifactRecord r = record_of(out);
  r.program_fingerprint = program_fingerprint;
  write_artifact(file, out.cubin, std::move(r));
  return artifact_record_path(file);
}

void load_vm_artifact(const std::filesystem::path& file, CompileOutput& out) {
  LoadedArtifact a = read_artifact(file);
  check_artifact(file, a, record_of(out));
  spdlog::info("using the ahead-of-time cubin {} ({} bytes, {}, built for program {})",
               file.string(), a.cubin.size(), out.arch, a.record.program_fingerprint);
  out.ok = true;
  out.cubin = std::move(a.cubin);
  out.log = "loaded from " + file.string() + " (amk compile -o); no NVRTC log";
}

}  // namespace amk
