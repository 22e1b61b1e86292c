// Per-instruction checks: operands against the op's signature (slots, dtypes, bounds) and the
// shape rules each built-in op relies on at run time. The device code trusts all of these.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/detail.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

// One operand slot as the checks see it (built-in or custom op).
struct Slot {
  std::string_view name;
  DTypeSet dtypes;
  bool optional;
};

// attention_decode holds one head_dim slice per lane group in registers (amk_ops_attention.cuh).
constexpr uint32_t kMaxAttentionHeadDim = 256;

std::string instr_where(uint32_t index) { return "/instructions/" + std::to_string(index); }

class InstructionChecker {
public:
  InstructionChecker(const Program& program, uint32_t index)
      : program_(program), index_(index), ins_(program.instructions[index]) {}

  void run() {
    resolve_op();
    check_capacities();
    check_operands();
    check_params();
    check_sync();
    if (sig_ != nullptr) check_shapes();
  }

private:
  [[noreturn]] void fail(std::string code, const std::string& suffix, const std::string& msg) {
    std::string label = "instruction " + std::to_string(index_);
    if (!ins_.name.empty()) label += " '" + ins_.name + "'";
    if (!op_label_.empty()) label += " (" + std::string(op_label_) + ")";
    throw_program_error(std::move(code), instr_where(index_) + suffix, label + ": " + msg);
  }

  std::string operand_where(size_t slot) const {
    return "/operands/" + std::string(slots_[slot].name);
  }

  void resolve_op() {
    sig_ = find_op(ins_.op);
    if (sig_ != nullptr) {
      op_label_ = sig_->name;
      for (const OperandSig& o : sig_->operands) add_slot({o.name, o.dtypes, o.optional});
      n_params_ = sig_->params.size();
      return;
    }
    if (ins_.op >= kCustomOpBase &&
        static_cast<size_t>(ins_.op - kCustomOpBase) < program_.custom_ops.size()) {
      const CustomOp& custom = program_.custom_ops[ins_.op - kCustomOpBase];
      op_label_ = custom.name;
      // Custom ops declare slot names only: every slot is required, any dtype.
      for (const std::string& name : custom.operands) add_slot({name, kAnyType, false});
      n_params_ = custom.params.size();
      return;
    }
    if (const RetiredOp* retired = find_retired_op(ins_.op))
      fail("op.retired", "/op", retired_op_message(*retired));
    fail("verify.op", "/op", "unknown op id " + std::to_string(ins_.op));
  }

  // The ABI has fixed room per instruction; the loader enforces it too, but the planner
  // copies into fixed arrays, so a hand-built program must not get past here.
  void add_slot(const Slot& slot) {
    if (n_slots_ == AMK_MAX_OPERANDS)
      fail("verify.capacity", "/operands",
           "op has more operand slots than the ABI's " + std::to_string(AMK_MAX_OPERANDS));
    slots_[n_slots_++] = slot;
  }

  void check_capacities() {
    if (ins_.waits.size() > AMK_MAX_WAITS)
      fail("verify.capacity", "/waits",
           std::to_string(ins_.waits.size()) + " waits, at most " + std::to_string(AMK_MAX_WAITS));
    if (ins_.signals.size() > AMK_MAX_SIGNALS)
      fail("verify.capacity", "/signals",
           std::to_string(ins_.signals.size()) + " signals, at most " +
               std::to_string(AMK_MAX_SIGNALS));
    if (n_params_ > AMK_MAX_PARAMS || ins_.params.size() > AMK_MAX_PARAMS)
      fail("verify.capacity", "/params", "more than " + std::to_string(AMK_MAX_PARAMS) + " params");
  }

