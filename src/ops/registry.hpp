// The op registry: the signature of every built-in op (operand slots, their access and dtypes,
// and the scalar params). Op ids are part of the binary format and the device ABI: never
// renumber. Shape rules live with the verifier (verify/op_rules.cpp), CPU implementations with
// the CPU backend (backend/cpu_ops.cpp), device code under kernels/.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "program/program.hpp"

namespace amk {

enum class OpId : uint16_t {
  nop = 0,        // waits and signals only
  copy = 1,
  fill = 2,
  add = 3,
  mul = 4,
  scale = 5,
  silu_mul = 6,
  rmsnorm = 7,
  softmax = 8,
  gemv = 9,
  argmax = 10,
  embedding = 11,
  rope = 12,               // rotary position embedding (Llama 3 frequency scaling)
  kv_append = 13,          // one position of every kv head into a layer's cache
  attention_decode = 14,   // one kv head, a chunk of positions, its group of query heads
  attention_combine = 15,  // merges attention_decode partials across chunks
  gemv_splitk = 16,        // a K range of a gemv, added into y with atomics
  attention_combine_splitk = 17,  // attention_combine of some query heads, then their gemv_splitk
  gemv_t = 18,             // x^T w for w stored K rows of N (a transposed gemv), added into y with atomics
};
inline constexpr uint16_t kCustomOpBase = 1000;  // custom op k has id kCustomOpBase + k
// attention_combine_splitk stages its x (count * head_dim floats) in shared memory: the verifier
// refuses more, codegen sizes the kernel's array with it (AMK_COMBINE_SPLITK_MAX_K).
inline constexpr uint64_t kCombineSplitkMaxK = 1024;
// gemv's K: extent(x), or where the gemv merges attention partials (param head_dim != 0, the
// o_proj of `amk gen llama --combine oproj`) heads * head_dim, x then holding chunk-major
// attention_decode partials of `heads` query heads (rows of head_dim + 2 floats).
[[nodiscard]] constexpr uint64_t gemv_k(uint64_t x_extent, uint32_t combine_hd, uint32_t heads) {
  return combine_hd == 0 ? x_extent : uint64_t{heads} * combine_hd;
}
// Chunks a merging gemv may read per head (the device merges them in one pass of registers).
inline constexpr uint32_t kGemvCombineMaxChunks = 64;

// accumulate: the op adds into the elements with atomics. Accumulations into the same elements
// commute, so they need no order among themselves, only against reads and writes.
enum class Access : uint8_t { read, write, read_write, accumulate };
// counter: a counter of the program, by name in JSON (its index in the binary form);
// kNoCounter (the default) means none.
enum class ParamType : uint8_t { f32, u32, i32, counter };
inline constexpr uint32_t kNoCounter = 0xFFFFFFFFu;

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

// Name of an op id within a program (built-in or custom); "op#<id>" if unknown.
[[nodiscard]] std::string op_name(const Program& program, uint16_t id);

// Encodes a param value for the instruction's raw words; nullopt if out of range for the type.
[[nodiscard]] std::optional<uint32_t> encode_param(ParamType type, double value) noexcept;
[[nodiscard]] double decode_param(ParamType type, uint32_t word) noexcept;

}  // namespace amk
