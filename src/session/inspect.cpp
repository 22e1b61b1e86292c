// `amk inspect`'s static summary of a program (see inspect.hpp).
#include "session/inspect.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "core/numeric.hpp"
#include "ops/registry.hpp"
#include "plan/plan.hpp"
#include "verify/ranks.hpp"

namespace amk {

using ordered_json = nlohmann::ordered_json;

nlohmann::ordered_json inspect_program(const Program& p, const VerifySummary& summary,
                                       const std::string& path, uint32_t grid_hint,
                                       bool list_buffers, std::ostream& t) {
  PlanOptions popts;
  popts.grid_hint = grid_hint;
  // A program with ranks is planned (and runs) as its expansion over them.
  const std::optional<RankExpansion> ranks =
      p.launch.ranks > 1 ? std::optional<RankExpansion>(expand_ranks(p)) : std::nullopt;
  const Plan plan = make_plan(ranks ? ranks->program : p, popts);
  ordered_json j;
  j["status"] = "ok";
  j["name"] = p.name;
  j["path"] = path;
  t << p.name << "  (" << path << ")\n";
  if (!p.description.empty()) t << "  " << p.description << "\n";

  // Buffers.
  uint64_t total = 0, out_bytes = 0;
  ordered_json bufs = ordered_json::array();
  for (const auto& b : p.buffers) {
    total += b.bytes();
    if (b.output) out_bytes += b.bytes();
    bufs.push_back({{"name", b.name},
                    {"dtype", std::string(dtype_name(b.dtype))},
                    {"shape", b.shape},
                    {"bytes", b.bytes()},
                    {"init", std::string(init_kind_name(b.init.kind))},
                    {"output", b.output}});
    if (!b.init.window_of.empty()) bufs.back()["window_of"] = b.init.window_of;
  }
  j["buffers"] = {
      {"count", p.buffers.size()}, {"bytes", total}, {"output_bytes", out_bytes}, {"list", bufs}};
  t << "buffers       " << p.buffers.size() << " (" << format_bytes(total) << ", outputs "
    << format_bytes(out_bytes) << (p.launch.ranks > 1 ? ", a rank" : "") << ")\n";
  if (list_buffers) {
    for (const auto& b : p.buffers) {
      std::string shape = "[";
      for (size_t i = 0; i < b.shape.size(); ++i)
        shape += (i ? ", " : "") + std::to_string(b.shape[i]);
      shape += "]";
      t << "  " << (b.output ? "out " : "    ") << b.name << "  " << dtype_name(b.dtype) << shape
        << "  " << format_bytes(b.bytes()) << "  init " << init_kind_name(b.init.kind);
      if (const auto& of = b.init.window_of; !of.empty()) {
        t << (b.rank_inits.empty() ? ", a block of [" : ", each rank's block of [");
        for (size_t i = 0; i < of.size(); ++i) t << (i ? ", " : "") << of[i];
        t << "]";
      }
      t << "\n";
    }
  }

  // Instructions by op.
  std::map<std::string, uint64_t> by_op;
  for (const auto& ins : p.instructions) ++by_op[op_name(p, ins.op)];
  ordered_json ops = ordered_json::object();
  t << "instructions  " << p.instructions.size() << "\n";
  for (const auto& [name, n] : by_op) {
    ops[name] = n;
    t << "  " << name << "  " << n << "\n";
  }
  j["instructions"] = {{"count", p.instructions.size()}, {"by_op", ops}};

  // Counters, queues, critical path.
  j["counters"] = p.counters.size();
  t << "counters      " << p.counters.size() << "\n";
  std::vector<uint32_t> lengths;
  for (uint32_t q = 0; q < plan.n_queues(); ++q)
    lengths.push_back(plan.queue_offsets[q + 1] - plan.queue_offsets[q]);
  std::vector<uint32_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  const uint32_t qmin = sorted.empty() ? 0 : sorted.front();
  const uint32_t qmax = sorted.empty() ? 0 : sorted.back();
  const uint32_t qmed = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  j["queues"] = {{"count", plan.n_queues()},
                 {"built_by_amk", plan.queues_built},
                 {"lengths", lengths},
                 {"min", qmin},
                 {"median", qmed},
                 {"max", qmax},
                 {"elided_waits", plan.elided_waits},
                 {"elided_signals", plan.elided_signals}};
  t << "queues        " << plan.n_queues()
    << (plan.queues_built
            ? " (built by amk for grid " + std::to_string(plan.grid) +
                  (p.launch.grid == 0 ? ", auto: the GPU uses its co-resident maximum)" : ")")
            : " (from the program)")
    << ", length min " << qmin << " / median " << qmed << " / max " << qmax << "\n";
  if (plan.elided_waits + plan.elided_signals != 0)
    t << "              queue order already orders " << plan.elided_waits << " wait(s); they and "
      << plan.elided_signals << " signal(s) nobody else waits for are left out on the device\n";
  j["critical_path"] = summary.critical_path;
  j["dependency_edges"] = summary.dependency_edges;
  t << "critical path " << summary.critical_path << " instructions (" << summary.dependency_edges
    << " dependency edges)\n";

  // Launch and target.
  j["launch"] = {{"mode", p.launch.mode == LaunchMode::cluster ? "cluster" : "cooperative"},
                 {"grid", p.launch.grid == 0 ? ordered_json("auto") : ordered_json(p.launch.grid)},
                 {"block", p.launch.block},
                 {"cluster", {p.launch.cluster[0], p.launch.cluster[1], p.launch.cluster[2]}},
                 {"dynamic_smem", p.launch.dynamic_smem},
                 {"timeout_ms", p.launch.timeout_ms},
                 {"ranks", p.launch.ranks}};
  j["target"] = {{"min_arch", p.target.min_arch},
                 {"features", feature_names(p.target.features)},
                 {"smem_per_block", p.target.smem_per_block}};
  j["tma"] = p.tma.size();
  j["custom_ops"] = p.custom_ops.size();
  t << "launch        " << (p.launch.mode == LaunchMode::cluster ? "cluster" : "cooperative")
    << ", grid " << (p.launch.grid == 0 ? std::string("auto") : std::to_string(p.launch.grid))
    << ", block " << p.launch.block << ", dynamic smem " << p.launch.dynamic_smem << " B, timeout "
    << p.launch.timeout_ms << " ms\n";
  if (ranks)
    t << "ranks         " << p.launch.ranks << ", run on the CPU backend as one program of "
      << ranks->program.instructions.size()
      << " instructions over every rank (queues and critical path above are its)\n";
  if (!p.tma.empty()) t << "tma specs     " << p.tma.size() << "\n";
  if (!p.custom_ops.empty()) t << "custom ops    " << p.custom_ops.size() << "\n";

  return j;
}

}  // namespace amk
