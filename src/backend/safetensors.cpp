// Reads one tensor of a .safetensors file: an 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then
// the data, offsets relative to byte 8 + N. Every number in the header is checked against the
// real file size before anything is allocated.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/data_file.hpp"
#include "backend/host_data.hpp"
#include "backend/init_sources.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"

namespace amk {
namespace {

std::optional<DType> safetensors_dtype(const std::string& s) noexcept {
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16;
  if (s == "I32") return DType::i32;
  if (s == "U32") return DType::u32;
  if (s == "I64") return DType::i64;
  if (s == "U8") return DType::u8;
  return std::nullopt;
}

std::optional<uint64_t> as_u64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// The format gives every tensor its own bytes: refuse a header where two tensors' data_offsets
// overlap (empty ranges overlap nothing). Entries too malformed to have a range are left to the
// checks of the tensor that is read.
void check_no_overlap(const detail::DataFile& file, const nlohmann::json& header) {
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__" || !entry.is_object()) continue;
    const auto offsets = entry.find("data_offsets");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) continue;
    const auto begin = as_u64((*offsets)[0]), end = as_u64((*offsets)[1]);
    if (begin && end && *begin < *end) spans.push_back({*begin, *end, &name});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : *a.name < *b.name;
  });
  auto range = [](const Span& s) {
    return "'" + *s.name + "' [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ")";
  };
  const Span* reach = nullptr;  // the span seen so far that ends last
  for (const Span& s : spans) {
    if (reach != nullptr && s.begin < reach->end)
      file.fail("init.safetensors.overlap", "tensors " + range(*reach) + " and " + range(s) +
                                                " share data bytes; tensors may not overlap");
    if (reach == nullptr || s.end > reach->end) reach = &s;
  }
}

}  // namespace

FileRange locate_safetensors(const std::filesystem::path& path, const std::string& tensor,
                             DType dtype, uint64_t elements, const std::string& where) {
  const detail::DataFile file(path, where);
  if (file.size() < 8)
    file.fail("init.safetensors.header", "file too short for the 8-byte header length");
  std::byte len_bytes[8];
  file.read(0, len_bytes);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<uint64_t>(len_bytes[i]);
  if (header_len > kMaxSafetensorsHeader) {
    file.fail("init.safetensors.header", "header length " + std::to_string(header_len) +
                                             " exceeds the limit of " +
                                             std::to_string(kMaxSafetensorsHeader));
  }
  if (header_len > file.size() - 8) {
    file.fail("init.safetensors.header", "header length " + std::to_string(header_len) +
                                             " runs past the end of the file (" +
                                             std::to_string(file.size()) + " bytes)");
  }
  std::string text(header_len, '\0');
  file.read(8, std::as_writable_bytes(std::span(text)));
  // The format nests three levels (header, tensor entry, shape); deeper values are not built
  // (a deeply nested header would cost memory per level) and the header is refused.
  bool too_deep = false;
  const auto depth_limit = [&too_deep](int depth, nlohmann::json::parse_event_t event,
                                       nlohmann::json&) {
    const bool opens = event == nlohmann::json::parse_event_t::object_start ||
                       event == nlohmann::json::parse_event_t::array_start;
    if (opens && depth >= kMaxSafetensorsDepth) too_deep = true;
    return !too_deep;
  };
  const nlohmann::json header =
      nlohmann::json::parse(text, depth_limit, /*allow_exceptions=*/false);
  if (too_deep)
    file.fail("init.safetensors.header",
              "header nests deeper than " + std::to_string(kMaxSafetensorsDepth) + " levels");
  if (header.is_discarded() || !header.is_object()) {
    file.fail("init.safetensors.header", "header is not a JSON object");
  }

  check_no_overlap(file, header);

  const auto it = header.find(tensor);
  if (it == header.end() || tensor == "__metadata__") {
    std::string names;
    int shown = 0;
    for (const auto& [name, _] : header.items()) {
      if (name == "__metadata__") continue;
      if (shown++ == 8) {
        names += ", ...";
        break;
      }
      names += (names.empty() ? "" : ", ") + name;
    }
    file.fail("init.safetensors.tensor",
              "no tensor '" + tensor + "' (tensors: " + (names.empty() ? "none" : names) + ")");
  }
  const nlohmann::json& entry = *it;
  const std::string ctx = "tensor '" + tensor + "': ";
  if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
      !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
      !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
    file.fail("init.safetensors.entry",
              ctx + "entry needs \"dtype\" (string), \"shape\" (array) and \"data_offsets\" "
                    "([begin, end])");
  }

  const std::string st_dtype = entry["dtype"].get<std::string>();
  const std::optional<DType> mapped = safetensors_dtype(st_dtype);
  if (!mapped || *mapped != dtype) {
    file.fail("init.safetensors.dtype", ctx + "dtype " + st_dtype +
                                            " does not match buffer dtype " +
                                            std::string(dtype_name(dtype)));
  }
  uint64_t count = 1;
  for (const auto& d : entry["shape"]) {
    const auto dim = as_u64(d);
    if (!dim)
      file.fail("init.safetensors.shape", ctx + "shape holds a non-integer or negative value");
    const auto c = checked_mul(count, *dim);
    if (!c) file.fail("init.safetensors.shape", ctx + "shape element count overflows 64 bits");
    count = *c;
  }
  if (count != elements) {
    file.fail("init.safetensors.shape", ctx + "has " + std::to_string(count) +
                                            " elements, the buffer has " +
                                            std::to_string(elements));
  }
  const auto begin = as_u64(entry["data_offsets"][0]);
  const auto end = as_u64(entry["data_offsets"][1]);
  if (!begin || !end || *begin > *end) {
    file.fail("init.safetensors.offsets", ctx + "data_offsets must be integers with begin <= end");
  }
  const auto total = checked_mul(elements, dtype_size(dtype));
  if (!total) file.fail("init.safetensors.shape", ctx + "tensor byte size overflows 64 bits");
  const uint64_t bytes = *total;
  if (*end - *begin != bytes) {
    file.fail("init.safetensors.offsets", ctx + "data_offsets span " +
                                              std::to_string(*end - *begin) +
                                              " bytes, the tensor needs " + std::to_string(bytes));
  }
  const uint64_t data_start = 8 + header_len;
  const auto abs_end = checked_add(data_start, *end);
  if (!abs_end || *abs_end > file.size()) {
    file.fail("init.safetensors.offsets",
              ctx + "data_offsets [" + std::to_string(*begin) + ", " + std::to_string(*end) +
                  ") run past the end of the file (" + std::to_string(file.size() - data_start) +
                  " data bytes)");
  }
  return {path, data_start + *begin, bytes};
}

std::vector<std::byte> read_safetensors(const std::filesystem::path& path,
                                        const std::string& tensor, DType dtype, uint64_t elements,
                                        const std::string& where) {
  const FileRange r = locate_safetensors(path, tensor, dtype, elements, where);
  std::vector<std::byte> out = host_bytes(r.bytes);
  detail::DataFile(r.file, where).read(r.offset, out);
  return out;
}

}  // namespace amk
