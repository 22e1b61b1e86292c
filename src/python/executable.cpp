// amk.Executable: an opened program on the GPU (the library's amk::Executable) or on the CPU
// reference backend, with numpy arrays in and out, torch (or any DLPack) tensors copied in or
// bound in place, torch's current stream finished before every launch, profile, attributes,
// stats and setup timings. Every argument is checked here or by the library: a bad one raises
// amk.UsageError, never crashes the interpreter.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amk/amk.hpp"
#include "api/host.hpp"
#include "backend/cpu_backend.hpp"
#include "backend/host_data.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "gen/llama.hpp"
#include "io/load.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"
#include "python/bindings.hpp"
#include "session/api_json.hpp"
#include "session/gpu_session.hpp"
#include "verify/verify.hpp"

namespace amk::python {
namespace {

// DLPack's C ABI (the unversioned DLManagedTensor that `__dlpack__()` capsules named "dltensor"
// carry).
struct DLDevice {
  int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
constexpr int32_t kDLCPU = 1, kDLCUDA = 2;

Error usage(const std::string& code, const std::string& where, const std::string& message) {
  return Error(ErrorKind::usage, code, where, message);
}

// A tensor seen through its DLPack capsule: where its bytes are, their amk dtype, how many.
struct TensorView {
  uint64_t address = 0;
  DLDevice device{};
  std::string dtype;  // amk's name; empty for a dtype amk has none of
  std::string dl_dtype;
  uint64_t bytes = 0;
  py::object capsule;  // keeps the producer's view alive while the view is used
};

TensorView view_of(const py::object& tensor, const std::string& name, const char* call) {
  if (!py::hasattr(tensor, "__dlpack__"))
    throw usage("api.tensor", name,
                std::string(call) + ": buffer '" + name + "' takes a tensor with __dlpack__ " +
                    "(torch, cupy, numpy); got " +
                    py::str(py::type::of(tensor).attr("__name__")).cast<std::string>());
  TensorView v;
  v.capsule = tensor.attr("__dlpack__")();
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(v.capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    throw usage("api.tensor", name,
                std::string(call) + ": the tensor's __dlpack__ gave no DLPack capsule");
  }
  const DLTensor& t = managed->dl_tensor;
  v.device = t.device;
  const DLDataType d = t.dtype;
  v.dl_dtype = std::string(d.code == 0   ? "int"
                           : d.code == 1 ? "uint"
                           : d.code == 2 ? "float"
                           : d.code == 4 ? "bfloat"
                                         : "code" + std::to_string(d.code)) +
               std::to_string(d.bits) + (d.lanes != 1 ? "x" + std::to_string(d.lanes) : "");
  if (d.lanes == 1) {
    const std::pair<DLDataType, const char*> names[] = {
        {{2, 32, 1}, "f32"}, {{2, 16, 1}, "f16"}, {{4, 16, 1}, "bf16"}, {{0, 32, 1}, "i32"},
        {{1, 32, 1}, "u32"}, {{0, 64, 1}, "i64"}, {{1, 8, 1}, "u8"}};
    for (const auto& [dt, n] : names)
      if (dt.code == d.code && dt.bits == d.bits) v.dtype = n;
  }
  uint64_t elements = 1, expected_stride = 1;
  bool dense = true;
  for (int32_t k = t.ndim - 1; k >= 0; --k) {
    const int64_t extent = t.shape[k];
    if (t.strides != nullptr && extent > 1 && t.strides[k] != static_cast<int64_t>(expected_stride))
      dense = false;
    expected_stride *= static_cast<uint64_t>(extent);
    elements *= static_cast<uint64_t>(extent);
  }
  if (!dense)
    throw usage("api.tensor.layout", name,
                std::string(call) + ": buffer '" + name +
                    "' takes a contiguous (row-major) tensor; call .contiguous() first");
  v.bytes = elements * ((d.bits * d.lanes + 7u) / 8u);
  v.address = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
  return v;
}

// numpy's dtype of a buffer: bf16 has none, so its elements are their 16 bits (uint16).
py::dtype numpy_dtype(DType t) {
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

// torch.cuda where torch is loaded and has used CUDA, else None.
py::object torch_cuda() {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return py::none();
  py::object cuda = modules["torch"].attr("cuda");
  return cuda.attr("is_initialized")().cast<bool>() ? cuda : py::none();
}

// torch's current CUDA stream on `device` as a CUstream handle; 0 (the legacy default stream)
// without torch's CUDA.
uint64_t torch_stream(int device) {
  const py::object cuda = torch_cuda();
  if (cuda.is_none()) return 0;
  return cuda.attr("current_stream")(device).attr("cuda_stream").cast<uint64_t>();
}

// torch's current stream finished (when torch has used CUDA): work queued there before a
// launch, set or get is done when amk reads or writes.
void finish_torch_streams() {
  const py::object cuda = torch_cuda();
  if (!cuda.is_none()) cuda.attr("current_stream")().attr("synchronize")();
}

// Ctrl-C while a GPU launch waits with the GIL released (Python cannot run its own handler
// then): on the main thread, SIGINT asks the launch to stop (core/interrupt.hpp: the host raises
// the device abort flag at once) and KeyboardInterrupt is raised when it has returned.
class InterruptScope {
public:
  InterruptScope() {
    (void)take_interrupt();
    fired_ = 0;
    const py::module_ threading = py::module_::import("threading");
    if (!threading.attr("current_thread")().is(threading.attr("main_thread")())) return;
    struct sigaction sa {};
    sa.sa_handler = [](int) {
      fired_ = 1;
      request_interrupt();
    };
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGINT, &sa, &previous_) == 0;
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  ~InterruptScope() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
    (void)take_interrupt();
  }
  // Raises KeyboardInterrupt when SIGINT came (the GIL held).
  void raise_if_fired() const {
    if (fired_ == 0) return;
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }

private:
  static inline volatile sig_atomic_t fired_ = 0;
  struct sigaction previous_ {};
  bool installed_ = false;
};

// Runs f (a GPU call) with the GIL released and Ctrl-C turned into an interrupt of the launch.
template <typename F>
void interruptible(F&& f) {
  InterruptScope scope;
  try {
    py::gil_scoped_release unlocked;
    f();
  } catch (const Error&) {
    scope.raise_if_fired();
    throw;
  }
  scope.raise_if_fired();
}

// An opened program. The GPU form is the library's executable; the CPU form holds its plan and
// its buffers' bytes on the host.
class PyExecutable {
public:
  // `opened`: a program loaded (and verified) for the options; a wrapper program's buffers are
  // its package arrays and tensor arguments, and it runs on the GPU only.
  PyExecutable(detail::OpenedProgram opened, const std::string& backend, const OpenOptions& options)
      : program_(opened.program), rank_origin_(opened.rank_origin), device_(options.device) {
    if (backend != "auto" && backend != "cuda" && backend != "cpu")
      throw usage("usage.backend", "backend",
                  "expected backend 'auto', 'cuda' or 'cpu', got '" + backend + "'");
    std::string why;
    // (auto: a program with ranks runs on the CPU backend, its only one so far)
    backend_ = backend != "auto"   ? backend
               : opened.ranks > 1  ? "cpu"
               : gpu_present(&why) ? "cuda"
                                   : "cpu";
    if (backend_ == "cuda") {
      py::gil_scoped_release unlocked;
      gpu_ = std::make_shared<Executable>(detail::open_opened(std::move(opened), options));
      return;
    }
    if (opened.wrapper)
      throw usage("api.wrapper.backend", "backend",
                  "a wrapper program runs its own CUDA kernel: it needs the GPU backend" +
                      (why.empty() ? std::string() : " (" + why + ")"));
    if (!options.vm.empty())
      throw usage("usage.vm", "vm", "vm fields configure the GPU's VM; the backend is cpu");
    const LoadOptions load = opened.load;
    py::gil_scoped_release unlocked;
    host_ = materialize_all(program_, load);
    plan_ = make_plan(program_, PlanOptions{});
  }

