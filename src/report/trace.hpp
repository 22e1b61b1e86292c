// Per-instruction timelines from the VM's trace words: a Chrome trace (Perfetto opens it) and
// summaries per op (count, time, bytes, bandwidth) and per block (busy, waiting, idle).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "program/program.hpp"

namespace amk {

// Words the VM writes per instruction when tracing (kernels/amk_device.cuh, kAmkTraceWords):
// start, end, and two marks an op may stamp on its way (0: not stamped).
inline constexpr uint32_t kTraceWordsPerInstruction = 4;

struct TraceSpan {
  uint32_t instruction = 0;
  uint32_t block = 0;
  uint32_t position = 0;  // in the block's queue
  uint64_t start_ns = 0;  // %globaltimer after the waits were satisfied
  uint64_t end_ns = 0;    // after the op's closing barrier
  // Op marks (thread 0's %globaltimer; 0 = none), within [start, end]. gemv: its first weight
  // batch requested (x' staged for the norm-fused forms) / that batch arrived and reduced.
  // attention_decode (tiled path): q staged / K and V in shared memory. attention_combine: the
  // first head's (m, l) arrived / its values summed.
  uint64_t mark[2] = {0, 0};
};

// The name of mark m (0 or 1) of an op in traces and summaries ("mark0" / "mark1" for an op
// that stamps none).
[[nodiscard]] std::string trace_mark_name(const std::string& op, uint32_t m);

// Spans from raw words (kTraceWordsPerInstruction per instruction: start, end, marks; start 0 =
// not executed) and the queues that ran (queue_offsets / queue_items of the plan). Instructions
// that did not run are left out; a mark outside [start, end] is dropped.
[[nodiscard]] std::vector<TraceSpan> trace_spans(std::span<const uint64_t> words,
                                                 std::span<const uint32_t> queue_offsets,
                                                 std::span<const uint32_t> queue_items);

// Bytes an instruction moves: every operand's extent times its element size.
[[nodiscard]] uint64_t instruction_bytes(const Program& program, const Instruction& ins);

// {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}; one track per block,
// times in microseconds from the earliest start.
[[nodiscard]] nlohmann::ordered_json chrome_trace(const Program& program,
                                                  const std::vector<TraceSpan>& spans);

// {"span_ns", "ops": [{op, count, total_ns, mean_ns, bytes, gb_per_s[, marks: [{name, count,
// mean_ns}] (mean time from the instruction's start to each mark)]}], "blocks": [{block,
// instructions, busy_ns, waiting_ns, idle_ns}], "totals": {...}}. Waiting is the time between
// an instruction's end and the next one's start on the same block (fetch + dependency waits),
// counted from the earliest start for the first; idle is the time after a block's last end.
[[nodiscard]] nlohmann::ordered_json trace_summary(const Program& program,
                                                   const std::vector<TraceSpan>& spans,
                                                   uint32_t n_blocks);

}  // namespace amk
