// The GPU-facing subcommands: amk compile (ahead of time, no GPU needed), amk devices,
// amk profile --events.
#include <sstream>

#include "backend/host_data.hpp"
#include "cli/common.hpp"
#include "session/gpu_session.hpp"
#include "core/error.hpp"

namespace amk::cli {
namespace {

struct CompileCmdOptions {
  ProgramArgs program;
  std::string arch = "sm_90a";
  CompileOutputs files;
  bool no_cache = false;
  std::string cache_dir;
  VmArgs vm;
  bool explain = false;
};

int run_compile(const GlobalOptions& g, const CompileCmdOptions& o) {
  GpuRequest req;
  req.vm = parse_vm_args(o.vm);
  req.line_info = o.vm.line_info;
  Program p = load_and_verify(o.program);
  req.use_cache = !o.no_cache;
  if (!o.cache_dir.empty()) req.cache_dir = o.cache_dir;
  req.trust_custom_ops = o.program.trust_custom_ops;
  std::ostringstream text;
  ordered_json j = compile_for_arch(p, o.arch, req, o.files, o.explain, text);
  emit(g, j, text.str());
  return 0;
}

struct ProfileCmdOptions {
  ProgramArgs program;
  bool events = false;
  std::string trace_path;
  ProfileRequest request;
  std::optional<uint64_t> timeout_ms;
  bool no_cache = false;
  std::string cache_dir;
  bool rounds_given = false;
  bool arms_given = false;  // (an empty --tuning-arms is refused, not ignored)
  std::string tuning_arms;
  VmArgs vm;
};

int run_profile(const GlobalOptions& g, ProfileCmdOptions o) {
  if (!o.events && o.trace_path.empty())
    throw Error(ErrorKind::usage, "usage.profile.mode", "",
                "choose what to profile: --events (CUDA-event timings of whole launches) and/or "
                "--trace FILE (a per-instruction timeline)");
  if (o.request.cold && !o.events)
    throw Error(ErrorKind::usage, "usage.profile.cold", "--cold",
                "--cold applies to --events (the trace's single launch is not flushed)");
  if (o.arms_given && (!o.events || !o.trace_path.empty()))
    throw Error(ErrorKind::usage, "usage.profile.arms", "--tuning-arms",
                "--tuning-arms applies to --events alone (each arm's launches timed, interleaved)");
  if (o.rounds_given && !o.arms_given)
    throw Error(ErrorKind::usage, "usage.profile.rounds", "--rounds",
                "--rounds applies to --tuning-arms");
  if (o.arms_given) o.request.arms = parse_tuning_arms(o.tuning_arms, "--tuning-arms");
  o.request.gpu.vm = parse_vm_args(o.vm);
  o.request.gpu.line_info = o.vm.line_info;
  Program p = load_and_verify(o.program);
  // (a refusal before minutes of host data)
  o.request.gpu.checked_device = check_gpu(p, o.request.gpu.device);
  HostBuffers initial = materialize_all(p, o.program.load_options());
  o.request.gpu.timeout_ms = o.timeout_ms;
  o.request.gpu.use_cache = !o.no_cache;
  if (!o.cache_dir.empty()) o.request.gpu.cache_dir = o.cache_dir;
  o.request.gpu.trust_custom_ops = o.program.trust_custom_ops;
  std::ostringstream text;
  ordered_json j;
  if (o.events)
    j = o.arms_given ? profile_arms_on_gpu(p, initial, o.request, text)
                     : profile_on_gpu(p, initial, o.request, text);
  if (!o.trace_path.empty()) {
    ordered_json t = trace_on_gpu(p, initial, o.request.gpu, o.trace_path, text);
    if (o.events)
      j["trace"] = std::move(t);
    else
      j = ordered_json{{"status", "ok"}, {"program", p.name}, {"trace", std::move(t)}};
  }
  emit(g, j, text.str());
  return 0;
}

int run_devices(const GlobalOptions& g) {
  std::ostringstream text;
  ordered_json j = list_gpus(text);
  emit(g, j, text.str());
  return 0;
}

}  // namespace

void setup_compile(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<CompileCmdOptions>();
  auto* cmd = app.add_subcommand("compile", "compile a program's VM with NVRTC (no GPU needed)");
  add_program_args(cmd, o->program);
  cmd->add_option("--arch", o->arch, "target architecture (default sm_90a)");
  cmd->add_option("-o,--output", o->files.cubin, "also write the cubin here");
  cmd->add_option("--source-out", o->files.source,
                  "also write the generated CUDA source here (it includes the kernels/ headers)");
  cmd->add_option(
      "--ptx-out", o->files.ptx,
      "also write the VM's PTX here (virtual architecture of --arch, e.g. compute_90a)");
  cmd->add_flag("--no-cache", o->no_cache, "compile afresh, ignoring the kernel cache");
  cmd->add_option("--cache-dir", o->cache_dir, "kernel cache folder (default: XDG cache)");
  add_vm_args(cmd, o->vm);
  cmd->add_flag("--explain", o->explain,
                "print every field of the VM's configuration, its value and why");
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_compile(g, *o); }; });
}

void setup_devices(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* cmd = app.add_subcommand("devices", "list CUDA devices and their capabilities");
  cmd->callback([&g, &action] { action = [&g] { return run_devices(g); }; });
}

void setup_profile(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<ProfileCmdOptions>();
  auto* cmd = app.add_subcommand("profile", "time a program's launches on the GPU");
  add_program_args(cmd, o->program);
  cmd->add_flag("--events", o->events, "CUDA-event timings: median, min, max, spread");
  cmd->add_option("--trace", o->trace_path,
                  "write a per-instruction timeline (Chrome trace JSON, opens in Perfetto) and "
                  "print per-op and per-block summaries");
  cmd->add_option("--warmup", o->request.warmup, "launches before timing");
  cmd->add_option("--iterations", o->request.iterations, "timed launches")
      ->check(CLI::Range(1u, 100000u));
  cmd->add_option("--scope", o->request.scope,
                  "kernel: events around the launch; launch: around counter reset + launch")
      ->check(CLI::IsMember({"kernel", "launch"}));
  cmd->add_flag("--cold", o->request.cold,
                "with --events: flush L2 before every launch (untimed), so weights come from HBM");
  cmd->add_option("--tuning-arms", o->tuning_arms,
                  "with --events: compare VM configurations in one process, 'ARM;ARM;...' (2-16 "
                  "arms, each 'default' or FIELD=VALUE[,FIELD=VALUE...] as --vm takes, on top of "
                  "--vm); one executable per arm, all in GPU memory at once, timed in "
                  "interleaved rounds")
      ->each([o](const std::string&) { o->arms_given = true; });
  cmd->add_option("--rounds", o->request.rounds, "with --tuning-arms: interleaved rounds (2)")
      ->check(CLI::Range(1u, 100u))
      ->each([o](const std::string&) { o->rounds_given = true; });
  cmd->add_option("--timeout", o->timeout_ms, "watchdog deadline in ms")
      ->check(CLI::Range(uint64_t{1}, uint64_t{86400000}));
  cmd->add_option("--device", o->request.gpu.device, "CUDA device ordinal");
  cmd->add_flag("--no-cache", o->no_cache, "compile afresh, ignoring the kernel cache");
  cmd->add_option("--cache-dir", o->cache_dir, "kernel cache folder (default: XDG cache)");
  add_vm_args(cmd, o->vm);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_profile(g, *o); }; });
}

}  // namespace amk::cli
