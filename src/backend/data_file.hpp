// A data file named by a program (npy, raw, safetensors): opened once, read at checked offsets.
// Sizes come from the file system, never from the file's own contents, so callers can check
// every size the file claims against size() before allocating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace amk::detail {

class DataFile {
public:
  // Throws Error io `io.missing` (no such file) or `io.read` (cannot open / not a file), with
  // `where` (the program pointer of the path, e.g. /buffers/3/init/path) and the file name.
  DataFile(const std::filesystem::path& path, std::string where);

  [[nodiscard]] uint64_t size() const noexcept { return size_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] const std::string& where() const noexcept { return where_; }

  // Reads dst.size() bytes at `offset`. Callers check the range first; a range outside the file
  // or a short read still throws (io.read), never reads out of bounds.
  void read(uint64_t offset, std::span<std::byte> dst) const;

  // Throws Error program `code` at where(), the message prefixed with the file name.
  [[noreturn]] void fail(const std::string& code, const std::string& message) const;

private:
  struct Closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  std::filesystem::path path_;
  std::string where_;
  std::unique_ptr<std::FILE, Closer> file_;
  uint64_t size_ = 0;
};

}  // namespace amk::detail