  const std::string& backend() const { return backend_; }
  const Program& program() const { return program_; }
  bool closed() const { return closed_; }

  void set(const std::string& name, const py::object& value) {
    const uint32_t i = index(name, "set");
    const Buffer& b = program_.buffers[i];
    if (py::isinstance<py::array>(value)) {
      const py::array a = py::reinterpret_borrow<py::array>(value);
      if (!a.dtype().equal(numpy_dtype(b.dtype)))
        throw usage("api.dtype", name,
                    "set: buffer '" + name + "' is " + std::string(dtype_name(b.dtype)) +
                        " (numpy " + py::str(numpy_dtype(b.dtype)).cast<std::string>() +
                        "); the array is " + py::str(a.dtype()).cast<std::string>());
      const py::array c = py::array::ensure(a, py::array::c_style);
      write(i, c.data(), static_cast<size_t>(c.nbytes()), std::string(dtype_name(b.dtype)));
      return;
    }
    // A tensor: on the host its bytes are read in place; on a device it is copied to the host
    // first (bind() uses device memory without a copy).
    TensorView v = view_of(value, name, "set");
    if (v.device.device_type != kDLCPU) {
      if (!py::hasattr(value, "cpu"))
        throw usage("api.tensor.device", name,
                    "set: the tensor is not in host memory and has no .cpu()");
      finish_torch_streams();
      const py::object host = value.attr("cpu")();
      v = view_of(host, name, "set");
      v.capsule = py::make_tuple(v.capsule, host);  // (keeps the host copy alive)
    }
    check_view(i, v, "set");
    write(i, reinterpret_cast<const void*>(v.address), v.bytes, v.dtype);
  }

