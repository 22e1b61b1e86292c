#include "cuda/wrapper_exec.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/phase_log.hpp"
#include "cuda/device_query.hpp"
#include "cuda/driver.hpp"
#include "cuda/resources.hpp"
#include "cuda/tma.hpp"
#include "cuda/upload.hpp"

namespace amk {
namespace {

using Clock = std::chrono::steady_clock;

// Every array starts on this boundary (TMA's 16-byte rule and vector loads with room to spare).
constexpr uint64_t kAlignment = 256;
// How long the host waits for the blocks to see the abort word before abandoning the launch.
constexpr auto kAbortGrace = std::chrono::milliseconds(5000);
constexpr size_t kFlags = static_cast<size_t>(PackageArray::flags);
constexpr size_t kTensorArgs = static_cast<size_t>(PackageArray::tensor_args);

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The bytes reserved for buffer i: its own, at least one (a valid, distinct address for an empty
// array, as executor.py allocates one byte), and at least the abort word for the flags.
uint64_t reserved_bytes(const Program& view, size_t i) {
  const uint64_t min = i == kFlags ? sizeof(uint32_t) : 1;
  return std::max(view.buffers[i].bytes(), min);
}

// True when some comm record is an HBM send or receive (the flags are zeroed before a launch).
bool comms_need_reset(const InitialData& initial) {
  const size_t i = static_cast<size_t>(PackageArray::comms);
  if (initial[i].size == 0) return false;
  const std::vector<std::byte> bytes = initial.expand(i);
  for (size_t at = 0; at + sizeof(WrapperCommRecord) <= bytes.size();
       at += sizeof(WrapperCommRecord)) {
    WrapperCommRecord r{};
    std::memcpy(&r, bytes.data() + at, sizeof r);
    if (r.kind == kCommKindHbmSend || r.kind == kCommKindHbmRecv) return true;
  }
  return false;
}

// The kernel's parameter list against the package: 14 pointers of 8 bytes, then one 128-byte
// tensor map per TMA spec. A launch with another list would hand the kernel garbage (or read
// past amk's parameter array). A cubin without the parameter records is taken as it is.
void check_kernel_params(const WrapperProgram& w, const CompileOutput& out) {
  const auto params = cubin_kernel_params(out.cubin, out.kernel_name);
  if (!params) return;
  const size_t want = kPackageArrays + w.tma.size();
  bool ok = params->size() == want;
  for (size_t i = 0; ok && i < params->size(); ++i)
    ok = (*params)[i].size == (i < kPackageArrays ? 8u : sizeof(CUtensorMap));
  if (ok) return;
  // "14 x 8, 1 x 128": runs of equal sizes.
  std::string sizes;
  for (size_t i = 0; i < params->size();) {
    size_t j = i;
    while (j < params->size() && (*params)[j].size == (*params)[i].size) ++j;
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(j - i) + " x " +
             std::to_string((*params)[i].size);
    i = j;
  }
  throw Error(ErrorKind::program, "wrapper.kernel_params", "/wrapper/kernel_name",
              "kernel " + out.kernel_name + " takes " + std::to_string(params->size()) +
                  " parameters (" + (sizes.empty() ? std::string("none") : sizes + " bytes") +
                  "); the launch passes the 14 package pointers (8 bytes each) and " +
                  std::to_string(w.tma.size()) + " tensor map(s) of " +
                  std::to_string(sizeof(CUtensorMap)) +
                  " bytes, one per TMA spec in order (AMK_WRAPPER_PARAMS, kernels/amk_wrapper.h)");
}

}  // namespace

CompileOutput compile_wrapper(const WrapperProgram& w, const CompileOptions& options) {
  CompileUnit unit;
  unit.source = w.wrapper.source;
  unit.file_name = w.wrapper.source_path.empty() ? "wrapper.cu" : w.wrapper.source_path;
  unit.kernel_name = w.wrapper.kernel_name;
  unit.tma_count = static_cast<uint32_t>(w.tma.size());
  unit.defines = wrapper_nvrtc_defines(w.wrapper);
  unit.generator = std::string("wrapper/") + AMK_VERSION;
  CompileOutput out = compile_unit(unit, options);
  // NVRTC compiles a source without the named kernel happily; cuModuleGetFunction would fail
  // later with a bare driver error, so the cubin's symbol table is read now (cache hits too).
  if (!cubin_has_entry(out.cubin, unit.kernel_name))
    throw Error(ErrorKind::program, "wrapper.kernel_missing", "/wrapper/kernel_name",
                "the compiled source has no kernel " + unit.kernel_name +
                    " (declare it extern \"C\" __global__ so that it keeps its name)");
  check_kernel_params(w, out);
  return out;
}

DeviceInfo check_wrapper_device(const WrapperProgram& w, int ordinal) {
  check_ordinal(ordinal, cu::device_count());
  DeviceInfo d = cu::query_device(ordinal);
  check_wrapper_target(w, d);
  // What place_and_upload reserves, from the sizes alone (no copy of the arrays' contents).
  uint64_t need = 0;
  const auto add = [&](uint64_t bytes) {
    const uint64_t b = std::max<uint64_t>(bytes, sizeof(uint32_t)) + kAlignment;
    need = need > UINT64_MAX - b ? UINT64_MAX : need + b;
  };
  for (const PackageEntry& e : w.package) add(e.present ? e.bytes() : 0);
  add(w.tensor_args.size() * sizeof(WrapperTensorArgRecord));
  for (const Buffer& t : w.tensor_args) add(t.bytes());
  if (d.global_mem_bytes != 0 && need > d.global_mem_bytes)
    throw Error(ErrorKind::device, "device.memory", "/package",
                "the wrapper's arrays and tensor arguments need " + std::to_string(need >> 20) +
                    " MiB (" + std::to_string(need) + " bytes); " + d.name + " has " +
                    std::to_string(d.global_mem_bytes >> 20) + " MiB of memory");
  return d;
}

struct WrapperExecutable::Impl {
  // Declaration order is destruction order reversed: the context goes last.
  cu::PrimaryContext context;
  cu::Module module;
  CUfunction function = nullptr;
  cu::DeviceMemory arena;           // every array and tensor argument, kAlignment apart
  cu::HostMappedMemory abort_word;  // pinned AMK_WRAPPER_ABORT, copied into flags word 0
  cu::Stream stream;                // resets, launches, copies, events
  cu::Stream abort_stream;          // the abort copy only (reaches a running kernel)
  cu::Event start, end;

