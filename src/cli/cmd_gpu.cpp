// The GPU-facing subcommands: amk compile (ahead of time, no GPU needed), amk devices,
// amk profile --events / --trace (session/gpu_session.hpp does the work).
#include <sstream>
#include <utility>

#include "cli/common.hpp"
#include "session/gpu_session.hpp"
#include "core/error.hpp"

namespace amk::cli {
namespace {

struct CompileCmdOptions {
  ProgramArgs program;
  std::string arch;  // empty: sm_90a for a VM program, the target snapshot's for a wrapper
  CompileOutputs files;
  CacheArgs cache;
  VmArgs vm;
  bool explain = false;
  bool trust_source = false;
};

// A wrapper program: its own source, compiled only with --trust-source, for its snapshot's arch.
int run_compile_wrapper(const GlobalOptions& g, const CompileCmdOptions& o) {
  // The VM's flags say nothing about a wrapper: refused by name rather than ignored.
  const std::pair<bool, const char*> vm_only[] = {{!o.vm.vm.empty(), "--vm"},
                                                  {o.explain, "--explain"},
                                                  {!o.files.source.empty(), "--source-out"},
                                                  {!o.files.ptx.empty(), "--ptx-out"}};
  for (const auto& [given, flag] : vm_only)
    if (given)
      throw Error(ErrorKind::usage, "usage.wrapper.compile", flag,
                  std::string(flag) + " applies to VM programs; a wrapper's source is its own");
  const WrapperProgram w = load_and_check_wrapper(o.program);
  const std::string arch = wrapper_compile_arch(w, o.arch, o.trust_source);
  GpuRequest req;
  req.line_info = o.vm.line_info;
  req.use_cache = !o.cache.no_cache;
  if (!o.cache.cache_dir.empty()) req.cache_dir = o.cache.cache_dir;
  std::ostringstream text;
  const ordered_json j = compile_wrapper_for_arch(w, arch, req, o.files.cubin, text);
  emit(g, j, text.str());
  return 0;
}

int run_compile(const GlobalOptions& g, const CompileCmdOptions& o) {
  if (is_wrapper_file(o.program.path)) return run_compile_wrapper(g, o);
  GpuRequest req;
  req.vm = parse_vm_args(o.vm);
  req.line_info = o.vm.line_info;
  Program p = load_and_verify(o.program);
  req.use_cache = !o.cache.no_cache;
  if (!o.cache.cache_dir.empty()) req.cache_dir = o.cache.cache_dir;
  req.trust_custom_ops = o.program.trust_custom_ops;
  std::ostringstream text;
  ordered_json j =
      compile_for_arch(p, o.arch.empty() ? "sm_90a" : o.arch, req, o.files, o.explain, text);
  emit(g, j, text.str());
  return 0;
}

struct ProfileCmdOptions {
  ProgramArgs program;
  bool events = false;
  std::string trace_path;
  std::string out_dir;
  std::string report_path;
  ProfileRequest request;
  std::optional<uint64_t> timeout_ms;
  CacheArgs cache;
  bool rounds_given = false;
  bool arms_given = false;  // (an empty --tuning-arms is refused, not ignored)
  std::string tuning_arms;
  VmArgs vm;
  std::string cubin;
  bool trust_source = false;
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
  // A cubin holds one VM: not the traced one, nor one per arm.
  if (!o.cubin.empty() && (o.arms_given || !o.trace_path.empty()))
    throw Error(ErrorKind::usage, "usage.profile.cubin", "--cubin",
                "--cubin applies to --events without --tuning-arms (a trace and each arm compile "
                "a VM of their own)");
  if (is_wrapper_file(o.program.path) &&
      (!o.events || o.arms_given || !o.trace_path.empty() || !o.vm.vm.empty()))
    throw Error(ErrorKind::usage, "usage.wrapper.profile", o.events ? "--tuning-arms" : "--trace",
                "a wrapper program profiles with --events alone: tuning arms, --vm and traces "
                "belong to amk's VM");
  if (o.arms_given) o.request.arms = parse_tuning_arms(o.tuning_arms, "--tuning-arms");
  ProfileProgramRequest req;
  req.files = {o.program.path, o.program.load_options(), o.out_dir, o.report_path, o.trust_source};
  req.profile = std::move(o.request);
  req.profile.gpu.vm = parse_vm_args(o.vm);
  req.profile.gpu.line_info = o.vm.line_info;
  req.profile.gpu.timeout_ms = o.timeout_ms;
  req.profile.gpu.use_cache = !o.cache.no_cache;
  if (!o.cache.cache_dir.empty()) req.profile.gpu.cache_dir = o.cache.cache_dir;
  req.profile.gpu.cubin = cubin_request(o.cubin);
  req.events = o.events;
  req.trace_path = o.trace_path;
  const CommandResult r = profile_program(req);
  emit(g, r.json, r.text);
  return 0;
}

int run_devices(const GlobalOptions& g) {
  std::ostringstream text;
  ordered_json j = devices_report(text);
  emit(g, j, text.str());
  return 0;
}

}  // namespace

void setup_compile(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<CompileCmdOptions>();
  auto* cmd = app.add_subcommand(
      "compile",
      "compile a program's VM, or a wrapper program's kernel, with NVRTC (no GPU needed)");
  add_program_args(cmd, o->program);
  cmd->add_option("--arch", o->arch,
                  "target architecture (default sm_90a; a wrapper program: its target.arch, and "
                  "no other)");
  add_trust_source_flag(cmd, o->trust_source);
  cmd->add_option("-o,--output", o->files.cubin,
                  "also write the cubin here, and beside it FILE.json, the record of what it was "
                  "built for (arch, fingerprints, versions) that run/profile --cubin FILE check")
      ->type_name("FILE");
  cmd->add_option("--source-out", o->files.source,
                  "also write the generated CUDA source here (it includes the kernels/ headers)");
  cmd->add_option(
      "--ptx-out", o->files.ptx,
      "also write the VM's PTX here (virtual architecture of --arch, e.g. compute_90a)");
  add_cache_args(cmd, o->cache);
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
  cmd->add_option("-o,--output", o->out_dir, "write report.json here (the folder is made)");
  cmd->add_option("--report", o->report_path, "write report.json here (default: OUT/report.json)");
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
  add_timeout_option(cmd, o->timeout_ms, "watchdog deadline in ms, instead of the program's");
  add_device_option(cmd, o->request.gpu.device);
  add_cache_args(cmd, o->cache);
  add_vm_args(cmd, o->vm);
  add_cubin_option(cmd, o->cubin);
  add_trust_source_flag(cmd, o->trust_source);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_profile(g, *o); }; });
}

}  // namespace amk::cli
