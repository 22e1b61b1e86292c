// amk generate: runs a generation program (amk gen llama --steps N --prompt IDS), or writes one
// from the model options into a scratch folder and runs it, then prints the new token ids, the
// tokens per second and the time a decode step takes. One launch decodes the prompt and every
// new token; with an end-of-sequence id (--eos, or the program's `eos` input) the launch ends
// one step after generating it, and the ids end with it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/init_sources.hpp"
#include "cli/common.hpp"
#include "cli/gen_llama.hpp"
#include "core/error.hpp"
#include "gen/llama.hpp"
#include "io/load.hpp"
#include "session/run_session.hpp"

namespace amk::cli {
namespace {

namespace fs = std::filesystem;

struct GenerateOptions {
  std::string program;    // a generation program; empty: write one from `model`
  GenLlamaOptions model;  // (its --eos sets the program's eos input)
  std::string backend = "auto";
  std::string out_dir;
  bool check = false;
  int device = 0;
  CacheArgs cache;
  VmArgs vm;
};

// A folder under the system's temp directory, removed with its contents when done.
class ScratchDir {
public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "amk_generate_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr)
      throw_io_error("io.write", tmpl, "cannot create a scratch folder for the program");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in) throw_io_error("io.read", p.string(), "cannot read the run's output");
  return s.str();
}

// The run's output `name` as int64 values, through its manifest.
std::vector<int64_t> read_ids(const fs::path& out, const std::string& name) {
  const ordered_json manifest = ordered_json::parse(read_file(out / "manifest.json"));
  for (const auto& e : manifest.at("outputs")) {
    if (e.at("name").get<std::string>() != name) continue;
    const auto shape = e.at("shape").get<std::vector<uint64_t>>();
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    const fs::path file = out / e.at("file").get<std::string>();
    const std::vector<std::byte> raw = read_npy(file, DType::i32, n, file.string());
    std::vector<int64_t> ids(n);
    for (uint64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      ids[i] = v;
    }
    return ids;
  }
  throw_program_error("generate.program", "/buffers",
                      "the program has no output '" + name +
                          "': amk generate runs generation programs (amk gen llama --steps N)");
}

int run_generate(const GlobalOptions& g, GenerateOptions o) {
  std::optional<ScratchDir> scratch;
  std::string program = o.program;
  ordered_json gen_json;
  if (program.empty()) {
    if (o.model.gen.steps == 0 && o.model.prompt.empty())
      throw Error(ErrorKind::usage, "usage.generate.program", "--steps",
                  "give a generation program, or the model and --steps N / --prompt IDS to write "
                  "one");
    scratch.emplace();
    o.model.output = (scratch->path() / "program.json").string();
    o.model.to = "json";
    o.model.allow_outside = true;  // the weights stay where they are (absolute paths)
    gen_json = write_llama_program(o.model).json;
    program = o.model.output;
  }
  // The end-of-sequence id the launch stops at (-1: none): --eos, else the program's eos input.
  int64_t stop_id = o.model.eos.value_or(-1);
  uint32_t ranks = o.model.gen.tp;  // (a program with ranks: rank 0's ids, it picks the tokens)
  if (!o.program.empty()) {         // a program without the generated ids is refused before it runs
    const Program p = load_program_file(program, LoadOptions{});
    const auto find = [&](std::string_view name) -> const Buffer* {
      for (const Buffer& b : p.buffers)
        if (b.name == name) return &b;
      return nullptr;
    };
    const Buffer* ids = find("ids");
    if (ids == nullptr || !ids->output)
      throw_program_error("generate.program", "/buffers",
                          "the program has no output 'ids': amk generate runs generation "
                          "programs (amk gen llama --steps N)");
    const Buffer* eos_buf = find("eos");
    if (o.model.eos) gen::check_eos_id(p, *o.model.eos, "--eos");
    if (o.model.eos && eos_buf == nullptr)
      throw_program_error("generate.eos", "/buffers",
                          "the program has no 'eos' input to stop at: write it again with amk "
                          "gen llama --steps N (this amk adds one), or give --eos there");
    if (!o.model.eos) stop_id = gen::program_eos(p).value_or(-1);
    ranks = p.launch.ranks;
  }
  if (stop_id < 0) stop_id = -1;
  if (o.out_dir.empty() && !scratch) scratch.emplace();
  const fs::path out = o.out_dir.empty() ? scratch->path() / "out" : fs::path(o.out_dir);

  RunRequest req;
  req.program_path = program;
  req.load.allow_outside_paths =
      o.program.empty();  // (a written program names its weights absolutely)
  req.backend = o.backend;
  req.out_dir = out.string();
  req.check = o.check;
  req.gpu.device = o.device;
  req.gpu.iterations = 0;  // the program's passes
  req.gpu.use_cache = !o.cache.no_cache;
  if (!o.cache.cache_dir.empty()) req.gpu.cache_dir = o.cache.cache_dir;
  req.gpu.vm = parse_vm_args(o.vm);
  req.gpu.line_info = o.vm.line_info;
  if (!o.program.empty() && o.model.eos) req.values.push_back({"eos", {*o.model.eos}});
  const RunResult run = run_program(req);

  // The launch wrote nothing after the first eos (feed_token): the ids end there.
  std::vector<int64_t> ids = read_ids(out, ranks > 1 ? "ids.rank0" : "ids");
  bool stopped = false;
  if (stop_id >= 0) {
    if (const auto at = std::find(ids.begin(), ids.end(), stop_id); at != ids.end()) {
      ids.erase(at + 1, ids.end());
      stopped = true;
    }
  }
  const uint64_t generated = ids.size();
  const ordered_json& t = run.report.at("timings_ms");
  const std::string backend = run.report.value("backend", std::string());
  const double launch_ms = t.contains("launch")        ? t.at("launch").get<double>()
                           : t.contains("cpu_execute") ? t.at("cpu_execute").get<double>()
                                                       : 0.0;
  const uint64_t passes = run.report.at("launch").value("passes_run", uint64_t{1});
  ordered_json j;
  j["status"] = "ok";
  j["program"] = o.program.empty() ? ordered_json(nullptr) : ordered_json(o.program);
  if (!gen_json.is_null()) j["generated_program"] = gen_json;
  j["backend"] = backend;
  j["ids"] = ids;
  j["new_tokens"] = generated;
  j["eos"] = stop_id >= 0 ? ordered_json(stop_id) : ordered_json(nullptr);
  j["stopped_at_eos"] = stopped;
  j["steps"] = passes;
  j["launch_ms"] = launch_ms;
  j["step_ms"] = passes != 0 ? launch_ms / static_cast<double>(passes) : 0.0;
  j["new_tokens_per_s"] = launch_ms > 0 ? generated * 1000.0 / launch_ms : 0.0;
  j["steps_per_s"] = launch_ms > 0 ? passes * 1000.0 / launch_ms : 0.0;
  if (!o.out_dir.empty()) j["output"] = o.out_dir;
  std::ostringstream text;
  for (size_t i = 0; i < ids.size(); ++i) text << (i ? " " : "") << ids[i];
  char figures[160];
  std::snprintf(figures, sizeof figures, ": %.3f ms, %.4f ms a step, %.1f new tokens/s", launch_ms,
                j["step_ms"].get<double>(), j["new_tokens_per_s"].get<double>());
  text << "\n"
       << generated << " new tokens" << (stopped ? " (the last one the end-of-sequence id)" : "")
       << " in one launch of " << passes << " decode steps on " << backend << figures;
  emit(g, j, text.str());
  return 0;
}

}  // namespace

