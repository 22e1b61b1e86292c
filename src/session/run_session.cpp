#include "session/run_session.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/check_inputs.hpp"
#include "backend/cpu_backend.hpp"
#include "backend/initial_data.hpp"
#include "core/error.hpp"
#include "core/phase_log.hpp"
#include "core/numeric.hpp"
#include "plan/plan.hpp"
#include "report/outputs.hpp"
#include "session/check.hpp"
#include "verify/ranks.hpp"
#include "verify/verify.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {
namespace {

// "name f32[4] = [0.1, 0.2, ...]  (min, max, mean)" per output buffer.
std::string describe_outputs(const Program& program, const HostBuffers& buffers) {
  std::ostringstream t;
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    if (!b.output) continue;
    const uint64_t n = b.elements();
    double mn = std::numeric_limits<double>::infinity(), mx = -mn, sum = 0.0;
    for (uint64_t k = 0; k < n; ++k) {
      const double v = load_element(buffers.data[i].data(), b.dtype, k);
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      sum += v;
    }
    t << "  " << b.name << " " << dtype_name(b.dtype) << "[";
    for (size_t d = 0; d < b.shape.size(); ++d) t << (d ? "," : "") << b.shape[d];
    t << "] = [";
    const uint64_t show = std::min<uint64_t>(n, 6);
    char num[32];
    for (uint64_t k = 0; k < show; ++k) {
      std::snprintf(num, sizeof num, "%.6g", load_element(buffers.data[i].data(), b.dtype, k));
      t << (k ? ", " : "") << num;
    }
    if (n > show) t << ", ...";
    std::snprintf(num, sizeof num, "%.6g", n ? sum / static_cast<double>(n) : 0.0);
    t << "]  min " << mn << " max " << mx << " mean " << num << "\n";
  }
  return t.str();
}

// "load_verify 1.2 ms, plan 0.3 ms, ..."
std::string format_ms(const std::vector<std::pair<std::string, double>>& timings) {
  std::ostringstream t;
  char num[32];
  for (size_t i = 0; i < timings.size(); ++i) {
    std::snprintf(num, sizeof num, "%.2f", timings[i].second);
    t << (i ? ", " : "") << timings[i].first << " " << num << " ms";
  }
  return t.str();
}

// The report's status for a failure that set none of its own (mismatch does).
std::string failure_status(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::timeout: return "timeout";
    case ErrorKind::program:
    case ErrorKind::device: return "rejected";
    default: return "error";
  }
}

// --report PATH beside an output folder DIR: DIR/report.json is the default (part of the
// folder); any other path inside DIR is refused, since the folder is replaced as a whole.
std::filesystem::path explicit_report(const std::filesystem::path& path,
                                      const std::filesystem::path& dir) {
  std::error_code ec;
  const std::filesystem::path abs =
      std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec).lexically_normal(), ec);
  if (ec) return path;
  if (abs == dir / "report.json") return {};
  if (std::mismatch(dir.begin(), dir.end(), abs.begin(), abs.end()).first == dir.end())
    throw Error(ErrorKind::usage, "usage.report", path.string(),
                "a report inside the output folder " + dir.string() +
                    " can only be report.json (the default); name a path outside it");
  return path;
}

// The GPU run's device, versions, fingerprints, launch, diagnostics and phase times into the
// report; a launch that did not finish ok throws run.timeout or run.bad_operand. Returns the
// outputs.
HostBuffers take_outcome(GpuOutcome out, RunReport& report) {
  report.device = out.device;
  report.versions = out.versions;
  report.target_fingerprint = out.target_fingerprint;
  report.artifact_fingerprint = out.artifact_fingerprint;
  report.grid = out.grid;
  report.block = out.block;
  report.diagnostics = out.diagnostics;
  report.passes_run = out.passes_run;
  if (!out.wrapper.is_null()) {
    if (report.extra.is_null()) report.extra = nlohmann::json::object();
    report.extra["wrapper"] = out.wrapper;
  }
  for (auto& t : out.timings_ms) report.timings_ms.push_back(t);
  if (out.status != "ok") {
    const ErrorKind kind = out.status == "timeout" ? ErrorKind::timeout : ErrorKind::launch;
    throw Error(kind, out.status == "timeout" ? "run.timeout" : "run.bad_operand", "", out.message);
  }
  return std::move(out.buffers);
}

