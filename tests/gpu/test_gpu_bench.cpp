// amk bench's three arms on the GPU (src/cuda/bench.hpp): the megakernel, one amk_step launch per
// instruction, and the same launches as a CUDA graph compute the same outputs, the sampling
// interleaves them and every arm's timings are real; hot and cold L2, with and without the
// tensor-map parameter.
//
// Without a GPU this binary exits 77 (CTest SKIP_RETURN_CODE) before doctest's main runs, as
// test_gpu_runtime.cpp does.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "backend/host_data.hpp"
#include "core/error.hpp"
#include "cuda/bench.hpp"
#include "cuda/executor.hpp"
#include "io/load.hpp"
#include "gpu_support.hpp"
#include "ops/registry.hpp"
#include "plan/plan.hpp"
#include "verify/verify.hpp"

using namespace amk;

namespace {

constexpr uint64_t kN = 1 << 16;
constexpr uint64_t kChunks = 8, kChunk = kN / kChunks;

// y = 0.5 * (a + b) chunk by chunk, a nop join that waits for every chunk, then z = y * y: the
// serial order must follow the counters across blocks, and the nop is not launched.
Program chain_program() {
  Program p;
  p.name = "gpu_bench_chain";
  p.launch.block = 256;
  p.launch.timeout_ms = 10000;
  auto buffer = [&](const char* name, InitKind kind, uint64_t seed, bool output) {
    amk::test::add_f32_buffer(p, name, kN, kind, seed, output);
  };
  buffer("a", InitKind::random, 1, false);
  buffer("b", InitKind::random, 2, false);
  buffer("t", InitKind::zeros, 0, false);
  buffer("y", InitKind::zeros, 0, true);
  buffer("z", InitKind::zeros, 0, true);
  p.counters.push_back(Counter{"chunks"});
  p.counters.push_back(Counter{"joined"});
  for (uint64_t c = 0; c < kChunks; ++c) {
    p.counters.push_back(Counter{"c" + std::to_string(c)});
    const auto counter = static_cast<uint32_t>(2 + c);
    Instruction add;
    add.op = static_cast<uint16_t>(OpId::add);
    add.operands = {Operand{0, c * kChunk, kChunk}, Operand{1, c * kChunk, kChunk},
                    Operand{2, c * kChunk, kChunk}};
    add.signals = {Signal{counter, 1}};
    p.instructions.push_back(add);
    Instruction scale;
    scale.op = static_cast<uint16_t>(OpId::scale);
    scale.operands = {Operand{2, c * kChunk, kChunk}, Operand{3, c * kChunk, kChunk}};
    scale.params = {f32_bits(0.5f)};
    scale.waits = {Wait{counter, 1}};
    scale.signals = {Signal{0, 1}};
    p.instructions.push_back(scale);
  }
  Instruction join;  // sync only
  join.op = static_cast<uint16_t>(OpId::nop);
  join.waits = {Wait{0, static_cast<uint32_t>(kChunks)}};
  join.signals = {Signal{1, 1}};
  p.instructions.push_back(join);
  Instruction square;
  square.op = static_cast<uint16_t>(OpId::mul);
  square.operands = {Operand{3, 0, kN}, Operand{3, 0, kN}, Operand{4, 0, kN}};
  square.waits = {Wait{1, 1}};
  p.instructions.push_back(square);
  return p;
}

BenchOptions quick(bool cold) {
  BenchOptions o;
  o.warmup = 2;
  o.stop.min_samples = 10;
  o.stop.min_time_s = 0.05;
  o.stop.time_limit_s = 2.0;
  o.cold = cold;
  o.flush_bytes = uint64_t{128} << 20;
  return o;
}

void check_result(const BenchResult& r, uint32_t launches) {
  REQUIRE(r.arms.size() == 3);
  CHECK(r.arms[0].name == "megakernel");
  CHECK(r.arms[1].name == "launches");
  CHECK(r.arms[2].name == "graph");
  CHECK(r.arms[0].launches == 1);
  CHECK(r.arms[1].launches == launches);
  CHECK(r.arms[2].launches == launches);
  CHECK(r.rounds >= 10);
  CHECK(r.stop_reason != "running");
  CHECK(r.outputs_agree);
  CHECK(!r.checks.empty());
  for (const BenchCheck& c : r.checks) {
    CAPTURE(c.arm);
    CAPTURE(c.buffer_name);
    CHECK(c.passed);
    CHECK(c.bitwise_equal);  // the same op code on the same data
  }
  for (const BenchArm& a : r.arms) {
    CAPTURE(a.name);
    const ProfileStats& s = a.stats;
    CHECK(s.samples_ms.size() == r.rounds);  // interleaved: one sample per arm per round
    CHECK(s.median_ms > 0);
    CHECK(s.min_ms > 0);
    CHECK(s.min_ms <= s.median_ms);
    CHECK(s.median_ms <= s.max_ms);
    std::printf("[bench] %-10s %5u launches: median %.4f ms, min %.4f, max %.4f, spread %.2f%%\n",
                a.name.c_str(), a.launches, s.median_ms, s.min_ms, s.max_ms, 100.0 * s.rel_spread);
  }
  CHECK(r.operand_bytes > 0);
  std::printf("[bench] %u rounds, %.2f s, %s\n", r.rounds, r.sampling_s, r.stop_reason.c_str());
}

GpuOptions step_options() {
  GpuOptions o;
  o.step_kernel = true;
  return o;
}

}  // namespace

