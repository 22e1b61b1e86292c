#include "program/program.hpp"

#include <cstring>

namespace amk {

size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (unsigned i = 0; i < AMK_DTYPE_COUNT; ++i) {
    auto t = static_cast<DType>(i);
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

bool dtype_is_float(DType t) noexcept {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

std::string_view init_kind_name(InitKind k) noexcept {
  switch (k) {
    case InitKind::zeros: return "zeros";
    case InitKind::constant: return "constant";
    case InitKind::random: return "random";
    case InitKind::values: return "values";
    case InitKind::npy: return "npy";
    case InitKind::raw: return "raw";
    case InitKind::safetensors: return "safetensors";
  }
  return "?";
}

uint64_t Buffer::elements() const noexcept {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t Buffer::bytes() const noexcept { return elements() * dtype_size(dtype); }

std::optional<uint32_t> parse_feature(std::string_view name) noexcept {
  if (name == "cooperative") return kFeatureCooperative;
  if (name == "cluster") return kFeatureCluster;
  if (name == "tma") return kFeatureTma;
  return std::nullopt;
}

std::vector<std::string> feature_names(uint32_t features) {
  std::vector<std::string> out;
  if (features & kFeatureCooperative) out.emplace_back("cooperative");
  if (features & kFeatureCluster) out.emplace_back("cluster");
  if (features & kFeatureTma) out.emplace_back("tma");
  return out;
}

uint32_t f32_bits(float v) noexcept {
  uint32_t w;
  std::memcpy(&w, &v, 4);
  return w;
}

float bits_f32(uint32_t w) noexcept {
  float v;
  std::memcpy(&v, &w, 4);
  return v;
}

std::optional<int64_t> initial_index_value(const Buffer& buffer, uint64_t offset) {
  const bool is_signed = buffer.dtype == DType::i32;
  if (!is_signed && buffer.dtype != DType::u32) return std::nullopt;
  if (offset >= buffer.elements()) return std::nullopt;
  const BufferInit& init = buffer.init;
  switch (init.kind) {
    case InitKind::zeros: return 0;
    case InitKind::constant: {
      const double v = init.constant;
      const double lo = is_signed ? -2147483648.0 : 0.0;
      const double hi = is_signed ? 2147483647.0 : 4294967295.0;
      if (!(v >= lo && v <= hi) || v != static_cast<double>(static_cast<int64_t>(v)))
        return std::nullopt;
      return static_cast<int64_t>(v);
    }
    case InitKind::values: {
      if (init.data.size() < (offset + 1) * 4) return std::nullopt;
      uint32_t word = 0;
      std::memcpy(&word, init.data.data() + offset * 4, 4);  // little endian, as stored
      if (is_signed) return int64_t{static_cast<int32_t>(word)};
      return int64_t{word};
    }
    case InitKind::random:
    case InitKind::npy:
    case InitKind::raw:
    case InitKind::safetensors: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace amk
