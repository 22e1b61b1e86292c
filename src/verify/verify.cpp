// verify(): launch rules, every instruction, every TMA spec, position bounds, queue structure
// and the deadlock proof, then the dependency graph and the hazard sweep, and for a program of
// several passes the same proofs over two passes unrolled. Cheap local checks run first so a
// broken program fails fast with the most specific location.
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "verify/ranks.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

constexpr uint32_t kWarpSize = 32;
constexpr uint32_t kMaxBlockThreads = 1024;
constexpr uint32_t kMaxPortableCluster = 16;  // non-portable size on sm_90 (opt-in attribute)
constexpr uint32_t kMaxDynamicSmem = 232448;  // 227 KiB: the sm_90 per-block opt-in maximum

}  // namespace

void check_launch(const Program& program) {
  const Launch& launch = program.launch;
  if (launch.grid > kMaxQueues)
    throw_program_error("launch.grid", "/launch/grid",
                        "grid of " + std::to_string(launch.grid) + " blocks; at most " +
                            std::to_string(kMaxQueues) +
                            " (a persistent grid must be co-resident: SMs x blocks per SM)");
  if (program.queues && program.queues->size() > kMaxQueues)
    throw_program_error("limit.queues", "/queues",
                        std::to_string(program.queues->size()) + " queues; at most " +
                            std::to_string(kMaxQueues) + " (one per block)");
  if (launch.block < kWarpSize || launch.block > kMaxBlockThreads || launch.block % kWarpSize != 0)
    throw_program_error("launch.block", "/launch/block",
                        "block of " + std::to_string(launch.block) +
                            " threads: must be 32..1024 and a multiple of 32 (whole warps)");
  const uint64_t cluster = uint64_t{launch.cluster[0]} * launch.cluster[1] * launch.cluster[2];
  if (launch.mode == LaunchMode::cooperative) {
    if (cluster != 1)
      throw_program_error("launch.cluster", "/launch/cluster",
                          "cooperative launch takes no clusters; cluster must be [1, 1, 1]");
  } else {
    for (int d = 0; d < 3; ++d)
      if (launch.cluster[d] < 1)
        throw_program_error("launch.cluster", "/launch/cluster/" + std::to_string(d),
                            "cluster dimensions must be >= 1");
    if (cluster > kMaxPortableCluster)
      throw_program_error("launch.cluster", "/launch/cluster",
                          "cluster of " + std::to_string(cluster) + " blocks; at most " +
                              std::to_string(kMaxPortableCluster));
    // Queues fix the grid when launch.grid is auto; either way it must be whole clusters.
    uint64_t grid = launch.grid;
    std::string where = "/launch/grid";
    if (grid == 0 && program.queues) {
      grid = program.queues->size();
      where = "/queues";
    }
    if (grid != 0 && grid % cluster != 0)
      throw_program_error("launch.grid", where,
                          "grid of " + std::to_string(grid) +
                              " blocks is not a multiple of the cluster size " +
                              std::to_string(cluster));
  }
  if (launch.dynamic_smem > kMaxDynamicSmem)
    throw_program_error("launch.smem", "/launch/dynamic_smem",
                        std::to_string(launch.dynamic_smem) +
                            " bytes of dynamic shared memory; at most " +
                            std::to_string(kMaxDynamicSmem) + " per block");
  if (program.target.smem_per_block > kMaxDynamicSmem)
    throw_program_error("launch.smem", "/target/smem_per_block",
                        std::to_string(program.target.smem_per_block) +
                            " bytes of shared memory per block; at most " +
                            std::to_string(kMaxDynamicSmem));
  if (launch.timeout_ms == 0)
    throw_program_error("launch.timeout", "/launch/timeout_ms", "timeout must be > 0 ms");
}

VerifySummary verify(const Program& program, const VerifyOptions& options) {
  check_ranks(program);
  if (program.launch.ranks > 1) {
    // Each instruction's own rules, then every proof over the expansion: deadlock and hazard
    // freedom across ranks are those of the one program that holds every rank.
    check_launch(program);
    for (uint32_t i = 0; i < program.instructions.size(); ++i) check_instruction(program, i);
    const RankExpansion x = expand_ranks(program);
    try {
      return verify(x.program, options);
    } catch (const Error& e) {
      throw rank_error(e, x.origin);
    }
  }
  check_launch(program);
  for (uint32_t i = 0; i < program.instructions.size(); ++i) check_instruction(program, i);
  for (uint32_t t = 0; t < program.tma.size(); ++t) check_tma(program, t);
  check_counter_range(program);
  check_position_bounds(program, program.launch.passes);
  (void)stopping_feed_token(program);  // one at most

  if (program.queues) {
    check_queues(program, *program.queues);  // structure, satisfiable waits, deadlock proof
  } else {
    check_waits_satisfiable(program);
    (void)pool_order(program);  // throws verify.deadlock when no legal order exists
  }

  VerifySummary summary;
  const DependencyGraph graph =
      build_dependency_graph(program, program.queues ? &*program.queues : nullptr);
  summary.critical_path = critical_path(graph);
  summary.dependency_edges = graph.instruction_edges;
  if (options.check_hazards) summary.hazard_pairs_checked = check_hazards(program, graph);
  if (runs_several_passes(program))
    summary.hazard_pairs_checked += check_pass_loop(program, options);
  return summary;
}

}  // namespace amk
