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
};

// Executes `plan` over `buffers` (materialized initial contents, updated in place). Throws
// amk::Error on a runtime data fault (e.g. an embedding id out of range, kind program,
// naming the instruction), if the queues cannot drain, or if `iterations` passes go past what
// the device's 32-bit counters hold (check_passes, plan.hpp: the CPU refuses what the GPU must).
CpuRunStats run_cpu(const Program& program, const Plan& plan, HostBuffers& buffers,
                    const CpuRunOptions& options = {});

// Executes one instruction in pass `pass` (from 1: the ops that read a position operand or the
// step add pass - 1), exposed for tests and for per-op checks.
void cpu_execute_instruction(const Program& program, const amk_instruction_t& ins,
                             HostBuffers& buffers, uint32_t pass = 1);

}  // namespace amk