// A wrapper program's run: load and check, the trust flag, the device against the target
// snapshot (before any host data), the host data of its arrays and tensor arguments, one launch.
// Returns the outputs (global_staging and the output tensor arguments) of `view`, which it sets
// to wrapper_buffers; `initial` gets host copies of every buffer with --save-inputs.
HostBuffers run_wrapper(const RunRequest& request, GpuRequest& gpu, RunReport& report,
                        Phase& load_verify, Program& view, HostBuffers& initial,
                        uint32_t& reseeded) {
  if (request.check)
    throw Error(ErrorKind::usage, "usage.run.check", "--check",
                "--check compares the outputs with the CPU backend's, which does not run wrapper "
                "programs: compare them with a reference of your own (scripts/check_wrappers.py "
                "does it with numpy)");
  if (!gpu.vm.empty() || gpu.line_info)
    throw Error(ErrorKind::usage, "usage.wrapper.vm", gpu.line_info ? "--lineinfo" : "--vm",
                "--vm and --lineinfo configure amk's VM; a wrapper program brings its own "
                "kernel");
  if (gpu.iterations > 1)
    throw Error(ErrorKind::usage, "usage.run.passes", "--passes",
                "a wrapper program's launch is one grid of its own kernel: --passes must be 1");
  WrapperSummary summary;
  const WrapperProgram w =
      load_trusted_wrapper(request.program_path, request.load, request.trust_source, &summary);
  view = wrapper_buffers(w);
  report.program_name = w.name;
  report.program_fingerprint = wrapper_fingerprint(w);
  report.instructions = summary.instruction_count;
  report.timings_ms.emplace_back("load_verify", load_verify.finish());

  std::string why;
  if (!gpu_present(&why))
    throw Error(ErrorKind::device, "device.no_gpu", "",
                "a wrapper program runs on the GPU only, and none is usable: " + why);
  report.backend = "cuda";
  gpu.checked_device = check_wrapper_gpu(w, gpu.device);

  Phase materialize("materialize");
  if (request.reseed) {
    reseeded = reseed_random_inits(view, *request.reseed);
    report.extra = {{"reseed", *request.reseed}, {"reseeded_buffers", reseeded}};
  }
  InitialData data;
  if (request.save_inputs) {
    initial = materialize_all(view, request.load);
    data = InitialData::view(initial);
  } else {
    data = initial_data(view, request.load);
  }
  report.data_fingerprint = data_fingerprint(data);
  report.timings_ms.emplace_back("materialize", materialize.finish());

  return take_outcome(run_wrapper_on_gpu(w, data, gpu), report);
}

// RunRequest::values: each named integer buffer's init becomes those values.
void set_values(Program& p, const RunRequest& request) {
  for (const auto& entry : request.values) {
    const auto& [name, values] = entry;
    const std::string& wanted = name;  // (a lambda may not capture a structured binding)
    auto b = std::find_if(p.buffers.begin(), p.buffers.end(),
                          [&](const Buffer& x) { return x.name == wanted; });
    if (b == p.buffers.end())
      throw_program_error("run.values.buffer", "/buffers",
                          "the program has no buffer '" + name + "' to set");
    const size_t i = static_cast<size_t>(b - p.buffers.begin());
    const std::string where = "/buffers/" + std::to_string(i);
    if (dtype_is_float(b->dtype) || b->elements() != values.size())
      throw_program_error("run.values.buffer", where,
                          "buffer '" + name + "' is " + std::string(dtype_name(b->dtype)) + " of " +
                              std::to_string(b->elements()) + " elements; setting it takes " +
                              std::to_string(values.size()) + " integer values");
    BufferInit init;
    init.kind = InitKind::values;
    init.data.resize(b->bytes());
    for (size_t k = 0; k < values.size(); ++k)
      store_element(init.data.data(), b->dtype, k, static_cast<double>(values[k]));
    b->init = std::move(init);
  }
}

}  // namespace

