// amk inspect PROGRAM [--attributes]: a static summary (buffers and bytes, instructions by op,
// queues, counters, critical path) and, with --attributes, the compiled kernel's resources on
// this machine's GPU.
#include <algorithm>
#include <map>
#include <sstream>

#include "cli/common.hpp"
#include "session/gpu_session.hpp"
#include "core/error.hpp"
#include "ops/registry.hpp"
#include "plan/plan.hpp"
#include "verify/verify.hpp"

namespace amk::cli {
namespace {

struct InspectOptions {
  ProgramArgs program;
  bool attributes = false;
  uint32_t grid_hint = kDefaultGridHint;
  bool list_buffers = true;
  int device = 0;
  CacheArgs cache;
  VmArgs vm;
  std::string cubin;
};

int run_inspect(const GlobalOptions& g, const InspectOptions& o) {
  VerifySummary summary;
  Program p = load_and_verify(o.program, &summary);
  PlanOptions popts;
  popts.grid_hint = o.grid_hint;
  Plan plan = make_plan(p, popts);

  ordered_json j;
  std::ostringstream t;
  j["status"] = "ok";
  j["name"] = p.name;
  j["path"] = o.program.path;
  t << p.name << "  (" << o.program.path << ")\n";
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
  }
  j["buffers"] = {
      {"count", p.buffers.size()}, {"bytes", total}, {"output_bytes", out_bytes}, {"list", bufs}};
  t << "buffers       " << p.buffers.size() << " (" << format_bytes(total) << ", outputs "
    << format_bytes(out_bytes) << ")\n";
  if (o.list_buffers) {
    for (const auto& b : p.buffers) {
      std::string shape = "[";
      for (size_t i = 0; i < b.shape.size(); ++i)
        shape += (i ? ", " : "") + std::to_string(b.shape[i]);
      shape += "]";
      t << "  " << (b.output ? "out " : "    ") << b.name << "  " << dtype_name(b.dtype) << shape
        << "  " << format_bytes(b.bytes()) << "  init " << init_kind_name(b.init.kind) << "\n";
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
                 {"timeout_ms", p.launch.timeout_ms}};
  j["target"] = {{"min_arch", p.target.min_arch},
                 {"features", feature_names(p.target.features)},
                 {"smem_per_block", p.target.smem_per_block}};
  j["tma"] = p.tma.size();
  j["custom_ops"] = p.custom_ops.size();
  t << "launch        " << (p.launch.mode == LaunchMode::cluster ? "cluster" : "cooperative")
    << ", grid " << (p.launch.grid == 0 ? std::string("auto") : std::to_string(p.launch.grid))
    << ", block " << p.launch.block << ", dynamic smem " << p.launch.dynamic_smem << " B, timeout "
    << p.launch.timeout_ms << " ms\n";
  if (!p.tma.empty()) t << "tma specs     " << p.tma.size() << "\n";
  if (!p.custom_ops.empty()) t << "custom ops    " << p.custom_ops.size() << "\n";

  if (o.attributes) {
    GpuRequest req;
    req.vm = parse_vm_args(o.vm);
    req.line_info = o.vm.line_info;
    req.device = o.device;
    req.use_cache = !o.cache.no_cache;
    if (!o.cache.cache_dir.empty()) req.cache_dir = o.cache.cache_dir;
    req.cubin = cubin_request(o.cubin);
    ordered_json attrs = kernel_attributes(p, o.program.load_options(), req, t);
    j["attributes"] = std::move(attrs);
  }
  emit(g, j, t.str());
  return 0;
}

}  // namespace

void setup_inspect(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "summarize a program (and its compiled kernel)");
  add_program_args(cmd, o->program);
  auto* attributes =
      cmd->add_flag("--attributes", o->attributes,
                    "compile for this machine's GPU and show the kernel's resources and occupancy");
  cmd->add_option("--grid-hint", o->grid_hint,
                  "blocks to schedule over when the program has no queues and grid is auto");
  // (the GPU's options mean something with --attributes only: refused without it)
  add_device_option(cmd, o->device)->needs(attributes);
  add_cache_args(cmd, o->cache);
  o->cache.no_cache_option->needs(attributes);
  o->cache.cache_dir_option->needs(attributes);
  add_vm_args(cmd, o->vm);
  add_cubin_option(cmd, o->cubin)->needs(attributes);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_inspect(g, *o); }; });
}

}  // namespace amk::cli