void setup_generate(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand(
      "generate",
      "decode a prompt and N new tokens in one launch: run a generation program, or write one "
      "from the model options (as amk gen llama --steps N --prompt IDS) and run it");
  cmd->add_option("program", o->program,
                  "a generation program (amk gen llama --steps N); without it, the model options "
                  "below write one into a scratch folder");
  add_gen_llama_options(cmd, o->model);
  cmd->add_option("--backend", o->backend, "auto (GPU when present), cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cmd->add_option("-o,--output", o->out_dir,
                  "keep the run's outputs (ids, logits, all_logits) and report.json here");
  cmd->add_flag("--check", o->check, "compare every output with the CPU reference backend");
  add_device_option(cmd, o->device);
  add_cache_args(cmd, o->cache);
  add_vm_args(cmd, o->vm);
  cmd->callback([&g, &action, o, cmd] {
    o->model.preset_given = cmd->count("--preset") > 0;
    std::string model_option;  // one of the options that write a program, if given
    for (const char* opt : {"--preset", "--from", "--steps", "--prompt", "--weights",
                            "--write-weights", "--context", "--layers"})
      if (model_option.empty() && cmd->count(opt) > 0) model_option = opt;
    action = [&g, o, model_option] {
      if (!o->program.empty() && !model_option.empty())
        throw Error(ErrorKind::usage, "usage.generate.program", model_option,
                    model_option + " writes a program; a program given runs as it is");
      return run_generate(g, *o);
    };
  });
}

}  // namespace amk::cli
