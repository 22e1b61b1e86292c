#include "cli/common.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <iostream>

#include <spdlog/spdlog.h>

#include "core/phase_log.hpp"
#include "io/load.hpp"
#include "report/artifact.hpp"
#include "report/outputs.hpp"

namespace amk::cli {
namespace {

// A plain decimal (digits only: CLI11 alone takes "-1" as 2^64 - 1 and "" as 0) in range.
bool decimal(const std::string& v, uint64_t& x) {
  const bool digits =
      !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  return digits && ec == std::errc() && end == v.data() + v.size();
}

void add_globals_to(CLI::App* app, GlobalOptions& g) {
  const std::string group = "Global options";
  app->add_flag("--json", g.json, "machine-readable output on stdout")->group(group);
  // (a count that adds up wherever -v is given: amk -v run -v is -vv)
  app->add_flag_function(
         "-v,--verbose", [&g](int64_t n) { g.verbose += static_cast<int>(n); },
         "log each phase and its time, and the progress of long transfers (repeat for debug)")
      ->group(group);
  app->add_flag("-q,--quiet", g.quiet, "only errors")->group(group);
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; }))
    if (!sub->get_name().empty()) add_globals_to(sub, g);
}

}  // namespace

void add_global_options(CLI::App& app, GlobalOptions& g) { add_globals_to(&app, g); }

CLI::Option* add_timeout_option(CLI::App* cmd, std::optional<uint64_t>& timeout_ms,
                                const std::string& description) {
  return cmd
      ->add_option("--timeout", timeout_ms,
                   description + " (1.." + std::to_string(kMaxTimeoutMs) + ")")
      ->type_name("MS")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            uint64_t x = 0;
            if (!decimal(v, x) || x > kMaxTimeoutMs)
              return "expected a deadline in milliseconds, 1.." + std::to_string(kMaxTimeoutMs) +
                     ", got '" + v + "'";
            if (x == 0)
              return "0 would turn the watchdog off; give a deadline in milliseconds, 1.." +
                     std::to_string(kMaxTimeoutMs);
            return {};
          },
          "", "timeout"));
}

CLI::Option* add_device_option(CLI::App* cmd, int& device) {
  return cmd->add_option("--device", device, "CUDA device ordinal (amk devices lists them)")
      ->type_name("N")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            uint64_t x = 0;
            if (decimal(v, x) && x <= static_cast<uint64_t>(std::numeric_limits<int>::max()))
              return {};
            return "expected a CUDA device ordinal, 0 or more (amk devices lists them), got '" + v +
                   "'";
          },
          "", "ordinal"));
}

void add_cache_args(CLI::App* cmd, CacheArgs& args) {
  args.no_cache_option =
      cmd->add_flag("--no-cache", args.no_cache, "compile afresh, ignoring the kernel cache");
  args.cache_dir_option =
      cmd->add_option("--cache-dir", args.cache_dir, "kernel cache folder (default: XDG cache)");
}

CLI::Option* add_cubin_option(CLI::App* cmd, std::string& path) {
  return cmd
      ->add_option("--cubin", path,
                   "run this ahead-of-time cubin (amk compile PROGRAM -o FILE) instead of "
                   "compiling: FILE.json, written beside it, must match this device's arch and "
                   "the VM this run would compile (program ops, --vm, --lineinfo, NVRTC and amk "
                   "versions), else artifact.mismatch (exit 5) lists every difference")
      ->type_name("FILE");
}

std::optional<std::string> cubin_request(const std::string& path) {
  if (path.empty()) return std::nullopt;
  (void)read_artifact(path);
  return path;
}

void add_program_args(CLI::App* cmd, ProgramArgs& args) {
  cmd->add_option("program", args.path, "program file (.json or .amkb)")->required();
  cmd->add_flag("--allow-outside", args.allow_outside,
                "let data paths in the program point outside its folder");
  cmd->add_flag("--trust-custom-ops", args.trust_custom_ops,
                "compile the program's custom op sources (runs code from the file)");
}

CLI::Option* add_trust_source_flag(CLI::App* cmd, bool& flag) {
  return cmd->add_flag(std::string(kTrustSourceFlag), flag,
                       "compile a wrapper program's own CUDA source (runs code from the file)");
}

void add_vm_args(CLI::App* cmd, VmArgs& args) {
  cmd->add_option("--vm", args.vm,
                  "override a field of the VM's configuration, FIELD=VALUE[,FIELD=VALUE...] "
                  "(amk compile --explain lists the fields; kernels/README.md describes them)");
  cmd->add_flag("--lineinfo", args.line_info,
                "compile the VM with source line tables (ncu's source view)");
}

VmOverrides parse_vm_args(const VmArgs& args) {
  std::string joined;
  for (const std::string& v : args.vm) joined += (joined.empty() ? "" : ",") + v;
  return joined.empty() ? VmOverrides{} : parse_vm_overrides(joined, "--vm");
}

uint64_t write_program(const Program& p, const std::string& path, const std::string& encoding) {
  if (encoding == "amkb") {
    const auto data = program_to_amkb(p);
    write_file_atomic(path, data);
    return data.size();
  }
  const std::string text = program_to_json(p) + "\n";
  write_text_atomic(path, text);
  return text.size();
}

Program load_and_verify(const ProgramArgs& args, VerifySummary* summary) {
  Phase load("load");
  Program program = load_program_file(args.path, args.load_options());
  load.finish();
  spdlog::debug("loaded {}: {} buffers, {} counters, {} instructions", args.path,
                program.buffers.size(), program.counters.size(), program.instructions.size());
  Phase verifying("verify");
  VerifySummary s = verify(program);
  verifying.finish();
  if (summary != nullptr) *summary = s;
  return program;
}

WrapperProgram load_and_check_wrapper(const ProgramArgs& args, WrapperSummary* summary) {
  Phase load("load");
  WrapperProgram w = load_wrapper_file(args.path, args.load_options());
  load.finish();
  Phase checking("check");
  const WrapperSummary s = check_wrapper(w, args.load_options());
  checking.finish();
  if (summary != nullptr) *summary = s;
  return w;
}

void emit(const GlobalOptions& g, const ordered_json& json, const std::string& text) {
  if (g.json) {
    std::cout << json.dump(2) << "\n";
  } else if (!g.quiet) {
    std::cout << text;
    if (!text.empty() && text.back() != '\n') std::cout << "\n";
  }
  std::cout.flush();
}

}  // namespace amk::cli
