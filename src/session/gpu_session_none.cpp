// The GPU session of a build without the CUDA toolkit: every call refuses with a device error
// (amk devices lists none).
#include "session/gpu_session.hpp"
#include "api/host.hpp"

namespace amk {
namespace {

[[noreturn]] void no_cuda() { detail::throw_no_cuda(); }

}  // namespace

bool gpu_present(std::string* why) {
  if (why != nullptr) *why = "amk was built without the CUDA toolkit";
  return false;
}
DeviceInfo check_gpu(const Program&, int) { no_cuda(); }
GpuOutcome run_on_gpu(const Program&, const InitialData&, const GpuRequest&) { no_cuda(); }
DeviceInfo check_wrapper_gpu(const WrapperProgram&, int) { no_cuda(); }
GpuOutcome run_wrapper_on_gpu(const WrapperProgram&, const InitialData&, const GpuRequest&) {
  no_cuda();
}
ordered_json profile_wrapper_on_gpu(const WrapperProgram&, const InitialData&,
                                    const ProfileRequest&, std::ostringstream&) {
  no_cuda();
}
ordered_json wrapper_attributes(const WrapperProgram&, const LoadOptions&, const GpuRequest&,
                                std::ostringstream&) {
  no_cuda();
}
ordered_json profile_on_gpu(const Program&, const InitialData&, const ProfileRequest&,
                            std::ostringstream&) {
  no_cuda();
}
ordered_json profile_arms_on_gpu(const Program&, const InitialData&, const ProfileRequest&,
                                 std::ostringstream&) {
  no_cuda();
}
ordered_json trace_on_gpu(const Program&, const InitialData&, const GpuRequest&, const std::string&,
                          std::ostringstream&) {
  no_cuda();
}
ordered_json bench_on_gpu(const Program&, const InitialData&, const BenchRequest&,
                          std::ostringstream&) {
  no_cuda();
}
ordered_json kernel_attributes(const Program&, const LoadOptions&, const GpuRequest&,
                               std::ostringstream&) {
  no_cuda();
}
ordered_json compile_for_arch(const Program&, const std::string&, const GpuRequest&,
                              const CompileOutputs&, bool, std::ostringstream&) {
  no_cuda();
}
ordered_json compile_wrapper_for_arch(const WrapperProgram&, const std::string&, const GpuRequest&,
                                      const std::string&, std::ostringstream&) {
  no_cuda();
}
ordered_json list_gpus(std::ostringstream& text) {
  // Zero devices is an answer, not an error (as without a driver in a CUDA build).
  std::string why;
  (void)gpu_present(&why);
  text << "no CUDA devices: " << why << "\n";
  return ordered_json{{"status", "ok"}, {"devices", ordered_json::array()}, {"notice", why}};
}

}  // namespace amk