  void check_operands() {
    if (ins_.operands.size() != n_slots_)
      fail("verify.operand.count", "/operands",
           "has " + std::to_string(ins_.operands.size()) + " operands, the op has " +
               std::to_string(n_slots_) + " slots");
    for (size_t s = 0; s < n_slots_; ++s) {
      const Operand& o = ins_.operands[s];
      const std::string slot_name(slots_[s].name);
      if (o.buffer == AMK_NO_BUFFER) {
        if (!slots_[s].optional)
          fail("verify.operand.missing", operand_where(s),
               "required operand '" + slot_name + "' is missing");
        continue;
      }
      if (o.buffer >= program_.buffers.size())
        fail("verify.operand.buffer", operand_where(s) + "/buffer",
             "operand '" + slot_name + "' names buffer " + std::to_string(o.buffer) + " of " +
                 std::to_string(program_.buffers.size()));
      const Buffer& b = program_.buffers[o.buffer];
      if ((slots_[s].dtypes & dtype_bit(b.dtype)) == 0)
        fail("verify.dtype", operand_where(s),
             "operand '" + slot_name + "' cannot be " + std::string(dtype_name(b.dtype)) +
                 " (buffer '" + b.name + "')");
      if (o.extent == 0 && !may_be_empty(s))
        fail("verify.operand.extent", operand_where(s) + "/extent",
             "operand '" + slot_name + "' has extent 0");
      if (o.extent > UINT32_MAX)
        fail("verify.operand.extent", operand_where(s) + "/extent",
             "operand '" + slot_name + "' extent " + std::to_string(o.extent) +
                 " exceeds the ABI's 32-bit extent");
      const auto end = checked_add(o.offset, o.extent);
      if (!end || *end > b.elements())
        fail("verify.operand.bounds", operand_where(s),
             "operand '" + slot_name + "' elements [" + std::to_string(o.offset) + ", +" +
                 std::to_string(o.extent) + ") lie outside buffer '" + b.name + "' (" +
                 std::to_string(b.elements()) + " elements)");
    }
  }

  // attention_decode's k and v may be empty when the chunk is only the new token (k_new); the
  // shape rules check that k_new is then present.
  bool may_be_empty(size_t slot) const {
    return sig_ != nullptr && sig_->id == OpId::attention_decode && (slot == 1 || slot == 2);
  }

  void check_params() {
    if (ins_.params.size() != n_params_)
      fail("verify.params.count", "/params",
           "has " + std::to_string(ins_.params.size()) + " params, the op takes " +
               std::to_string(n_params_));
  }

  void check_sync() {
    const size_t n_counters = program_.counters.size();
    for (size_t w = 0; w < ins_.waits.size(); ++w) {
      const Wait& wait = ins_.waits[w];
      const std::string at = "/waits/" + std::to_string(w);
      if (wait.counter >= n_counters)
        fail("verify.counter", at + "/counter",
             "waits on counter " + std::to_string(wait.counter) + " of " +
                 std::to_string(n_counters));
      // A wait for >= 0 always holds: almost certainly a mistake, and it orders nothing.
      if (wait.value == 0) fail("verify.wait.value", at + "/value", "wait value must be > 0");
    }
    for (size_t g = 0; g < ins_.signals.size(); ++g) {
      const Signal& signal = ins_.signals[g];
      const std::string at = "/signals/" + std::to_string(g);
      if (signal.counter >= n_counters)
        fail("verify.counter", at + "/counter",
             "signals counter " + std::to_string(signal.counter) + " of " +
                 std::to_string(n_counters));
      if (signal.add == 0) fail("verify.signal.add", at + "/add", "signal add must be > 0");
    }
  }

  uint64_t extent(size_t slot) const { return ins_.operands[slot].extent; }
  bool present(size_t slot) const { return ins_.operands[slot].buffer != AMK_NO_BUFFER; }
  DType dtype(size_t slot) const { return program_.buffers[ins_.operands[slot].buffer].dtype; }

  void require_equal_extent(size_t slot, size_t ref) {
    if (extent(slot) != extent(ref))
      fail("verify.shape", operand_where(slot),
           "extent(" + std::string(slots_[slot].name) + ") = " + std::to_string(extent(slot)) +
               " must equal extent(" + std::string(slots_[ref].name) +
               ") = " + std::to_string(extent(ref)));
  }

