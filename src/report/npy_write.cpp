// .npy writer, format 1.0: magic, version, u16 header length, a Python dict literal padded with
// spaces so that the data starts at a multiple of 64 bytes (numpy's alignment), then the data.
#include <algorithm>
#include <bit>
#include <cstring>

#include "core/checked.hpp"
#include "core/numeric.hpp"
#include "report/outputs.hpp"

namespace amk {
namespace {

// Buffer bytes are copied as they are: both the program data and .npy are little endian.
static_assert(std::endian::native == std::endian::little, "amk assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kPreludeSize = kMagicSize + 2 + 2;  // magic, version 1.0, u16 header length
constexpr size_t kAlign = 64;
constexpr size_t kMaxHeader = 0xffff;  // format 1.0 stores the length in 16 bits

std::string shape_tuple(std::span<const uint64_t> shape) {
  // Python's tuple repr: (), (N,), (A, B).
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  s += ")";
  return s;
}

}  // namespace

DType npy_stored_dtype(DType dtype) noexcept { return dtype == DType::bf16 ? DType::f32 : dtype; }

std::string_view npy_descr(DType stored) noexcept {
  switch (stored) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return "<f4";  // widened
    case DType::i32: return "<i4";
    case DType::u32: return "<u4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
  }
  return "";
}

std::vector<std::byte> encode_npy(DType dtype, std::span<const uint64_t> shape,
                                  std::span<const std::byte> data) {
  // The element count is checked so that a wrong buffer never writes a file that lies about
  // its shape; this is a caller bug, not user input.
  // A zero dim makes the array empty whatever the others are (no overflow from them then).
  uint64_t elements = std::find(shape.begin(), shape.end(), 0) != shape.end() ? 0 : 1;
  for (uint64_t d : shape) {
    if (elements == 0) break;
    auto next = checked_mul(elements, d);
    if (!next) throw Error(ErrorKind::internal, "npy.shape", "", "shape element count overflows");
    elements = *next;
  }
  const auto in_bytes = checked_mul(elements, dtype_size(dtype));
  if (!in_bytes || *in_bytes != data.size())
    throw Error(ErrorKind::internal, "npy.size", "",
                "data has " + std::to_string(data.size()) + " bytes; shape " + shape_tuple(shape) +
                    " of " + std::string(dtype_name(dtype)) + " needs " + std::to_string(elements) +
                    " elements of " + std::to_string(dtype_size(dtype)) + " bytes");

  const DType stored = npy_stored_dtype(dtype);
  std::string header = "{'descr': '" + std::string(npy_descr(stored)) +
                       "', 'fortran_order': False, 'shape': " + shape_tuple(shape) + ", }";
  // Pad with spaces, then '\n', so that prelude + header is a multiple of 64.
  const size_t unpadded = kPreludeSize + header.size() + 1;
  header.append((kAlign - unpadded % kAlign) % kAlign, ' ');
  header += '\n';
  if (header.size() > kMaxHeader)
    throw Error(ErrorKind::internal, "npy.header", "", "header too long for format 1.0");

  const size_t out_data = static_cast<size_t>(elements) * dtype_size(stored);
  std::vector<std::byte> out(kPreludeSize + header.size() + out_data);
  std::memcpy(out.data(), kMagic, kMagicSize);
  out[6] = std::byte{1};  // major version
  out[7] = std::byte{0};  // minor version
  out[8] = static_cast<std::byte>(header.size() & 0xff);
  out[9] = static_cast<std::byte>(header.size() >> 8);
  std::memcpy(out.data() + kPreludeSize, header.data(), header.size());

  std::byte* dst = out.data() + kPreludeSize + header.size();
  if (stored == dtype) {
    if (!data.empty()) std::memcpy(dst, data.data(), data.size());
  } else {
    // bf16 -> f32 is exact: the bf16 bits are the top half of the f32.
    for (uint64_t i = 0; i < elements; ++i) {
      uint16_t h;
      std::memcpy(&h, data.data() + i * 2, 2);
      const float f = bf16_to_f32(h);
      std::memcpy(dst + i * 4, &f, 4);
    }
  }
  return out;
}

}  // namespace amk
