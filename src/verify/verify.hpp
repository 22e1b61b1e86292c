// The verifier: everything that must hold before a program may run. Throws amk::Error
// (kind program) with a stable code and location on the first violation found.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "program/program.hpp"

namespace amk {

struct VerifyOptions {
  bool check_hazards = true;
};

struct StuckHead {
  uint32_t block;
  uint32_t position;  // position in the block's queue
  uint32_t instruction;
  std::string op;
  uint32_t counter;
  uint64_t have;
  uint64_t need;
};

struct VerifySummary {
  uint64_t critical_path = 0;  // longest chain of dependent instructions (instructions)
  uint64_t dependency_edges = 0;
  uint64_t hazard_pairs_checked = 0;  // with several passes, plus those of the unrolled passes
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

// ---- the pieces of verify, exposed for the planner and for tests ----

// Launch and target rules (block size, cluster shape, cooperative mode, shared memory).
void check_launch(const Program& program);
// cuTensorMapEncodeTiled rules for program.tma[index], checked before any driver sees them.
void check_tma(const Program& program, uint32_t index);
// Every wait can be met by the sum of all signals to its counter (verify.wait.unsatisfiable).
void check_waits_satisfiable(const Program& program);
// Device counters are 32-bit: the signals of one pass may add at most kMaxCounterValue to a
// counter (verify.counter.overflow at the signal that goes past it). Waits are 32-bit values
// and, once satisfiable, never ask for more than the signals add. Several passes in one launch
// multiply both; the planner checks that (check_passes, plan.hpp).
inline constexpr uint64_t kMaxCounterValue = UINT32_MAX;
void check_counter_range(const Program& program);
// Queue structure (count, valid items, every instruction exactly once), satisfiable waits and
// the deadlock proof; throws verify.deadlock with every stuck head in the detail.
void check_queues(const Program& program, const std::vector<std::vector<uint32_t>>& queues);
// A legal execution order of the instruction pool (no queues): any instruction whose waits
// hold may run. `priority` (one per instruction, optional): among ready instructions the
// highest runs first (ties: lowest index). Throws verify.deadlock naming the instructions that
// never became ready.
[[nodiscard]] std::vector<uint32_t> pool_order(const Program& program,
                                               const std::vector<double>* priority = nullptr);

// What orders instructions: queue order plus the counter signals a wait cannot do without.
// Nodes 0..n_instructions-1 are instructions; the rest are join nodes, one per (counter,
// number of needed signalers), chained per counter so the graph stays linear in size.
// Only valid for a program that passed the deadlock proof (the graph is then acyclic).
struct DependencyGraph {
  uint32_t n_instructions = 0;
  uint32_t n_nodes = 0;
  std::vector<uint32_t> pred_offsets;  // n_nodes + 1, CSR into preds
  std::vector<uint32_t> preds;
  std::vector<uint32_t> topo;      // all nodes, every node after its predecessors
  uint64_t instruction_edges = 0;  // direct producer -> consumer relations
};
[[nodiscard]] DependencyGraph build_dependency_graph(
    const Program& program, const std::vector<std::vector<uint32_t>>* queues);
// Longest chain of instructions in the graph.
[[nodiscard]] uint64_t critical_path(const DependencyGraph& graph);
// Throws verify.hazard for the first conflicting pair of accesses the graph leaves unordered.
// A kv_append at a position operand writes one row of each head, checked pairwise: an
// attention_decode of the same position reading that head's rows below it needs no order.
// Returns the number of distinct instruction pairs whose order was tested.
uint64_t check_hazards(const Program& program, const DependencyGraph& graph);

// ---- programs stepped over several passes (launch.passes, carried waits) ----

// Position bounds: every position operand (rope, kv_append, attention_decode) reads an element
// that no instruction writes (verify.position.written) and whose initial value the program
// states (zeros, constant or values; else verify.position.unknown); its position, that value +
// pass - 1, stays in 0..2^31-1 over `passes` passes, and a kv_append's below its max_len
// (verify.position.range, at the position operand). verify() checks launch.passes; the run path
// checks again when the user asks for another number of passes.
void check_position_bounds(const Program& program, uint32_t passes);
// Whether the program runs over several passes in one launch: launch.passes > 1 or a carried
// wait (a loop-carried dependency).
[[nodiscard]] bool runs_several_passes(const Program& program);

// The feed_token with an eos operand (the instruction that may end a launch early), if any.
// Throws verify.stop.many when two have one.
[[nodiscard]] std::optional<uint32_t> stopping_feed_token(const Program& program);
// The proof that several passes are safe, on the program unrolled over two passes
// (verify/passes.cpp): its deadlock proof, no signal running into the next pass ahead of a
// waiter (verify.pass.overtake) and, with options.check_hazards, its hazards (verify.hazard).
// Needs a program that passed the single-pass checks. Returns the hazard pairs tested.
uint64_t check_pass_loop(const Program& program, const VerifyOptions& options = {});

}  // namespace amk
