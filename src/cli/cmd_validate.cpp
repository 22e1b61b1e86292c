// amk validate PROGRAM...: load and verify, report each program's verdict.
#include <sstream>

#include "cli/common.hpp"
#include "core/error.hpp"

namespace amk::cli {
namespace {

struct ValidateOptions {
  std::vector<std::string> paths;
  bool allow_outside = false;
  bool trust_custom_ops = false;
};

int run_validate(const GlobalOptions& g, const ValidateOptions& o) {
  ordered_json results = ordered_json::array();
  std::ostringstream text;
  int worst = 0;
  for (const auto& path : o.paths) {
    ProgramArgs args{path, o.allow_outside, o.trust_custom_ops};
    ordered_json r;
    r["path"] = path;
    try {
      if (is_wrapper_file(path)) {
        WrapperSummary ws;
        const WrapperProgram w = load_and_check_wrapper(args, &ws);
        r["status"] = "ok";
        r["kind"] = "wrapper";
        r["name"] = w.name;
        r["kernel_name"] = w.wrapper.kernel_name;
        r["queues"] = w.launch.queues;
        r["instructions"] = ws.instruction_count;
        r["tensor_args"] = w.tensor_args.size();
        text << "ok      " << path << ": " << w.name << " (wrapper " << w.wrapper.kernel_name
             << ", " << w.launch.queues << " queues, " << ws.instruction_count
             << " instruction records, " << w.tensor_args.size() << " tensor arguments, "
             << w.tma.size() << " TMA specs)\n";
        results.push_back(std::move(r));
        continue;
      }
      VerifySummary summary;
      Program p = load_and_verify(args, &summary);
      r["status"] = "ok";
      r["name"] = p.name;
      r["instructions"] = p.instructions.size();
      r["critical_path"] = summary.critical_path;
      text << "ok      " << path << ": " << p.name << " (" << p.buffers.size() << " buffers, "
           << p.instructions.size() << " instructions, critical path " << summary.critical_path
           << ")\n";
    } catch (const Error& e) {
      if (o.paths.size() == 1 && !g.json) throw;  // one program: the usual one-line error
      r["status"] = "invalid";
      r["error"] = {{"kind", std::string(kind_name(e.kind()))},
                    {"code", e.code()},
                    {"where", e.where()},
                    {"message", e.message()}};
      text << "invalid " << path << ": " << e.what() << "\n";
      const int code = static_cast<int>(e.exit_code());
      if (worst == 0 || code == static_cast<int>(ExitCode::io)) worst = code;
    }
    results.push_back(std::move(r));
  }
  ordered_json j;
  j["status"] = worst == 0 ? "ok" : "invalid";
  j["programs"] = std::move(results);
  emit(g, j, text.str());
  return worst;
}

}  // namespace

void setup_validate(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<ValidateOptions>();
  auto* cmd = app.add_subcommand("validate", "load and verify programs (no GPU needed)");
  cmd->add_option("programs", o->paths, "program files (.json or .amkb; wrapper programs: .json)")
      ->required();
  cmd->add_flag("--allow-outside", o->allow_outside,
                "let data paths in the program point outside its folder");
  cmd->add_flag("--trust-custom-ops", o->trust_custom_ops, "accept custom op sources");
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_validate(g, *o); }; });
}

}  // namespace amk::cli
