#include <string>

#include "backend/data_file.hpp"
#include "backend/host_data.hpp"
#include "backend/init_sources.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"

namespace amk {

FileRange locate_raw(const std::filesystem::path& path, uint64_t offset, DType dtype,
                     uint64_t elements, const std::string& where) {
  const detail::DataFile file(path, where);
  const auto bytes = checked_mul(elements, dtype_size(dtype));
  const auto end = bytes ? checked_add(offset, *bytes) : std::nullopt;
  if (!end || *end > file.size()) {
    file.fail("init.raw.range", "needs bytes [" + std::to_string(offset) + ", " +
                                    (end ? std::to_string(*end) : std::string("beyond 2^64")) +
                                    ") but the file has " + std::to_string(file.size()) + " bytes");
  }
  return {path, offset, *bytes};
}

std::vector<std::byte> read_raw(const std::filesystem::path& path, uint64_t offset, DType dtype,
                                uint64_t elements, const std::string& where) {
  const FileRange r = locate_raw(path, offset, dtype, elements, where);
  std::vector<std::byte> out = host_bytes(r.bytes);
  detail::DataFile(r.file, where).read(r.offset, out);
  return out;
}

}  // namespace amk
