// The rules `amk compile` applies to a wrapper before NVRTC sees it: the trust flag, the arch
// (the target snapshot's), and the defines as NVRTC options. No CUDA here.
#include "core/error.hpp"
#include "core/hash.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {

std::string wrapper_arch(const TargetSnapshot& t) {
  return "sm_" + std::to_string(t.arch) + (t.arch_specific ? "a" : "");
}

WrapperProgram load_trusted_wrapper(const std::filesystem::path& path, const LoadOptions& options,
                                    bool trust_source, WrapperSummary* summary) {
  WrapperProgram w = load_wrapper_file(path, options);
  const WrapperSummary s = check_wrapper(w, options);
  (void)wrapper_compile_arch(w, "", trust_source);
  if (summary != nullptr) *summary = s;
  return w;
}

std::string wrapper_fingerprint(const WrapperProgram& w) { return sha256_hex(wrapper_to_json(w)); }

std::vector<std::string> wrapper_nvrtc_defines(const WrapperSource& s) {
  std::vector<std::string> out;
  out.reserve(s.defines.size());
  for (const WrapperDefine& d : s.defines)
    out.push_back("-D" + d.name + (d.value ? "=" + *d.value : std::string()));
  return out;
}

std::string wrapper_compile_arch(const WrapperProgram& w, const std::string& requested,
                                 bool trust_source) {
  if (!trust_source)
    throw Error(ErrorKind::program, "wrapper.untrusted",
                w.wrapper.source_path.empty() ? "/wrapper/source" : "/wrapper/source_path",
                "the wrapper's kernel " + w.wrapper.kernel_name +
                    " is CUDA source from the program file; amk compiles it only with " +
                    std::string(kTrustSourceFlag) + " (it runs that code on the GPU)");
  const std::string arch = wrapper_arch(w.target);
  if (!requested.empty() && requested != arch)
    throw Error(ErrorKind::device, "device.target", "--arch",
                "wrapper '" + w.name + "' was built for " + arch + " (target fingerprint " +
                    w.target.fingerprint + "), not " + requested +
                    ": a wrapper compiles only for its target snapshot's arch (leave --arch out)");
  return arch;
}

}  // namespace amk
