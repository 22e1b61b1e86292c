// The Python module `amk`: the program pipeline from Python (load, parse, validate, write,
// generate, compile, run; the executable is executable.cpp's), each call the library's, each
// failure an amk.Error subclass carrying the error's kind, code, where, detail and exit code.
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/stderr_log.hpp"
#include "gen/checkpoint.hpp"
#include "gen/llama.hpp"
#include "io/load.hpp"
#include "program/program.hpp"
#include "session/gpu_session.hpp"
#include "python/bindings.hpp"
#include "python/pure_py.hpp"
#include "session/inspect.hpp"
#include "session/run_session.hpp"
#include "verify/verify.hpp"
#include "wrapper/wrapper.hpp"

namespace py = pybind11;

namespace amk {
namespace {

using python::buffer_dict;
using python::json_dumps;
using python::json_loads;

// The verdict `amk validate --json` gives a valid program.
py::dict validate(const Program& p) {
  const VerifySummary s = verify(p);
  py::dict d;
  d["status"] = "ok";
  d["name"] = p.name;
  d["instructions"] = p.instructions.size();
  d["critical_path"] = s.critical_path;
  return d;
}

// amk.Status's value for an error: timeout, rejected (refused before anything ran) or error.
const char* status_of(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::timeout: return "timeout";
    case ErrorKind::usage:
    case ErrorKind::program:
    case ErrorKind::io:
    case ErrorKind::device:
    case ErrorKind::nvrtc: return "rejected";
    default: return "error";
  }
}

DType kv_dtype_of(const std::string& name) {
  if (name == "bf16") return DType::bf16;
  if (name == "f32") return DType::f32;
  throw Error(ErrorKind::usage, "usage.gen.kv_dtype", "kv_dtype", "the KV caches are bf16 or f32");
}

}  // namespace
}  // namespace amk

