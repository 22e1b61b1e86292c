// Per-instruction timelines from the VM's trace words: a Chrome trace (Perfetto opens it) and
// summaries per op (count, time, bytes, bandwidth) and per block (busy, waiting, idle).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "program/program.hpp"

namespace amk {

struct TraceSpan {
  uint32_t instruction = 0;
  uint32_t block = 0;
  uint32_t position = 0;   // in the block's queue
  uint64_t start_ns = 0;   // %globaltimer after the waits were satisfied
  uint64_t end_ns = 0;     // after the op's closing barrier
};

// Spans from raw words (2 per instruction: start, end; 0 = not executed) and the queues that
// ran (queue_offsets / queue_items of the plan). Instructions that did not run are left out.
[[nodiscard]] std::vector<TraceSpan> trace_spans(std::span<const uint64_t> words,
                                                 std::span<const uint32_t> queue_offsets,
                                                 std::span<const uint32_t> queue_items);

// Bytes an instruction moves: every operand's extent times its element size.
[[nodiscard]] uint64_t instruction_bytes(const Program& program, const Instruction& ins);

// {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}; one track per block,
// times in microseconds from the earliest start.
[[nodiscard]] nlohmann::ordered_json chrome_trace(const Program& program,
                                                  const std::vector<TraceSpan>& spans);

// {"span_ns", "ops": [{op, count, total_ns, mean_ns, bytes, gb_per_s}], "blocks": [{block,
// instructions, busy_ns, waiting_ns, idle_ns}], "totals": {...}}. Waiting is the time between
// an instruction's end and the next one's start on the same block (fetch + dependency waits),
// counted from the earliest start for the first; idle is the time after a block's last end.
[[nodiscard]] nlohmann::ordered_json trace_summary(const Program& program,
                                                   const std::vector<TraceSpan>& spans,
                                                   uint32_t n_blocks);

}  // namespace amk