RunResult run_program(const RunRequest& request) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto ms_since = [](clock::time_point t) {
    return std::chrono::duration<double, std::milli>(clock::now() - t).count();
  };
  if (request.backend != "auto" && request.backend != "cuda" && request.backend != "cpu")
    throw Error(ErrorKind::usage, "usage.backend", "backend",
                "expected auto, cuda or cpu, got '" + request.backend + "'");

  RunReport report;
  report.command = "run";
  report.program_path = request.program_path;
  // The output folder is checked, and its staging folder made, before anything runs.
  std::optional<OutputFolder> folder;
  if (!request.out_dir.empty()) folder.emplace(request.out_dir);
  // --report PATH: the report goes there only. Without it, report.json is part of the output
  // folder, and a failed run's goes beside the folder (DIR.failed-report.json).
  std::filesystem::path report_file = request.report_path;
  if (std::error_code ec; !report_file.empty() && std::filesystem::is_directory(report_file, ec))
    throw Error(ErrorKind::usage, "usage.report", report_file.string(),
                "the report path is a folder; name a file (e.g. " +
                    (report_file / "report.json").string() + ")");
  if (folder && !report_file.empty()) report_file = explicit_report(report_file, folder->dir());
  GpuRequest gpu = request.gpu;
  gpu.trust_custom_ops = request.load.trust_custom_ops;
  // Passes over the program in the launch: --passes, else the program's launch.passes.
  uint32_t iterations = gpu.iterations != 0 ? gpu.iterations : 1;

  // Every failure after this point still writes report.json (status error / timeout).
  try {
    Phase load_verify("load_verify");
    // A wrapper is compiler-made CUDA source: the CPU reference backend has nothing to interpret.
    const bool wrapper = is_wrapper_file(request.program_path);
    if (wrapper && request.backend == "cpu")
      throw_program_error("wrapper.backend.cpu", "/format",
                          "the CPU backend does not run wrapper programs: a wrapper's kernel is "
                          "CUDA source that only the cuda backend compiles and launches");
    Program p;  // a wrapper's: wrapper_buffers (its package arrays and tensor arguments)
    std::string backend;
    uint32_t reseeded = 0;
    HostBuffers initial;
    std::vector<bool> poisoned;
    HostBuffers result;
    if (wrapper) {
      backend = "cuda";
      result = run_wrapper(request, gpu, report, load_verify, p, initial, reseeded);
    } else {
      p = load_program_file(request.program_path, request.load);
      set_values(p, request);
      spdlog::debug("loaded {}: {} buffers, {} counters, {} instructions", request.program_path,
                    p.buffers.size(), p.counters.size(), p.instructions.size());
      (void)verify(p);
      const uint32_t ranks = p.launch.ranks;
      if (gpu.iterations == 0) {
        gpu.iterations = p.launch.passes;
      } else if (gpu.iterations != p.launch.passes) {
        check_position_bounds(p, gpu.iterations);  // the positions the other passes reach
      }
      iterations = gpu.iterations;
      report.passes = iterations;
      report.program_name = p.name;
      report.program_fingerprint = program_fingerprint(p);
      report.instructions = p.instructions.size();
      // A program with ranks runs as its expansion over them on the CPU backend: every rank's
      // buffers, outputs NAME.rankR.
      std::vector<RankOrigin> rank_origin;  // what each instruction of the expansion stands for
      if (ranks > 1) {
        if (request.backend == "cuda") refuse_ranks_on_gpu(ranks);
        RankExpansion x = expand_ranks(p);
        p = std::move(x.program);
        rank_origin = std::move(x.origin);
      }
      report.timings_ms.emplace_back("load_verify", load_verify.finish());

      // The backend (and, for the GPU, its device and target) before the host data, which for a
      // decode step's weights takes minutes: a refusal comes at once.
      backend = request.backend;
      if (backend == "auto" && ranks > 1) {
        backend = "cpu";
        spdlog::info("{} ranks: running on the CPU backend", ranks);
      } else if (backend == "auto") {
        std::string why;
        backend = gpu_present(&why) ? "cuda" : "cpu";
        if (backend == "cpu")
          spdlog::warn("no usable GPU ({}); running on the CPU reference backend", why);
      }
      report.backend = backend;
      if (backend == "cuda") gpu.checked_device = check_gpu(p, gpu.device);

      Phase materialize("materialize");
      if (request.reseed) {
        reseeded = reseed_random_inits(p, *request.reseed);
        report.extra = {{"reseed", *request.reseed}, {"reseeded_buffers", reseeded}};
      }
      // Host copies of the initial contents where something reads them there (the CPU backend,
      // --check's reference, --save-inputs); a GPU run alone maps its data files and fills its
      // zeros and constants on the device.
      const bool on_host = backend != "cuda" || request.check || request.save_inputs;
      InitialData data;
      if (on_host) {
        initial = materialize_all(p, request.load);
        data = InitialData::view(initial);
      } else {
        data = initial_data(p, request.load);
      }
      report.data_fingerprint = data_fingerprint(data);
      // --check: the outputs whose initial zeros nothing reads start poisoned on both backends
      // (after the fingerprint, which stays that of the program's own data).
      if (request.check) {
        poisoned = poisonable_outputs(p);
        poison_buffers(p, poisoned, initial);
        data = InitialData::view(initial);
      }
      report.timings_ms.emplace_back("materialize", materialize.finish());

      if (backend == "cuda") {
        result = take_outcome(run_on_gpu(p, data, gpu), report);
      } else {
        Phase plan_phase("plan");
        PlanOptions popts;
        popts.grid_hint = kDefaultGridHint;
        Plan plan = make_plan(p, popts);
        report.grid = plan.grid;
        report.block = plan.block;
        report.timings_ms.emplace_back("plan", plan_phase.finish());
        // The CPU backend runs in place: on a copy only when the initial contents are still
        // needed (--check, --save-inputs); otherwise on them (a decode step's are gigabytes).
        result =
            request.check || request.save_inputs ? copy_host_buffers(initial) : std::move(initial);
        CpuRunOptions copts;
        copts.iterations = iterations;
        Phase execute("cpu_execute");
        CpuRunStats stats;
        try {
          stats = run_cpu(p, plan, result, copts);
        } catch (const Error& e) {
          if (rank_origin.empty()) throw;
          throw rank_error(e, rank_origin);  // (at the program's instruction and rank)
        }
        (void)execute.finish();
        report.passes_run = stats.passes_run;
        report.timings_ms.emplace_back("cpu_execute", stats.elapsed_ms);
      }
    }

    if (request.check) {
      Phase check_phase("check");
      // (--save-inputs writes the initial contents below; otherwise the check may consume them.)
      ordered_json check = check_against_cpu(
          p, request.save_inputs ? copy_host_buffers(initial) : std::move(initial), result,
          iterations, poisoned);
      report.timings_ms.emplace_back("check", check_phase.finish());
      report.check = check;
      if (!check["passed"].get<bool>()) {
        report.status = "mismatch";
        throw Error(ErrorKind::mismatch, "check.mismatch", check["worst"].get<std::string>(),
                    check["summary"].get<std::string>());
      }
      // Where neither run wrote, the outputs hold what a run from zeros leaves there.
      (void)clear_poison(p, poisoned, result);
    }

    if (folder) {
      Phase write("write_outputs");
      report.outputs =
          write_output_files(folder->staging(), p, result, request.save_inputs, &initial);
      report.timings_ms.emplace_back("write_outputs", write.finish());
    }
    report.timings_ms.emplace_back("total", ms_since(t0));
    report.status = "ok";
    RunResult run;
    run.report = make_report(report);
    // The report inside the folder is swapped in with the outputs it describes.
    if (folder && report_file.empty()) write_report(folder->staging() / "report.json", report);
    if (folder) folder->commit();
    if (!report_file.empty()) write_report(report_file, report);
    if (folder) {
      // A failed report of an earlier run describes outputs that are gone now.
      std::error_code ec;
      std::filesystem::remove(folder->failed_report_path(), ec);
    }

    std::ostringstream text;
    text << p.name << ": ok on " << backend << " (" << report.instructions << " instructions, "
         << format_ms(report.timings_ms) << ")\n";
    text << describe_outputs(p, result);
    if (report.passes_run != 0 && report.passes_run < report.passes)
      text << "passes: " << report.passes_run << " of " << report.passes
           << " ran (feed_token generated its eos id in pass " << report.passes_run - 1 << ")\n";
    if (reseeded != 0)
      text << "inputs: " << reseeded << " random init(s) reseeded from " << *request.reseed << "\n";
    if (request.check) {
      text << "check: " << report.check["summary"].get<std::string>() << "\n";
      if (backend == "cpu")
        text << "check: ran on the CPU backend, so it compared the CPU backend with itself\n";
      const std::string names = buffer_names(p, poisoned);
      if (!names.empty())
        text << "check: poisoned before the run, every element the reference writes written: "
             << names << "\n";
    }
    if (!request.out_dir.empty()) text << "outputs written to " << request.out_dir << "\n";
    run.text = text.str();
    return run;
  } catch (const Error& e) {
    if (report.status == "ok") report.status = failure_status(e);
    report.error = error_to_json(e);
    // The folder keeps the previous outputs and their report.
    std::filesystem::path failed = report_file;
    if (folder) {
      if (!folder->committed()) report.outputs = nullptr;
      if (failed.empty()) failed = folder->failed_report_path();
      folder.reset();  // removes the staging folder
    }
    if (!failed.empty()) {
      try {
        std::filesystem::create_directories(
            failed.parent_path().empty() ? std::filesystem::path(".") : failed.parent_path());
        write_report(failed, report);
        spdlog::info("the failed run's report: {}", failed.string());
      } catch (const std::exception& w) {
        spdlog::error("could not write {}: {}", failed.string(), w.what());
      }
    }
    throw;
  }
}

}  // namespace amk
