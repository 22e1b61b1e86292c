#include "cuda/tma.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "cuda/driver.hpp"
#include "verify/verify.hpp"

namespace amk::cu {
namespace {

CUtensorMapDataType tma_dtype(DType t) {
  switch (t) {
    case DType::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::i32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case DType::u32: return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    case DType::i64: return CU_TENSOR_MAP_DATA_TYPE_INT64;
    case DType::u8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

const char* dtype_text(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: return "FLOAT32";
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16: return "FLOAT16";
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return "BFLOAT16";
    case CU_TENSOR_MAP_DATA_TYPE_INT32: return "INT32";
    case CU_TENSOR_MAP_DATA_TYPE_UINT32: return "UINT32";
    case CU_TENSOR_MAP_DATA_TYPE_INT64: return "INT64";
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return "UINT8";
    default: return "other";
  }
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

TmaArguments tma_arguments(const Program& program, uint32_t index, uint64_t buffer_address) {
  check_tma(program, index);  // every spec rule, with its JSON pointer
  const TmaSpec& spec = program.tma[index];
  const Buffer& buffer = program.buffers[spec.buffer];
  const uint64_t elem = dtype_size(buffer.dtype);

  TmaArguments a;
  a.dtype = tma_dtype(buffer.dtype);
  a.rank = static_cast<uint32_t>(spec.dims.size());
  a.address = buffer_address + spec.offset * elem;  // check_tma bounded offset * elem
  // check_tma assumed a 16-byte aligned allocation; hold the placed address to it.
  const uint64_t align = spec.interleave == TmaInterleave::b32 ? 32 : 16;
  if (a.address % align != 0)
    throw Error(ErrorKind::program, "tma.address", "/tma/" + std::to_string(index),
                "tma " + std::to_string(index) + " '" + spec.name + "': tensor address " +
                    hex(a.address) + " (buffer '" + buffer.name + "' at " + hex(buffer_address) +
                    " + " + std::to_string(spec.offset) + " elements) is not " +
                    std::to_string(align) + "-byte aligned");
  a.dims.assign(spec.dims.begin(), spec.dims.end());
  if (!spec.strides.empty()) {
    a.strides.assign(spec.strides.begin(), spec.strides.end());
  } else {
    uint64_t s = elem;
    for (size_t i = 0; i + 1 < spec.dims.size(); ++i) {
      s *= spec.dims[i];  // check_tma proved these products stay below 2^40
      a.strides.push_back(s);
    }
  }
  a.box.assign(spec.box.begin(), spec.box.end());
  if (spec.element_strides.empty())
    a.element_strides.assign(a.rank, 1);
  else
    a.element_strides.assign(spec.element_strides.begin(), spec.element_strides.end());
  switch (spec.interleave) {
    case TmaInterleave::none: a.interleave = CU_TENSOR_MAP_INTERLEAVE_NONE; break;
    case TmaInterleave::b16: a.interleave = CU_TENSOR_MAP_INTERLEAVE_16B; break;
    case TmaInterleave::b32: a.interleave = CU_TENSOR_MAP_INTERLEAVE_32B; break;
  }
  switch (spec.swizzle) {
    case TmaSwizzle::none: a.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE; break;
    case TmaSwizzle::b32: a.swizzle = CU_TENSOR_MAP_SWIZZLE_32B; break;
    case TmaSwizzle::b64: a.swizzle = CU_TENSOR_MAP_SWIZZLE_64B; break;
    case TmaSwizzle::b128: a.swizzle = CU_TENSOR_MAP_SWIZZLE_128B; break;
  }
  switch (spec.l2_promotion) {
    case TmaL2Promotion::none: a.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE; break;
    case TmaL2Promotion::b64: a.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_64B; break;
    case TmaL2Promotion::b128: a.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B; break;
    case TmaL2Promotion::b256: a.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B; break;
  }
  a.oob_fill = spec.oob_fill == TmaOobFill::nan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                                : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  return a;
}

std::string describe(const TmaArguments& a) {
  return std::string("dtype ") + dtype_text(a.dtype) + " (" + std::to_string(a.dtype) + "), rank " +
         std::to_string(a.rank) + ", address " + hex(a.address) + ", dims " + list(a.dims) +
         ", strides " + list(a.strides) + " bytes, box " + list(a.box) + ", element strides " +
         list(a.element_strides) + ", interleave " + std::to_string(a.interleave) + ", swizzle " +
         std::to_string(a.swizzle) + ", l2 promotion " + std::to_string(a.l2_promotion) +
         ", oob fill " + std::to_string(a.oob_fill);
}

std::vector<CUtensorMap> encode_tma(const Program& program,
                                    const std::vector<uint64_t>& buffer_addresses) {
  std::vector<CUtensorMap> maps(program.tma.size());  // CUtensorMap is over-aligned by type
  for (uint32_t i = 0; i < program.tma.size(); ++i) {
    const TmaSpec& spec = program.tma[i];
    if (spec.buffer >= buffer_addresses.size())
      throw Error(ErrorKind::internal, "internal.tma_buffer", "/tma/" + std::to_string(i),
                  "no placed address for buffer " + std::to_string(spec.buffer));
    const TmaArguments a = tma_arguments(program, i, buffer_addresses[spec.buffer]);
    const cuuint64_t no_strides = 0;  // rank 1 has no strides; pass a valid pointer anyway
    const CUresult r = driver().tensor_map_encode_tiled(
        &maps[i], a.dtype, a.rank, reinterpret_cast<void*>(a.address), a.dims.data(),
        a.strides.empty() ? &no_strides : a.strides.data(), a.box.data(), a.element_strides.data(),
        a.interleave, a.swizzle, a.l2_promotion, a.oob_fill);
    check(r, "cuTensorMapEncodeTiled", [&] {
      return "tma " + std::to_string(i) + " '" + spec.name + "' (" + describe(a) + ")";
    });
  }
  return maps;
}

}  // namespace amk::cu
