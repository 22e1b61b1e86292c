// amk: run megakernel programs. Parses the command line, runs one subcommand, and turns every
// amk::Error into one clear line (or JSON) and its documented exit code.
#include <signal.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/common.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/stderr_log.hpp"

namespace {

int report_error(const amk::cli::GlobalOptions& g, const amk::Error& e) {
  if (g.json) {
    amk::cli::ordered_json j;
    j["status"] = e.kind() == amk::ErrorKind::timeout ? "timeout" : "error";
    j["error"] = {{"kind", std::string(amk::kind_name(e.kind()))},
                  {"code", e.code()},
                  {"where", e.where()},
                  {"message", e.message()},
                  {"detail", e.detail()},
                  {"exit_code", static_cast<int>(e.exit_code())}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::fprintf(stderr, "amk: %s\n", e.what());
    if (!e.detail().empty()) std::fprintf(stderr, "%s\n", e.detail().c_str());
  }
  return static_cast<int>(e.exit_code());
}

// The first word on the line that is no option and names no command of `app` (or of the command
// chosen before it, as `llama` under `gen`): "unknown command 'frobnicate'; the commands are ...".
// Global options take no value, so every word before a command that is no option is one.
std::optional<amk::Error> unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  std::string where = "amk";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') continue;
    const std::vector<const CLI::App*> subs =
        at->get_subcommands([](const CLI::App* s) { return !s->get_name().empty(); });
    if (subs.empty()) return std::nullopt;  // a command's own arguments from here on
    const auto named = std::find_if(subs.begin(), subs.end(),
                                    [&](const CLI::App* s) { return s->get_name() == word; });
    if (named != subs.end()) {
      at = *named;
      where += " " + word;
      continue;
    }
    std::string names;
    for (const CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
    return amk::Error(amk::ErrorKind::usage, "usage.command", where,
                      "unknown command '" + word + "'; the commands are " + names + " (see " +
                          where + " --help)");
  }
  return std::nullopt;
}

// Ctrl-C while a GPU launch waits stops that launch: its wait raises the device abort flag and
// the command ends with run.interrupted (exit 8), its output folder left as it was. Otherwise,
// and at a second Ctrl-C, the signal's default action ends the process.
void on_sigint(int) {
  static volatile sig_atomic_t asked = 0;
  if (asked == 0 && amk::wait_under_way()) {
    asked = 1;
    amk::request_interrupt();
    return;
  }
  std::signal(SIGINT, SIG_DFL);
  std::raise(SIGINT);
}

}  // namespace

int main(int argc, char** argv) {
  amk::cli::GlobalOptions g;
  amk::cli::Action action;

  CLI::App app{"amk: run megakernel programs on NVIDIA GPUs (and on the CPU reference backend)"};
  app.set_version_flag("--version", std::string("amk ") + AMK_VERSION);
  app.fallthrough();
  app.require_subcommand(1);
  amk::cli::setup_validate(app, g, action);
  amk::cli::setup_inspect(app, g, action);
  amk::cli::setup_convert(app, g, action);
  amk::cli::setup_run(app, g, action);
  amk::cli::setup_compile(app, g, action);
  amk::cli::setup_devices(app, g, action);
  amk::cli::setup_profile(app, g, action);
  amk::cli::setup_gen(app, g, action);
  amk::cli::setup_generate(app, g, action);
  amk::cli::setup_bench(app, g, action);
  amk::cli::add_global_options(app, g);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print as CLI11 writes them; a bad command line is an amk usage error
    // like any other: one line (or JSON with --json), naming the subcommand, exit 2.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    for (int i = 1; i < argc; ++i)
      if (std::string_view(argv[i]) == "--json") g.json = true;
    if (const std::optional<amk::Error> unknown = unknown_command(app, argc, argv))
      return report_error(g, *unknown);
    std::string where = "amk";
    for (CLI::App* sub = &app; sub != nullptr;) {
      const std::vector<CLI::App*> subs = sub->get_subcommands();
      sub = subs.empty() ? nullptr : subs.front();
      if (sub != nullptr) where += " " + sub->get_name();
    }
    return report_error(g, amk::Error(amk::ErrorKind::usage, "usage.command_line", where,
                                      std::string(e.what()) + " (see " + where + " --help)"));
  }

  amk::log_to_stderr(g.quiet          ? spdlog::level::err
                     : g.verbose >= 2 ? spdlog::level::debug
                     : g.verbose == 1 ? spdlog::level::info
                                      : spdlog::level::warn);

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);

  try {
    return action ? action() : static_cast<int>(amk::ExitCode::usage);
  } catch (const amk::Error& e) {
    return report_error(g, e);
  } catch (const std::bad_alloc&) {
    // A resource this machine lacks, as host.memory before an allocation (exit 5), not a bug.
    return report_error(g, amk::Error(amk::ErrorKind::device, "host.memory", "",
                                      "out of host memory (an allocation failed)"));
  } catch (const std::exception& e) {
    return report_error(g, amk::Error(amk::ErrorKind::internal, "internal.exception", "",
                                      std::string("unexpected: ") + e.what()));
  }
}
