// The Python module `amk`: the program pipeline from Python (load, parse, validate, write,
// generate, run), each call the library's, each failure an amk.Error subclass carrying the
// error's kind, code, where, detail and exit code. A thin binding: no logic of its own.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "backend/host_data.hpp"
#include "core/error.hpp"
#include "gen/llama.hpp"
#include "io/load.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"
#include "session/gpu_session.hpp"
#include "session/run_session.hpp"
#include "verify/verify.hpp"

namespace py = pybind11;

namespace amk {
namespace {

// Python's json module turns amk's JSON text into plain dicts and back.
py::object json_loads(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}
std::string json_dumps(const py::object& value) {
  return py::module_::import("json").attr("dumps")(value).cast<std::string>();
}

py::dict buffer_dict(const Buffer& b) {
  py::dict d;
  d["name"] = b.name;
  d["dtype"] = std::string(dtype_name(b.dtype));
  d["shape"] = b.shape;
  d["output"] = b.output;
  return d;
}

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

// An opened program on the CPU reference backend: its plan and its buffers' bytes, kept across
// launches; inputs set and outputs read by name as numpy arrays.
class CpuExecutable {
public:
  CpuExecutable(Program program, const LoadOptions& load) : program_(std::move(program)) {
    verify(program_);
    buffers_ = materialize_all(program_, load);
    PlanOptions o;
    plan_ = make_plan(program_, o);
  }

  const Program& program() const { return open("program"); }

  void set(const std::string& name, const py::array& array) {
    const uint32_t i = index(name, "set");
    const Buffer& b = program_.buffers[i];
    check_dtype(b, array, "set");
    std::vector<std::byte>& bytes = buffers_.data[i];
    if (static_cast<size_t>(array.nbytes()) != bytes.size())
      throw Error(ErrorKind::usage, "api.size", name,
                  "buffer '" + name + "' holds " + std::to_string(bytes.size()) +
                      " bytes; the array has " + std::to_string(array.nbytes()));
    const py::array c = py::array::ensure(array, py::array::c_style);
    std::memcpy(bytes.data(), c.data(), bytes.size());
  }

  py::array get(const std::string& name) const {
    const uint32_t i = index(name, "get");
    const Buffer& b = program_.buffers[i];
    std::vector<py::ssize_t> shape(b.shape.begin(), b.shape.end());
    py::array out(numpy_dtype(b.dtype), shape);
    std::memcpy(out.mutable_data(), buffers_.data[i].data(), buffers_.data[i].size());
    return out;
  }

  void launch(uint32_t passes) {
    open("launch");
    const uint32_t n = passes != 0 ? passes : program_.launch.passes;
    if (n != program_.launch.passes) check_position_bounds(program_, n);
    CpuRunOptions o;
    o.iterations = n;
    py::gil_scoped_release unlocked;
    (void)run_cpu(program_, plan_, buffers_, o);
  }

  void close() {
    closed_ = true;
    buffers_ = {};
  }
  bool closed() const { return closed_; }

private:
  const Program& open(const char* call) const {
    if (closed_) throw Error(ErrorKind::usage, "api.closed", call, "the executable is closed");
    return program_;
  }
  uint32_t index(const std::string& name, const char* call) const {
    open(call);
    for (uint32_t i = 0; i < program_.buffers.size(); ++i)
      if (program_.buffers[i].name == name) return i;
    throw Error(ErrorKind::usage, "api.buffer", name, "the program has no buffer '" + name + "'");
  }
  // numpy's dtype of a buffer: bf16 has none, so its elements are their 16 bits (uint16).
  static py::dtype numpy_dtype(DType t) {
    switch (t) {
      case DType::f32: return py::dtype::of<float>();
      case DType::f16: return py::dtype("float16");
      case DType::bf16: return py::dtype::of<uint16_t>();
      case DType::i32: return py::dtype::of<int32_t>();
      case DType::u32: return py::dtype::of<uint32_t>();
      case DType::i64: return py::dtype::of<int64_t>();
      case DType::u8: return py::dtype::of<uint8_t>();
    }
    return py::dtype::of<uint8_t>();
  }
  static void check_dtype(const Buffer& b, const py::array& a, const char* call) {
    if (!a.dtype().equal(numpy_dtype(b.dtype)))
      throw Error(ErrorKind::usage, "api.dtype", b.name,
                  std::string(call) + ": buffer '" + b.name + "' is " +
                      std::string(dtype_name(b.dtype)) + " (numpy " +
                      py::str(numpy_dtype(b.dtype)).cast<std::string>() + "); the array is " +
                      py::str(a.dtype()).cast<std::string>());
  }

  Program program_;
  Plan plan_;
  HostBuffers buffers_;
  bool closed_ = false;
};

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
      .def("to_json", &program_to_json, "the canonical JSON text (what amk convert writes)")
      .def("to_dict", [](const Program& p) { return json_loads(program_to_json(p)); });

  py::class_<CpuExecutable>(m, "Executable", "an opened program (the CPU reference backend)")
      .def_property_readonly("buffers",
                             [](const CpuExecutable& e) {
                               py::list l;
                               for (const Buffer& b : e.program().buffers) l.append(buffer_dict(b));
                               return l;
                             })
      .def("set", &CpuExecutable::set, py::arg("name"), py::arg("array"),
           "copy a numpy array (the buffer's dtype and byte size) into buffer `name`")
      .def("get", &CpuExecutable::get, py::arg("name"),
           "a copy of buffer `name` as a numpy array of its shape (bf16: its uint16 bits)")
      .def("launch", &CpuExecutable::launch, py::arg("passes") = 0,
           "run the program's passes (0: launch.passes) over the buffers, in place")
      .def("close", &CpuExecutable::close)
      .def_property_readonly("closed", &CpuExecutable::closed)
      .def("__enter__", [](CpuExecutable& e) -> CpuExecutable& { return e; })
      .def("__exit__", [](CpuExecutable& e, const py::args&) { e.close(); });

  m.def(
      "open",
      [](const py::object& program, const std::string& backend, bool allow_outside) {
        if (backend != "cpu")
          throw Error(ErrorKind::usage, "usage.backend", "backend",
                      "amk.open runs programs on the CPU reference backend (backend='cpu'); "
                      "the GPU executable is not in the Python module yet");
        const LoadOptions load{allow_outside, false};
        if (py::isinstance<Program>(program)) return CpuExecutable(program.cast<Program>(), load);
        return CpuExecutable(load_program_file(program.cast<std::string>(), load), load);
      },
      py::arg("program"), py::arg("backend") = "cpu", py::arg("allow_outside") = false,
      "open a program (a path or an amk.Program): verified, its initial data built, planned");

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
      [](const std::string& preset, std::optional<uint32_t> layers, std::optional<uint32_t> context,
         uint64_t seed, uint32_t steps, const std::vector<int64_t>& prompt, bool all_logits,
         const std::string& kv_dtype) {
        gen::LlamaOptions o;
        o.preset = preset;
        o.layers = layers;
        o.context = context;
        o.seed = seed;
        o.steps = steps;
        o.prompt = prompt;
        o.all_logits = all_logits;
        o.kv_dtype = kv_dtype_of(kv_dtype);
        return gen::generate_llama(o);
      },
      py::arg("preset") = "tiny", py::arg("layers") = std::nullopt,
      py::arg("context") = std::nullopt, py::arg("seed") = 0, py::arg("steps") = 0,
      py::arg("prompt") = std::vector<int64_t>{}, py::arg("all_logits") = false,
      py::arg("kv_dtype") = "bf16",
      "a Llama decode-step program (amk gen llama); with steps and prompt, a generation");
}
