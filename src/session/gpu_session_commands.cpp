// `amk profile` and `amk bench` as library calls: load, verify, device check, host data, then the
// GPU session's call, with report.json (as run_session.cpp writes `amk run`'s). Built with or
// without CUDA: without it check_gpu refuses, and the report says so.
#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "core/phase_log.hpp"
#include "device/nccl.hpp"
#include "report/outputs.hpp"
#include "session/gpu_session.hpp"
#include "verify/verify.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {
namespace {

// The report's status for a failure (schemas/outputs.md).
std::string gpu_report_status(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::timeout: return "timeout";
    case ErrorKind::mismatch: return "mismatch";
    case ErrorKind::program:
    case ErrorKind::device: return "rejected";
    default: return "error";
  }
}

// The fields report.json shares with a command's result: device, versions, fingerprints, the
// launch, the setup phases' times.
void lift_result(const ordered_json& j, RunReport& report) {
  if (j.contains("device")) report.device = j["device"];
  if (j.contains("versions")) report.versions = j["versions"];
  if (j.contains("target_fingerprint"))
    report.target_fingerprint = j["target_fingerprint"].get<std::string>();
  if (j.contains("artifact_fingerprint"))
    report.artifact_fingerprint = j["artifact_fingerprint"].get<std::string>();
  const ordered_json& launch = j.contains("attributes") ? j["attributes"] : j;
  if (launch.contains("grid")) report.grid = launch["grid"].get<uint32_t>();
  if (launch.contains("block")) report.block = launch["block"].get<uint32_t>();
  if (j.contains("setup_timings_ms"))
    for (const auto& [phase, ms] : j["setup_timings_ms"].items())
      report.timings_ms.emplace_back(phase, ms.get<double>());
}

using GpuCommand =
    std::function<ordered_json(const Program&, const InitialData&, std::ostringstream&)>;
// The command for a wrapper program; null: the command takes VM programs only.
using WrapperCommand =
    std::function<ordered_json(const WrapperProgram&, const InitialData&, std::ostringstream&)>;

// Runs `command` on the loaded, verified, device-checked program and its host data; with
// files.out_dir or files.report_path, writes report.json whether it succeeds or not.
CommandResult run_with_report(const std::string& name, const GpuCommandFiles& files,
                              GpuRequest& gpu, const GpuCommand& command,
                              const WrapperCommand& wrapper_command = nullptr) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  RunReport report;
  report.command = name;
  report.backend = "cuda";
  report.program_path = files.program_path;
  const std::filesystem::path report_file =
      !files.report_path.empty() ? std::filesystem::path(files.report_path)
      : !files.out_dir.empty()   ? std::filesystem::path(files.out_dir) / "report.json"
                                 : std::filesystem::path();
  const auto write = [&] {
    std::filesystem::create_directories(
        report_file.parent_path().empty() ? std::filesystem::path(".") : report_file.parent_path());
    write_report(report_file, report);
  };
  try {
    CommandResult result;
    std::ostringstream text;
    if (wrapper_command && is_wrapper_file(files.program_path)) {
      Phase load("load");
      WrapperSummary summary;
      const WrapperProgram w =
          load_trusted_wrapper(files.program_path, files.load, files.trust_source, &summary);
      report.timings_ms.emplace_back("load", load.finish());
      report.program_name = w.name;
      report.program_fingerprint = wrapper_fingerprint(w);
      report.instructions = summary.instruction_count;
      gpu.checked_device = check_wrapper_gpu(w, gpu.device);
      Phase materialize("materialize");
      const InitialData initial = initial_data(wrapper_buffers(w), files.load);
      report.timings_ms.emplace_back("materialize", materialize.finish());
      report.data_fingerprint = data_fingerprint(initial);
      result.json = wrapper_command(w, initial, text);
    } else {
      Phase load("load");
      Program p = load_program_file(files.program_path, files.load);
      report.timings_ms.emplace_back("load", load.finish());
      Phase verifying("verify");
      (void)verify(p);
      report.timings_ms.emplace_back("verify", verifying.finish());
      report.program_name = p.name;
      report.program_fingerprint = program_fingerprint(p);
      report.instructions = p.instructions.size();
      // (a refusal before minutes of host data)
      gpu.checked_device = check_gpu(p, gpu.device);
      gpu.trust_custom_ops = files.load.trust_custom_ops;
      Phase materialize("materialize");
      const InitialData initial = initial_data(p, files.load);
      report.timings_ms.emplace_back("materialize", materialize.finish());
      report.data_fingerprint = data_fingerprint(initial);
      result.json = command(p, initial, text);
    }
    lift_result(result.json, report);
    report.extra = result.json;
    report.timings_ms.emplace_back(
        "total", std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    report.status = "ok";
    if (!report_file.empty()) {
      Phase writing("write");
      write();
      text << "report written to " << report_file.string() << "\n";
    }
    result.text = text.str();
    return result;
  } catch (const Error& e) {
    report.status = gpu_report_status(e);
    report.error = error_to_json(e);
    if (!report_file.empty()) {
      try {
        write();
      } catch (const std::exception& w) {
        spdlog::error("could not write {}: {}", report_file.string(), w.what());
      }
    }
    throw;
  }
}

}  // namespace

CommandResult profile_program(const ProfileProgramRequest& request) {
  ProfileRequest profile = request.profile;
  return run_with_report(
      "profile", request.files, profile.gpu,
      [&](const Program& p, const InitialData& initial, std::ostringstream& text) {
        ordered_json j;
        if (request.events)
          j = profile.arms.empty() ? profile_on_gpu(p, initial, profile, text)
                                   : profile_arms_on_gpu(p, initial, profile, text);
        if (!request.trace_path.empty()) {
          ordered_json t = trace_on_gpu(p, initial, profile.gpu, request.trace_path, text);
          if (request.events)
            j["trace"] = std::move(t);
          else
            j = ordered_json{{"status", "ok"}, {"program", p.name}, {"trace", std::move(t)}};
        }
        return j;
      },
      [&](const WrapperProgram& w, const InitialData& initial, std::ostringstream& text) {
        if (!request.events || !profile.arms.empty() || !request.trace_path.empty())
          throw Error(ErrorKind::usage, "usage.wrapper.profile", "--events",
                      "a wrapper program profiles with --events only: tuning arms and traces "
                      "belong to amk's VM");
        return profile_wrapper_on_gpu(w, initial, profile, text);
      });
}

CommandResult bench_program(const BenchProgramRequest& request) {
  BenchRequest bench = request.bench;
  return run_with_report(
      "bench", request.files, bench.gpu,
      [&](const Program& p, const InitialData& initial, std::ostringstream& text) {
        return bench_on_gpu(p, initial, bench, text);
      });
}

ordered_json devices_report(std::ostringstream& text) {
  ordered_json j = list_gpus(text);
  // NCCL (programs with ranks across GPUs): whether it loads, from where, its version.
  const nccl::Status n = nccl::status();
  ordered_json nj{{"available", n.available}, {"library", n.library}};
  if (n.available) {
    nj["version"] = n.version;
    text << "NCCL " << n.version << " (" << n.library << ")\n";
  } else {
    nj["notice"] = n.notice;
    text << "NCCL not available: " << n.notice << "\n";
  }
  j["nccl"] = nj;
  return j;
}

}  // namespace amk
