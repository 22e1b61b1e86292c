// The CPU reference backend: runs a planned program instruction by instruction in an order
// consistent with its queues and counters. Ground truth for tests and for `amk run --check`.
#pragma once

#include <cstdint>
#include <string>

#include "backend/host_data.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"

namespace amk {

struct CpuRunOptions {
  uint32_t iterations = 1;
};

struct CpuRunStats {
  uint64_t instructions_executed = 0;
  double elapsed_ms = 0.0;
  uint32_t passes_run = 0;  // the last pass an instruction ran in (fewer after feed_token's eos)
};

// Executes `plan` over `buffers` (materialized initial contents, updated in place). Throws
// amk::Error on a runtime data fault (e.g. an embedding id out of range, kind program,
// naming the instruction), if the queues cannot drain, or if `iterations` passes go past what
// the device's 32-bit counters hold (check_passes, plan.hpp: the CPU refuses what the GPU must).
CpuRunStats run_cpu(const Program& program, const Plan& plan, HostBuffers& buffers,
                    const CpuRunOptions& options = {});

// Executes one instruction in pass `pass` (from 1: the ops that read a position operand or the
// step add pass - 1), exposed for tests and for per-op checks. `stop_word` is the launch's stop
// word (feed_token with eos writes the pass there and nothing once it is set; null: a word of
// the call's own, starting at 0).
void cpu_execute_instruction(const Program& program, const amk_instruction_t& ins,
                             HostBuffers& buffers, uint32_t pass = 1,
                             uint32_t* stop_word = nullptr);

}  // namespace amk
