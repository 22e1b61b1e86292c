// Program loading: JSON (.json) and binary (.amkb) encodings of program format v1.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "program/program.hpp"

namespace amk {

struct LoadOptions {
  bool allow_outside_paths = false;  // data files may live outside the program's folder
  bool trust_custom_ops = false;     // custom op sources are accepted only with this
};

// JSON encoding. Errors carry a JSON pointer to the offending value.
[[nodiscard]] Program parse_json_program(std::string_view text, const LoadOptions& options = {});
// Canonical JSON text of a program (stable key order; what `amk convert` writes).
[[nodiscard]] std::string program_to_json(const Program& program);

// Binary encoding. Errors carry the section and byte offset.
[[nodiscard]] Program parse_amkb_program(std::span<const std::byte> bytes,
                                         const LoadOptions& options = {});
[[nodiscard]] std::vector<std::byte> program_to_amkb(const Program& program);

// Reads a program file of either encoding (chosen by magic bytes, not the extension), sets
// base_dir to the file's folder, and checks the data paths it names.
[[nodiscard]] Program load_program_file(const std::filesystem::path& path,
                                        const LoadOptions& options = {});

// Resolves a data path named by a program against its base dir; refuses paths that escape it
// unless allowed. `where` locates the path in the program for the error.
[[nodiscard]] std::filesystem::path resolve_data_path(const Program& program,
                                                      const std::string& path,
                                                      const std::string& where,
                                                      const LoadOptions& options);

// Rewrites the program's relative data paths to name the same files from `new_dir` (the folder
// it is about to be written to) and sets base_dir to it; returns how many paths changed.
// Refuses (usage.convert.path) a path that would leave `new_dir`, unless options allow paths
// outside the folder.
uint32_t rebase_data_paths(Program& program, const std::filesystem::path& new_dir,
                           const LoadOptions& options);

}  // namespace amk