  // Buffer `name` as a numpy array (a copy); with torch=True a torch tensor without a copy: on
  // the GPU the bound tensor itself, or a view of the executable's memory through DLPack (it
  // keeps that memory alive past close()); on the CPU backend the host copy.
  py::object get(const std::string& name, bool torch) {
    const uint32_t i = index(name, "get");
    const Buffer& b = program_.buffers[i];
    if (torch) {
      const auto bound = bound_.find(name);
      if (bound != bound_.end()) {
        finish_torch_streams();
        return bound->second;
      }
      if (gpu_open())
        return py::module_::import("torch.utils.dlpack")
            .attr("from_dlpack")(export_buffer(b, gpu_->device_pointer(name)));
    }
    std::vector<py::ssize_t> shape(b.shape.begin(), b.shape.end());
    py::array out(numpy_dtype(b.dtype), shape);
    const size_t bytes = static_cast<size_t>(out.nbytes());
    if (gpu_open()) {
      finish_torch_streams();
      py::gil_scoped_release unlocked;
      gpu_->read_output(name, out.mutable_data(), bytes, dtype_name(b.dtype));
    } else {
      std::memcpy(out.mutable_data(), host_.data[i].data(), bytes);
    }
    if (!torch) return out;
    py::object t = py::module_::import("torch").attr("from_numpy")(out);
    if (b.dtype == DType::bf16) t = t.attr("view")(py::module_::import("torch").attr("bfloat16"));
    return t;
  }

  void bind(const std::string& name, const py::object& tensor) {
    const uint32_t i = index(name, "bind");
    if (!gpu_open())
      throw usage("api.bind.backend", name,
                  "bind: the CPU backend has no device memory to bind; open with backend='cuda'");
    const TensorView v = view_of(tensor, name, "bind");
    if (v.device.device_type != kDLCUDA)
      throw usage("api.bind.device", name,
                  "bind: buffer '" + name + "' needs device memory; the tensor is in " +
                      (v.device.device_type == kDLCPU ? std::string("host memory")
                                                      : "memory of DLPack device type " +
                                                            std::to_string(v.device.device_type)));
    if (v.device.device_id != device_)
      throw usage("api.bind.device", name,
                  "bind: the tensor is on device " + std::to_string(v.device.device_id) +
                      "; the executable runs on device " + std::to_string(device_));
    check_view(i, v, "bind");
    finish_torch_streams();
    gpu_->bind(name, v.address, v.bytes, v.dtype);
    bound_[name] = tensor;  // the memory stays alive while the executable may use it
  }