  // Shape rules of the built-in ops: what each kernel assumes about its operands.
  void check_shapes() {
    // The position operand (rope, kv_append, attention_decode): one u32 or i32 scalar (the dtype
    // is the slot's); its bounds are check_position_bounds'.
    if (const uint32_t slot = detail::position_slot(ins_); slot != detail::kNoIndex)
      if (extent(slot) != 1)
        fail("verify.shape", operand_where(slot),
             "extent(position) = " + std::to_string(extent(slot)) + " must be 1");
    switch (sig_->id) {
      case OpId::nop:
      case OpId::fill:
      case OpId::all_reduce:  // (the comm ops' rules across ranks: check_ranks)
      case OpId::send:
      case OpId::recv: break;
      case OpId::copy: {  // x, y
        require_equal_extent(1, 0);
        const DType x = dtype(0), y = dtype(1);
        if (x != y && !(dtype_is_float(x) && dtype_is_float(y)))
          fail("verify.dtype", operand_where(1),
               "copy converts only between float types; x is " + std::string(dtype_name(x)) +
                   ", y is " + std::string(dtype_name(y)));
        break;
      }
      case OpId::add:
      case OpId::mul:
      case OpId::silu_mul:  // a/gate, b/up, y
        require_equal_extent(1, 0);
        require_equal_extent(2, 0);
        break;
      case OpId::scale: require_equal_extent(1, 0); break;
      case OpId::rmsnorm: {  // x, weight, y: rows of extent(weight)
        if (extent(0) % extent(1) != 0)
          fail("verify.shape", operand_where(1),
               "extent(x) = " + std::to_string(extent(0)) +
                   " is not a multiple of extent(weight) = " + std::to_string(extent(1)));
        require_equal_extent(2, 0);
        break;
      }
      case OpId::softmax: {  // x, y; params cols, scale
        const uint32_t cols = ins_.params[0];
        if (cols != 0 && extent(0) % cols != 0)
          fail("verify.shape", "/params/cols",
               "cols = " + std::to_string(cols) +
                   " does not divide extent(x) = " + std::to_string(extent(0)));
        require_equal_extent(1, 0);
        break;
      }
      case OpId::gemv: {  // w, x, y, residual?, norm?, w2?; eps, head_dim, heads
        const uint32_t combine_hd = ins_.params[1], heads = ins_.params[2];
        if (combine_hd != 0) require_gemv_combine(combine_hd, heads);
        const uint64_t k = gemv_k(extent(1), combine_hd, heads);
        if (extent(0) % k != 0)
          fail("verify.shape", operand_where(0),
               "extent(w) = " + std::to_string(extent(0)) +
                   " is not a multiple of K = extent(x) = " + std::to_string(k));
        // w must be a range of whole rows of a row-major [rows_total, K] matrix.
        if (ins_.operands[0].offset % k != 0)
          fail("verify.shape", operand_where(0) + "/offset",
               "offset(w) = " + std::to_string(ins_.operands[0].offset) +
                   " is not a multiple of K = " + std::to_string(k) + " (w must be a row range)");
        const uint64_t rows = extent(0) / k;
        if (extent(2) != rows)
          fail("verify.shape", operand_where(2),
               "extent(y) = " + std::to_string(extent(2)) +
                   " must equal rows = extent(w) / K = " + std::to_string(rows));
        if (present(3) && extent(3) != rows)
          fail("verify.shape", operand_where(3),
               "extent(residual) = " + std::to_string(extent(3)) +
                   " must equal rows = " + std::to_string(rows));
        if (present(4)) {  // fused rmsnorm of x: one weight per column
          if (extent(4) != k)
            fail("verify.shape", operand_where(4),
                 "extent(norm) = " + std::to_string(extent(4)) +
                     " must equal K = extent(x) = " + std::to_string(k));
          const float eps = param_f32(0);
          if (!(std::isfinite(eps) && eps > 0.0f))
            fail("verify.param", "/params/eps", "eps must be finite and > 0 when norm is present");
        }
        if (present(5)) {  // GLU: w2 is the same row range of a second matrix, read alike
          if (extent(5) != extent(0))
            fail("verify.shape", operand_where(5),
                 "extent(w2) = " + std::to_string(extent(5)) +
                     " must equal extent(w) = " + std::to_string(extent(0)));
          if (ins_.operands[5].offset % k != 0)
            fail("verify.shape", operand_where(5) + "/offset",
                 "offset(w2) = " + std::to_string(ins_.operands[5].offset) +
                     " is not a multiple of K = " + std::to_string(k) +
                     " (w2 must be a row range)");
          if (dtype(5) != dtype(0))
            fail("verify.dtype", operand_where(5),
                 "dtype(w2) = " + std::string(dtype_name(dtype(5))) +
                     " must equal dtype(w) = " + std::string(dtype_name(dtype(0))));
        }
        break;
      }
      case OpId::argmax:  // x, index, value?, index_map?
        if (extent(1) != 1)
          fail("verify.shape", operand_where(1),
               "extent(index) = " + std::to_string(extent(1)) + " must be 1");
        if (present(2) && extent(2) != 1)
          fail("verify.shape", operand_where(2),
               "extent(value) = " + std::to_string(extent(2)) + " must be 1");
        if (present(3) && extent(3) != extent(0))
          fail("verify.shape", operand_where(3),
               "extent(index_map) = " + std::to_string(extent(3)) +
                   " must equal extent(x) = " + std::to_string(extent(0)));
        break;
      case OpId::embedding: {  // table, ids, y
        if (extent(2) % extent(1) != 0)
          fail("verify.shape", operand_where(2),
               "extent(y) = " + std::to_string(extent(2)) +
                   " is not a multiple of extent(ids) = " + std::to_string(extent(1)));
        const uint64_t dim = extent(2) / extent(1);
        if (extent(0) % dim != 0)
          fail("verify.shape", operand_where(0),
               "extent(table) = " + std::to_string(extent(0)) +
                   " is not a multiple of the row size D = " + std::to_string(dim));
        break;
      }
      case OpId::rope: {  // x, y; head_dim, position, theta, scaling_factor, low, high, orig
        const uint32_t hd = require_head_dim(true);
        if (extent(0) % hd != 0)
          fail("verify.shape", operand_where(0),
               "extent(x) = " + std::to_string(extent(0)) +
                   " is not a multiple of head_dim = " + std::to_string(hd));
        require_equal_extent(1, 0);
        const float theta = param_f32(2);
        if (!(std::isfinite(theta) && theta > 0.0f))
          fail("verify.param", "/params/theta", "theta must be finite and > 0");
        require_rope_scaling(3);
        break;
      }
      case OpId::kv_append: {  // x, cache, position?; head_dim, position, max_len, rope params
        const float theta = param_f32(3);
        if (!(std::isfinite(theta) && theta >= 0.0f))
          fail("verify.param", "/params/theta", "theta must be finite and >= 0 (0: no rotation)");
        const uint32_t hd = require_head_dim(theta != 0.0f);  // RoPE pairs the halves of a head
        if (theta != 0.0f) require_rope_scaling(4);
        const uint32_t position = ins_.params[1], max_len = ins_.params[2];
        if (max_len == 0) fail("verify.param", "/params/max_len", "max_len must be > 0");
        // With the position operand the param is unused; check_position_bounds bounds the operand.
        if (!present(2) && position >= max_len)
          fail("verify.param", "/params/position",
               "position = " + std::to_string(position) +
                   " must be < max_len = " + std::to_string(max_len));
        if (extent(0) % hd != 0)
          fail("verify.shape", operand_where(0),
               "extent(x) = " + std::to_string(extent(0)) +
                   " is not a multiple of head_dim = " + std::to_string(hd));
        // extent(x) < 2^32 and max_len < 2^32: the product fits in 64 bits.
        const uint64_t want = extent(0) * uint64_t{max_len};
        if (extent(1) != want)
          fail("verify.shape", operand_where(1),
               "extent(cache) = " + std::to_string(extent(1)) +
                   " must equal n_kv_heads * max_len "
                   "* head_dim = " +
                   std::to_string(want) + " (the whole layer cache)");
        break;
      }
      case OpId::attention_decode: {  // q, k, v, out, k_new?, v_new?; head_dim, scale, rope params
        const float theta = param_f32(3);
        if (!(std::isfinite(theta) && theta >= 0.0f))
          fail("verify.param", "/params/theta", "theta must be finite and >= 0 (0: no rotation)");
        const uint32_t hd = require_head_dim(theta != 0.0f);  // RoPE pairs the halves of a head
        if (hd > kMaxAttentionHeadDim)
          fail("verify.param", "/params/head_dim",
               "head_dim = " + std::to_string(hd) + " exceeds attention_decode's " +
                   std::to_string(kMaxAttentionHeadDim));
        if (!std::isfinite(param_f32(1)))
          fail("verify.param", "/params/scale", "scale must be finite (0: 1/sqrt(head_dim))");
        if (theta != 0.0f) require_rope_scaling(4);
        if (extent(0) % hd != 0)
          fail("verify.shape", operand_where(0),
               "extent(q) = " + std::to_string(extent(0)) +
                   " is not a multiple of head_dim = " + std::to_string(hd));
        // The new token's row: both or neither, one head_dim each.
        if (present(4) != present(5)) {
          const size_t missing = present(4) ? 5 : 4, given = present(4) ? 4 : 5;
          fail("verify.shape", operand_where(missing),
               "k_new and v_new go together: " + std::string(slots_[given].name) + " is present, " +
                   std::string(slots_[missing].name) + " is not");
        }
        for (size_t s : {size_t{4}, size_t{5}})
          if (present(s) && extent(s) != hd)
            fail("verify.shape", operand_where(s),
                 "extent(" + std::string(slots_[s].name) + ") = " + std::to_string(extent(s)) +
                     " must equal head_dim = " + std::to_string(hd));
        if (extent(1) % hd != 0 || (extent(1) == 0 && !present(4)))
          fail("verify.shape", operand_where(1),
               "extent(k) = " + std::to_string(extent(1)) + " must be a multiple of head_dim = " +
                   std::to_string(hd) + (present(4) ? "" : ", > 0 without k_new"));
        require_equal_extent(2, 1);
        const uint64_t want = extent(0) / hd * (uint64_t{hd} + 2);
        if (extent(3) != want)
          fail("verify.shape", operand_where(3),
               "extent(out) = " + std::to_string(extent(3)) +
                   " must equal group * (head_dim + 2) = " + std::to_string(want));
        break;
      }
      case OpId::attention_combine: {  // partials, out; head_dim, kv_heads
        const uint32_t hd = require_head_dim(false);
        const uint32_t kv = ins_.params[1];
        if (kv == 0) fail("verify.param", "/params/kv_heads", "kv_heads must be > 0");
        const uint64_t per = uint64_t{hd} * kv;
        if (extent(1) % per != 0)
          fail("verify.shape", operand_where(1),
               "extent(out) = " + std::to_string(extent(1)) +
                   " is not a multiple of head_dim * kv_heads = " + std::to_string(per));
        // Each kv head's chunks: `chunks` blocks of group * (head_dim + 2) floats.
        const uint64_t block = extent(1) / per * (uint64_t{hd} + 2);
        if (extent(0) % (block * kv) != 0)
          fail("verify.shape", operand_where(0),
               "extent(partials) = " + std::to_string(extent(0)) +
                   " is not a multiple of kv_heads * group * (head_dim + 2) = " +
                   std::to_string(block * kv) + " (group = extent(out) / (head_dim * kv_heads))");
        break;
      }
      case OpId::feed_token: {  // index, prompt, token, ids?, logits?, all_logits?, eos?
        for (size_t slot : {size_t{0}, size_t{2}, size_t{6}})
          if ((slot != 6 || present(6)) && extent(slot) != 1)
            fail("verify.shape", operand_where(slot),
                 "extent(" + std::string(slots_[slot].name) +
                     ") = " + std::to_string(extent(slot)) + " must be 1");
        // prompt: at least one token, which the operand rules already require (extent > 0).
        if (present(4) != present(5)) {
          const size_t missing = present(4) ? 5 : 4, given = present(4) ? 4 : 5;
          fail("verify.shape", operand_where(missing),
               "logits and all_logits go together: " + std::string(slots_[given].name) +
                   " is present, " + std::string(slots_[missing].name) + " is not");
        }
        if (present(4) && extent(5) % extent(4) != 0)
          fail("verify.shape", operand_where(5),
               "extent(all_logits) = " + std::to_string(extent(5)) +
                   " is not a multiple of extent(logits) = " + std::to_string(extent(4)) +
                   " (one step's logits a row)");
        break;
      }
    }
  }

