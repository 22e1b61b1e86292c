#include "backend/host_data.hpp"

#include <cstring>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backend/init_sources.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"

namespace amk {

std::vector<std::byte> materialize_buffer(const Program& program, uint32_t index,
                                          const LoadOptions& options) {
  if (index >= program.buffers.size()) {
    throw Error(ErrorKind::internal, "init.buffer", "/buffers/" + std::to_string(index),
                "buffer index out of range (" + std::to_string(program.buffers.size()) +
                    " buffers)");
  }
  const Buffer& buffer = program.buffers[index];
  const BufferInit& init = buffer.init;
  const std::string where = "/buffers/" + std::to_string(index) + "/init";
  uint64_t elements = 1;
  for (uint64_t d : buffer.shape) {
    const auto e = checked_mul(elements, d);
    if (!e)
      throw_program_error("init.size", "/buffers/" + std::to_string(index) + "/shape",
                          "element count overflows");
    elements = *e;
  }
  const size_t item = dtype_size(buffer.dtype);
  const auto bytes = checked_mul(elements, item);
  if (!bytes || *bytes > kMaxBufferBytes) {
    throw_program_error("init.size", "/buffers/" + std::to_string(index) + "/shape",
                        "buffer '" + buffer.name + "' exceeds " + std::to_string(kMaxBufferBytes) +
                            " bytes");
  }

  switch (init.kind) {
    case InitKind::zeros: return host_bytes(*bytes);
    case InitKind::constant: {
      if (!value_fits(buffer.dtype, init.constant)) {
        throw_program_error("init.value", where + "/value",
                            "constant " + std::to_string(init.constant) + " does not fit dtype " +
                                std::string(dtype_name(buffer.dtype)));
      }
      std::byte one[8];
      store_element(one, buffer.dtype, 0, init.constant);
      std::vector<std::byte> out = host_bytes(*bytes);
      for (uint64_t i = 0; i < elements; ++i) std::memcpy(out.data() + i * item, one, item);
      return out;
    }
    case InitKind::random: return random_fill(init, buffer.dtype, elements, where);
    case InitKind::values:
      if (init.data.size() != *bytes) {
        throw_program_error("init.values.count", where + "/values",
                            std::to_string(init.data.size() / item) + " values for " +
                                std::to_string(elements) + " elements");
      }
      return init.data;
    case InitKind::npy:
      return read_npy(resolve_data_path(program, init.path, where + "/path", options), buffer.dtype,
                      elements, where + "/path");
    case InitKind::raw:
      return read_raw(resolve_data_path(program, init.path, where + "/path", options), init.offset,
                      buffer.dtype, elements, where + "/path");
    case InitKind::safetensors:
      return read_safetensors(resolve_data_path(program, init.path, where + "/path", options),
                              init.tensor, buffer.dtype, elements, where + "/path");
  }
  throw_program_error("init.kind", where + "/kind", "unknown init kind");
}

std::vector<std::byte> host_bytes(size_t bytes) {
  std::vector<std::byte> out;
  out.reserve(bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes >= 4 * kHuge) {
    const auto p = reinterpret_cast<uintptr_t>(out.data());
    const uintptr_t begin = (p + kHuge - 1) & ~(kHuge - 1), end = (p + bytes) & ~(kHuge - 1);
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
  out.resize(bytes);
  return out;
}

HostBuffers copy_host_buffers(const HostBuffers& from) {
  HostBuffers out;
  out.data.reserve(from.data.size());
  for (const auto& b : from.data) {
    out.data.push_back(host_bytes(b.size()));
    if (!b.empty()) std::memcpy(out.data.back().data(), b.data(), b.size());
  }
  return out;
}

HostBuffers materialize_all(const Program& program, const LoadOptions& options) {
  HostBuffers out;
  out.data.reserve(program.buffers.size());
  for (uint32_t i = 0; i < program.buffers.size(); ++i)
    out.data.push_back(materialize_buffer(program, i, options));
  return out;
}

}  // namespace amk
