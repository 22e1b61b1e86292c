// The verifier: everything that must hold before a program may run. Throws amk::Error
// (kind program) with a stable code and location on the first violation found.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "program/program.hpp"

namespace amk {

struct VerifyOptions {
  bool check_hazards = true;
};

struct StuckHead {
  uint32_t block;
  uint32_t position;     // position in the block's queue
  uint32_t instruction;
  std::string op;
  uint32_t counter;
  uint64_t have;
  uint64_t need;
};

struct VerifySummary {
  uint64_t critical_path = 0;     // longest chain of dependent instructions (instructions)
  uint64_t dependency_edges = 0;
  uint64_t hazard_pairs_checked = 0;
};

// Static checks of one instruction's operands and params against its op's signature and shape
// rules (used by verify and by tests). `where` is the instruction's JSON pointer.
void check_instruction(const Program& program, uint32_t index);

// Greedy simulation of queues over the counters. Returns the stuck queue heads (empty = the
// program drains: deadlock free).
[[nodiscard]] std::vector<StuckHead> simulate_queues(
    const Program& program, const std::vector<std::vector<uint32_t>>& queues);

// Full verification of a program (with queues, or without: then only the dependency checks
// that do not need a schedule).
VerifySummary verify(const Program& program, const VerifyOptions& options = {});

}  // namespace amk