  WrapperProgram program;           // without the source and inline data
  Program view;                     // wrapper_buffers(program)
  Program tma_view;                 // the tensor arguments as buffers, with the TMA specs
  std::vector<uint64_t> addresses;  // per buffer of `view`
  std::vector<CUtensorMap> tma;
  DeviceInfo device;
  KernelResources kernel;
  CompileOutput compiled;
  std::vector<std::pair<std::string, double>> timings;
  WrapperGpuOptions options;
  uint64_t timeout_ms = 0;
  bool reset_flags = false;
  bool hung = false;  // a kernel may still run: nothing is freed

  std::string launch_label() const {
    const auto b = program.launch.block3();
    std::string s =
        "wrapper kernel " + compiled.kernel_name + ", arch " + compiled.arch + ", grid " +
        std::to_string(program.launch.queues) + ", block (" + std::to_string(b[0]) + ", " +
        std::to_string(b[1]) + ", " + std::to_string(b[2]) + "), " +
        std::to_string(program.launch.dynamic_smem_bytes) + " bytes dynamic shared memory, ";
    s += program.launch.cluster_size > 1 ? "cluster " + std::to_string(program.launch.cluster_size)
                                         : std::string("cooperative");
    return s;
  }
  std::string buffer_label(size_t i) const {
    return i < kPackageArrays ? "package array '" + view.buffers[i].name + "'"
                              : "tensor argument '" + view.buffers[i].name + "'";
  }
  void check_index(uint32_t index, size_t bytes, const char* call) const {
    if (index >= view.buffers.size() || bytes != view.buffers[index].bytes())
      throw Error(ErrorKind::internal, "internal.buffer_copy", "",
                  std::string(call) + " of " + std::to_string(bytes) + " bytes for buffer " +
                      std::to_string(index) + " of " + std::to_string(view.buffers.size()));
  }
  std::vector<uint64_t> tensor_addresses(const std::vector<uint64_t>& all) const {
    return {all.begin() + kPackageArrays, all.end()};
  }

