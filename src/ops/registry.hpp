// The op registry: the signature of every built-in op (operand slots, their access and dtypes,
// and the scalar params), and the retired ops whose ids stay reserved. Op ids are part of the
// binary format and the device ABI (amk_op in kernels/amk_abi.h): never renumber. Shape rules
// live with the verifier (verify/op_rules.cpp), CPU implementations with the CPU backend
// (backend/cpu_ops.cpp), device code under kernels/.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "amk_abi.h"
#include "program/program.hpp"

namespace amk {

// Op ids come from the ABI header (one list for device code, registry, CPU backend, verifier and
// codegen); custom op k has id kCustomOpBase + k.
using OpId = amk_op;
inline constexpr uint16_t kCustomOpBase = AMK_CUSTOM_OP_BASE;
static_assert(AMK_OP_ID_END <= AMK_CUSTOM_OP_BASE, "built-in op ids run into custom op ids");

// gemv's K: extent(x), or where the gemv merges attention partials (param head_dim != 0, the
// o_proj of `amk gen llama --combine oproj`) heads * head_dim, x then holding chunk-major
// attention_decode partials of `heads` query heads (rows of head_dim + 2 floats).
[[nodiscard]] constexpr uint64_t gemv_k(uint64_t x_extent, uint32_t combine_hd, uint32_t heads) {
  return combine_hd == 0 ? x_extent : uint64_t{heads} * combine_hd;
}
// Chunks a merging gemv may read per head (the device merges them in one pass of registers).
inline constexpr uint32_t kGemvCombineMaxChunks = 64;

enum class Access : uint8_t { read, write, read_write };
enum class ParamType : uint8_t { f32, u32, i32 };

// Bit set of DType values.
using DTypeSet = uint32_t;
[[nodiscard]] constexpr DTypeSet dtype_bit(DType t) { return 1u << static_cast<unsigned>(t); }
inline constexpr DTypeSet kFloatTypes =
    dtype_bit(DType::f32) | dtype_bit(DType::f16) | dtype_bit(DType::bf16);
inline constexpr DTypeSet kIndexTypes =
    dtype_bit(DType::i32) | dtype_bit(DType::u32) | dtype_bit(DType::i64);
inline constexpr DTypeSet kAnyType = (1u << AMK_DTYPE_COUNT) - 1;

struct OperandSig {
  std::string_view name;
  Access access;
  DTypeSet dtypes;
  bool optional = false;
};

struct ParamSig {
  std::string_view name;
  ParamType type;
  std::optional<double> default_value;  // nullopt: required
  // Left out of written JSON while at its default (params added to an op later, so that programs
  // not using them are written as before).
  bool omit_default = false;
};

struct OpSig {
  OpId id;
  std::string_view name;
  std::string_view summary;
  std::span<const OperandSig> operands;
  std::span<const ParamSig> params;
};

// All built-in ops, in id order.
[[nodiscard]] std::span<const OpSig> builtin_ops() noexcept;
[[nodiscard]] const OpSig* find_op(std::string_view name) noexcept;
[[nodiscard]] const OpSig* find_op(uint16_t id) noexcept;

// A built-in op that was removed because it measured slower than the default layout. Its id and
// name stay reserved: a program that uses either is refused with op.retired.
struct RetiredOp {
  uint16_t id;
  std::string_view name;
  std::string_view instead;  // what a program uses in its place
};
[[nodiscard]] std::span<const RetiredOp> retired_ops() noexcept;
[[nodiscard]] const RetiredOp* find_retired_op(std::string_view name) noexcept;
[[nodiscard]] const RetiredOp* find_retired_op(uint16_t id) noexcept;
// The message of the op.retired error for `op`.
[[nodiscard]] std::string retired_op_message(const RetiredOp& op);

// Name of an op id within a program (built-in or custom); "op#<id>" if unknown.
[[nodiscard]] std::string op_name(const Program& program, uint16_t id);

// Encodes a param value for the instruction's raw words; nullopt if out of range for the type.
[[nodiscard]] std::optional<uint32_t> encode_param(ParamType type, double value) noexcept;
[[nodiscard]] double decode_param(ParamType type, uint32_t word) noexcept;

}  // namespace amk
