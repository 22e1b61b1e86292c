// TMA descriptor specs, checked against the requirements of cuTensorMapEncodeTiled (CUDA driver
// API, "Tensor Map Object Management") so that a bad spec is refused with its location here
// instead of as CUDA_ERROR_INVALID_VALUE at encode time, or as a silent out-of-bounds copy.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

constexpr size_t kTmaMaxRank = 5;
constexpr uint64_t kTmaMaxDim = uint64_t{1} << 32;
constexpr uint64_t kTmaStrideLimit = uint64_t{1} << 40;
constexpr uint32_t kTmaMaxBox = 256;
constexpr uint32_t kTmaMaxElementStride = 8;

class TmaChecker {
public:
  TmaChecker(const Program& program, uint32_t index)
      : program_(program), index_(index), spec_(program.tma[index]) {}

  void run() {
    if (spec_.buffer >= program_.buffers.size())
      fail("verify.tma.buffer", "/buffer",
           "names buffer " + std::to_string(spec_.buffer) + " of " +
               std::to_string(program_.buffers.size()));
    const Buffer& buffer = program_.buffers[spec_.buffer];
    elem_ = dtype_size(buffer.dtype);
    const size_t rank = spec_.dims.size();
    const bool interleaved = spec_.interleave != TmaInterleave::none;
    // Interleave 32B addresses memory in 32-byte units: base and strides align to 32.
    const uint64_t align = spec_.interleave == TmaInterleave::b32 ? 32 : 16;

    // tensorRank: 1..5, and >= 3 with interleave (the driver's layouts need an outer dim).
    if (rank < 1 || rank > kTmaMaxRank)
      fail("verify.tma.rank", "/dims", "rank " + std::to_string(rank) + " is not in 1..5");
    if (interleaved && rank < 3)
      fail("verify.tma.rank", "/dims",
           "rank " + std::to_string(rank) + " with interleave; the driver requires rank >= 3");
    // One entry per dimension (strides: one per dimension above the innermost).
    if (spec_.box.size() != rank)
      fail("verify.tma.box", "/box",
           std::to_string(spec_.box.size()) + " box entries for rank " + std::to_string(rank));
    if (!spec_.element_strides.empty() && spec_.element_strides.size() != rank)
      fail("verify.tma.element_strides", "/element_strides",
           std::to_string(spec_.element_strides.size()) + " entries for rank " +
               std::to_string(rank));
    if (!spec_.strides.empty() && spec_.strides.size() != rank - 1)
      fail("verify.tma.strides", "/strides",
           std::to_string(spec_.strides.size()) + " strides for rank " + std::to_string(rank) +
               " (expected " + std::to_string(rank - 1) + ")");

    // globalDim: each nonzero and <= 2^32.
    for (size_t i = 0; i < rank; ++i)
      if (spec_.dims[i] == 0 || spec_.dims[i] > kTmaMaxDim)
        fail("verify.tma.dims", "/dims/" + std::to_string(i),
             "dim " + std::to_string(spec_.dims[i]) + " is not in 1..2^32");

    // globalAddress: 16-byte aligned (32 with interleave 32B). Buffers are allocated with at
    // least 256-byte alignment, so the element offset decides.
    const auto base = checked_mul(spec_.offset, elem_);
    if (!base) fail("verify.tma.bounds", "/offset", "offset overflows");
    if (*base % align != 0)
      fail("verify.tma.align", "/offset",
           "base offset " + std::to_string(*base) + " bytes is not a multiple of " +
               std::to_string(align));

    // globalStrides: multiples of 16 (32) and < 2^40; derived ones are dense row-major.
    std::vector<uint64_t> strides(rank > 0 ? rank - 1 : 0);
    for (size_t i = 0; i + 1 < rank; ++i) {
      std::string where = "/strides/" + std::to_string(i);
      if (!spec_.strides.empty()) {
        strides[i] = spec_.strides[i];
      } else {
        const auto s = checked_mul(i == 0 ? elem_ : strides[i - 1], spec_.dims[i]);
        if (!s || *s >= kTmaStrideLimit)
          fail("verify.tma.strides", "/dims/" + std::to_string(i),
               "the derived stride of dim " + std::to_string(i + 1) + " is not below 2^40 bytes");
        strides[i] = *s;
        where = "/dims/" + std::to_string(i);
      }
      if (strides[i] % align != 0)
        fail("verify.tma.strides", where,
             "stride of dim " + std::to_string(i + 1) + " = " + std::to_string(strides[i]) +
                 " bytes is not a multiple of " + std::to_string(align) +
                 (spec_.strides.empty() ? " (derived from dims)" : ""));
      if (strides[i] >= kTmaStrideLimit)
        fail("verify.tma.strides", where,
             "stride of dim " + std::to_string(i + 1) + " = " + std::to_string(strides[i]) +
                 " bytes is not below 2^40");
    }

    // boxDim: each 1..256; amk also keeps the box inside the tensor (a larger box only copies
    // fill values and usually means the dims are wrong).
    for (size_t i = 0; i < rank; ++i) {
      const uint32_t b = spec_.box[i];
      if (b < 1 || b > kTmaMaxBox)
        fail("verify.tma.box", "/box/" + std::to_string(i),
             "box " + std::to_string(b) + " is not in 1..256");
      if (b > spec_.dims[i])
        fail("verify.tma.box", "/box/" + std::to_string(i),
             "box " + std::to_string(b) + " exceeds dim " + std::to_string(spec_.dims[i]));
    }
    const uint64_t inner_bytes = uint64_t{spec_.box[0]} * elem_;
    // Without interleave the inner box row must be whole 16-byte units.
    if (!interleaved && inner_bytes % 16 != 0)
      fail("verify.tma.box", "/box/0",
           "inner box " + std::to_string(spec_.box[0]) + " x " + std::to_string(elem_) + " = " +
               std::to_string(inner_bytes) + " bytes is not a multiple of 16");

    // elementStrides: each 1..8.
    for (size_t i = 0; i < spec_.element_strides.size(); ++i) {
      const uint32_t e = spec_.element_strides[i];
      if (e < 1 || e > kTmaMaxElementStride)
        fail("verify.tma.element_strides", "/element_strides/" + std::to_string(i),
             "element stride " + std::to_string(e) + " is not in 1..8");
    }

    // swizzle: with interleave none the inner box row must fit the swizzle span (32/64/128 B);
    // with interleave 32B the only legal swizzle is 32B.
    if (spec_.interleave == TmaInterleave::b32 && spec_.swizzle != TmaSwizzle::b32)
      fail("verify.tma.swizzle", "/swizzle", "interleave 32B requires swizzle 32B");
    if (!interleaved && spec_.swizzle != TmaSwizzle::none) {
      const uint64_t span = spec_.swizzle == TmaSwizzle::b32   ? 32
                            : spec_.swizzle == TmaSwizzle::b64 ? 64
                                                               : 128;
      if (inner_bytes > span)
        fail("verify.tma.swizzle", "/swizzle",
             "inner box row of " + std::to_string(inner_bytes) + " bytes exceeds the " +
                 std::to_string(span) + "-byte swizzle span");
    }

    // oobFill NaN is only defined for floating-point data.
    if (spec_.oob_fill == TmaOobFill::nan && !dtype_is_float(buffer.dtype))
      fail("verify.tma.oob_fill", "/oob_fill",
           "NaN fill needs a float dtype, buffer '" + buffer.name + "' is " +
               std::string(dtype_name(buffer.dtype)));

    // The footprint must stay inside the buffer: the encode call cannot know the allocation,
    // and TMA reads whatever memory the descriptor describes.
    auto end = checked_mul(spec_.dims[0], elem_);
    for (size_t i = 1; i < rank && end; ++i) {
      const auto span = checked_mul(spec_.dims[i] - 1, strides[i - 1]);
      end = span ? checked_add(*end, *span) : std::nullopt;
    }
    if (end) end = checked_add(*end, *base);
    if (!end || *end > buffer.bytes())
      fail("verify.tma.bounds", "",
           "the tensor reaches byte " + (end ? std::to_string(*end) : std::string("> 2^64")) +
               " of buffer '" + buffer.name + "' (" + std::to_string(buffer.bytes()) + " bytes)");
  }

private:
  [[noreturn]] void fail(std::string code, const std::string& suffix, const std::string& msg) {
    std::string label = "tma " + std::to_string(index_);
    if (!spec_.name.empty()) label += " '" + spec_.name + "'";
    throw_program_error(std::move(code), "/tma/" + std::to_string(index_) + suffix,
                        label + ": " + msg);
  }

  const Program& program_;
  uint32_t index_;
  const TmaSpec& spec_;
  uint64_t elem_ = 1;
};

}  // namespace

void check_tma(const Program& program, uint32_t index) {
  if (index >= program.tma.size())
    throw_program_error("verify.tma", "/tma/" + std::to_string(index), "no such TMA spec");
  TmaChecker(program, index).run();
}

}  // namespace amk