  void enqueue_resets() {
    const auto& d = cu::driver();
    const uint64_t flags = addresses[kFlags];
    if (reset_flags)
      cu::check(d.memset_d8_async(flags, 0, reserved_bytes(view, kFlags), stream.get()),
                "cuMemsetD8Async", "the flags");
    else
      cu::check(d.memset_d32_async(flags, 0, 1, stream.get()), "cuMemsetD32Async",
                "the abort word");
  }

  void enqueue_launch() {
    std::array<CUdeviceptr, kPackageArrays> ptrs{};
    for (size_t i = 0; i < kPackageArrays; ++i) ptrs[i] = addresses[i];
    std::vector<void*> params(kPackageArrays + tma.size());
    for (size_t i = 0; i < kPackageArrays; ++i) params[i] = &ptrs[i];
    for (size_t t = 0; t < tma.size(); ++t) params[kPackageArrays + t] = &tma[t];

    const WrapperLaunch& l = program.launch;
    CUlaunchAttribute attrs[2] = {};
    unsigned n = 0;
    if (l.cluster_size > 1) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = l.cluster_size;
      attrs[n].value.clusterDim.y = 1;
      attrs[n].value.clusterDim.z = 1;
      ++n;
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
      attrs[n].value.clusterSchedulingPolicyPreference =
          CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING;
      ++n;
    } else {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n].value.cooperative = 1;
      ++n;
    }
    const auto b = l.block3();
    CUlaunchConfig config{};
    config.gridDimX = l.queues;
    config.gridDimY = 1;
    config.gridDimZ = 1;
    config.blockDimX = b[0];
    config.blockDimY = b[1];
    config.blockDimZ = b[2];
    config.sharedMemBytes = l.dynamic_smem_bytes;
    config.hStream = stream.get();
    config.attrs = attrs;
    config.numAttrs = n;
    cu::check(cu::driver().launch_kernel_ex(&config, function, params.data(), nullptr),
              "cuLaunchKernelEx", [&] { return launch_label(); });
  }

  // Waits for the stream. At the deadline the host copies AMK_WRAPPER_ABORT into flags word 0;
  // a kernel that has not returned kAbortGrace later is abandoned (launch.hang). Returns true
  // when the abort word was set.
  bool wait() {
    const cu::HostWatchdog watchdog{timeout_ms, std::chrono::milliseconds(0), kAbortGrace};
    return cu::wait_with_watchdog(
        stream, watchdog,
        [&](bool interrupted) {
          if (interrupted)
            spdlog::warn("interrupted; setting the abort word (flags word {})",
                         AMK_WRAPPER_ABORT_WORD);
          else
            spdlog::warn("wrapper launch still running at its {} ms deadline; setting the abort "
                         "word (flags word {})",
                         timeout_ms, AMK_WRAPPER_ABORT_WORD);
          cu::check(cu::driver().memcpy_htod_async(addresses[kFlags], abort_word.host(),
                                                   sizeof(uint32_t), abort_stream.get()),
                    "cuMemcpyHtoDAsync", "the abort word");
        },
        [&] {
          hung = true;
          throw Error(ErrorKind::timeout, "launch.hang", launch_label(),
                      "the wrapper did not finish: the host set the abort word (flags word " +
                          std::to_string(AMK_WRAPPER_ABORT_WORD) + ") at its " +
                          std::to_string(timeout_ms) + " ms deadline and waited another " +
                          std::to_string(kAbortGrace.count()) +
                          " ms; the kernel does not poll it (amk_wrapper_abort_requested) and "
                          "is still running; the GPU context is abandoned");
        },
        [&](CUresult r) {
          cu::throw_driver_error(r, "the launch (cuStreamQuery)", launch_label());
        });
  }

