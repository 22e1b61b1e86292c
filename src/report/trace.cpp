#include "report/trace.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "ops/registry.hpp"

namespace amk {

std::vector<TraceSpan> trace_spans(std::span<const uint64_t> words,
                                   std::span<const uint32_t> queue_offsets,
                                   std::span<const uint32_t> queue_items) {
  std::vector<TraceSpan> spans;
  for (size_t q = 0; q + 1 < queue_offsets.size(); ++q) {
    for (uint32_t k = queue_offsets[q]; k < queue_offsets[q + 1] && k < queue_items.size(); ++k) {
      const uint32_t i = queue_items[k];
      const uint64_t w = uint64_t{kTraceWordsPerInstruction} * i;
      if (w + kTraceWordsPerInstruction > words.size()) continue;
      const uint64_t s = words[w], e = words[w + 1];
      if (s == 0 || e < s) continue;  // not executed (or a torn record)
      TraceSpan span{i, static_cast<uint32_t>(q), k - queue_offsets[q], s, e};
      for (uint32_t m = 0; m < 2; ++m)
        if (words[w + 2 + m] >= s && words[w + 2 + m] <= e) span.mark[m] = words[w + 2 + m];
      spans.push_back(span);
    }
  }
  return spans;
}

std::string trace_mark_name(const std::string& op, uint32_t m) {
  const auto pick = [m](const char* first, const char* second) {
    return std::string(m == 0 ? first : second);
  };
  if (op == "gemv") return pick("loads_issued", "first_batch");
  if (op == "attention_decode") return pick("q_staged", "kv_landed");
  if (op == "attention_combine") return pick("ml_arrived", "values_summed");
  return "mark" + std::to_string(m);
}

uint64_t instruction_bytes(const Program& program, const Instruction& ins) {
  uint64_t bytes = 0;
  for (size_t k = 0; k < ins.operands.size(); ++k) {
    const Operand& o = ins.operands[k];
    if (o.buffer == AMK_NO_BUFFER || o.buffer >= program.buffers.size()) continue;
    bytes += o.extent * dtype_size(program.buffers[o.buffer].dtype);
  }
  return bytes;
}

namespace {

uint64_t earliest(const std::vector<TraceSpan>& spans) {
  uint64_t t0 = UINT64_MAX;
  for (const auto& s : spans) t0 = std::min(t0, s.start_ns);
  return spans.empty() ? 0 : t0;
}

}  // namespace

nlohmann::ordered_json chrome_trace(const Program& program, const std::vector<TraceSpan>& spans) {
  const uint64_t t0 = earliest(spans);
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  uint32_t max_block = 0;
  for (const auto& s : spans) max_block = std::max(max_block, s.block);
  for (uint32_t b = 0; b <= max_block && !spans.empty(); ++b)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", b},
                      {"args", {{"name", "block " + std::to_string(b)}}}});
  for (const auto& s : spans) {
    const Instruction& ins = program.instructions[s.instruction];
    const std::string op = op_name(program, ins.op);
    std::string name = op + " #" + std::to_string(s.instruction);
    if (!ins.name.empty()) name += " " + ins.name;
    nlohmann::ordered_json args = {{"instruction", s.instruction},
                                   {"queue_position", s.position},
                                   {"bytes", instruction_bytes(program, ins)}};
    // Marks as microseconds from the instruction's start, under the op's names for them.
    for (uint32_t m = 0; m < 2; ++m)
      if (s.mark[m] != 0)
        args[trace_mark_name(op, m) + "_us"] = static_cast<double>(s.mark[m] - s.start_ns) / 1000.0;
    events.push_back({{"name", name},
                      {"cat", op},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", s.block},
                      {"ts", static_cast<double>(s.start_ns - t0) / 1000.0},
                      {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1000.0},
                      {"args", args}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ns"},
          {"otherData", {{"program", program.name}, {"clock", "%globaltimer, ns"}}}};
}

nlohmann::ordered_json trace_summary(const Program& program, const std::vector<TraceSpan>& spans,
                                     uint32_t n_blocks) {
  const uint64_t t0 = earliest(spans);
  uint64_t t1 = t0;
  for (const auto& s : spans) t1 = std::max(t1, s.end_ns);

  struct OpAcc {
    uint64_t count = 0, ns = 0, bytes = 0;
    uint64_t marked[2] = {0, 0}, mark_ns[2] = {0, 0};  // instructions with mark m, their offsets
  };
  std::map<std::string, OpAcc> ops;
  struct BlockAcc {
    uint64_t n = 0, busy = 0, waiting = 0, last_end = 0;
  };
  std::vector<BlockAcc> blocks(n_blocks);
  std::vector<TraceSpan> ordered = spans;
  std::sort(ordered.begin(), ordered.end(), [](const TraceSpan& a, const TraceSpan& b) {
    return a.block != b.block ? a.block < b.block : a.start_ns < b.start_ns;
  });
  for (const auto& s : ordered) {
    const Instruction& ins = program.instructions[s.instruction];
    OpAcc& o = ops[op_name(program, ins.op)];
    ++o.count;
    o.ns += s.end_ns - s.start_ns;
    o.bytes += instruction_bytes(program, ins);
    for (uint32_t m = 0; m < 2; ++m)
      if (s.mark[m] != 0) {
        ++o.marked[m];
        o.mark_ns[m] += s.mark[m] - s.start_ns;
      }
    if (s.block >= blocks.size()) blocks.resize(s.block + 1);
    BlockAcc& b = blocks[s.block];
    const uint64_t prev = b.n == 0 ? t0 : b.last_end;
    b.waiting += s.start_ns > prev ? s.start_ns - prev : 0;
    b.busy += s.end_ns - s.start_ns;
    b.last_end = s.end_ns;
    ++b.n;
  }
  nlohmann::ordered_json op_rows = nlohmann::ordered_json::array();
  for (const auto& [name, o] : ops) {
    nlohmann::ordered_json row = {
        {"op", name},       {"count", o.count},
        {"total_ns", o.ns}, {"mean_ns", o.count ? static_cast<double>(o.ns) / o.count : 0.0},
        {"bytes", o.bytes}, {"gb_per_s", o.ns ? static_cast<double>(o.bytes) / o.ns : 0.0}};
    if (o.marked[0] != 0 || o.marked[1] != 0) {
      nlohmann::ordered_json marks = nlohmann::ordered_json::array();
      for (uint32_t m = 0; m < 2; ++m)
        marks.push_back(
            {{"name", trace_mark_name(name, m)},
             {"count", o.marked[m]},
             {"mean_ns", o.marked[m] ? static_cast<double>(o.mark_ns[m]) / o.marked[m] : 0.0}});
      row["marks"] = marks;
    }
    op_rows.push_back(row);
  }
  nlohmann::ordered_json block_rows = nlohmann::ordered_json::array();
  uint64_t busy = 0, waiting = 0, idle = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const BlockAcc& a = blocks[b];
    const uint64_t id = a.n == 0 ? t1 - t0 : t1 - a.last_end;
    busy += a.busy;
    waiting += a.waiting;
    idle += id;
    block_rows.push_back({{"block", b},
                          {"instructions", a.n},
                          {"busy_ns", a.busy},
                          {"waiting_ns", a.waiting},
                          {"idle_ns", id}});
  }
  return {{"span_ns", t1 - t0},
          {"instructions", spans.size()},
          {"ops", op_rows},
          {"blocks", block_rows},
          {"totals", {{"busy_ns", busy}, {"waiting_ns", waiting}, {"idle_ns", idle}}}};
}

}  // namespace amk
