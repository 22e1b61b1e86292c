// TMA descriptors: each TmaSpec of a program becomes a CUtensorMap (cuTensorMapEncodeTiled) over
// the placed buffer. The spec is validated on the host first (verify's check_tma plus the real
// address), so the driver's bare CUDA_ERROR_INVALID_VALUE is the exception, not the rule.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "program/program.hpp"

namespace amk::cu {

// The exact arguments of one cuTensorMapEncodeTiled call.
struct TmaArguments {
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  uint32_t rank = 0;
  uint64_t address = 0;             // buffer address + element offset
  std::vector<cuuint64_t> dims;     // innermost first
  std::vector<cuuint64_t> strides;  // bytes, rank - 1 entries
  std::vector<cuuint32_t> box;
  std::vector<cuuint32_t> element_strides;
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

// Validates spec `index` (Error kind program, code verify.tma.* / tma.address, where /tma/<index>)
// and translates it. Needs no driver.
[[nodiscard]] TmaArguments tma_arguments(const Program& program, uint32_t index,
                                         uint64_t buffer_address);

// Every argument, for error messages ("dtype FLOAT32, rank 2, address 0x..., dims [..], ...").
[[nodiscard]] std::string describe(const TmaArguments& args);

// Encodes every spec in program order; buffer_addresses[i] is the device address of buffer i. A
// failed encode throws Error(kind driver) naming the spec and listing every argument.
[[nodiscard]] std::vector<CUtensorMap> encode_tma(const Program& program,
                                                  const std::vector<uint64_t>& buffer_addresses);

}  // namespace amk::cu
