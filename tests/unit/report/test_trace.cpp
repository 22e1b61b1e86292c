// Trace spans, the Chrome trace and the per-op / per-block summaries, from made-up words.
#include <doctest/doctest.h>

#include <span>

#include "report/trace.hpp"

using namespace amk;

namespace {

Program two_block_program() {
  Program p;
  p.name = "t";
  p.buffers.push_back({"x", DType::f32, {1024}, {}, false});
  p.buffers.push_back({"w", DType::bf16, {256, 1024}, {}, false});
  p.buffers.push_back({"y", DType::f32, {256}, {}, true});
  Instruction g;
  g.op = 9;  // gemv
  g.operands = {{1, 0, 128 * 1024}, {0, 0, 1024}, {2, 0, 128}, {AMK_NO_BUFFER, 0, 0}};
  p.instructions.push_back(g);
  g.operands = {{1, 128 * 1024, 128 * 1024}, {0, 0, 1024}, {2, 128, 128}, {AMK_NO_BUFFER, 0, 0}};
  p.instructions.push_back(g);
  Instruction n;
  n.op = 0;
  n.name = "tail";
  p.instructions.push_back(n);
  return p;
}

}  // namespace

TEST_CASE("spans follow the queues and skip instructions that did not run") {
  // queue 0: [0, 2], queue 1: [1]; instruction 2 has no record (0).
  // Four words an instruction: start, end, mark 0, mark 1. Instruction 1's mark 1 lies past its
  // end (a stale stamp): dropped.
  static_assert(kTraceWordsPerInstruction == 4);
  const std::vector<uint64_t> words = {1000, 1400, 1050, 1200, 1100, 1300, 0, 1350, 0, 0, 0, 0};
  const std::vector<uint32_t> offsets = {0, 2, 3}, items = {0, 2, 1};
  const auto spans = trace_spans(words, offsets, items);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].instruction == 0);
  CHECK(spans[0].block == 0);
  CHECK(spans[0].mark[0] == 1050);
  CHECK(spans[0].mark[1] == 1200);
  CHECK(spans[1].instruction == 1);
  CHECK(spans[1].block == 1);
  CHECK(spans[1].position == 0);
  CHECK(spans[1].mark[0] == 0);
  CHECK(spans[1].mark[1] == 0);
  // A short word array (a truncated download) yields no span for the instructions it lacks.
  CHECK(trace_spans(std::span<const uint64_t>(words.data(), 6), offsets, items).size() == 1);
}

TEST_CASE("instruction bytes count every operand at its dtype") {
  const Program p = two_block_program();
  CHECK(instruction_bytes(p, p.instructions[0]) == 128 * 1024 * 2 + 1024 * 4 + 128 * 4);
  CHECK(instruction_bytes(p, p.instructions[2]) == 0);
}

TEST_CASE("chrome trace: one track per block, microseconds from the first start") {
  const Program p = two_block_program();
  const std::vector<TraceSpan> spans = {
      {0, 0, 0, 5000, 7000}, {1, 1, 0, 5500, 6500}, {2, 0, 1, 8000, 8100}};
  const auto j = chrome_trace(p, spans);
  const auto& ev = j["traceEvents"];
  REQUIRE(ev.size() == 5);  // 2 thread names + 3 spans
  CHECK(ev[2]["ph"] == "X");
  CHECK(ev[2]["name"] == "gemv #0");
  CHECK(ev[2]["ts"].get<double>() == doctest::Approx(0.0));
  CHECK(ev[2]["dur"].get<double>() == doctest::Approx(2.0));
  CHECK(ev[3]["tid"] == 1);
  CHECK(ev[3]["ts"].get<double>() == doctest::Approx(0.5));
  CHECK(ev[4]["name"] == "nop #2 tail");
  CHECK_FALSE(ev[2]["args"].contains("loads_issued_us"));  // no marks, no mark args
}

