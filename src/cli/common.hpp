// Shared pieces of the CLI: global flags, program loading flags, output (text or --json), and
// the registry of subcommands (one file per subcommand: an options struct + setup_* / run_*).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "config/vm_config.hpp"
#include "core/numeric.hpp"
#include "io/load.hpp"
#include "program/program.hpp"
#include "verify/verify.hpp"
#include "wrapper/wrapper.hpp"

namespace amk::cli {

using ordered_json = nlohmann::ordered_json;

struct GlobalOptions {
  bool json = false;
  int verbose = 0;
  bool quiet = false;
};

// --json, -v and -q on `app` and on every subcommand under it, listed in each one's help under
// "Global options", so that they may come anywhere on the line (amk run p.json --json).
void add_global_options(CLI::App& app, GlobalOptions& g);

// The command chosen on the command line; set by the subcommand's callback.
using Action = std::function<int()>;

struct ProgramArgs {
  std::string path;
  bool allow_outside = false;
  bool trust_custom_ops = false;

  [[nodiscard]] LoadOptions load_options() const {
    return LoadOptions{allow_outside, trust_custom_ops};
  }
};

// Adds PROGRAM and the flags every program-reading command shares.
void add_program_args(CLI::App* cmd, ProgramArgs& args);
// --trust-source: a wrapper program's own CUDA source may be compiled (and run).
CLI::Option* add_trust_source_flag(CLI::App* cmd, bool& flag);

// --vm FIELD=VALUE (repeatable, or comma-separated) and --lineinfo: the commands that compile the
// VM.
struct VmArgs {
  std::vector<std::string> vm;
  bool line_info = false;
};
void add_vm_args(CLI::App* cmd, VmArgs& args);
// The overrides; a usage error (usage.vm, at --vm) for an unknown field or a bad value.
[[nodiscard]] VmOverrides parse_vm_args(const VmArgs& args);

inline constexpr uint64_t kMaxTimeoutMs = 86400000;  // a day

// --timeout MS: the watchdog's deadline, 1..kMaxTimeoutMs; 0 would turn the watchdog off and
// is refused at parse time, as is anything but a plain decimal.
CLI::Option* add_timeout_option(CLI::App* cmd, std::optional<uint64_t>& timeout_ms,
                                const std::string& description);
// --device N: a CUDA device ordinal. A negative one is refused at parse time (usage, exit 2); one
// the driver does not report is device.ordinal (exit 5) when the device is opened.
CLI::Option* add_device_option(CLI::App* cmd, int& device);
// --no-cache and --cache-dir DIR: the kernel cache (default: $AMK_CACHE_DIR, XDG cache).
struct CacheArgs {
  bool no_cache = false;
  std::string cache_dir;
  CLI::Option* no_cache_option = nullptr;
  CLI::Option* cache_dir_option = nullptr;
};
void add_cache_args(CLI::App* cmd, CacheArgs& args);
// --cubin FILE (run, profile, inspect --attributes): an ahead-of-time cubin (amk compile -o FILE)
// loaded instead of compiling, once its record FILE.json matches what this run would compile.
CLI::Option* add_cubin_option(CLI::App* cmd, std::string& path);
// The request's cubin: none for an empty path; else the path, once FILE and FILE.json are read
// and parsed, so that their io.* errors come at once, before the program's host data is built.
[[nodiscard]] std::optional<std::string> cubin_request(const std::string& path);

// Loads and verifies (the phases load and verify, logged with -v); the summary is filled when
// `summary` is not null.
[[nodiscard]] Program load_and_verify(const ProgramArgs& args, VerifySummary* summary = nullptr);

// A wrapper program (schemas/wrapper.md), loaded and checked (the phases load and check, logged
// with -v). validate and inspect take wrapper programs; is_wrapper_file tells them apart.
[[nodiscard]] WrapperProgram load_and_check_wrapper(const ProgramArgs& args,
                                                    WrapperSummary* summary = nullptr);

// Writes `p` atomically as .amkb (encoding "amkb") or JSON text (anything else); returns the
// bytes written.
uint64_t write_program(const Program& p, const std::string& path, const std::string& encoding);

// Prints a result: JSON to stdout with --json, else the text (unless --quiet).
void emit(const GlobalOptions& g, const ordered_json& json, const std::string& text);

// Subcommands. Each registers itself and sets `action` when chosen.
void setup_validate(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_inspect(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_convert(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_run(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_compile(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_devices(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_profile(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_gen(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_bench(CLI::App& app, const GlobalOptions& g, Action& action);
void setup_generate(CLI::App& app, const GlobalOptions& g, Action& action);

}  // namespace amk::cli
