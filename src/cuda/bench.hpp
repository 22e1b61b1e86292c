// `amk bench`: the megakernel against the two ways programs are usually run, side by side in one
// process (BENCH.md's method):
//   A  megakernel   one persistent launch of amk_vm, as GpuExecutable::launch does (counter and
//                   abort-flag reset included in the timed span)
//   B  launches     one launch of amk_step per instruction (1 block), in a legal serial order on
//                   one stream: what an eager framework does. Host-bound when the ops are short.
//   C  graph        that same sequence captured once into a CUDA graph and replayed
// Each arm warms up, then rounds A B C A B C ... run until the stopping rule (bench_stats.hpp)
// says the spread settled. Every sample is bracketed by CUDA events on the executable's stream,
// after the stream went idle (so B's host launch cost is inside its span in hot and cold mode
// alike). Cold mode writes a scratch buffer larger than L2 before every sample, outside the span.
//
// Samples after the first run on whatever the buffers then hold: the initial contents are not
// re-uploaded between samples. Programs that update their own inputs (a KV cache append, an
// accumulation) therefore time later steps of themselves; the op shapes, hence the work, do not
// change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/initial_data.hpp"
#include "cuda/bench_stats.hpp"
#include "cuda/executor.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"

namespace amk {

struct BenchOptions {
  uint32_t warmup = 3;   // untimed samples of each arm (interleaved) before sampling
  bench::StopRule stop;  // min samples / time, noise threshold, time limit
  bool cold = false;     // flush L2 before every sample
  uint64_t flush_bytes = uint64_t{256} << 20;  // the cold-mode scratch buffer (H200 L2: 60 MiB)
  double roofline_bytes_per_s = 4.47e12;       // H200 streaming read (BENCH.md)
};

struct BenchArm {
  std::string name;  // megakernel | launches | graph
  std::string description;
  uint32_t launches = 0;  // kernel launches (or graph nodes) per sample
  ProfileStats stats;     // scope: the name; warmup: BenchOptions::warmup
};

// Arm B's and C's outputs against arm A's, once, before timing (from the same initial contents).
struct BenchCheck {
  std::string arm;
  uint32_t buffer = 0;
  std::string buffer_name;
  bool bitwise_equal = false;
  double error = 0;      // normalized error (floats) or mismatched fraction (integers)
  double tolerance = 0;  // as `amk run --check`
  bool passed = false;
};

struct BenchResult {
  std::vector<BenchArm> arms;  // A, B, C in that order
  uint32_t rounds = 0;
  std::string stop_reason;     // bench::stop_reason_name
  double sampling_s = 0;       // wall time of the sampling rounds
  uint32_t instructions = 0;   // in the plan
  uint32_t skipped_nops = 0;   // sync-only nop instructions B and C leave out
  uint64_t operand_bytes = 0;  // sum over instructions of every operand's bytes
  std::vector<BenchCheck> checks;
  bool outputs_agree = false;
};

// Runs the three arms over the plan `exe` runs. `exe` must have been opened with
// GpuOptions::step_kernel (else Error(usage, bench.step_kernel)); `initial` the buffers' initial
// contents. Throws like launch() when a
// launch faults, Error(launch, launch.<status>) when a sample ends with a non-ok diag, and
// Error(mismatch, bench.mismatch) when B or C disagrees with A.
[[nodiscard]] BenchResult run_bench(GpuExecutable& exe, const Program& program,
                                    const InitialData& initial, const BenchOptions& options);

}  // namespace amk
