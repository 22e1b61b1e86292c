// amk run PROGRAM: the options of a run (session/run_session.hpp does the run) and its printing.
#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/common.hpp"
#include "core/error.hpp"
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
  uint32_t passes = 1;
  bool passes_given = false;
  bool iterations_given = false;  // the deprecated name of --passes
  std::optional<uint64_t> timeout_ms;
  int device = 0;
  bool device_given = false;
  CacheArgs cache;
  VmArgs vm;
  std::string cubin;
  bool trust_source = false;
};

int run_run(const GlobalOptions& g, const RunOptions& o) {
  if (o.iterations_given && o.passes_given)
    throw Error(ErrorKind::usage, "usage.run.passes", "--iterations",
                "--iterations is the old name of --passes: give one of them");
  if (o.iterations_given)
    spdlog::warn("amk run --iterations is deprecated: use --passes (passes over the program in "
                 "one launch; amk profile's --iterations counts timed launches)");
  // The CPU backend has no devices and compiles nothing: say so rather than ignore --device or
  // --cubin silently.
  std::vector<std::string> ignored;
  if (o.device_given) ignored.push_back("--device " + std::to_string(o.device));
  if (!o.cubin.empty()) ignored.push_back("--cubin");
  std::string why;
  const bool cpu = o.backend == "cpu" || (!ignored.empty() && o.backend == "auto" &&
                                          !gpu_present(&why));  // (asked only when it matters)
  for (const std::string& opt : ignored) {
    if (o.backend == "cpu")
      spdlog::warn("{} is ignored on the CPU backend", opt);
    else if (cpu)
      spdlog::warn("{} is ignored on the CPU backend, which auto falls back to without a usable "
                   "GPU",
                   opt);
  }
  RunRequest req;
  req.program_path = o.program.path;
  req.load = o.program.load_options();
  req.backend = o.backend;
  req.out_dir = o.out_dir;
  req.report_path = o.report_path;
  req.check = o.check;
  req.save_inputs = o.save_inputs;
  req.reseed = o.reseed;
  req.trust_source = o.trust_source;
  req.gpu.device = o.device;
  // (0: the program's launch.passes)
  req.gpu.iterations = o.passes_given || o.iterations_given ? o.passes : 0;
  req.gpu.timeout_ms = o.timeout_ms;
  req.gpu.use_cache = !o.cache.no_cache;
  if (!o.cache.cache_dir.empty()) req.gpu.cache_dir = o.cache.cache_dir;
  req.gpu.vm = parse_vm_args(o.vm);  // (a usage error before anything runs)
  req.gpu.line_info = o.vm.line_info;
  if (!cpu) req.gpu.cubin = cubin_request(o.cubin);  // (its io.* errors before anything runs)
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
  cmd->add_option("-o,--output", o->out_dir,
                  "write outputs (.npy + manifest.json) and report.json here");
  // (--out: the spelling before -o,--output was every command's; hidden, kept for scripts)
  cmd->add_option("--out", o->out_dir)->group("");
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
  cmd->add_option("--passes", o->passes,
                  "passes over the program in one launch (default: the program's launch.passes, "
                  "1 unless it says otherwise; amk profile's --iterations counts launches)")
      ->check(CLI::Range(1u, 1000000u))
      ->each([o](const std::string&) { o->passes_given = true; });
  // (--iterations: the old, deprecated name of --passes; hidden, warns, kept for scripts)
  cmd->add_option("--iterations", o->passes)
      ->check(CLI::Range(1u, 1000000u))
      ->group("")
      ->each([o](const std::string&) { o->iterations_given = true; });
  add_timeout_option(cmd, o->timeout_ms, "watchdog deadline in ms, instead of the program's");
  add_device_option(cmd, o->device)->each([o](const std::string&) { o->device_given = true; });
  add_cache_args(cmd, o->cache);
  add_vm_args(cmd, o->vm);
  add_cubin_option(cmd, o->cubin);
  add_trust_source_flag(cmd, o->trust_source);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_run(g, *o); }; });
}

}  // namespace amk::cli
