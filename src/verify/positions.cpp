// Position bounds: the largest position a program can reach must fit every cache it indexes, or
// the program is refused before it runs. A position operand (rope, kv_append,
// attention_decode) makes the op's position P = position[0] + pass - 1, so P depends only on the
// element's initial value when no instruction writes it: P_max = that value + passes - 1.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/detail.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace detail {

uint32_t position_slot(const Instruction& ins) {
  const OpSig* sig = find_op(ins.op);
  if (sig == nullptr) return kNoIndex;
  for (size_t s = 0; s < sig->operands.size() && s < ins.operands.size(); ++s)
    if (sig->operands[s].name == "position")
      return ins.operands[s].buffer == AMK_NO_BUFFER ? kNoIndex : static_cast<uint32_t>(s);
  return kNoIndex;
}

}  // namespace detail

namespace {

// Positions stay far below 2^31 (the device adds the pass to a 32-bit value).
constexpr int64_t kMaxPosition = INT32_MAX;

std::string position_where(uint32_t instruction, const Instruction& ins, uint32_t slot) {
  std::string where = "/instructions/" + std::to_string(instruction) + "/operands/";
  if (const OpSig* sig = find_op(ins.op)) return where + std::string(sig->operands[slot].name);
  return where + std::to_string(slot);
}

// A write operand: instruction, slot and the elements it covers.
struct WriteRange {
  uint32_t instruction;
  uint32_t slot;
  uint64_t lo, hi;
};

}  // namespace

void check_position_bounds(const Program& program, uint32_t passes) {
  const uint64_t steps = passes == 0 ? 0 : passes - 1;  // .amkb stores 0 for one pass
  // The writes of every buffer some position operand reads (usually none), in program order.
  std::vector<uint8_t> is_position(program.buffers.size(), 0);
  for (const Instruction& ins : program.instructions)
    if (const uint32_t s = detail::position_slot(ins); s != detail::kNoIndex)
      if (ins.operands[s].buffer < program.buffers.size()) is_position[ins.operands[s].buffer] = 1;
  std::vector<std::vector<WriteRange>> writes(program.buffers.size());
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    for (uint32_t s = 0; s < ins.operands.size(); ++s) {
      const Operand& o = ins.operands[s];
      if (o.buffer < program.buffers.size() && is_position[o.buffer] &&
          detail::slot_access(program, ins, s).writes)
        writes[o.buffer].push_back({i, s, o.offset, o.offset + o.extent});
    }
  }

  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    const uint32_t slot = detail::position_slot(ins);
    if (slot == detail::kNoIndex) continue;
    const Operand& o = ins.operands[slot];
    if (o.buffer >= program.buffers.size()) continue;  // check_instruction names it
    const Buffer& buffer = program.buffers[o.buffer];
    const std::string where = position_where(i, ins, slot);
    const std::string element = "buffer '" + buffer.name + "' element " + std::to_string(o.offset);

    for (const WriteRange& w : writes[o.buffer]) {
      if (o.offset < w.lo || o.offset >= w.hi) continue;
      throw_program_error(
          "verify.position.written", where,
          detail::instruction_label(program, i) + " takes its position from " + element +
              ", which " + detail::instruction_label(program, w.instruction) +
              " writes (operand '" +
              std::string(
                  detail::slot_access(program, program.instructions[w.instruction], w.slot).name) +
              "'); a position operand must hold its initial value for the whole launch");
    }
    const std::optional<int64_t> start = initial_index_value(buffer, o.offset);
    if (!start)
      throw_program_error("verify.position.unknown", where,
                          detail::instruction_label(program, i) + " takes its position from " +
                              element + ", whose initial value (init " +
                              std::string(init_kind_name(buffer.init.kind)) +
                              ") the verifier cannot read; give it as zeros, a constant or values");
    const int64_t p_max = *start + static_cast<int64_t>(steps);
    if (*start < 0 || p_max > kMaxPosition)
      throw_program_error("verify.position.range", where,
                          detail::instruction_label(program, i) + ": the position starts at " +
                              std::to_string(*start) + " (" + element + ") and reaches " +
                              std::to_string(p_max) + " in " + std::to_string(steps + 1) +
                              " passes; positions must lie in 0.." + std::to_string(kMaxPosition));
    if (static_cast<OpId>(ins.op) != OpId::kv_append) continue;
    const uint32_t max_len = ins.params.size() > 2 ? ins.params[2] : 0;
    if (p_max < int64_t{max_len}) continue;
    throw_program_error("verify.position.range", where,
                        detail::instruction_label(program, i) + " appends at position " +
                            std::to_string(p_max) + " in the last of " + std::to_string(steps + 1) +
                            " passes (" + element + " = " + std::to_string(*start) +
                            ", plus passes - 1), past the cache of max_len = " +
                            std::to_string(max_len) + " positions");
  }
}

}  // namespace amk