TEST_CASE("marks: named per op in the Chrome trace, averaged per op in the summary") {
  const Program p = two_block_program();
  std::vector<TraceSpan> spans = {
      {0, 0, 0, 5000, 7000}, {1, 1, 0, 5500, 6500}, {2, 0, 1, 8000, 8100}};
  spans[0].mark[0] = 5200;
  spans[0].mark[1] = 6000;
  spans[1].mark[0] = 5900;  // instruction 1 has mark 0 only
  spans[2].mark[1] = 8050;  // a nop's mark: generic name
  const auto j = chrome_trace(p, spans);
  const auto& ev = j["traceEvents"];
  CHECK(ev[2]["args"]["loads_issued_us"].get<double>() == doctest::Approx(0.2));
  CHECK(ev[2]["args"]["first_batch_us"].get<double>() == doctest::Approx(1.0));
  CHECK(ev[3]["args"]["loads_issued_us"].get<double>() == doctest::Approx(0.4));
  CHECK_FALSE(ev[3]["args"].contains("first_batch_us"));
  CHECK(ev[4]["args"]["mark1_us"].get<double>() == doctest::Approx(0.05));
  const auto s = trace_summary(p, spans, 2);
  const auto& gemv = s["ops"][0];
  REQUIRE(gemv["op"] == "gemv");
  REQUIRE(gemv["marks"].size() == 2);
  CHECK(gemv["marks"][0]["name"] == "loads_issued");
  CHECK(gemv["marks"][0]["count"] == 2);
  CHECK(gemv["marks"][0]["mean_ns"].get<double>() == doctest::Approx(300.0));  // (200 + 400) / 2
  CHECK(gemv["marks"][1]["count"] == 1);
  CHECK(gemv["marks"][1]["mean_ns"].get<double>() == doctest::Approx(1000.0));
  CHECK(trace_mark_name("attention_decode", 1) == "kv_landed");
  CHECK(trace_mark_name("rmsnorm", 0) == "mark0");
}

TEST_CASE("marks: each op's two points by name, in the trace's args and the summary") {
  CHECK(trace_mark_name("gemv", 0) == "loads_issued");
  CHECK(trace_mark_name("gemv", 1) == "first_batch");
  CHECK(trace_mark_name("attention_decode", 0) == "q_staged");
  CHECK(trace_mark_name("attention_combine", 0) == "ml_arrived");
  CHECK(trace_mark_name("attention_combine", 1) == "values_summed");
  CHECK(trace_mark_name("rmsnorm", 1) == "mark1");
  const Program p = two_block_program();
  std::vector<TraceSpan> spans = {
      {0, 0, 0, 5000, 7000}, {1, 1, 0, 5500, 6500}, {2, 0, 1, 8000, 8100}};
  spans[0].mark[0] = 5200;
  spans[0].mark[1] = 6000;
  const auto j = chrome_trace(p, spans);
  const auto& args = j["traceEvents"][2]["args"];
  CHECK(args["loads_issued_us"].get<double>() == doctest::Approx(0.2));
  CHECK(args["first_batch_us"].get<double>() == doctest::Approx(1.0));
  const auto s = trace_summary(p, spans, 2);
  REQUIRE(s["ops"][0]["op"] == "gemv");
  CHECK(s["ops"][0]["marks"][0]["name"] == "loads_issued");
  CHECK(s["ops"][0]["marks"][1]["name"] == "first_batch");
}

TEST_CASE("summary: per op time and bandwidth, per block busy / waiting / idle") {
  const Program p = two_block_program();
  const std::vector<TraceSpan> spans = {
      {0, 0, 0, 5000, 7000}, {1, 1, 0, 5500, 6500}, {2, 0, 1, 8000, 8100}};
  const auto s = trace_summary(p, spans, 2);
  CHECK(s["span_ns"] == 3100);
  CHECK_FALSE(s["ops"][0].contains("marks"));
  const auto& ops = s["ops"];
  REQUIRE(ops.size() == 2);
  CHECK(ops[0]["op"] == "gemv");
  CHECK(ops[0]["count"] == 2);
  CHECK(ops[0]["total_ns"] == 3000);
  const double bytes = 2.0 * (128 * 1024 * 2 + 1024 * 4 + 128 * 4);
  CHECK(ops[0]["bytes"].get<double>() == bytes);
  CHECK(ops[0]["gb_per_s"].get<double>() == doctest::Approx(bytes / 3000.0));
  const auto& b = s["blocks"];
  CHECK(b[0]["busy_ns"] == 2100);
  CHECK(b[0]["waiting_ns"] == 1000);  // 7000 -> 8000
  CHECK(b[0]["idle_ns"] == 0);
  CHECK(b[1]["waiting_ns"] == 500);  // from the earliest start 5000
  CHECK(b[1]["idle_ns"] == 1600);    // 6500 -> 8100
}
