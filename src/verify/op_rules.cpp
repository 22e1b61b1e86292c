// Per-instruction checks: operands against the op's signature (slots, dtypes, bounds) and the
// shape rules each built-in op relies on at run time. The device code trusts all of these.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

// One operand slot as the checks see it (built-in or custom op).
struct Slot {
  std::string_view name;
  DTypeSet dtypes;
  bool optional;
};

std::string instr_where(uint32_t index) { return "/instructions/" + std::to_string(index); }

class InstructionChecker {
public:
  InstructionChecker(const Program &program, uint32_t index)
      : program_(program), index_(index), ins_(program.instructions[index]) {}

  void run() {
    resolve_op();
    check_capacities();
    check_operands();
    check_params();
    check_sync();
    if (sig_ != nullptr)
      check_shapes();
  }

private:
  [[noreturn]] void fail(std::string code, const std::string &suffix, const std::string &msg) {
    std::string label = "instruction " + std::to_string(index_);
    if (!ins_.name.empty())
      label += " '" + ins_.name + "'";
    if (!op_label_.empty())
      label += " (" + std::string(op_label_) + ")";
    throw_program_error(std::move(code), instr_where(index_) + suffix, label + ": " + msg);
  }

  std::string operand_where(size_t slot) const {
    return "/operands/" + std::string(slots_[slot].name);
  }

  void resolve_op() {
    sig_ = find_op(ins_.op);
    if (sig_ != nullptr) {
      op_label_ = sig_->name;
      for (const OperandSig &o : sig_->operands)
        add_slot({o.name, o.dtypes, o.optional});
      n_params_ = sig_->params.size();
      return;
    }
    if (ins_.op >= kCustomOpBase &&
        static_cast<size_t>(ins_.op - kCustomOpBase) < program_.custom_ops.size()) {
      const CustomOp &custom = program_.custom_ops[ins_.op - kCustomOpBase];
      op_label_ = custom.name;
      // Custom ops declare slot names only: every slot is required, any dtype.
      for (const std::string &name : custom.operands)
        add_slot({name, kAnyType, false});
      n_params_ = custom.params.size();
      return;
    }
    fail("verify.op", "/op", "unknown op id " + std::to_string(ins_.op));
  }

  // The ABI has fixed room per instruction; the loader enforces it too, but the planner
  // copies into fixed arrays, so a hand-built program must not get past here.
  void add_slot(const Slot &slot) {
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
      const Operand &o = ins_.operands[s];
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
      const Buffer &b = program_.buffers[o.buffer];
      if ((slots_[s].dtypes & dtype_bit(b.dtype)) == 0)
        fail("verify.dtype", operand_where(s),
             "operand '" + slot_name + "' cannot be " + std::string(dtype_name(b.dtype)) +
                 " (buffer '" + b.name + "')");
      if (o.extent == 0)
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

  void check_params() {
    if (ins_.params.size() != n_params_)
      fail("verify.params.count", "/params",
           "has " + std::to_string(ins_.params.size()) + " params, the op takes " +
               std::to_string(n_params_));
  }

  void check_sync() {
    const size_t n_counters = program_.counters.size();
    for (size_t w = 0; w < ins_.waits.size(); ++w) {
      const Wait &wait = ins_.waits[w];
      const std::string at = "/waits/" + std::to_string(w);
      if (wait.counter >= n_counters)
        fail("verify.counter", at + "/counter",
             "waits on counter " + std::to_string(wait.counter) + " of " +
                 std::to_string(n_counters));
      // A wait for >= 0 always holds: almost certainly a mistake, and it orders nothing.
      if (wait.value == 0)
        fail("verify.wait.value", at + "/value", "wait value must be > 0");
    }
    for (size_t g = 0; g < ins_.signals.size(); ++g) {
      const Signal &signal = ins_.signals[g];
      const std::string at = "/signals/" + std::to_string(g);
      if (signal.counter >= n_counters)
        fail("verify.counter", at + "/counter",
             "signals counter " + std::to_string(signal.counter) + " of " +
                 std::to_string(n_counters));
      if (signal.add == 0)
        fail("verify.signal.add", at + "/add", "signal add must be > 0");
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
    switch (sig_->id) {
    case OpId::nop:
    case OpId::fill:
      break;
    case OpId::copy: { // x, y
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
    case OpId::silu_mul: // a/gate, b/up, y
      require_equal_extent(1, 0);
      require_equal_extent(2, 0);
      break;
    case OpId::scale:
      require_equal_extent(1, 0);
      break;
    case OpId::rmsnorm: { // x, weight, y: rows of extent(weight)
      if (extent(0) % extent(1) != 0)
        fail("verify.shape", operand_where(1),
             "extent(x) = " + std::to_string(extent(0)) +
                 " is not a multiple of extent(weight) = " + std::to_string(extent(1)));
      require_equal_extent(2, 0);
      break;
    }
    case OpId::softmax: { // x, y; params cols, scale
      const uint32_t cols = ins_.params[0];
      if (cols != 0 && extent(0) % cols != 0)
        fail("verify.shape", "/params/cols",
             "cols = " + std::to_string(cols) +
                 " does not divide extent(x) = " + std::to_string(extent(0)));
      require_equal_extent(1, 0);
      break;
    }
    case OpId::gemv: { // w, x, y, residual?
      const uint64_t k = extent(1);
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
      break;
    }
    case OpId::argmax: // x, index
      if (extent(1) != 1)
        fail("verify.shape", operand_where(1),
             "extent(index) = " + std::to_string(extent(1)) + " must be 1");
      break;
    case OpId::embedding: { // table, ids, y
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
    }
  }

  const Program &program_;
  uint32_t index_;
  const Instruction &ins_;
  const OpSig *sig_ = nullptr;
  std::string_view op_label_; // only built into messages on failure
  std::array<Slot, AMK_MAX_OPERANDS> slots_{};
  size_t n_slots_ = 0;
  size_t n_params_ = 0;
};

} // namespace

void check_instruction(const Program &program, uint32_t index) {
  if (index >= program.instructions.size())
    throw_program_error("verify.instruction", instr_where(index),
                        "no instruction " + std::to_string(index));
  InstructionChecker(program, index).run();
}

} // namespace amk
