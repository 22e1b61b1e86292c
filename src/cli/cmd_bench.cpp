// amk bench PROGRAM: the megakernel against one launch per instruction and against the same
// launches as a CUDA graph, interleaved in one process (src/cuda/bench.hpp has the method).
#include <sstream>

#include "backend/host_data.hpp"
#include "cli/common.hpp"
#include "session/gpu_session.hpp"
#include "core/error.hpp"

namespace amk::cli {
namespace {

struct BenchCmdOptions {
  ProgramArgs program;
  BenchRequest request;
  std::optional<uint64_t> timeout_ms;
  bool no_cache = false;
  std::string cache_dir;
  VmArgs vm;
};

int run_bench_cmd(const GlobalOptions& g, BenchCmdOptions o) {
  o.request.gpu.vm = parse_vm_args(o.vm);
  o.request.gpu.line_info = o.vm.line_info;
  Program p = load_and_verify(o.program);
  // (a refusal before minutes of host data)
  o.request.gpu.checked_device = check_gpu(p, o.request.gpu.device);
  const HostBuffers initial = materialize_all(p, o.program.load_options());
  o.request.gpu.timeout_ms = o.timeout_ms;
  o.request.gpu.use_cache = !o.no_cache;
  if (!o.cache_dir.empty()) o.request.gpu.cache_dir = o.cache_dir;
  o.request.gpu.trust_custom_ops = o.program.trust_custom_ops;
  std::ostringstream text;
  const ordered_json j = bench_on_gpu(p, initial, o.request, text);
  emit(g, j, text.str());
  return 0;
}

}  // namespace

void setup_bench(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<BenchCmdOptions>();
  auto* cmd = app.add_subcommand(
      "bench", "time the megakernel against one launch per instruction and a CUDA graph");
  add_program_args(cmd, o->program);
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
  cmd->add_option("--timeout", o->timeout_ms, "watchdog deadline in ms per launch")
      ->check(CLI::Range(uint64_t{1}, uint64_t{86400000}));
  cmd->add_option("--device", o->request.gpu.device, "CUDA device ordinal");
  cmd->add_flag("--no-cache", o->no_cache, "compile afresh, ignoring the kernel cache");
  cmd->add_option("--cache-dir", o->cache_dir, "kernel cache folder (default: XDG cache)");
  add_vm_args(cmd, o->vm);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_bench_cmd(g, *o); }; });
}

}  // namespace amk::cli
