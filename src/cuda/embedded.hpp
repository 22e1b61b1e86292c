// The files of kernels/, embedded at build time (scripts/embed_kernels.cmake).
#pragma once

#include <span>
#include <string_view>

namespace amk {

struct EmbeddedFile {
  std::string_view name;
  std::string_view text;
};

[[nodiscard]] std::span<const EmbeddedFile> embedded_kernel_files() noexcept;

}  // namespace amk
