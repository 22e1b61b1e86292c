// amk run PROGRAM: the options of a run (session/run_session.hpp does the run) and its printing.
#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <string>

#include "cli/common.hpp"
#include "session/run_session.hpp"

namespace amk::cli {
namespace {

struct RunOptions {
  ProgramArgs program;
  std::string backend = "auto";
  std::string out_dir;
  std::string report_path;
  bool check = false;
  bool save_inputs = false;
  std::optional<uint64_t> reseed;
  uint32_t iterations = 1;
  std::optional<uint64_t> timeout_ms;
  int device = 0;
  bool no_cache = false;
  std::string cache_dir;
  VmArgs vm;
};

int run_run(const GlobalOptions& g, const RunOptions& o) {
  RunRequest req;
  req.program_path = o.program.path;
  req.load = o.program.load_options();
  req.backend = o.backend;
  req.out_dir = o.out_dir;
  req.report_path = o.report_path;
  req.check = o.check;
  req.save_inputs = o.save_inputs;
  req.reseed = o.reseed;
  req.gpu.device = o.device;
  req.gpu.iterations = o.iterations;
  req.gpu.timeout_ms = o.timeout_ms;
  req.gpu.use_cache = !o.no_cache;
  if (!o.cache_dir.empty()) req.gpu.cache_dir = o.cache_dir;
  req.gpu.vm = parse_vm_args(o.vm);  // (a usage error before anything runs)
  req.gpu.line_info = o.vm.line_info;
  const RunResult run = run_program(req);
  emit(g, run.report, run.text);
  return 0;
}

}  // namespace

void setup_run(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "run a program (GPU when present, else CPU reference)");
  add_program_args(cmd, o->program);
  cmd->add_option("-b,--backend", o->backend, "auto | cuda | cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("-o,--out", o->out_dir,
                  "write outputs (.npy + manifest.json) and report.json here");
  cmd->add_option("--report", o->report_path, "write report.json here (default: OUT/report.json)");
  cmd->add_flag("--check", o->check,
                "compare every output with the CPU backend (normalized error at the output dtype's "
                "tolerance, or a coarser one where it follows bf16/f16 stores: README)");
  cmd->add_flag("--save-inputs", o->save_inputs, "also write every input buffer under OUT/inputs");
  cmd->add_option(
         "--reseed", o->reseed,
         "draw every random init from another seed (random_bits(RESEED, seed): schemas/init.md)")
      ->check([](const std::string& v) -> std::string {
        // (CLI11 would take "-1" as 2^64 - 1 and "" as 0: only a plain decimal in range is one)
        uint64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        const bool digits = !v.empty() && std::all_of(v.begin(), v.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
        return digits && ec == std::errc() && end == v.data() + v.size()
                   ? std::string()
                   : "expected a decimal integer in 0..18446744073709551615, got '" + v + "'";
      });
  cmd->add_option("--iterations", o->iterations, "passes over the program in one launch")
      ->check(CLI::Range(1u, 1000000u));
  cmd->add_option("--timeout", o->timeout_ms, "watchdog deadline in ms (overrides the program)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{86400000}));
  cmd->add_option("--device", o->device, "CUDA device ordinal");
  cmd->add_flag("--no-cache", o->no_cache, "compile afresh, ignoring the kernel cache");
  cmd->add_option("--cache-dir", o->cache_dir, "kernel cache folder (default: XDG cache)");
  add_vm_args(cmd, o->vm);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_run(g, *o); }; });
}

}  // namespace amk::cli
