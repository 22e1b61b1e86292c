// The public API in a build without the CUDA toolkit: open loads and verifies the program, then
// refuses with the device error (device.unsupported, exit 5); no executable is ever open, so
// every other call throws api.closed.
#include "amk/amk.hpp"
#include "api/host.hpp"

namespace amk {

struct Executable::Impl {};

Executable::Executable() noexcept = default;
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;
Executable::~Executable() = default;

void Executable::close() noexcept { impl_.reset(); }

Executable Executable::open(const std::string& program_path, const OpenOptions& options) {
  return detail::open_opened(detail::load_for_open(program_path, options), options);
}

Executable detail::open_opened(OpenedProgram, const OpenOptions&) { throw_no_cuda(); }

const std::vector<BufferInfo>& Executable::buffers() const { detail::throw_closed("buffers"); }
void Executable::set_input(std::string_view, const void*, size_t, std::string_view) {
  detail::throw_closed("set_input");
}
void Executable::bind(std::string_view, uint64_t, size_t, std::string_view) {
  detail::throw_closed("bind");
}
void Executable::launch(uint32_t) { detail::throw_closed("launch"); }
uint32_t Executable::passes_run() const { detail::throw_closed("passes_run"); }
void Executable::launch_async(uint64_t, uint32_t) { detail::throw_closed("launch_async"); }
void Executable::wait() { detail::throw_closed("wait"); }
void Executable::read_output(std::string_view, void*, size_t, std::string_view) const {
  detail::throw_closed("read_output");
}
ProfileResult Executable::profile(const ProfileOptions&) { detail::throw_closed("profile"); }
KernelAttributes Executable::attributes() const { detail::throw_closed("attributes"); }
ExecutableStats Executable::stats() const { detail::throw_closed("stats"); }
uint64_t Executable::device_pointer(std::string_view) const {
  detail::throw_closed("device_pointer");
}
std::vector<std::pair<std::string, double>> Executable::setup_timings() const {
  detail::throw_closed("setup_timings");
}

}  // namespace amk
