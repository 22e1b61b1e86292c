// amk convert IN -o OUT: JSON <-> .amkb, losslessly, for VM and wrapper programs alike. The output
// is verified (a wrapper: checked) first and written atomically; relative data paths (and a
// wrapper's source path) are rewritten to resolve from OUT's folder.
#include <filesystem>
#include <sstream>

#include "cli/common.hpp"
#include "core/error.hpp"
#include "io/load.hpp"
#include "report/outputs.hpp"
#include "wrapper/amkb.hpp"

namespace amk::cli {
namespace {

struct ConvertOptions {
  ProgramArgs program;
  std::string output;
  std::string to;  // json | amkb; default from the output's extension
};

// Writes a checked wrapper program in `to`'s encoding; returns the bytes written.
uint64_t convert_wrapper(const ConvertOptions& o, const std::string& to, uint32_t& rebased) {
  WrapperProgram w = load_and_check_wrapper(o.program);
  const std::filesystem::path out_dir = std::filesystem::path(o.output).parent_path();
  rebased = rebase_wrapper_paths(w, out_dir, o.program.load_options());
  if (to == "amkb") {
    const auto data = wrapper_to_amkb(w);
    write_file_atomic(o.output, data);
    return data.size();
  }
  const std::string text = wrapper_to_json(w) + "\n";
  write_text_atomic(o.output, text);
  return text.size();
}

int run_convert(const GlobalOptions& g, const ConvertOptions& o) {
  std::string to = o.to;
  if (to.empty()) {
    const std::string ext = std::filesystem::path(o.output).extension().string();
    if (ext == ".amkb")
      to = "amkb";
    else if (ext == ".json")
      to = "json";
    else
      throw Error(ErrorKind::usage, "usage.convert.format", o.output,
                  "cannot tell the output encoding from the extension; use .json, .amkb or --to");
  }
  const bool wrapper = is_wrapper_file(o.program.path);
  uint32_t rebased = 0;
  uint64_t bytes = 0;
  if (wrapper) {
    bytes = convert_wrapper(o, to, rebased);
  } else {
    Program p = load_and_verify(o.program);
    // Relative data paths keep naming the same files from the output's folder.
    const std::filesystem::path out_dir = std::filesystem::path(o.output).parent_path();
    rebased = rebase_data_paths(p, out_dir, o.program.load_options());
    bytes = write_program(p, o.output, to);
  }
  ordered_json j;
  j["status"] = "ok";
  if (wrapper) j["kind"] = "wrapper";  // as validate and inspect say it
  j["input"] = o.program.path;
  j["output"] = o.output;
  j["encoding"] = to;
  j["bytes"] = bytes;
  j["rebased_paths"] = rebased;
  std::ostringstream text;
  text << "wrote " << o.output << " (" << to << ", " << format_bytes(bytes) << ")";
  if (rebased != 0) text << "; " << rebased << " data path(s) rewritten relative to its folder";
  emit(g, j, text.str());
  return 0;
}

}  // namespace

void setup_convert(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<ConvertOptions>();
  auto* cmd = app.add_subcommand("convert", "convert a program between JSON and .amkb");
  add_program_args(cmd, o->program);
  cmd->add_option("-o,--output", o->output, "output file (.json or .amkb)")->required();
  cmd->add_option("--to", o->to, "output encoding")->check(CLI::IsMember({"json", "amkb"}));
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_convert(g, *o); }; });
}

}  // namespace amk::cli