  void place_and_upload(const InitialData& initial);
};

void WrapperExecutable::Impl::place_and_upload(const InitialData& initial) {
  const size_t nb = view.buffers.size();
  if (initial.size() != nb)
    throw Error(ErrorKind::internal, "internal.initial_buffers", "",
                "initial contents for " + std::to_string(initial.size()) +
                    " buffers, the wrapper has " + std::to_string(nb));
  std::vector<uint64_t> offsets(nb);
  uint64_t total = 0;
  for (size_t i = 0; i < nb; ++i) {
    if (initial[i].size != view.buffers[i].bytes())
      throw Error(ErrorKind::internal, "internal.initial_buffers", "",
                  buffer_label(i) + " has " + std::to_string(initial[i].size) +
                      " initial bytes, expected " + std::to_string(view.buffers[i].bytes()));
    const auto at = checked_align_up(total, kAlignment);
    const auto next = at ? checked_add(*at, reserved_bytes(view, i)) : std::nullopt;
    if (!next)
      throw Error(ErrorKind::device, "device.memory", "",
                  "the wrapper's arrays do not fit a 64-bit address space");
    offsets[i] = *at;
    total = *next;
  }
  arena = cu::DeviceMemory::allocate(total, "the wrapper's arrays and tensor arguments");
  addresses.resize(nb);
  for (size_t i = 0; i < nb; ++i) addresses[i] = arena.get() + offsets[i];
  // The flags' bytes past the file's (the abort word of a short array) start zero.
  cu::check(cu::driver().memset_d8_async(addresses[kFlags], 0, reserved_bytes(view, kFlags),
                                         stream.get()),
            "cuMemsetD8Async", "the flags");
  cu::upload_initial(initial, addresses, context, stream.get(),
                     [this](size_t i) { return buffer_label(i); });
}

WrapperExecutable WrapperExecutable::open(const WrapperProgram& w, const InitialData& initial,
                                          const WrapperGpuOptions& options) {
  WrapperExecutable exe;
  exe.impl_ = std::make_unique<Impl>();
  Impl& m = *exe.impl_;
  m.options = options;
  // Sizes, shapes and specs only: the contents come from `initial`.
  m.program = w;
  m.program.wrapper.source.clear();
  for (PackageEntry& e : m.program.package) e.buffer.init.data.clear();
  for (Buffer& t : m.program.tensor_args) t.init.data.clear();
  m.view = wrapper_buffers(m.program);
  m.tma_view.buffers = m.program.tensor_args;
  m.tma_view.tma = m.program.tma;
  m.timeout_ms = options.timeout_ms.value_or(w.launch.timeout_ms);
  PhaseSequence phases(m.timings);

  phases.next("context");
  m.context = cu::PrimaryContext::retain(options.device);
  m.stream = cu::Stream::create("the launch stream");
  m.abort_stream = cu::Stream::create("the abort stream");
  m.start = cu::Event::create("the profile start event");
  m.end = cu::Event::create("the profile end event");
  m.abort_word = cu::HostMappedMemory::allocate_staging(sizeof(uint32_t), "the abort word");
  const uint32_t abort = AMK_WRAPPER_ABORT;
  std::memcpy(m.abort_word.host(), &abort, sizeof abort);

  phases.next("target");
  m.device =
      options.checked_device ? *options.checked_device : check_wrapper_device(w, options.device);

  phases.next("compile");
  CompileOptions co = options.compile;
  co.arch = wrapper_arch(w.target);
  m.compiled = compile_wrapper(w, co);

  phases.next("module_load");
  m.module = cu::Module::load(m.compiled.cubin, "wrapper kernel " + m.compiled.kernel_name +
                                                    ", arch " + m.compiled.arch);
  m.function = m.module.function(m.compiled.kernel_name);

  phases.next("configure");
  const WrapperLaunch& l = w.launch;
  const auto b = l.block3();
  const uint32_t threads = b[0] * b[1] * b[2];
  const KernelResources footprint = cu::kernel_attributes(m.function, m.launch_label());
  // A shape the function cannot take fails in cuFuncSetAttribute with a bare
  // CUDA_ERROR_INVALID_VALUE: the proof refuses it first, with the numbers.
  if (footprint.static_smem + l.dynamic_smem_bytes > m.device.smem_per_block_optin ||
      threads == 0 || threads > footprint.max_threads)
    prove_wrapper_launch(w, m.device, footprint);
  const cu::LaunchShape shape{l.queues, threads, l.dynamic_smem_bytes, l.cluster_size};
  cu::configure_function(m.function, shape, m.launch_label());
  m.kernel = cu::query_kernel(m.function, shape, m.launch_label());
  prove_wrapper_launch(w, m.device, m.kernel);

  phases.next("upload");
  m.reset_flags = comms_need_reset(initial);
  m.place_and_upload(initial);

  phases.next("tensor_args");
  const std::vector<std::byte> records = tensor_arg_records(w, m.tensor_addresses(m.addresses));
  if (!records.empty())
    cu::copy_to_device(m.addresses[kTensorArgs], records, m.stream.get(), "the tensor-arg records");
  m.stream.synchronize("the upload");

  phases.next("tma_encode");
  m.tma = cu::encode_tma(m.tma_view, m.tensor_addresses(m.addresses));
  phases.end();
  return exe;
}

