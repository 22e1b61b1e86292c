// Program files: read with a size limit, pick the encoding by magic bytes (never the extension),
// and refuse data paths that would leave the program's folder.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "io/load.hpp"

namespace amk {
namespace {

namespace fs = std::filesystem;

constexpr char kAmkbMagic[4] = {'A', 'M', 'K', 'B'};
constexpr char kWrapperAmkbMagic[4] = {'A', 'M', 'K', 'W'};  // a wrapper program's .amkb

std::string read_file_limited(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw_io_error("io.missing", path.string(), "no such file");
  if (fs::is_directory(st)) throw_io_error("io.read", path.string(), "is a directory, not a file");

  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw_io_error("io.read", path.string(), std::string("cannot open: ") + std::strerror(errno));
  std::string text;
  if (fs::is_regular_file(st)) {
    const uintmax_t size = fs::file_size(path, ec);
    if (!ec && size > kMaxFileBytes)
      throw_io_error("io.too_large", path.string(),
                     "the file is " + std::to_string(size) + " bytes, more than the " +
                         std::to_string(kMaxFileBytes) + " a program may have");
    if (!ec) text.reserve(static_cast<size_t>(size));
  }
  // Read in chunks: pipes and special files have no size up front.
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (text.size() + got > kMaxFileBytes)
      throw_io_error("io.too_large", path.string(),
                     "the file is more than the " + std::to_string(kMaxFileBytes) +
                         " bytes a program may have");
    text.append(buf.data(), got);
  }
  if (in.bad()) throw_io_error("io.read", path.string(), "read failed");
  return text;
}

bool is_within(const fs::path& p, const fs::path& base) {
  auto b = base.begin(), be = base.end();
  // A trailing separator leaves an empty last component; it does not count.
  if (b != be && std::prev(be)->empty()) --be;
  auto i = p.begin();
  for (; b != be; ++b, ++i)
    if (i == p.end() || *i != *b) return false;
  return true;
}

}  // namespace

Program load_program_file(const fs::path& path, const LoadOptions& options) {
  const std::string bytes = read_file_limited(path);
  Program program;
  // A wrapper program (schemas/wrapper.md) is another kind: say so, as the JSON reader does.
  if (bytes.size() >= sizeof kWrapperAmkbMagic &&
      std::memcmp(bytes.data(), kWrapperAmkbMagic, 4) == 0)
    throw_program_error("wrapper.unsupported", "header byte 0",
                        "a wrapper program's .amkb (magic AMKW) where only a VM program is "
                        "taken: wrappers go to validate, inspect, convert, compile, run and "
                        "profile --events");
  if (bytes.size() >= sizeof kAmkbMagic && std::memcmp(bytes.data(), kAmkbMagic, 4) == 0)
    program = parse_amkb_program(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        options);
  else
    program = parse_json_program(bytes, options);

  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) abs = path;
  program.base_dir = abs.lexically_normal().parent_path().string();

  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const BufferInit& init = program.buffers[i].init;
    if (init.kind == InitKind::npy || init.kind == InitKind::raw ||
        init.kind == InitKind::safetensors)
      (void)resolve_data_path(program, init.path, "/buffers/" + std::to_string(i) + "/init/path",
                              options);
  }
  return program;
}

fs::path resolve_data_path(const Program& program, const std::string& path,
                           const std::string& where, const LoadOptions& options) {
  if (path.empty())
    throw_program_error("path.empty", where, "expected a data file path, found \"\"");
  if (path.find('\0') != std::string::npos)
    throw_program_error("path.invalid", where, "the data path contains a NUL character");
  std::error_code ec;
  fs::path base = program.base_dir.empty() ? fs::current_path(ec) : fs::path(program.base_dir);
  if (ec)
    throw_io_error("io.read", where, "cannot determine the current directory: " + ec.message());
  const fs::path rel(path);

  if (rel.has_root_path()) {
    if (!options.allow_outside_paths)
      throw_program_error("path.escape", where,
                          "absolute data path \"" + path +
                              "\" refused: data paths are relative to the program's folder "
                              "(--allow-outside permits others)");
    return rel.lexically_normal();
  }
  const fs::path joined = (base / rel).lexically_normal();
  if (options.allow_outside_paths) return joined;

  const fs::path norm = rel.lexically_normal();
  if (!norm.empty() && *norm.begin() == "..")
    throw_program_error("path.escape", where,
                        "data path \"" + path +
                            "\" leaves the program's folder through \"..\" (--allow-outside "
                            "permits it)");
  // Links: compare where the path really leads with where the folder really is. The file need
  // not exist yet (weakly_canonical resolves the existing prefix).
  const fs::path real_base = fs::weakly_canonical(base, ec);
  if (ec)
    throw_program_error("path.escape", where,
                        "cannot resolve the program's folder " + base.string() + ": " +
                            ec.message());
  const fs::path real = fs::weakly_canonical(joined, ec);
  if (ec)
    throw_program_error("path.escape", where,
                        "cannot resolve data path \"" + path + "\": " + ec.message());
  if (!is_within(real.lexically_normal(), real_base.lexically_normal()))
    throw_program_error("path.escape", where,
                        "data path \"" + path + "\" resolves to " + real.string() +
                            ", outside the program's folder " + real_base.string() +
                            " (through a symbolic link; --allow-outside permits it)");
  return real;
}

}  // namespace amk
