// Data paths of a program written to another folder (amk convert -o elsewhere/P.amkb): each
// relative path is rewritten to name the same file from the new folder.
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "io/load.hpp"

namespace amk {
namespace fs = std::filesystem;

namespace {

bool names_a_file(InitKind kind) {
  return kind == InitKind::npy || kind == InitKind::raw || kind == InitKind::safetensors;
}

// The folder as the file system sees it (links resolved; it need not exist yet).
fs::path real_folder(const fs::path& dir, const std::string& where) {
  std::error_code ec;
  const fs::path abs = fs::absolute(dir.empty() ? fs::path(".") : dir, ec);
  if (ec) throw_io_error("io.path", where, "cannot resolve " + dir.string() + ": " + ec.message());
  const fs::path real = fs::weakly_canonical(abs, ec);
  if (ec) throw_io_error("io.path", where, "cannot resolve " + abs.string() + ": " + ec.message());
  return real.lexically_normal();
}

}  // namespace

uint32_t rebase_data_paths(Program& program, const fs::path& new_dir, const LoadOptions& options) {
  const fs::path from = real_folder(program.base_dir, "program");
  const fs::path to = real_folder(new_dir, new_dir.string());
  uint32_t changed = 0;
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    BufferInit& init = program.buffers[i].init;
    if (!names_a_file(init.kind) || fs::path(init.path).has_root_path()) continue;
    const std::string where = "/buffers/" + std::to_string(i) + "/init/path";
    // (resolve_data_path refuses what the program could not load from where it is.)
    const fs::path file = resolve_data_path(program, init.path, where, options);
    if (from == to) continue;
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(file, ec).lexically_normal();
    const fs::path rel = (ec ? file : real).lexically_relative(to);
    if (rel.empty())
      throw Error(ErrorKind::usage, "usage.convert.path", where,
                  "data path \"" + init.path + "\" cannot be named relative to " + to.string() +
                      "; write the program on the same file system as its data");
    if (*rel.begin() == ".." && !options.allow_outside_paths)
      throw Error(ErrorKind::usage, "usage.convert.path", where,
                  "data path \"" + init.path + "\" would be \"" + rel.generic_string() +
                      "\" from " + to.string() +
                      ", outside the new program's folder; write the program into a folder "
                      "that holds its data, or pass --allow-outside (loading it then needs "
                      "--allow-outside too)");
    if (rel.generic_string() != init.path) {
      init.path = rel.generic_string();
      ++changed;
    }
  }
  program.base_dir = to.string();
  return changed;
}

}  // namespace amk
