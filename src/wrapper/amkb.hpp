// The .amkb encoding of wrapper programs (schemas/wrapper.md, "Binary encoding"): the VM .amkb's
// header and section table (src/io/amkb.cpp) under the magic AMKW, with three sections: META (the
// JSON encoding's canonical text minus the bulk), SOURCE (the inline kernel source, raw) and
// PACKAGE (the package arrays' inline contents, raw).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/load.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {

// "AMKW" then CR LF SUB LF: the VM .amkb's magic family ("AMKB..."), told apart by its 4th byte.
inline constexpr std::array<char, 8> kWrapperAmkbMagic = {'A',  'M',  'K',    'W',
                                                          '\r', '\n', '\x1a', '\n'};

// True when the bytes start with "AMKW" (the decoder checks the rest of the magic).
[[nodiscard]] bool is_wrapper_amkb(std::string_view bytes) noexcept;

// Decodes a wrapper .amkb. Errors are amk::Error (program) located as "header byte N",
// "section table byte N", "section NAME byte N" or, inside META's JSON, "section META POINTER".
// base_dir is where source_path and data paths resolve from.
[[nodiscard]] WrapperProgram parse_amkb_wrapper(std::span<const std::byte> bytes,
                                                const std::filesystem::path& base_dir,
                                                const LoadOptions& options = {});
// The canonical encoding: equal programs give equal files. amkb.encode when it cannot be stored.
[[nodiscard]] std::vector<std::byte> wrapper_to_amkb(const WrapperProgram& w);

// Rewrites the wrapper's relative data paths and source_path to name the same files from
// `new_dir` (where it is about to be written) and sets base_dir to it; returns how many changed.
// A data path that would leave `new_dir` is usage.convert.path unless options allow it; the source
// path is refused whatever the options say (a source never leaves the program's folder).
uint32_t rebase_wrapper_paths(WrapperProgram& w, const std::filesystem::path& new_dir,
                              const LoadOptions& options);

namespace detail {

// What the .amkb decoder gives the JSON reader besides META's text, and what it learns back.
struct WrapperMeta {
  const std::string* source = nullptr;  // the SOURCE section's text; none: no SOURCE section
  std::array<std::optional<uint64_t>, kPackageArrays> raw{};  // out: each array's "raw" offset
};

// Reads META: the JSON encoding without "source" (given by `meta.source`) and without "data"
// (an array with "raw": OFFSET has its contents in PACKAGE; its init is `values`, left empty and
// its offset recorded in `meta.raw`). Errors carry JSON pointers, or "byte N" of the text.
[[nodiscard]] WrapperProgram parse_wrapper_meta(std::string_view text,
                                                const std::filesystem::path& base_dir,
                                                const LoadOptions& options, WrapperMeta& meta);

}  // namespace detail
}  // namespace amk