  float param_f32(size_t i) const { return bits_f32(ins_.params[i]); }

  // The rope op's scaling params from index `at`: scaling_factor, low_freq_factor,
  // high_freq_factor, original_max_position (rope: 3, kv_append and attention_decode: 4).
  void require_rope_scaling(size_t at) {
    const float factor = param_f32(at);
    if (!(std::isfinite(factor) && factor >= 0.0f))
      fail("verify.param", "/params/scaling_factor",
           "scaling_factor must be finite and >= 0 (0: plain RoPE)");
    if (factor > 0.0f) {  // Llama 3 scaling: the smooth band needs low < high, both > 0
      const float low = param_f32(at + 1), high = param_f32(at + 2);
      if (!(std::isfinite(low) && low > 0.0f))
        fail("verify.param", "/params/low_freq_factor", "low_freq_factor must be finite and > 0");
      if (!(std::isfinite(high) && high > low))
        fail("verify.param", "/params/high_freq_factor",
             "high_freq_factor must be finite and > low_freq_factor");
      if (ins_.params[at + 3] == 0)
        fail("verify.param", "/params/original_max_position", "original_max_position must be > 0");
    }
  }

  // Param 0 of the attention-family ops: > 0, and even where the op pairs halves of a head.
  // gemv merging attention partials (params head_dim, heads != 0): x f32 chunk-major blocks of
  // heads rows of head_dim + 2, at most kGemvCombineMaxChunks of them; no norm, no w2 (x' is the
  // merge); K = heads * head_dim staged in shared memory like the norm's x' (4096 floats).
  void require_gemv_combine(uint32_t hd, uint32_t heads) {
    if (hd % 4 != 0)
      fail("verify.param", "/params/head_dim",
           "head_dim = " + std::to_string(hd) + " must be a multiple of 4 for a merging gemv");
    if (heads == 0)
      fail("verify.param", "/params/heads",
           "heads must be > 0 when head_dim is set (merging gemv)");
    if (uint64_t{heads} * hd > 4096)
      fail("verify.param", "/params/heads",
           "heads * head_dim = " + std::to_string(uint64_t{heads} * hd) +
               " must be <= 4096 (the merged x is staged in shared memory)");
    if (dtype(1) != DType::f32)
      fail("verify.dtype", operand_where(1),
           "dtype(x) = " + std::string(dtype_name(dtype(1))) +
               " must be f32: a merging gemv reads attention_decode partials");
    const uint64_t block = uint64_t{heads} * (uint64_t{hd} + 2);
    if (extent(1) % block != 0 || extent(1) / block > kGemvCombineMaxChunks)
      fail("verify.shape", operand_where(1),
           "extent(x) = " + std::to_string(extent(1)) + " must be 1 to " +
               std::to_string(kGemvCombineMaxChunks) +
               " chunks of heads * (head_dim + 2) = " + std::to_string(block) + " partials");
    for (uint32_t slot : {4u, 5u})
      if (present(slot))
        fail("verify.shape", operand_where(slot),
             std::string(slot == 4 ? "norm" : "w2") +
                 " cannot be fused into a merging gemv (head_dim set: x' is the merged attention)");
  }

  uint32_t require_head_dim(bool even) {
    const uint32_t hd = ins_.params[0];
    if (hd == 0 || (even && hd % 2 != 0))
      fail("verify.param", "/params/head_dim",
           "head_dim = " + std::to_string(hd) + " must be " + (even ? "even and " : "") + "> 0");
    return hd;
  }

  const Program& program_;
  uint32_t index_;
  const Instruction& ins_;
  const OpSig* sig_ = nullptr;
  std::string_view op_label_;  // only built into messages on failure
  std::array<Slot, AMK_MAX_OPERANDS> slots_{};
  size_t n_slots_ = 0;
  size_t n_params_ = 0;
};

}  // namespace

void check_instruction(const Program& program, uint32_t index) {
  if (index >= program.instructions.size())
    throw_program_error("verify.instruction", instr_where(index),
                        "no instruction " + std::to_string(index));
  InstructionChecker(program, index).run();
}

}  // namespace amk