  void launch(uint32_t passes, bool wait) {
    open("launch");
    if (gpu_open()) {
      if (!wait) {  // behind torch's current stream, which then waits for it
        const uint64_t stream = torch_stream(device_);
        interruptible([&] { gpu_->launch_async(stream, passes); });
        return;
      }
      finish_torch_streams();
      interruptible([&] { gpu_->launch(passes); });
      return;
    }
    if (!wait)
      throw usage("api.async.backend", "wait",
                  "launch(wait=False) queues the launch on the GPU; the backend is cpu");
    const uint32_t n = passes != 0 ? passes : program_.launch.passes;
    if (n != program_.launch.passes) check_position_bounds(program_, n);
    CpuRunOptions o;
    o.iterations = n;
    passes_run_ = 0;
    py::gil_scoped_release unlocked;
    try {
      passes_run_ = run_cpu(program_, plan_, host_, o).passes_run;
    } catch (const Error& e) {
      if (rank_origin_.empty()) throw;
      throw rank_error(e, rank_origin_);  // (a program with ranks: at its instruction and rank)
    }
  }

  // The last launch's passes that ran (fewer after a generation's eos); 0 before one.
  uint32_t passes_run() const { return gpu_open() ? gpu_->passes_run() : passes_run_; }

  // The outcome of launch(wait=False): raises what launch() would have.
  void wait() {
    open("wait");
    if (gpu_open()) interruptible([&] { gpu_->wait(); });
  }