TEST_CASE("three arms agree with each other and with the CPU, hot and cold") {
  REQUIRE(amk::test::g_have_gpu);
  const Program program = chain_program();
  (void)verify(program);
  const Plan plan = make_plan(program, PlanOptions{4});
  const HostBuffers initial = materialize_all(program);
  GpuExecutable exe = GpuExecutable::open(program, InitialData::view(initial), step_options());
  REQUIRE(exe.step_launch().function != nullptr);

  for (const bool cold : {false, true}) {
    CAPTURE(cold);
    const BenchResult r = run_bench(exe, program, InitialData::view(initial), quick(cold));
    check_result(r, static_cast<uint32_t>(program.instructions.size() - 1));
    CHECK(r.skipped_nops == 1);
    CHECK(r.instructions == program.instructions.size());
    // Every float operand element counted once per instruction: 8 x (3 + 2) chunks + 3 whole.
    CHECK(r.operand_bytes == (kChunks * 5 * kChunk + 3 * kN) * sizeof(float));
  }

  // The megakernel still agrees with the CPU after the bench (nothing left in a bad state).
  HostBuffers want = initial;
  (void)run_cpu(program, plan, want);
  exe.upload(InitialData::view(initial));
  REQUIRE(exe.launch().status == "ok");
  const HostBuffers got = exe.download();
  CHECK(got.data[3] == want.data[3]);
  CHECK(got.data[4] == want.data[4]);
}

TEST_CASE("the TMA gemv runs through amk_step with the tensor-map parameter") {
  const Program program =
      load_program_file(std::string(AMK_SOURCE_DIR) + "/tests/gpu/programs/tma_gemv.json");
  (void)verify(program);
  REQUIRE(!program.tma.empty());
  const HostBuffers initial = materialize_all(program);
  GpuExecutable exe = GpuExecutable::open(program, InitialData::view(initial), step_options());
  const BenchResult r = run_bench(exe, program, InitialData::view(initial), quick(false));
  uint32_t work = 0;
  for (const Instruction& ins : program.instructions) work += ins.op != 0;
  check_result(r, work);
}

TEST_CASE("an executable without the step kernel is refused") {
  const Program program = chain_program();
  const HostBuffers initial = materialize_all(program);
  GpuExecutable exe = GpuExecutable::open(program, InitialData::view(initial), {});
  CHECK(exe.step_launch().function == nullptr);
  try {
    (void)run_bench(exe, program, InitialData::view(initial), quick(false));
    FAIL("expected bench.step_kernel");
  } catch (const Error& e) {
    CHECK(e.code() == "bench.step_kernel");
  }
}