WrapperExecutable::WrapperExecutable(WrapperExecutable&&) noexcept = default;
WrapperExecutable& WrapperExecutable::operator=(WrapperExecutable&& o) noexcept {
  if (this != &o) {
    close();
    impl_ = std::move(o.impl_);
  }
  return *this;
}
WrapperExecutable::~WrapperExecutable() { close(); }

WrapperExecutable::Impl& WrapperExecutable::impl() const {
  if (!impl_)
    throw Error(ErrorKind::internal, "internal.closed", "", "the wrapper executable is closed");
  if (impl_->hung)
    throw Error(ErrorKind::timeout, "launch.hang", "",
                "the wrapper executable is abandoned: an earlier launch never finished");
  return *impl_;
}

WrapperLaunchResult WrapperExecutable::launch() {
  Impl& m = impl();
  m.context.make_current();
  const auto t0 = Clock::now();
  m.enqueue_resets();
  m.enqueue_launch();
  const bool aborted = m.wait();
  return WrapperLaunchResult{aborted ? "timeout" : "ok", ms_since(t0)};
}

ProfileStats WrapperExecutable::profile(uint32_t warmup, uint32_t iterations,
                                        const std::string& scope, uint64_t flush_bytes) {
  Impl& m = impl();
  if (scope != "kernel" && scope != "launch")
    throw Error(ErrorKind::usage, "profile.scope", "",
                "profile scope must be kernel or launch, not '" + scope + "'");
  if (iterations == 0)
    throw Error(ErrorKind::usage, "profile.iterations", "", "profile needs at least one sample");
  m.context.make_current();
  std::vector<double> samples;
  samples.reserve(iterations);
  cu::L2Flush flush;
  if (flush_bytes != 0) flush = cu::L2Flush(flush_bytes);
  for (uint64_t i = 0; i < uint64_t{warmup} + iterations; ++i) {
    if (flush_bytes != 0) flush.enqueue(m.stream.get());  // before the start event: untimed
    if (scope == "launch") {
      m.start.record(m.stream.get(), "the profile start event");
      m.enqueue_resets();
    } else {
      m.enqueue_resets();
      m.start.record(m.stream.get(), "the profile start event");
    }
    m.enqueue_launch();
    m.end.record(m.stream.get(), "the profile end event");
    if (m.wait())
      throw Error(ErrorKind::timeout, "launch.timeout", m.launch_label(),
                  "profile sample " + std::to_string(i) + " passed its " +
                      std::to_string(m.timeout_ms) + " ms deadline and returned on the abort word");
    const double ms = cu::elapsed_ms(m.start, m.end, "the profile events");
    if (i >= warmup) samples.push_back(ms);
  }
  ProfileStats s = summarize_samples(std::move(samples));
  s.warmup = warmup;
  s.iterations = iterations;
  s.scope = scope;
  return s;
}

