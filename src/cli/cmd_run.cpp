// amk run PROGRAM: load, verify, plan, execute (GPU, or the CPU reference backend), optionally
// compare with the CPU backend (--check), and write outputs (-o DIR) and report.json.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "backend/check_inputs.hpp"
#include "backend/cpu_backend.hpp"
#include "cli/common.hpp"
#include "session/gpu_session.hpp"
#include "cli/run_support.hpp"
#include "core/error.hpp"
#include "core/numeric.hpp"
#include "plan/plan.hpp"
#include "report/outputs.hpp"

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
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto ms_since = [](clock::time_point t) {
    return std::chrono::duration<double, std::milli>(clock::now() - t).count();
  };

  RunReport report;
  report.command = "run";
  report.program_path = o.program.path;
  const std::filesystem::path report_file =
      !o.report_path.empty() ? std::filesystem::path(o.report_path)
      : !o.out_dir.empty()   ? std::filesystem::path(o.out_dir) / "report.json"
                             : std::filesystem::path();

  GpuRequest req;
  req.device = o.device;
  req.iterations = o.iterations;
  req.timeout_ms = o.timeout_ms;
  req.use_cache = !o.no_cache;
  if (!o.cache_dir.empty()) req.cache_dir = o.cache_dir;
  req.trust_custom_ops = o.program.trust_custom_ops;
  req.vm = parse_vm_args(o.vm);  // (a usage error before anything runs)
  req.line_info = o.vm.line_info;

  // Every failure after this point still writes report.json (status error / timeout).
  try {
    auto phase = clock::now();
    Program p = load_and_verify(o.program);
    report.program_name = p.name;
    report.program_fingerprint = program_fingerprint(p);
    report.instructions = p.instructions.size();
    report.timings_ms.emplace_back("load_verify", ms_since(phase));

    // The backend (and, for the GPU, its device and target) before the host data, which for a
    // decode step's weights takes minutes: a refusal comes at once.
    std::string backend = o.backend;
    if (backend == "auto") {
      std::string why;
      backend = gpu_present(&why) ? "cuda" : "cpu";
      if (backend == "cpu")
        spdlog::warn("no usable GPU ({}); running on the CPU reference backend", why);
    }
    report.backend = backend;
    if (backend == "cuda") req.checked_device = check_gpu(p, o.device);

    phase = clock::now();
    uint32_t reseeded = 0;
    if (o.reseed) {
      reseeded = reseed_random_inits(p, *o.reseed);
      report.extra = {{"reseed", *o.reseed}, {"reseeded_buffers", reseeded}};
    }
    const LoadOptions load = o.program.load_options();
    HostBuffers initial = materialize_all(p, load);
    report.data_fingerprint = data_fingerprint(initial);
    // --check: the outputs whose initial zeros nothing reads start poisoned on both backends
    // (after the fingerprint, which stays that of the program's own data).
    std::vector<bool> poisoned;
    if (o.check) {
      poisoned = poisonable_outputs(p);
      poison_buffers(p, poisoned, initial);
    }
    report.timings_ms.emplace_back("materialize", ms_since(phase));

    HostBuffers result;
    if (backend == "cuda") {
      GpuOutcome out = run_on_gpu(p, initial, req);
      report.device = out.device;
      report.versions = out.versions;
      report.target_fingerprint = out.target_fingerprint;
      report.artifact_fingerprint = out.artifact_fingerprint;
      report.grid = out.grid;
      report.block = out.block;
      report.diagnostics = out.diagnostics;
      for (auto& t : out.timings_ms) report.timings_ms.push_back(t);
      if (out.status != "ok") {
        const ErrorKind kind = out.status == "timeout" ? ErrorKind::timeout : ErrorKind::launch;
        throw Error(kind, out.status == "timeout" ? "run.timeout" : "run.bad_operand", "",
                    out.message);
      }
      result = std::move(out.buffers);
    } else {
      phase = clock::now();
      PlanOptions popts;
      popts.grid_hint = kDefaultGridHint;
      Plan plan = make_plan(p, popts);
      report.grid = plan.grid;
      report.block = plan.block;
      report.timings_ms.emplace_back("plan", ms_since(phase));
      // The CPU backend runs in place: on a copy only when the initial contents are still
      // needed (--check, --save-inputs); otherwise on them (a decode step's are gigabytes).
      result = o.check || o.save_inputs ? copy_host_buffers(initial) : std::move(initial);
      CpuRunOptions copts;
      copts.iterations = o.iterations;
      CpuRunStats stats = run_cpu(p, plan, result, copts);
      report.timings_ms.emplace_back("cpu_execute", stats.elapsed_ms);
    }

    if (o.check) {
      phase = clock::now();
      // (--save-inputs writes the initial contents below; otherwise the check may consume them.)
      ordered_json check =
          check_against_cpu(p, o.save_inputs ? copy_host_buffers(initial) : std::move(initial),
                            result, o.iterations, poisoned);
      report.timings_ms.emplace_back("check", ms_since(phase));
      report.check = check;
      if (!check["passed"].get<bool>()) {
        report.status = "mismatch";
        throw Error(ErrorKind::mismatch, "check.mismatch", check["worst"].get<std::string>(),
                    check["summary"].get<std::string>());
      }
      // Where neither run wrote, the outputs hold what a run from zeros leaves there.
      (void)clear_poison(p, poisoned, result);
    }

    if (!o.out_dir.empty()) {
      phase = clock::now();
      report.outputs = write_outputs(o.out_dir, p, result, o.save_inputs, &initial);
      report.timings_ms.emplace_back("write_outputs", ms_since(phase));
    }
    report.timings_ms.emplace_back("total", ms_since(t0));
    report.status = "ok";
    const ordered_json rep = make_report(report);
    if (!report_file.empty()) write_report(report_file, report);

    std::ostringstream text;
    text << p.name << ": ok on " << backend << " (" << p.instructions.size() << " instructions, "
         << format_ms(report.timings_ms) << ")\n";
    text << describe_outputs(p, result);
    if (reseeded != 0)
      text << "inputs: " << reseeded << " random init(s) reseeded from " << *o.reseed << "\n";
    if (o.check) {
      text << "check: " << report.check["summary"].get<std::string>() << "\n";
      const std::string names = buffer_names(p, poisoned);
      if (!names.empty())
        text << "check: poisoned before the run, every element the reference writes written: "
             << names << "\n";
    }
    if (!o.out_dir.empty()) text << "outputs written to " << o.out_dir << "\n";
    emit(g, rep, text.str());
    return 0;
  } catch (const Error& e) {
    if (report.status == "ok") {
      report.status = e.kind() == ErrorKind::timeout   ? "timeout"
                      : e.kind() == ErrorKind::program ? "rejected"
                      : e.kind() == ErrorKind::device  ? "rejected"
                                                       : "error";
    }
    report.error = error_to_json(e);
    if (!report_file.empty()) {
      try {
        std::filesystem::create_directories(report_file.parent_path().empty()
                                                ? std::filesystem::path(".")
                                                : report_file.parent_path());
        write_report(report_file, report);
      } catch (const std::exception& w) {
        spdlog::error("could not write {}: {}", report_file.string(), w.what());
      }
    }
    throw;
  }
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
