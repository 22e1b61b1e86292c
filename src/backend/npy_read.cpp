// A small .npy reader (format 1.0 / 2.0 / 3.0): magic, version, header length, and the
// python-literal header dict {'descr': ..., 'fortran_order': ..., 'shape': (...)}. Only what
// numpy's own writer produces for plain little-endian C-order arrays is accepted.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "backend/data_file.hpp"
#include "backend/host_data.hpp"
#include "backend/init_sources.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/numeric.hpp"

namespace amk {
namespace {

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<uint64_t> shape;
};

// Recursive-descent parser over the header text; the first failure is kept in `why`.
class HeaderParser {
public:
  explicit HeaderParser(std::string_view text) : s_(text) {}

  std::optional<NpyHeader> parse(std::string& why) {
    NpyHeader h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    ws();
    if (!eat('{')) return fail(why, "header does not start with '{'");
    for (;;) {
      ws();
      if (eat('}')) break;
      std::string key;
      if (!string_literal(key)) return fail(why, "expected a quoted key");
      ws();
      if (!eat(':')) return fail(why, "expected ':' after key '" + key + "'");
      ws();
      if (key == "descr") {
        if (seen_descr) return fail(why, "duplicate key 'descr'");
        seen_descr = true;
        if (peek() == '[') {
          structured_ = true;
          return fail(why, "structured dtypes are not supported");
        }
        if (!string_literal(h.descr)) return fail(why, "'descr' is not a string");
      } else if (key == "fortran_order") {
        if (seen_fortran) return fail(why, "duplicate key 'fortran_order'");
        seen_fortran = true;
        if (word("True"))
          h.fortran_order = true;
        else if (word("False"))
          h.fortran_order = false;
        else
          return fail(why, "'fortran_order' is not True or False");
      } else if (key == "shape") {
        if (seen_shape) return fail(why, "duplicate key 'shape'");
        seen_shape = true;
        if (!tuple(h.shape, why)) return std::nullopt;
      } else {
        return fail(why, "unexpected key '" + key + "'");
      }
      ws();
      if (eat(',')) continue;
      ws();
      if (eat('}')) break;
      return fail(why, "expected ',' or '}' after the value of '" + key + "'");
    }
    ws();
    if (pos_ != s_.size()) return fail(why, "unexpected text after the header dict");
    if (!seen_descr || !seen_fortran || !seen_shape) {
      return fail(why, "header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return h;
  }

  [[nodiscard]] bool structured() const noexcept { return structured_; }

private:
  std::optional<NpyHeader> fail(std::string& why, std::string message) {
    why = std::move(message);
    return std::nullopt;
  }
  [[nodiscard]] char peek() const noexcept { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eat(char c) noexcept {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void ws() noexcept {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool word(std::string_view w) noexcept {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  // 'text' or "text" without escapes (numpy never writes escapes in these fields).
  bool string_literal(std::string& out) {
    const char q = peek();
    if (q != '\'' && q != '"') return false;
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) return false;
    out.assign(s_.substr(pos_ + 1, end - pos_ - 1));
    if (out.find('\\') != std::string::npos) return false;
    pos_ = end + 1;
    return true;
  }
  // (), (n,), (n, m), (n, m,) with non-negative decimal integers (a trailing L of python 2 files
  // is accepted).
  bool tuple(std::vector<uint64_t>& dims, std::string& why) {
    if (!eat('(')) return fail_bool(why, "'shape' is not a tuple");
    for (;;) {
      ws();
      if (eat(')')) return true;
      if (!(peek() >= '0' && peek() <= '9')) return fail_bool(why, "'shape' holds a non-integer");
      uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        const auto m = checked_mul(v, 10);
        const auto a = m ? checked_add(*m, static_cast<uint64_t>(peek() - '0')) : std::nullopt;
        if (!a) return fail_bool(why, "'shape' dimension overflows 64 bits");
        v = *a;
        ++pos_;
      }
      eat('L');
      dims.push_back(v);
      if (dims.size() > 64) return fail_bool(why, "'shape' has more than 64 dimensions");
      ws();
      if (eat(',')) continue;
      ws();
      if (eat(')')) return true;
      return fail_bool(why, "expected ',' or ')' in 'shape'");
    }
  }
  bool fail_bool(std::string& why, std::string message) {
    why = std::move(message);
    return false;
  }

  std::string_view s_;
  size_t pos_ = 0;
  bool structured_ = false;
};

// The descr a buffer dtype accepts (the first is what numpy writes; for bf16, raw bits).
struct Accepted {
  std::string_view descr;
  size_t item_size;
  bool f32_to_bf16;
};

std::vector<Accepted> accepted_descrs(DType t) {
  switch (t) {
    case DType::f32: return {{"<f4", 4, false}};
    case DType::f16: return {{"<f2", 2, false}};
    case DType::bf16: return {{"<u2", 2, false}, {"<f4", 4, true}};
    case DType::i32: return {{"<i4", 4, false}};
    case DType::u32: return {{"<u4", 4, false}};
    case DType::i64: return {{"<i8", 8, false}};
    case DType::u8: return {{"|u1", 1, false}, {"<u1", 1, false}};
  }
  return {};
}

uint32_t le32(const std::byte* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

namespace {

// Where a checked .npy file's data lies and whether it is converted (f32 into bf16).
struct NpyLayout {
  FileRange range;  // the file's data bytes
  bool f32_to_bf16 = false;
  uint64_t count = 0;
};

NpyLayout npy_layout(const std::filesystem::path& path, DType dtype, uint64_t elements,
                     const std::string& where) {
  const detail::DataFile file(path, where);
  static constexpr std::array<unsigned char, 6> kMagic = {0x93, 'N', 'U', 'M', 'P', 'Y'};

  // Preamble: magic (6), version (2), header length (2 in v1, 4 in v2/v3).
  std::array<std::byte, 12> pre{};
  if (file.size() < 10) file.fail("init.npy.magic", "file too short for a .npy preamble");
  file.read(0, std::span(pre).first(10));
  if (std::memcmp(pre.data(), kMagic.data(), kMagic.size()) != 0) {
    file.fail("init.npy.magic", "not a .npy file (magic \\x93NUMPY missing)");
  }
  const unsigned major = static_cast<unsigned>(pre[6]);
  const unsigned minor = static_cast<unsigned>(pre[7]);
  if (major < 1 || major > 3) {
    file.fail("init.npy.version", "unsupported .npy version " + std::to_string(major) + "." +
                                      std::to_string(minor) + " (1.0, 2.0 and 3.0 are read)");
  }
  uint64_t header_len = 0;
  uint64_t header_start = 0;
  if (major == 1) {
    header_len = static_cast<uint64_t>(pre[8]) | static_cast<uint64_t>(pre[9]) << 8;
    header_start = 10;
  } else {
    if (file.size() < 12) file.fail("init.npy.header", "file too short for a .npy preamble");
    file.read(10, std::span(pre).subspan(10, 2));
    header_len = le32(pre.data() + 8);
    header_start = 12;
  }
  if (header_len > kMaxNpyHeader) {
    file.fail("init.npy.header", "header length " + std::to_string(header_len) +
                                     " exceeds the limit of " + std::to_string(kMaxNpyHeader));
  }
  if (header_start + header_len > file.size()) {
    file.fail("init.npy.header", "header length " + std::to_string(header_len) +
                                     " runs past the end of the file (" +
                                     std::to_string(file.size()) + " bytes)");
  }
  std::string text(header_len, '\0');
  file.read(header_start, std::as_writable_bytes(std::span(text)));

  HeaderParser parser(text);
  std::string why;
  const std::optional<NpyHeader> header = parser.parse(why);
  if (!header) file.fail(parser.structured() ? "init.npy.dtype" : "init.npy.header", why);

  // dtype: object and big-endian arrays are refused by name, anything else must match.
  const std::string& d = header->descr;
  if (d.find('O') != std::string::npos)
    file.fail("init.npy.dtype", "object arrays ('" + d + "') are not supported");
  if (!d.empty() && d[0] == '>' && !(d.size() == 3 && d[2] == '1')) {
    file.fail("init.npy.endian", "big-endian data ('" + d +
                                     "') is not supported; save with "
                                     "arr.astype(arr.dtype.newbyteorder('<'))");
  }
  const auto accepted = accepted_descrs(dtype);
  const auto match = std::find_if(accepted.begin(), accepted.end(),
                                  [&](const Accepted& a) { return a.descr == d; });
  if (match == accepted.end()) {
    std::string expect;
    for (const auto& a : accepted)
      expect += (expect.empty() ? "'" : " or '") + std::string(a.descr) + "'";
    file.fail("init.npy.dtype", "descr '" + d + "' does not match buffer dtype " +
                                    std::string(dtype_name(dtype)) + " (expected " + expect + ")");
  }
  if (header->fortran_order) {
    file.fail("init.npy.fortran", "Fortran-order arrays are not supported; save "
                                  "np.ascontiguousarray(arr)");
  }
  uint64_t count = 1;
  for (uint64_t dim : header->shape) {
    const auto c = checked_mul(count, dim);
    if (!c) file.fail("init.npy.shape", "shape element count overflows 64 bits");
    count = *c;
  }
  if (count != elements) {
    file.fail("init.npy.shape", "array has " + std::to_string(count) +
                                    " elements, the buffer has " + std::to_string(elements));
  }
  const uint64_t data_start = header_start + header_len;
  const auto data_bytes = checked_mul(count, match->item_size);
  if (!data_bytes || *data_bytes != file.size() - data_start) {
    file.fail("init.npy.size", "file holds " + std::to_string(file.size() - data_start) +
                                   " data bytes, the header implies " +
                                   (data_bytes ? std::to_string(*data_bytes) : "more than 2^64"));
  }

  return {{path, data_start, *data_bytes}, match->f32_to_bf16, count};
}

}  // namespace

std::optional<FileRange> locate_npy(const std::filesystem::path& path, DType dtype,
                                    uint64_t elements, const std::string& where) {
  NpyLayout l = npy_layout(path, dtype, elements, where);
  if (l.f32_to_bf16) return std::nullopt;
  return std::move(l.range);
}

std::vector<std::byte> read_npy(const std::filesystem::path& path, DType dtype, uint64_t elements,
                                const std::string& where) {
  const NpyLayout l = npy_layout(path, dtype, elements, where);
  const detail::DataFile file(l.range.file, where);
  const uint64_t data_start = l.range.offset, count = l.count;
  std::vector<std::byte> out = host_bytes(elements * dtype_size(dtype));
  if (!l.f32_to_bf16) {
    file.read(data_start, out);
    return out;
  }
  // bf16 from f32: convert in chunks so the f32 copy never exists whole.
  constexpr uint64_t kChunk = 1u << 16;
  std::vector<float> chunk(kChunk);
  for (uint64_t i = 0; i < count; i += kChunk) {
    const uint64_t n = std::min(kChunk, count - i);
    file.read(data_start + i * 4, std::as_writable_bytes(std::span(chunk.data(), n)));
    for (uint64_t j = 0; j < n; ++j) {
      const uint16_t h = f32_to_bf16(chunk[j]);
      std::memcpy(out.data() + (i + j) * 2, &h, 2);
    }
  }
  return out;
}

}  // namespace amk
