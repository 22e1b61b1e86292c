#include "cli/common.hpp"

#include <iostream>

#include <spdlog/spdlog.h>

#include "io/load.hpp"
#include "report/outputs.hpp"

namespace amk::cli {

void add_program_args(CLI::App* cmd, ProgramArgs& args) {
  cmd->add_option("program", args.path, "program file (.json or .amkb)")->required();
  cmd->add_flag("--allow-outside", args.allow_outside,
                "let data paths in the program point outside its folder");
  cmd->add_flag("--trust-custom-ops", args.trust_custom_ops,
                "compile the program's custom op sources (runs code from the file)");
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
  Program program = load_program_file(args.path, args.load_options());
  spdlog::debug("loaded {}: {} buffers, {} counters, {} instructions", args.path,
                program.buffers.size(), program.counters.size(), program.instructions.size());
  VerifySummary s = verify(program);
  if (summary != nullptr) *summary = s;
  return program;
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
