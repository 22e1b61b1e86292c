#include "ops/registry.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <string>

namespace amk {
namespace {

constexpr DTypeSet kF = kFloatTypes;

constexpr OperandSig kCopyOperands[] = {{"x", Access::read, kAnyType},
                                        {"y", Access::write, kAnyType}};
constexpr OperandSig kFillOperands[] = {{"y", Access::write, kAnyType}};
constexpr ParamSig kFillParams[] = {{"value", ParamType::f32, std::nullopt}};
constexpr OperandSig kBinaryOperands[] = {
    {"a", Access::read, kF}, {"b", Access::read, kF}, {"y", Access::write, kF}};
constexpr OperandSig kUnaryOperands[] = {{"x", Access::read, kF}, {"y", Access::write, kF}};
constexpr ParamSig kScaleParams[] = {{"alpha", ParamType::f32, std::nullopt}};
constexpr OperandSig kSiluMulOperands[] = {
    {"gate", Access::read, kF}, {"up", Access::read, kF}, {"y", Access::write, kF}};
constexpr OperandSig kRmsnormOperands[] = {
    {"x", Access::read, kF}, {"weight", Access::read, kF}, {"y", Access::write, kF}};
constexpr ParamSig kRmsnormParams[] = {{"eps", ParamType::f32, 1e-5}};
constexpr ParamSig kSoftmaxParams[] = {{"cols", ParamType::u32, 0.0},
                                       {"scale", ParamType::f32, 1.0}};
constexpr OperandSig kGemvOperands[] = {
    {"w", Access::read, kF},          {"x", Access::read, kF},
    {"y", Access::write, kF},         {"residual", Access::read, kF, true},
    {"norm", Access::read, kF, true}, {"w2", Access::read, kF, true}};
// head_dim / heads (0: off): x is attention_decode partials merged into x' first (gemv_k).
constexpr ParamSig kGemvParams[] = {{"eps", ParamType::f32, 1e-5},
                                    {"head_dim", ParamType::u32, 0.0, true},
                                    {"heads", ParamType::u32, 0.0, true}};
constexpr OperandSig kArgmaxOperands[] = {{"x", Access::read, kF},
                                          {"index", Access::write, kIndexTypes},
                                          {"value", Access::write, kF, true},
                                          {"index_map", Access::read, kIndexTypes, true}};
constexpr ParamSig kArgmaxParams[] = {{"base", ParamType::u32, 0.0}};
constexpr OperandSig kEmbeddingOperands[] = {
    {"table", Access::read, kF}, {"ids", Access::read, kIndexTypes}, {"y", Access::write, kF}};

constexpr DTypeSet kF32 = dtype_bit(DType::f32);
// The position operand (rope, kv_append, attention_decode): one u32 or i32 element, read when
// the op runs; the op's position is that value + pass - 1 (pass counted from 1), in place of the
// `position` param.
constexpr DTypeSet kPositionTypes = dtype_bit(DType::u32) | dtype_bit(DType::i32);
constexpr OperandSig kRopeOperands[] = {{"x", Access::read, kF},
                                        {"y", Access::write, kF},
                                        {"position", Access::read, kPositionTypes, true}};
constexpr ParamSig kRopeParams[] = {{"head_dim", ParamType::u32, std::nullopt},
                                    {"position", ParamType::u32, 0.0},
                                    {"theta", ParamType::f32, 500000.0},
                                    {"scaling_factor", ParamType::f32, 32.0},
                                    {"low_freq_factor", ParamType::f32, 1.0},
                                    {"high_freq_factor", ParamType::f32, 4.0},
                                    {"original_max_position", ParamType::u32, 8192.0}};
constexpr OperandSig kKvAppendOperands[] = {{"x", Access::read, kF},
                                            {"cache", Access::write, kF},
                                            {"position", Access::read, kPositionTypes, true}};
// theta != 0 rotates each head with RoPE at the position first (the rope op's params).
constexpr ParamSig kKvAppendParams[] = {{"head_dim", ParamType::u32, std::nullopt},
                                        {"position", ParamType::u32, 0.0},
                                        {"max_len", ParamType::u32, std::nullopt},
                                        {"theta", ParamType::f32, 0.0, true},
                                        {"scaling_factor", ParamType::f32, 32.0, true},
                                        {"low_freq_factor", ParamType::f32, 1.0, true},
                                        {"high_freq_factor", ParamType::f32, 4.0, true},
                                        {"original_max_position", ParamType::u32, 8192.0, true}};
constexpr OperandSig kAttentionDecodeOperands[] = {
    {"q", Access::read, kF},
    {"k", Access::read, kF},
    {"v", Access::read, kF},
    {"out", Access::write, kF32},
    {"k_new", Access::read, kF, true},
    {"v_new", Access::read, kF, true},
    {"position", Access::read, kPositionTypes, true}};
// The RoPE params: the rope op's names, meaning and order (here theta 0 = no rotation).
constexpr ParamSig kAttentionDecodeParams[] = {
    {"head_dim", ParamType::u32, std::nullopt}, {"scale", ParamType::f32, 0.0},
    {"position", ParamType::u32, 0.0},          {"theta", ParamType::f32, 0.0},
    {"scaling_factor", ParamType::f32, 32.0},   {"low_freq_factor", ParamType::f32, 1.0},
    {"high_freq_factor", ParamType::f32, 4.0},  {"original_max_position", ParamType::u32, 8192.0},
    {"start", ParamType::u32, 0.0, true}};
constexpr OperandSig kAttentionCombineOperands[] = {{"partials", Access::read, kF32},
                                                    {"out", Access::write, kF}};
constexpr ParamSig kAttentionCombineParams[] = {{"head_dim", ParamType::u32, std::nullopt},
                                                {"kv_heads", ParamType::u32, 1.0}};

constexpr OperandSig kFeedTokenOperands[] = {
    {"index", Access::read, kIndexTypes},    {"prompt", Access::read, kIndexTypes},
    {"token", Access::write, kIndexTypes},   {"ids", Access::write, kIndexTypes, true},
    {"logits", Access::read, kF32, true},    {"all_logits", Access::write, kF32, true},
    {"eos", Access::read, kIndexTypes, true}};

constexpr OperandSig kAllReduceOperands[] = {{"x", Access::read_write, kF32}};
constexpr OperandSig kSendOperands[] = {{"x", Access::read, kAnyType}};
constexpr OperandSig kRecvOperands[] = {{"y", Access::write, kAnyType}};
constexpr ParamSig kPeerParams[] = {{"peer", ParamType::u32, std::nullopt}};

constexpr std::array<OpSig, 20> kOps = {{
    {OpId::nop, "nop", "no data; waits and signals only", {}, {}},
    {OpId::copy,
     "copy",
     "y = x (float types convert; integer types must match)",
     kCopyOperands,
     {}},
    {OpId::fill, "fill", "y = value", kFillOperands, kFillParams},
    {OpId::add, "add", "y = a + b", kBinaryOperands, {}},
    {OpId::mul, "mul", "y = a * b", kBinaryOperands, {}},
    {OpId::scale, "scale", "y = alpha * x", kUnaryOperands, kScaleParams},
    {OpId::silu_mul, "silu_mul", "y = silu(gate) * up", kSiluMulOperands, {}},
    {OpId::rmsnorm, "rmsnorm", "rows of extent(weight): y = x / sqrt(mean(x^2) + eps) * weight",
     kRmsnormOperands, kRmsnormParams},
    {OpId::softmax, "softmax", "row-wise softmax(scale * x) over rows of `cols` (0: whole extent)",
     kUnaryOperands, kSoftmaxParams},
    {OpId::gemv, "gemv",
     "y[r] = v[r] (+ residual[r]), v[r] = a[r] = sum_k w[r, k] * x'[k], or with w2 v[r] = "
     "silu(a[r]) * sum_k w2[r, k] * x'[k]; x' = x, or with norm x' = x / sqrt(mean(x^2) + eps) "
     "* norm (rmsnorm fused), or with head_dim != 0 x' = attention_combine of x (f32 chunk-major "
     "attention_decode partials of `heads` query heads); rows = extent(w) / K, K = extent(x) "
     "(merged: heads * head_dim), f32 accumulate",
     kGemvOperands, kGemvParams},
    {OpId::argmax, "argmax",
     "i = first position of the maximum of x (NaN never wins; none: 0); index = base + i, or "
     "base + index_map[i] with index_map; value = x[i] (NaN when none). A split argmax: slices "
     "with base = their offset write (index, value) pairs, then one argmax over the values with "
     "the indices as index_map",
     kArgmaxOperands, kArgmaxParams},
    {OpId::embedding,
     "embedding",
     "y[i, :] = table[ids[i], :], dim = extent(y) / extent(ids)",
     kEmbeddingOperands,
     {}},
    {OpId::rope, "rope",
     "rotary embedding of each head of head_dim in x at `position` (HF rotate_half pairs i, "
     "i + head_dim/2; inv_freq theta^(-2i/head_dim) with Llama 3 scaling unless "
     "scaling_factor = 0; angles in double); with the position operand at position[0] + "
     "pass - 1",
     kRopeOperands, kRopeParams},
    {OpId::kv_append, "kv_append",
     "cache[h, position, :] = x[h*head_dim : (h+1)*head_dim] for each kv head h (rotated like "
     "rope when theta != 0); cache is [extent(x)/head_dim, max_len, head_dim]; with the "
     "position operand at position[0] + pass - 1 (a position past max_len stops the launch)",
     kKvAppendOperands, kKvAppendParams},
    {OpId::attention_decode, "attention_decode",
     "one kv head, one chunk of positions: per query head g of q, out[g] = (softmax-weighted "
     "sum of v rows normalized in the chunk [head_dim], max score m, sum exp(s - m)); "
     "s = scale * q_g . k_t, scale 0: 1/sqrt(head_dim); theta != 0 rotates q and k_new like "
     "rope at `position`; (k_new, v_new), both or neither, is one more position after the "
     "cached rows (k, v may then be empty). With the position operand (P = position[0] + "
     "pass - 1), k and v hold the cache rows from `start` on: the op attends those below P, "
     "and (k_new, v_new) when start <= P < start + rows",
     kAttentionDecodeOperands, kAttentionDecodeParams},
    {OpId::attention_combine, "attention_combine",
     "out[g] = sum_c l_c exp(m_c - M) o_c / sum_c l_c exp(m_c - M) over the chunk-major "
     "attention_decode partials, M = max_c m_c; partials holds kv_heads kv heads' chunks back "
     "to back, out their query heads in the same order",
     kAttentionCombineOperands, kAttentionCombineParams},
    {OpId::feed_token,
     "feed_token",
     "step s = pass - 1 of a generation: t = prompt[s + 1] while s + 1 < extent(prompt), else "
     "index[0]; token[0] = t; ids[s + 1 - extent(prompt)] = t once past the prompt; "
     "all_logits[s * extent(logits) + i] = logits[i] (the step's logits) where they fit; a "
     "generated t equal to eos[0] ends the launch after the next pass, which writes nothing",
     kFeedTokenOperands,
     {}},
    {OpId::all_reduce,
     "all_reduce",
     "x = the sum over every rank of that rank's x (f32, added in rank order); each rank waits "
     "until every rank has reached it",
     kAllReduceOperands,
     {}},
    {OpId::send, "send",
     "x into the y of rank `peer`'s matching recv (the k-th send to a rank meets that rank's "
     "k-th recv from this one, in instruction order); done when the copy is",
     kSendOperands, kPeerParams},
    {OpId::recv, "recv",
     "y = the x of rank `peer`'s matching send (same extent and dtype); waits for that send",
     kRecvOperands, kPeerParams},
}};

constexpr RetiredOp kRetiredOps[] = {
    {16, "gemv_splitk", "gemv"},
    {17, "attention_combine_splitk", "attention_combine, then gemv"},
    {18, "gemv_t", "gemv"},
};

// builtin_ops() promises id order, and every id below AMK_OP_ID_END is either a built-in op or a
// retired one, so a new op takes the next free id instead of reusing a retired one.
constexpr bool ids_cover_the_range() {
  size_t op = 0, retired = 0;
  for (size_t id = 0; id < AMK_OP_ID_END; ++id) {
    if (op < kOps.size() && static_cast<size_t>(kOps[op].id) == id)
      ++op;
    else if (retired < std::size(kRetiredOps) && kRetiredOps[retired].id == id)
      ++retired;
    else
      return false;
  }
  return op == kOps.size() && retired == std::size(kRetiredOps);
}
static_assert(ids_cover_the_range(),
              "op ids: the built-in ops, then the retired ones, up to AMK_OP_ID_END");

}  // namespace

std::span<const OpSig> builtin_ops() noexcept { return kOps; }

const OpSig* find_op(std::string_view name) noexcept {
  for (const auto& op : kOps)
    if (op.name == name) return &op;
  return nullptr;
}

const OpSig* find_op(uint16_t id) noexcept {
  for (const auto& op : kOps)
    if (static_cast<uint16_t>(op.id) == id) return &op;
  return nullptr;
}

std::span<const RetiredOp> retired_ops() noexcept { return kRetiredOps; }

const RetiredOp* find_retired_op(std::string_view name) noexcept {
  for (const auto& op : kRetiredOps)
    if (op.name == name) return &op;
  return nullptr;
}

const RetiredOp* find_retired_op(uint16_t id) noexcept {
  for (const auto& op : kRetiredOps)
    if (op.id == id) return &op;
  return nullptr;
}

std::string retired_op_message(const RetiredOp& op) {
  return "op " + std::string(op.name) + " (id " + std::to_string(op.id) +
         ") was removed because it measured slower than the default layout; use " +
         std::string(op.instead) + " instead";
}

std::string op_name(const Program& program, uint16_t id) {
  if (const OpSig* sig = find_op(id)) return std::string(sig->name);
  if (id >= kCustomOpBase && static_cast<size_t>(id - kCustomOpBase) < program.custom_ops.size())
    return program.custom_ops[id - kCustomOpBase].name;
  return "op#" + std::to_string(id);
}

std::optional<uint32_t> encode_param(ParamType type, double value) noexcept {
  switch (type) {
    case ParamType::f32: {
      if (std::isnan(value)) return f32_bits(std::nanf(""));
      if (std::isfinite(value) && std::fabs(value) > 3.4028234663852886e38) return std::nullopt;
      return f32_bits(static_cast<float>(value));
    }
    case ParamType::u32:
      if (!(value >= 0.0 && value <= 4294967295.0) || value != std::floor(value))
        return std::nullopt;
      return static_cast<uint32_t>(value);
    case ParamType::i32:
      if (!(value >= -2147483648.0 && value <= 2147483647.0) || value != std::floor(value))
        return std::nullopt;
      return static_cast<uint32_t>(static_cast<int32_t>(value));
  }
  return std::nullopt;
}

double decode_param(ParamType type, uint32_t word) noexcept {
  switch (type) {
    case ParamType::f32: return bits_f32(word);
    case ParamType::u32: return word;
    case ParamType::i32: return static_cast<int32_t>(word);
  }
  return 0.0;
}

}  // namespace amk
