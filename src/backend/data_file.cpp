#include "backend/data_file.hpp"

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace amk::detail {

DataFile::DataFile(const std::filesystem::path& path, std::string where)
    : path_(path), where_(std::move(where)) {
  std::error_code ec;
  const auto status = std::filesystem::status(path_, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw_io_error("io.missing", where_, "data file '" + path_.string() + "' does not exist");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw_io_error("io.read", where_, "data file '" + path_.string() + "' is not a regular file");
  }
  file_.reset(std::fopen(path_.c_str(), "rb"));
  if (!file_) {
    throw_io_error("io.read", where_,
                   "cannot open data file '" + path_.string() + "': " + std::strerror(errno));
  }
  // The size of the opened file, not of the path, so a file replaced meanwhile cannot lie.
  if (fseeko(file_.get(), 0, SEEK_END) != 0) {
    throw_io_error("io.read", where_, "cannot seek in data file '" + path_.string() + "'");
  }
  const off_t end = ftello(file_.get());
  if (end < 0) throw_io_error("io.read", where_, "cannot size data file '" + path_.string() + "'");
  size_ = static_cast<uint64_t>(end);
}

void DataFile::read(uint64_t offset, std::span<std::byte> dst) const {
  const auto end = checked_add(offset, dst.size());
  if (!end || *end > size_) {
    throw_io_error("io.read", where_,
                   "read of " + std::to_string(dst.size()) + " bytes at offset " +
                       std::to_string(offset) + " is past the end of '" + path_.string() + "' (" +
                       std::to_string(size_) + " bytes)");
  }
  if (dst.empty()) return;
  if (offset > static_cast<uint64_t>(INT64_MAX) ||
      fseeko(file_.get(), static_cast<off_t>(offset), SEEK_SET) != 0) {
    throw_io_error("io.read", where_, "cannot seek in data file '" + path_.string() + "'");
  }
  size_t done = 0;
  while (done < dst.size()) {
    const size_t n = std::fread(dst.data() + done, 1, dst.size() - done, file_.get());
    if (n == 0) {
      throw_io_error("io.read", where_,
                     "short read from '" + path_.string() + "' at offset " +
                         std::to_string(offset + done) + ": " + std::strerror(errno));
    }
    done += n;
  }
}

void DataFile::fail(const std::string& code, const std::string& message) const {
  throw_program_error(code, where_, path_.string() + ": " + message);
}

}  // namespace amk::detail