void WrapperExecutable::upload_buffer(uint32_t index, std::span<const std::byte> data) {
  Impl& m = impl();
  m.check_index(index, data.size(), "an upload");
  if (index == kTensorArgs)
    throw Error(ErrorKind::usage, "api.wrapper.tensor_args", "tensor_args",
                "the tensor_args array is amk's: it holds the tensor arguments' records");
  m.context.make_current();
  cu::copy_to_device(m.addresses[index], data, m.stream.get(), m.buffer_label(index));
  m.stream.synchronize("the buffer upload");
}

void WrapperExecutable::download_buffer(uint32_t index, std::span<std::byte> out) const {
  Impl& m = impl();
  m.check_index(index, out.size(), "a download");
  m.context.make_current();
  cu::copy_to_host(out, m.addresses[index], m.stream.get(), m.buffer_label(index));
  m.stream.synchronize("the buffer download");
}

void WrapperExecutable::bind_buffer(uint32_t index, uint64_t address) {
  Impl& m = impl();
  const uint64_t bytes = index < m.view.buffers.size() ? m.view.buffers[index].bytes() : 0;
  m.check_index(index, bytes, "a bind");
  if (index < kPackageArrays)
    throw Error(ErrorKind::usage, "api.bind.wrapper", m.view.buffers[index].name,
                "only a wrapper's tensor arguments can be bound to the caller's memory, not its "
                "package array '" +
                    m.view.buffers[index].name + "'");
  m.context.make_current();
  const std::string what = m.buffer_label(index);
  cu::check_caller_memory(address, bytes, m.context.get(), m.options.device, what);
  // Everything that can fail first, on copies: the maps over the moved tensor are validated
  // and encoded again for its new address, then the records and maps change together.
  std::vector<uint64_t> addresses = m.addresses;
  addresses[index] = address;
  const std::vector<uint64_t> tensors = m.tensor_addresses(addresses);
  std::vector<CUtensorMap> tma = cu::encode_tma(m.tma_view, tensors);
  const std::vector<std::byte> records = tensor_arg_records(m.program, tensors);
  cu::copy_to_device(m.addresses[kTensorArgs], records, m.stream.get(), "the tensor-arg records");
  m.stream.synchronize("the tensor-arg records");
  m.addresses = std::move(addresses);
  m.tma = std::move(tma);
}

const std::vector<std::pair<std::string, double>>& WrapperExecutable::setup_timings_ms() const {
  return impl().timings;
}
const DeviceInfo& WrapperExecutable::device() const { return impl().device; }
uint64_t WrapperExecutable::buffer_address(uint32_t index) const {
  const Impl& m = impl();
  if (index >= m.addresses.size())
    throw Error(ErrorKind::internal, "internal.buffer", "", "no buffer " + std::to_string(index));
  return m.addresses[index];
}
const KernelResources& WrapperExecutable::kernel() const { return impl().kernel; }
const CompileOutput& WrapperExecutable::compiled() const { return impl().compiled; }
const WrapperProgram& WrapperExecutable::program() const { return impl().program; }
const Program& WrapperExecutable::buffers() const { return impl().view; }
uint64_t WrapperExecutable::timeout_ms() const { return impl().timeout_ms; }
bool WrapperExecutable::flags_reset() const { return impl().reset_flags; }

void WrapperExecutable::close() {
  if (!impl_) return;
  std::unique_ptr<Impl> m = std::move(impl_);
  if (m->hung) {
    // The kernel may still run: freeing its memory or module could block or pull memory from
    // under it. Every handle is handed out unfreed; the process is expected to exit.
    (void)m->arena.release(), (void)m->abort_word.release(), (void)m->stream.release();
    (void)m->abort_stream.release(), (void)m->start.release(), (void)m->end.release();
    (void)m->module.release(), (void)m->context.release();
    return;
  }
  try {
    if (m->context) m->context.make_current();
  } catch (const Error& e) {
    spdlog::debug("closing the wrapper executable: {}", e.what());
  }
  m.reset();
}

}  // namespace amk
