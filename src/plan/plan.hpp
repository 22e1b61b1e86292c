// The planner: lowers a verified program to the device ABI (kernels/amk_abi.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "amk_abi.h"
#include "program/program.hpp"

namespace amk {

struct PlanOptions {
  // Grid used when the program says `grid: auto` and leaves scheduling to amk. The GPU backend
  // passes the co-resident maximum of the device; the CPU backend a default.
  uint32_t grid_hint = 8;
  // Leave out of the device instructions the waits their queue order already guarantees and
  // the signals nobody then waits for (plan.cpp, elide_ordered_syncs).
  bool elide_ordered_syncs = true;
};

struct Plan {
  std::vector<amk_instruction_t> instructions;  // program order; index == position
  std::vector<uint32_t> queue_offsets;          // n_queues + 1
  std::vector<uint32_t> queue_items;            // instruction indices
  std::vector<amk_buffer_t> buffers;            // address 0 until placed on a device
  uint32_t n_counters = 0;
  uint32_t grid = 0;  // == number of queues
  uint32_t block = 0;
  bool queues_built = false;       // true when amk scheduled the program
  uint32_t elided_waits = 0;       // waits queue order guarantees (left out)
  uint32_t elided_signals = 0;     // signals to counters nobody waits for then
  std::vector<uint16_t> ops_used;  // sorted, unique

  [[nodiscard]] uint32_t n_queues() const noexcept {
    return queue_offsets.empty() ? 0 : static_cast<uint32_t>(queue_offsets.size() - 1);
  }
};

// Encodes one instruction of the program in the ABI layout (no validation beyond the ABI's
// fixed capacities, which the loader already enforces).
[[nodiscard]] amk_instruction_t encode_instruction(const Instruction& in, uint32_t index);
// The inverse, for the binary format's reader.
[[nodiscard]] Instruction decode_instruction(const amk_instruction_t& in);

// Builds queues for a program that has none: a list schedule over `grid` blocks that follows a
// legal execution order, so the result always passes the deadlock proof.
[[nodiscard]] std::vector<std::vector<uint32_t>> build_queues(const Program& program,
                                                              uint32_t grid);

// Sets AMK_INS_CONST_WEIGHTS on every gemv whose w (and w2) buffers no instruction of the
// program writes (custom ops count as writing every operand): such a gemv may request its
// weights before its waits are met (AMK_GEMV_PRELOAD). And on every attention_decode whose k and
// v views overlap no range any instruction writes (the cache rows an append writes elsewhere in
// the same buffer do not count; a custom op writes its operands' whole buffers): such a step may
// copy its K and V before its waits are met (AMK_ATTN_PRELOAD). make_plan calls it.
void mark_const_weights(const Program& program, Plan& plan);

// Lowers a verified program. When the program has no queues they are built first (and the
// result verified again).
[[nodiscard]] Plan make_plan(const Program& program, const PlanOptions& options = {});

// A launch of several passes (amk run --passes) has the device compare counters with
// value * pass and walk len * passes steps of each queue, all in 32 bits. Refuses (kind
// program) a pass count that takes a counter past kMaxCounterValue (plan.counter.overflow at
// /counters/N, or at a wait's value) or a queue's steps past 2^32 - 1 (plan.queue.overflow at
// /queues/N). The figures are those of the plan's instructions, which the device runs.
void check_passes(const Program& program, const Plan& plan, uint32_t passes);

}  // namespace amk