  py::dict profile(bool events, uint32_t warmup, uint32_t iterations, const std::string& scope,
                   bool flush_l2) {
    Executable& exe = gpu("profile");
    if (iterations == 0) throw usage("usage.iterations", "iterations", "expected iterations >= 1");
    finish_torch_streams();
    py::dict d;
    if (events) {
      ProfileOptions o{warmup, iterations, scope, flush_l2};
      if (scope != "kernel" && scope != "launch")
        throw usage("usage.scope", "scope",
                    "expected scope 'kernel' or 'launch', got '" + scope + "'");
      ProfileResult r;
      interruptible([&] { r = exe.profile(o); });
      nlohmann::ordered_json j;
      put_stats(j, r);
      d = json_loads(j.dump());
      d["clock"] = "cuda events";
      d["scope"] = scope;
      return d;
    }
    // Host clock: each launch() whole (reset, launch, wait).
    std::vector<double> samples;
    interruptible([&] {
      for (uint32_t k = 0; k < warmup; ++k) exe.launch(0);
      for (uint32_t k = 0; k < iterations; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        exe.launch(0);
        samples.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
    });
    std::vector<double> sorted = samples;
    std::sort(sorted.begin(), sorted.end());
    d["samples_ms"] = samples;
    d["median_ms"] = sorted[sorted.size() / 2];
    d["min_ms"] = sorted.front();
    d["max_ms"] = sorted.back();
    d["clock"] = "host";
    d["scope"] = "launch";
    return d;
  }

  py::dict attributes() {
    const KernelAttributes a = gpu("attributes").attributes();
    py::dict d = json_loads(resources_json(a).dump());
    d["device"] = a.device;
    d["cache_hit"] = a.cache_hit;
    return d;
  }

  py::dict stats() {
    const ExecutableStats s = gpu("stats").stats();
    py::dict d;
    d["launches"] = s.launches;
    d["uploads"] = s.uploads;
    d["skipped_uploads"] = s.skipped_uploads;
    d["uploaded_bytes"] = s.uploaded_bytes;
    d["downloaded_bytes"] = s.downloaded_bytes;
    return d;
  }

  py::dict setup_timings() {
    py::dict d;
    for (const auto& [phase, ms] : gpu("setup_timings").setup_timings()) d[py::str(phase)] = ms;
    return d;
  }

  void close() {
    closed_ = true;
    gpu_.reset();
    host_ = {};
    bound_.clear();
  }

private:
  void open(const char* call) const {
    if (closed_) detail::throw_closed(call);
  }
  bool gpu_open() const { return gpu_ != nullptr && gpu_->is_open(); }
  Executable& gpu(const char* call) {
    open(call);
    if (!gpu_open())
      throw usage("api.backend", call,
                  std::string(call) + " needs the GPU backend; this executable runs on the CPU");
    return *gpu_;
  }
  uint32_t index(const std::string& name, const char* call) const {
    open(call);
    for (uint32_t i = 0; i < program_.buffers.size(); ++i)
      if (program_.buffers[i].name == name) return i;
    throw usage("api.buffer", name, "the program has no buffer '" + name + "'");
  }
  // The tensor's dtype and byte size against buffer `i`'s.
  void check_view(uint32_t i, const TensorView& v, const char* call) const {
    const Buffer& b = program_.buffers[i];
    const std::string want(dtype_name(b.dtype));
    if (v.dtype != want)
      throw usage("api.dtype", b.name,
                  std::string(call) + ": buffer '" + b.name + "' is " + want + "; the tensor is " +
                      v.dl_dtype);
    if (v.bytes != b.bytes())
      throw usage("api.size", b.name,
                  std::string(call) + ": buffer '" + b.name + "' holds " +
                      std::to_string(b.bytes()) + " bytes; the tensor has " +
                      std::to_string(v.bytes));
  }
  void write(uint32_t i, const void* data, size_t bytes, const std::string& dtype) {
    const Buffer& b = program_.buffers[i];
    if (gpu_open()) {
      finish_torch_streams();
      py::gil_scoped_release unlocked;
      gpu_->set_input(b.name, data, bytes, dtype);
      return;
    }
    std::vector<std::byte>& dst = host_.data[i];
    if (bytes != dst.size())
      throw usage("api.size", b.name,
                  "set: buffer '" + b.name + "' holds " + std::to_string(dst.size()) +
                      " bytes; the array has " + std::to_string(bytes));
    std::memcpy(dst.data(), data, bytes);
  }

  // A DLPack capsule over buffer `b` at `address` on the executable's device, owning a share
  // of the executable.
  py::capsule export_buffer(const Buffer& b, uint64_t address) const {
    struct Export {
      DLManagedTensor tensor{};
      std::vector<int64_t> shape;
      std::shared_ptr<Executable> owner;
    };
    auto* e = new Export{{}, std::vector<int64_t>(b.shape.begin(), b.shape.end()), gpu_};
    const DType t = b.dtype;
    const uint8_t code = t == DType::bf16                       ? 4
                         : (t == DType::f32 || t == DType::f16) ? 2
                         : (t == DType::i32 || t == DType::i64) ? 0
                                                                : 1;
    const uint8_t bits = static_cast<uint8_t>(dtype_size(t) * 8);
    e->tensor.dl_tensor = {reinterpret_cast<void*>(address),
                           {kDLCUDA, device_},
                           static_cast<int32_t>(e->shape.size()),
                           {code, bits, 1},
                           e->shape.data(),
                           nullptr,
                           0};
    e->tensor.manager_ctx = e;
    e->tensor.deleter = [](DLManagedTensor* self) {
      delete static_cast<Export*>(self->manager_ctx);
    };
    // An unconsumed capsule deletes its tensor; a consumer renames it and calls the deleter.
    return py::capsule(&e->tensor, "dltensor", [](PyObject* capsule) {
      if (PyCapsule_IsValid(capsule, "dltensor")) {
        auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
        t->deleter(t);
      }
    });
  }

  Program program_;
  std::vector<RankOrigin> rank_origin_;  // a program with ranks: its expansion's origins
  std::string backend_;
  int device_ = 0;
  // backend cuda; shared with the tensors get(torch=True) exported, so its memory outlives
  // close() while one of them lives
  std::shared_ptr<Executable> gpu_;
  Plan plan_;         // backend cpu
  HostBuffers host_;  // backend cpu
  std::map<std::string, py::object> bound_;
  bool closed_ = false;
  uint32_t passes_run_ = 0;
};

// An amk.Program, or a path to a program or wrapper program file, loaded and verified for `o`.
detail::OpenedProgram opened_from(const py::object& program, const OpenOptions& o) {
  if (py::isinstance<Program>(program)) return detail::opened_program(program.cast<Program>(), o);
  if (!py::isinstance<py::str>(program) && !py::hasattr(program, "__fspath__"))
    throw py::type_error("expected an amk.Program or a path, got " +
                         py::str(py::type::of(program).attr("__name__")).cast<std::string>());
  return detail::load_for_open(
      py::module_::import("os").attr("fspath")(program).cast<std::string>(), o);
}

}  // namespace

void define_executable(py::module_& m) {
  py::class_<PyExecutable>(m, "Executable", "an opened program (amk.open)")
      .def_property_readonly("backend", &PyExecutable::backend, "'cuda' or 'cpu'")
      .def_property_readonly("buffers",
                             [](const PyExecutable& e) {
                               py::list l;
                               for (const Buffer& b : e.program().buffers) l.append(buffer_dict(b));
                               return l;
                             })
      .def("set", &PyExecutable::set, py::arg("name"), py::arg("array"),
           "copy a numpy array or a tensor (the buffer's dtype and byte size) into buffer `name`; "
           "on the GPU, unchanged bytes are not uploaded again")
      .def("get", &PyExecutable::get, py::arg("name"), py::arg("torch") = false,
           "buffer `name` as a numpy array of its shape (bf16: its uint16 bits); torch=True: a "
           "torch tensor (a bound buffer's own tensor)")
      .def("bind", &PyExecutable::bind, py::arg("name"), py::arg("tensor"),
           "use a device tensor's memory for buffer `name` from now on (no copy)")
      .def("launch", &PyExecutable::launch, py::arg("passes") = 0, py::arg("wait") = true,
           "run the program's passes (0: launch.passes) in one launch and wait; wait=False "
           "(GPU): queue it behind torch's current stream, which then waits for it, and return "
           "at once (wait() takes its outcome)")
      .def("wait", &PyExecutable::wait,
           "the outcome of launch(wait=False): returns when it has finished, raises as launch()")
      .def_property_readonly("passes_run", &PyExecutable::passes_run,
                             "the last launch's passes that ran: fewer than asked where a "
                             "generation met its eos id (0 before a launch)")
      .def("profile", &PyExecutable::profile, py::arg("events") = true, py::arg("warmup") = 3,
           py::arg("iterations") = 20, py::arg("scope") = "kernel", py::arg("flush_l2") = false,
           "time launches (CUDA events; events=False: the host clock around launch())")
      .def("attributes", &PyExecutable::attributes, "the compiled kernel's attributes and launch")
      .def("stats", &PyExecutable::stats, "launches, uploads and bytes moved since open")
      .def_property_readonly("setup_timings", &PyExecutable::setup_timings,
                             "what open took, phase by phase (ms)")
      .def("close", &PyExecutable::close)
      .def_property_readonly("closed", &PyExecutable::closed)
      .def("__enter__", [](PyExecutable& e) -> PyExecutable& { return e; })
      .def("__exit__", [](PyExecutable& e, const py::args&) { e.close(); });

  m.def(
      "generate",
      [](const py::object& program, const std::string& backend, std::optional<int64_t> eos,
         int device, const std::string& vm, const std::string& cache_dir) {
        OpenOptions o;
        o.device = device;
        o.vm = vm;
        o.cache_dir = cache_dir;
        detail::OpenedProgram opened = opened_from(program, o);
        const std::vector<Buffer>& buffers = opened.program.buffers;
        const bool has_ids = std::any_of(buffers.begin(), buffers.end(), [](const Buffer& b) {
          return b.name == "ids" && b.output;
        });
        if (!has_ids)
          throw usage("usage.generate.program", "program",
                      "the program has no output 'ids': amk.generate runs generation programs "
                      "(amk.gen.llama(steps=N, prompt=IDS))");
        const auto eos_buf = std::find_if(buffers.begin(), buffers.end(),
                                          [](const Buffer& b) { return b.name == "eos"; });
        const DType eos_dtype = eos_buf != buffers.end() ? eos_buf->dtype : DType::i32;
        if (eos) gen::check_eos_id(opened.program, *eos, "eos");
        // The id the launch stops at: eos, else the program's own (amk gen llama --eos).
        const std::optional<int64_t> stop_id =
            eos ? (*eos >= 0 ? eos : std::nullopt) : gen::program_eos(opened.program);
        if (eos && eos_buf == buffers.end())
          throw usage("usage.generate.eos", "eos",
                      "the program has no 'eos' input to stop at: make it again with "
                      "amk.gen.llama(steps=N, prompt=IDS) (this amk adds one)");
        PyExecutable exe(std::move(opened), backend, o);
        if (eos) {  // the launch ends one step after generating it (feed_token)
          py::array_t<int64_t> word(1);
          word.mutable_at(0) = *eos;
          exe.set("eos", word.attr("astype")(numpy_dtype(eos_dtype)));
        }
        const auto t0 = std::chrono::steady_clock::now();
        exe.launch(0, true);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        const py::array_t<int64_t> all = exe.get("ids", false).attr("astype")("int64");
        std::vector<int64_t> ids(all.data(), all.data() + all.size());
        bool stopped = false;
        if (stop_id)
          if (const auto at = std::find(ids.begin(), ids.end(), *stop_id); at != ids.end()) {
            ids.erase(at + 1, ids.end());
            stopped = true;
          }
        const size_t generated = ids.size();
        const uint32_t passes = exe.passes_run();
        py::dict d;
        d["ids"] = ids;
        d["generated"] = generated;
        d["stopped_at_eos"] = stopped;
        d["steps"] = passes;
        d["backend"] = exe.backend();
        d["launch_ms"] = ms;
        d["step_ms"] = passes != 0 ? ms / passes : 0.0;
        d["new_tokens_per_s"] = ms > 0 ? generated * 1000.0 / ms : 0.0;
        exe.close();
        return d;
      },
      py::arg("program"), py::arg("backend") = "auto", py::arg("eos") = std::nullopt,
      py::arg("device") = 0, py::arg("vm") = "", py::arg("cache_dir") = "",
      "run a generation program (a path or amk.gen.llama(steps=N, prompt=IDS)) in one launch: "
      "the new ids (with eos, the launch ends one step after generating it and the ids end "
      "with it), the launch's host time, the time a decode step takes and new tokens per second");

  m.def(
      "open",
      [](const py::object& program, const std::string& backend, int device, const std::string& vm,
         std::optional<uint64_t> timeout_ms, const std::string& cache_dir, bool use_cache,
         bool trust_custom_ops, bool allow_outside, bool trust_source) {
        OpenOptions o;
        o.device = device;
        o.vm = vm;
        o.timeout_ms = timeout_ms;
        o.cache_dir = cache_dir;
        o.use_cache = use_cache;
        o.trust_custom_ops = trust_custom_ops;
        o.allow_outside_paths = allow_outside;
        o.trust_source = trust_source;
        return std::make_unique<PyExecutable>(opened_from(program, o), backend, o);
      },
      py::arg("program"), py::arg("backend") = "auto", py::arg("device") = 0, py::arg("vm") = "",
      py::arg("timeout_ms") = std::nullopt, py::arg("cache_dir") = "", py::arg("use_cache") = true,
      py::arg("trust_custom_ops") = false, py::arg("allow_outside") = false,
      py::arg("trust_source") = false,
      "open a program (a path or an amk.Program; a wrapper program's path with trust_source=True) "
      "on the GPU (backend 'cuda'), the CPU reference "
      "backend ('cpu') or whichever is usable ('auto'): verified, its initial data built, its VM "
      "compiled and its buffers uploaded");
}

}  // namespace amk::python