PYBIND11_MODULE(amk, m) {
  using namespace amk;
  m.doc() = "amk: megakernel programs from Python (load, validate, generate, run)";

  // amk.Error and one subclass a kind (the module holds them; the translator borrows them).
  static PyObject* base = py::exception<Error>(m, "Error").ptr();
  static std::vector<std::pair<ErrorKind, PyObject*>> classes;
  const std::pair<ErrorKind, const char*> kinds[] = {
      {ErrorKind::internal, "InternalError"}, {ErrorKind::usage, "UsageError"},
      {ErrorKind::program, "ProgramError"},   {ErrorKind::io, "IoError"},
      {ErrorKind::device, "DeviceError"},     {ErrorKind::driver, "DriverError"},
      {ErrorKind::nvrtc, "CompileError"},     {ErrorKind::launch, "LaunchError"},
      {ErrorKind::timeout, "TimeoutError"},   {ErrorKind::mismatch, "MismatchError"}};
  for (const auto& [kind, name] : kinds)
    classes.emplace_back(kind, py::exception<Error>(m, name, base).ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* cls = base;
      for (const auto& [kind, c] : classes)
        if (kind == e.kind()) cls = c;
      py::object exc = py::reinterpret_borrow<py::object>(cls)(std::string(e.what()));
      exc.attr("kind") = std::string(kind_name(e.kind()));
      exc.attr("code") = e.code();
      exc.attr("where") = e.where();
      exc.attr("message") = e.message();
      exc.attr("detail") = e.detail();
      exc.attr("exit_code") = static_cast<int>(e.exit_code());
      exc.attr("status") = status_of(e);
      PyErr_SetObject(cls, exc.ptr());
    }
  });

  py::class_<Program>(m, "Program", "a megakernel program (schemas/README.md)")
      .def_static(
          "from_json",
          [](const std::string& text, bool allow_outside, bool trust_custom_ops) {
            return parse_json_program(text, {allow_outside, trust_custom_ops});
          },
          py::arg("text"), py::arg("allow_outside") = false, py::arg("trust_custom_ops") = false,
          "parse a program from its JSON text")
      .def_static(
          "from_dict",
          [](const py::object& d, bool allow_outside, bool trust_custom_ops) {
            return parse_json_program(json_dumps(d), {allow_outside, trust_custom_ops});
          },
          py::arg("program"), py::arg("allow_outside") = false, py::arg("trust_custom_ops") = false,
          "a program from a dict of its JSON form")
      .def_property_readonly("name", [](const Program& p) { return p.name; })
      .def_property_readonly("buffers",
                             [](const Program& p) {
                               py::list l;
                               for (const Buffer& b : p.buffers) l.append(buffer_dict(b));
                               return l;
                             })
      .def_property_readonly("instruction_count",
                             [](const Program& p) { return p.instructions.size(); })
      .def("validate", &validate, "verify the program; its verdict, or raises amk.ProgramError")
      .def(
          "inspect",
          [](const Program& p, uint32_t grid_hint) {
            const VerifySummary s = verify(p);
            std::ostringstream text;
            return json_loads(inspect_program(p, s, "", grid_hint, false, text).dump());
          },
          py::arg("grid_hint") = kDefaultGridHint,
          "amk inspect's summary (buffers, instructions by op, counters, queues, critical path, "
          "launch, target) as a dict")
      .def("to_json", &program_to_json, "the canonical JSON text (what amk convert writes)")
      .def("to_dict", [](const Program& p) { return json_loads(program_to_json(p)); });

  // amk's log lines go to stderr as the command line's do: warnings and errors unless
  // amk.set_log_level asks for more (the pipeline's phases log at info, as `amk -v` shows them).
  log_to_stderr(spdlog::level::warn);
  m.def(
      "set_log_level",
      [](const std::string& level) {
        const std::pair<const char*, spdlog::level::level_enum> levels[] = {
            {"debug", spdlog::level::debug},
            {"info", spdlog::level::info},
            {"warn", spdlog::level::warn},
            {"error", spdlog::level::err},
            {"off", spdlog::level::off}};
        for (const auto& [name, value] : levels)
          if (level == name) return spdlog::set_level(value);
        throw Error(ErrorKind::usage, "usage.log_level", "level",
                    "expected debug, info, warn, error or off, got '" + level + "'");
      },
      py::arg("level"),
      "what amk logs to stderr: 'warn' (the default), 'info' (each phase and its time, as amk -v), "
      "'debug', 'error' or 'off'");

  python::define_executable(m);
  py::exec(kPurePy, m.attr("__dict__"));

  m.def(
      "check_wrapper",
      [](const py::object& program, const std::string& base_dir) {
        const std::string text =
            py::isinstance<py::str>(program) ? program.cast<std::string>() : json_dumps(program);
        const WrapperProgram w = parse_json_wrapper(text, base_dir);
        const WrapperSummary s = check_wrapper(w);
        py::dict d;
        d["status"] = "ok";
        d["name"] = w.name;
        d["instructions"] = s.instruction_count;
        d["slots"] = s.slot_count;
        d["comms"] = s.comm_count;
        d["tensor_args_bytes"] = s.tensor_args_bytes;
        return d;
      },
      py::arg("program"), py::arg("base_dir") = ".",
      "load and check a wrapper program (its JSON text or dict; data paths and source_path "
      "relative to base_dir) as amk validate does; its summary, or raises amk.ProgramError");

  m.def(
      "load",
      [](const std::string& path, bool allow_outside, bool trust_custom_ops) {
        return load_program_file(path, {allow_outside, trust_custom_ops});
      },
      py::arg("path"), py::arg("allow_outside") = false, py::arg("trust_custom_ops") = false,
      "read a program file (.json or .amkb)");

  m.def(
      "run",
      [](const std::string& path, const std::string& backend, const std::string& out_dir,
         bool check, std::optional<uint64_t> reseed, bool allow_outside) {
        RunRequest r;
        r.program_path = path;
        r.backend = backend;
        r.out_dir = out_dir;
        r.check = check;
        r.reseed = reseed;
        r.load.allow_outside_paths = allow_outside;
        RunResult result;
        {
          py::gil_scoped_release unlocked;
          result = run_program(r);
        }
        return json_loads(result.report.dump());
      },
      py::arg("path"), py::arg("backend") = "auto", py::arg("out_dir") = "",
      py::arg("check") = false, py::arg("reseed") = std::nullopt, py::arg("allow_outside") = false,
      "run a program file as `amk run` does; returns report.json's contents");

  m.def(
      "compile",
      [](const Program& program, const std::string& arch, std::optional<std::string> cache_dir,
         bool use_cache, const std::string& cubin, bool explain) {
        GpuRequest r;
        r.cache_dir = std::move(cache_dir);
        r.use_cache = use_cache;
        CompileOutputs files;
        files.cubin = cubin;
        std::ostringstream text;
        ordered_json j;
        {
          py::gil_scoped_release unlocked;
          j = compile_for_arch(program, arch, r, files, explain, text);
        }
        py::dict d = json_loads(j.dump());
        if (explain) d["explain"] = text.str();
        return d;
      },
      py::arg("program"), py::arg("arch") = "sm_90a", py::arg("cache_dir") = std::nullopt,
      py::arg("use_cache") = true, py::arg("cubin") = "", py::arg("explain") = false,
      "compile the program's VM with NVRTC for `arch` (no GPU needed), as amk compile does");

  py::module_ generators = m.def_submodule("gen", "program generators");
  generators.def(
      "llama",
      [](const std::optional<std::string>& preset, std::optional<uint32_t> layers,
         std::optional<uint32_t> context, uint64_t seed, uint32_t steps,
         const std::vector<int64_t>& prompt, bool all_logits, const std::string& kv_dtype,
         int64_t eos, uint32_t tp, const std::optional<std::string>& checkpoint) {
        gen::LlamaOptions o;
        if (preset && checkpoint)
          throw Error(ErrorKind::usage, "usage.gen.from", "preset",
                      "checkpoint and preset exclude each other (the checkpoint gives the shape "
                      "and the weights)");
        o.preset = preset.value_or("tiny");
        o.layers = layers;
        o.context = context;
        o.seed = seed;
        o.steps = steps;
        o.prompt = prompt;
        o.all_logits = all_logits;
        o.kv_dtype = kv_dtype_of(kv_dtype);
        o.eos = eos;
        o.tp = tp;
        if (!checkpoint) return gen::generate_llama(o);
        // The program's folder is the checkpoint's: its weight files are named relative to it.
        const gen::HfCheckpoint ckpt = gen::read_hf_checkpoint(*checkpoint);
        o.config = ckpt.cfg;
        Program p = gen::generate_llama(o);
        const std::filesystem::path dir = std::filesystem::weakly_canonical(ckpt.dir);
        gen::use_hf_checkpoint(p, ckpt, [&](const std::filesystem::path& file) {
          return std::filesystem::weakly_canonical(file).lexically_relative(dir).generic_string();
        });
        p.base_dir = dir.string();
        return p;
      },
      py::arg("preset") = std::nullopt, py::arg("layers") = std::nullopt,
      py::arg("context") = std::nullopt, py::arg("seed") = 0, py::arg("steps") = 0,
      py::arg("prompt") = std::vector<int64_t>{}, py::arg("all_logits") = false,
      py::arg("kv_dtype") = "bf16", py::arg("eos") = -1, py::arg("tp") = 1,
      py::arg("checkpoint") = std::nullopt,
      "a Llama decode-step program (amk gen llama; preset 'tiny' unless given); with steps and "
      "prompt, a generation (eos: its end-of-sequence id, -1 none); tp: tensor-parallel ranks (a "
      "program with ranks); checkpoint: a Hugging Face model folder whose config and weights it "
      "uses (amk gen llama --from)");
}
