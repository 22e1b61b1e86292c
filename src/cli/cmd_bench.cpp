// amk bench PROGRAM: the megakernel against one launch per instruction and against the same
// launches as a CUDA graph, interleaved in one process (src/cuda/bench.hpp has the method).
#include "cli/common.hpp"
#include "session/gpu_session.hpp"

namespace amk::cli {
namespace {

struct BenchCmdOptions {
  ProgramArgs program;
  std::string out_dir;
  std::string report_path;
  BenchRequest request;
  std::optional<uint64_t> timeout_ms;
  CacheArgs cache;
  VmArgs vm;
};

int run_bench_cmd(const GlobalOptions& g, BenchCmdOptions o) {
  BenchProgramRequest req;
  req.files = {o.program.path, o.program.load_options(), o.out_dir, o.report_path};
  req.bench = std::move(o.request);
  req.bench.gpu.vm = parse_vm_args(o.vm);  // (a usage error before anything runs)
  req.bench.gpu.line_info = o.vm.line_info;
  req.bench.gpu.timeout_ms = o.timeout_ms;
  req.bench.gpu.use_cache = !o.cache.no_cache;
  if (!o.cache.cache_dir.empty()) req.bench.gpu.cache_dir = o.cache.cache_dir;
  const CommandResult r = bench_program(req);
  emit(g, r.json, r.text);
  return 0;
}

}  // namespace

void setup_bench(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<BenchCmdOptions>();
  auto* cmd = app.add_subcommand(
      "bench", "time the megakernel against one launch per instruction and a CUDA graph");
  add_program_args(cmd, o->program);
  cmd->add_option("-o,--output", o->out_dir, "write report.json here (the folder is made)");
  cmd->add_option("--report", o->report_path, "write report.json here (default: OUT/report.json)");
  cmd->add_flag("--cold", o->request.cold,
                "flush L2 (write a 256 MiB scratch buffer) before every sample, untimed");
  cmd->add_option("--warmup", o->request.warmup, "untimed samples of each arm first")
      ->check(CLI::Range(0u, 1000u));
  cmd->add_option("--min-samples", o->request.min_samples, "samples per arm at least")
      ->check(CLI::Range(1u, 1000000u));
  cmd->add_option("--min-time", o->request.min_time_s, "seconds of sampling at least")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-noise", o->request.max_noise,
                  "stop once every arm's relative standard deviation is below this")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--time-limit", o->request.time_limit_s, "seconds of sampling at most")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--roofline", o->request.roofline_bytes_per_s,
                  "bytes/s the % of roofline is against (default: H200 streaming read)")
      ->check(CLI::PositiveNumber);
  add_timeout_option(cmd, o->timeout_ms, "watchdog deadline in ms per launch");
  add_device_option(cmd, o->request.gpu.device);
  add_cache_args(cmd, o->cache);
  add_vm_args(cmd, o->vm);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_bench_cmd(g, *o); }; });
}

}  // namespace amk::cli
