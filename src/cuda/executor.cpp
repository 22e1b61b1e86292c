#include "cuda/executor.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/phase_log.hpp"
#include "cuda/codegen.hpp"
#include "cuda/device_query.hpp"
#include "cuda/driver.hpp"
#include "cuda/resources.hpp"
#include "cuda/tma.hpp"
#include "cuda/upload.hpp"
#include "report/trace.hpp"

namespace amk {
namespace {

using Clock = std::chrono::steady_clock;

// Every buffer starts on this boundary in the arena: covers TMA's 16/32-byte rule and 16-byte
// vector loads with room to spare.
constexpr uint64_t kBufferAlignment = 256;
// How long past the program's own deadline the host waits before raising the abort flag, and then
// how long it waits for the blocks to see it. The device watchdog normally fires first.
constexpr auto kHostGrace = std::chrono::milliseconds(5000);
constexpr auto kAbortGrace = std::chrono::milliseconds(5000);

// Layout of the host-mapped control block: the diag record, then the word the host copies into the
// device abort flag (a pinned source, so the copy runs on the copy engine next to the persistent
// kernel instead of queueing behind it as a memset kernel would).
constexpr size_t kDiagOffset = 0;
constexpr size_t kAbortWordOffset = sizeof(amk_diag_t);
constexpr size_t kControlBytes = sizeof(amk_diag_t) + 64;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v.data(), v.size()));
}

}  // namespace

struct GpuExecutable::Impl {
  // Declaration order is destruction order reversed: the context is released last, after the module
  // and every allocation made in it.
  cu::PrimaryContext context;
  cu::Module module;
  CUfunction function = nullptr;
  CUfunction step_function = nullptr;  // amk_step (GpuOptions::step_kernel only)
  cu::DeviceMemory arena;              // every program buffer, kBufferAlignment apart
  cu::DeviceMemory instructions, queue_offsets, queue_items, buffer_table, counters, abort_flag,
      trace_words;
  cu::HostMappedMemory control;
  cu::Stream stream;        // launches, resets, event records
  cu::Stream abort_stream;  // the host abort copy only
  cu::Event start, end;
  cu::Event before, after;  // start(): the caller's stream ahead of the launch, and behind it

  Program program;  // copy without inline data: sizes, launch, TMA specs
  Plan plan;
  VmChoice vm;
  std::vector<uint64_t> addresses;  // each buffer's: in the arena, or the caller's (bind_buffer)
  std::vector<amk_buffer_t> table;  // the buffer table as uploaded
  std::vector<CUtensorMap> tma;
  DeviceInfo device;
  KernelResources kernel;
  CompileOutput compiled;
  std::vector<std::pair<std::string, double>> timings;
  GpuOptions options;
  uint64_t timeout_ms = 0;
  uint32_t grid = 0, block = 0, dynamic_smem = 0, cluster_size = 1;
  uint32_t n_instructions = 0, n_queues = 0, n_counters = 0;
  bool hung = false;     // a kernel may still be running: never free (it could block forever)
  uint32_t pending = 0;  // the passes of a launch start() began and finish() has not taken
  Clock::time_point started;

  std::string kernel_label() const {
    return "kernel " + compiled.kernel_name + ", arch " + compiled.arch;
  }
  std::string launch_label() const {
    std::string s = kernel_label() + ", grid " + std::to_string(grid) + ", block " +
                    std::to_string(block) + ", " + std::to_string(dynamic_smem) +
                    " bytes dynamic shared memory, ";
    s += program.launch.mode == LaunchMode::cooperative ? std::string("cooperative")
                                                        : "cluster " + std::to_string(cluster_size);
    return s;
  }

  std::string buffer_label(uint32_t index) const {
    return "buffer '" + program.buffers[index].name + "'";
  }
  // A whole-buffer copy of `bytes` bytes for buffer `index`.
  void check_copy(uint32_t index, size_t bytes) const {
    if (index >= program.buffers.size() || bytes != program.buffers[index].bytes())
      throw Error(ErrorKind::internal, "internal.buffer_copy", "",
                  "a copy of " + std::to_string(bytes) + " bytes for buffer " +
                      std::to_string(index) + " of " + std::to_string(program.buffers.size()));
  }

  amk_diag_t read_diag() const {
    // Host-mapped and written by the device: read through volatile, word by word.
    amk_diag_t d{};
    const auto* src = static_cast<const volatile uint32_t*>(static_cast<const volatile void*>(
        static_cast<const std::byte*>(control.host()) + kDiagOffset));
    uint32_t words[sizeof(amk_diag_t) / 4];
    for (size_t i = 0; i < sizeof(amk_diag_t) / 4; ++i) words[i] = src[i];
    std::memcpy(&d, words, sizeof d);
    return d;
  }

  void reset_state() {
    // Nothing runs now (every launch is waited for), so the host may write the mapped diag.
    std::memset(static_cast<std::byte*>(control.host()) + kDiagOffset, 0, sizeof(amk_diag_t));
    const auto& d = cu::driver();
    cu::check(d.memset_d8_async(counters.get(), 0, counters.size(), stream.get()),
              "cuMemsetD8Async", "the counters");
    cu::check(d.memset_d8_async(abort_flag.get(), 0, abort_flag.size(), stream.get()),
              "cuMemsetD8Async", "the abort flag");
  }

  amk_device_program_t device_program(uint32_t iterations) const {
    amk_device_program_t prog{};
    prog.instructions = reinterpret_cast<const amk_instruction_t*>(instructions.get());
    prog.queue_offsets = reinterpret_cast<const uint32_t*>(queue_offsets.get());
    prog.queue_items = reinterpret_cast<const uint32_t*>(queue_items.get());
    prog.buffers = reinterpret_cast<const amk_buffer_t*>(buffer_table.get());
    prog.counters = reinterpret_cast<uint32_t*>(counters.get());
    prog.abort_flag = reinterpret_cast<uint32_t*>(abort_flag.get());
    prog.diag = reinterpret_cast<amk_diag_t*>(control.device() + kDiagOffset);
    prog.trace = trace_words.get() != 0 ? reinterpret_cast<uint64_t*>(trace_words.get()) : nullptr;
    const auto ns = checked_mul(timeout_ms, 1000000);
    prog.timeout_ns = ns ? *ns : std::numeric_limits<uint64_t>::max();
    prog.n_instructions = n_instructions;
    prog.n_queues = n_queues;
    prog.n_buffers = static_cast<uint32_t>(program.buffers.size());
    prog.n_counters = n_counters;
    prog.iterations = iterations;
    return prog;
  }

  void enqueue(uint32_t iterations) {
    amk_device_program_t prog = device_program(iterations);

    // The program struct by value, then the tensor maps as one __grid_constant__ struct whose
    // layout is that of the array (kernelParams are copied at launch, so locals are fine).
    void* params[2] = {&prog, tma.data()};

    CUlaunchAttribute attrs[2] = {};
    unsigned n_attrs = 0;
    if (program.launch.mode == LaunchMode::cooperative) {
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n_attrs].value.cooperative = 1;
      ++n_attrs;
    } else {
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n_attrs].value.clusterDim.x = cluster_size;
      attrs[n_attrs].value.clusterDim.y = 1;
      attrs[n_attrs].value.clusterDim.z = 1;
      ++n_attrs;
      attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
      attrs[n_attrs].value.clusterSchedulingPolicyPreference =
          CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING;
      ++n_attrs;
    }
    CUlaunchConfig config{};
    config.gridDimX = grid;
    config.gridDimY = 1;
    config.gridDimZ = 1;
    config.blockDimX = block;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = dynamic_smem;
    config.hStream = stream.get();
    config.attrs = attrs;
    config.numAttrs = n_attrs;
    cu::check(cu::driver().launch_kernel_ex(&config, function, params, nullptr), "cuLaunchKernelEx",
              [&] { return launch_label(); });
  }

  // Waits for everything queued on `stream`. Past the deadline + grace the host raises the abort
  // flag; if the blocks still do not return, the executable is abandoned (launch.hang). Returns
  // true when the host had to raise the abort flag.
  bool wait() {
    const cu::HostWatchdog watchdog{timeout_ms, kHostGrace, kAbortGrace};
    return cu::wait_with_watchdog(
        stream, watchdog,
        [&](bool interrupted) {
          if (interrupted)
            spdlog::warn("interrupted; raising the abort flag");
          else
            spdlog::warn("launch still running {} ms after its {} ms deadline; raising the abort "
                         "flag",
                         kHostGrace.count(), timeout_ms);
          const void* one = static_cast<const std::byte*>(control.host()) + kAbortWordOffset;
          cu::check(cu::driver().memcpy_htod_async(abort_flag.get(), one, sizeof(uint32_t),
                                                   abort_stream.get()),
                    "cuMemcpyHtoDAsync", "the abort flag (host abort)");
        },
        [&] {
          hung = true;
          throw Error(ErrorKind::timeout, "launch.hang", launch_label(),
                      "the launch did not finish: the device watchdog (" +
                          std::to_string(timeout_ms) +
                          " ms) did not stop it, nor did the abort flag the host raised " +
                          std::to_string(kHostGrace.count()) + " ms later (waited another " +
                          std::to_string(kAbortGrace.count()) +
                          " ms); the kernel is still running and the GPU context is abandoned; "
                          "diag: " +
                          describe_diag(read_diag()));
        },
        [&](CUresult r) { fault(r); });
  }

  [[noreturn]] void fault(CUresult r) {
    const amk_diag_t d = read_diag();  // host memory: readable even after a fault
    std::string what = launch_label();
    if (d.status != AMK_STATUS_OK) what += "; diag saw " + describe_diag(d);
    cu::throw_driver_error(r, "the launch (cuStreamQuery)", std::move(what));
  }

  LaunchResult run(uint32_t iterations) {
    const auto t0 = Clock::now();
    reset_state();
    enqueue(iterations);
    return outcome(t0);
  }

  // Waits for the launch on the stream and reads how it ended.
  LaunchResult outcome(Clock::time_point t0) {
    LaunchResult result;
    const bool host_aborted = wait();
    result.host_ms = ms_since(t0);
    result.diag = read_diag();
    // Blocks that stopped on the host's abort may leave no record: the launch still did not
    // complete in time.
    if (host_aborted && result.diag.status == AMK_STATUS_OK)
      result.diag.status = AMK_STATUS_ABORTED;
    result.status = launch_status_name(result.diag.status);
    if (vm.config.early_stop && result.status == "ok") {
      std::byte word[sizeof(uint32_t)];
      cu::copy_to_host(word, counters.get() + uint64_t{n_counters} * sizeof(uint32_t), stream.get(),
                       "the stop word");
      stream.synchronize("the stop word");
      std::memcpy(&result.stop_pass, word, sizeof word);
    }
    return result;
  }

  void place_and_upload(const InitialData& initial);

  // The calls that launch or copy need the launch start() began taken by finish() first.
  void require_idle(const char* call) const {
    if (pending != 0)
      throw Error(ErrorKind::internal, "internal.pending", "",
                  std::string(call) + " while a started launch is not finished");
  }
};

namespace {

void require(bool ok, const char* code, const std::string& message) {
  if (!ok) throw Error(ErrorKind::internal, code, "", message);
}

DeviceCaps device_caps(const DeviceInfo& d) {
  DeviceCaps c;
  c.arch = d.arch_number();
  c.smem_optin = d.smem_per_block_optin;
  return c;
}

}  // namespace

void GpuExecutable::Impl::place_and_upload(const InitialData& initial) {
  const size_t nb = program.buffers.size();
  require(plan.buffers.size() == nb, "internal.plan_buffers",
          "the plan has " + std::to_string(plan.buffers.size()) + " buffers, the program " +
              std::to_string(nb));
  require(initial.size() == nb, "internal.initial_buffers",
          "initial contents for " + std::to_string(initial.size()) + " buffers, the program has " +
              std::to_string(nb));
  std::vector<uint64_t> offsets(nb);
  uint64_t total = 0;
  for (size_t i = 0; i < nb; ++i) {
    const uint64_t bytes = program.buffers[i].bytes();
    require(initial[i].size == bytes, "internal.initial_buffers",
            "buffer " + std::to_string(i) + " '" + program.buffers[i].name + "' has " +
                std::to_string(initial[i].size) + " initial bytes, expected " +
                std::to_string(bytes));
    const auto at = checked_align_up(total, kBufferAlignment);
    const auto next = at ? checked_add(*at, bytes) : std::nullopt;
    if (!next)
      throw Error(ErrorKind::device, "device.memory", "",
                  "the program's buffers do not fit a 64-bit address space");
    offsets[i] = *at;
    total = *next;
  }
  arena = cu::DeviceMemory::allocate(total, "the program's buffers");
  addresses.resize(nb);
  for (size_t i = 0; i < nb; ++i) addresses[i] = arena.get() + offsets[i];
  cu::upload_initial(initial, addresses, context, stream.get(),
                     [this](size_t i) { return buffer_label(static_cast<uint32_t>(i)); });

  // The VM's shared-memory buffer table packs a dtype above bit 56 of each address
  // (kernels/amk_device.cuh, AMK_SMEM_BUFFERS): GPU virtual addresses are 49 bits today.
  if (nb != 0 && (arena.get() + total) >> 56 != 0)
    throw Error(ErrorKind::device, "device.memory", "",
                "the driver placed the program's buffers above 2^56, where amk's VM cannot "
                "address them");
  table = plan.buffers;
  for (size_t i = 0; i < nb; ++i) table[i].address = addresses[i];

  instructions = cu::DeviceMemory::allocate(plan.instructions.size() * sizeof(amk_instruction_t),
                                            "the instruction table");
  instructions.upload(bytes_of(plan.instructions), 0, stream.get(), "the instruction table");
  queue_offsets =
      cu::DeviceMemory::allocate(plan.queue_offsets.size() * sizeof(uint32_t), "the queue offsets");
  queue_offsets.upload(bytes_of(plan.queue_offsets), 0, stream.get(), "the queue offsets");
  queue_items =
      cu::DeviceMemory::allocate(plan.queue_items.size() * sizeof(uint32_t), "the queue items");
  queue_items.upload(bytes_of(plan.queue_items), 0, stream.get(), "the queue items");
  buffer_table =
      cu::DeviceMemory::allocate(table.size() * sizeof(amk_buffer_t), "the buffer table");
  buffer_table.upload(bytes_of(table), 0, stream.get(), "the buffer table");
  // The counters, then the stop word (early_stop: the pass whose token was eos), zeroed together.
  counters = cu::DeviceMemory::allocate((uint64_t{plan.n_counters} + 1) * sizeof(uint32_t),
                                        "the counters");
  abort_flag = cu::DeviceMemory::allocate(sizeof(uint32_t), "the abort flag");
  control = cu::HostMappedMemory::allocate(kControlBytes, "the diag record");
  const uint32_t one = 1;
  std::memcpy(static_cast<std::byte*>(control.host()) + kAbortWordOffset, &one, sizeof one);
  if (options.trace) {
    trace_words = cu::DeviceMemory::allocate(uint64_t{plan.instructions.size()} *
                                                 kTraceWordsPerInstruction * sizeof(uint64_t),
                                             "the trace");
    cu::check(cu::driver().memset_d8_async(trace_words.get(), 0, trace_words.size(), stream.get()),
              "cuMemsetD8Async", "the trace");
  }
  stream.synchronize("the plan upload");
}

GpuExecutable GpuExecutable::open(const Program& program, const InitialData& initial,
                                  const GpuOptions& options) {
  GpuExecutable exe;
  exe.impl_ = std::make_unique<Impl>();
  Impl& m = *exe.impl_;
  m.options = options;
  m.program = program;
  for (auto& b : m.program.buffers) b.init.data.clear();  // contents come from `initial`
  m.timeout_ms = options.timeout_ms.value_or(program.launch.timeout_ms);
  // Each phase logged as it starts and ends (-v) and timed into setup_timings_ms().
  PhaseSequence phases(m.timings);

  phases.next("context");
  m.context = cu::PrimaryContext::retain(options.device);
  m.stream = cu::Stream::create("the launch stream");
  m.abort_stream = cu::Stream::create("the abort stream");
  m.start = cu::Event::create("the profile start event");
  m.end = cu::Event::create("the profile end event");
  m.before = cu::Event::create("the caller's stream event");
  m.after = cu::Event::create("the launch's end event");

  phases.next("device");
  m.device = options.checked_device ? *options.checked_device
                                    : check_device_target(program, options.device);

  phases.next("config");
  ChooseOptions chosen;
  chosen.overrides = options.vm;
  chosen.trace = options.trace;
  chosen.step_kernel = options.step_kernel;
  m.vm = choose(program_facts(program), device_caps(m.device), chosen);
  const std::string source = vm_source(program, m.vm, options.trust_custom_ops);

  phases.next("compile");
  CompileOptions copts = options.compile;
  copts.arch = m.device.arch();
  m.compiled = compile_vm(source, static_cast<uint32_t>(program.tma.size()), copts);

  phases.next("module_load");
  m.module = cu::Module::load(m.compiled.cubin, m.kernel_label());
  m.function = m.module.function(m.compiled.kernel_name);

  phases.next("configure");
  const Launch& l = program.launch;
  m.block = l.block;
  m.cluster_size = l.mode == LaunchMode::cluster ? l.cluster[0] * l.cluster[1] * l.cluster[2] : 1;
  // A block or shared-memory request the kernel cannot take would fail in cuFuncSetAttribute as a
  // bare CUDA_ERROR_INVALID_VALUE: refuse it first, with the numbers.
  const KernelResources footprint = cu::kernel_attributes(m.function, m.kernel_label());
  // The VM's dynamic shared memory: the program's own, the config's (gemv's ring), or the TMA
  // gemv's stages in what the compiled kernel's static shared memory leaves.
  m.dynamic_smem = std::max(l.dynamic_smem, m.vm.dynamic_smem);
  if (m.vm.config.tma_gemv && m.device.smem_per_block_optin > footprint.static_smem)
    m.dynamic_smem =
        std::max(m.dynamic_smem,
                 tma_dynamic_smem(program, m.device.smem_per_block_optin - footprint.static_smem));
  // The grid: the program's, or its queues', or (grid auto, amk scheduling) every block of this
  // kernel that can be co-resident here.
  cu::LaunchShape shape{1, m.block, m.dynamic_smem, m.cluster_size};
  if (footprint.static_smem + m.dynamic_smem > m.device.smem_per_block_optin || m.block == 0 ||
      m.block > footprint.max_threads)
    prove_coresidency(program, 1, m.device, footprint);  // throws device.smem / .block
  cu::configure_function(m.function, shape, m.kernel_label());
  if (options.step_kernel) {
    // One block per launch, same shared memory as the VM (the ops are the same code).
    m.step_function = m.module.function(kStepKernelName);
    const std::string step_label =
        std::string("kernel ") + kStepKernelName + ", arch " + m.compiled.arch;
    cu::configure_function(m.step_function, cu::LaunchShape{1, m.block, m.dynamic_smem, 1},
                           step_label);
  }
  m.kernel = cu::query_kernel(m.function, shape, m.kernel_label());
  PlanOptions popts;
  if (l.grid == 0 && !program.queues)
    if (const uint32_t g = auto_grid(program, m.device, m.kernel); g != 0) popts.grid_hint = g;

  phases.next("plan");
  m.plan = make_plan(program, popts);
  m.grid = m.plan.grid;
  prove_coresidency(program, m.grid, m.device, m.kernel);
  m.n_instructions = static_cast<uint32_t>(m.plan.instructions.size());
  m.n_queues = m.plan.n_queues();
  m.n_counters = m.plan.n_counters;
  require(m.n_queues == m.grid, "internal.plan_grid",
          "the plan has " + std::to_string(m.n_queues) + " queues for a grid of " +
              std::to_string(m.grid));

  phases.next("upload");
  m.place_and_upload(initial);

  phases.next("tma_encode");
  m.tma = cu::encode_tma(program, m.addresses);
  phases.end();
  return exe;
}

GpuExecutable::GpuExecutable(GpuExecutable&&) noexcept = default;
GpuExecutable& GpuExecutable::operator=(GpuExecutable&& o) noexcept {
  if (this != &o) {
    close();
    impl_ = std::move(o.impl_);
  }
  return *this;
}
GpuExecutable::~GpuExecutable() { close(); }

GpuExecutable::Impl& GpuExecutable::impl() const {
  if (!impl_)
    throw Error(ErrorKind::internal, "internal.closed", "", "the GPU executable is closed");
  if (impl_->hung)
    throw Error(ErrorKind::timeout, "launch.hang", "",
                "the GPU executable is abandoned: an earlier launch never finished");
  return *impl_;
}

void GpuExecutable::start(uint32_t iterations, CUstream after) {
  Impl& m = impl();
  if (iterations == 0)
    throw Error(ErrorKind::usage, "launch.iterations", "", "a launch needs at least one pass");
  m.require_idle("start");
  check_passes(m.program, m.plan, iterations);
  m.context.make_current();
  const auto& d = cu::driver();
  m.started = Clock::now();
  m.before.record(after, "the caller's stream");
  cu::check(d.stream_wait_event(m.stream.get(), m.before.get(), 0), "cuStreamWaitEvent",
            "the launch behind the caller's stream");
  m.reset_state();  // (the diag is the host's: no launch of this executable runs)
  m.enqueue(iterations);
  m.pending = iterations;
  m.after.record(m.stream.get(), "the launch's end");
  cu::check(d.stream_wait_event(after, m.after.get(), 0), "cuStreamWaitEvent",
            "the caller's stream behind the launch");
}

LaunchResult GpuExecutable::finish() {
  Impl& m = impl();
  if (m.pending == 0)
    throw Error(ErrorKind::internal, "internal.finish", "", "finish() without a started launch");
  m.context.make_current();
  m.pending = 0;
  LaunchResult r = m.outcome(m.started);
  if (r.status != "ok") spdlog::debug("launch stopped: {}", describe_diag(r.diag));
  return r;
}

bool GpuExecutable::started() const { return impl().pending != 0; }

LaunchResult GpuExecutable::launch(uint32_t iterations) {
  Impl& m = impl();
  m.require_idle("launch");
  if (iterations == 0)
    throw Error(ErrorKind::usage, "launch.iterations", "", "a launch needs at least one pass");
  // Counters, waits and queue steps scale with the pass: they must stay within 32 bits.
  check_passes(m.program, m.plan, iterations);
  m.context.make_current();
  LaunchResult r = m.run(iterations);
  if (r.status != "ok") spdlog::debug("launch stopped: {}", describe_diag(r.diag));
  return r;
}

ProfileStats GpuExecutable::profile(uint32_t warmup, uint32_t iterations, const std::string& scope,
                                    uint64_t flush_bytes, uint32_t passes) {
  Impl& m = impl();
  m.require_idle("profile");
  if (scope != "kernel" && scope != "launch")
    throw Error(ErrorKind::usage, "profile.scope", "",
                "profile scope must be kernel or launch, not '" + scope + "'");
  if (iterations == 0)
    throw Error(ErrorKind::usage, "profile.iterations", "", "profile needs at least one sample");
  m.context.make_current();
  const bool launch_scope = scope == "launch";
  std::vector<double> samples;
  samples.reserve(iterations);
  cu::L2Flush flush;
  if (flush_bytes != 0) flush = cu::L2Flush(flush_bytes);
  for (uint64_t i = 0; i < uint64_t{warmup} + iterations; ++i) {
    if (flush_bytes != 0)  // before the start event: stream order keeps it out of the timing
      flush.enqueue(m.stream.get());
    if (launch_scope) {
      m.start.record(m.stream.get(), "the profile start event");
      m.reset_state();
    } else {
      m.reset_state();
      m.start.record(m.stream.get(), "the profile start event");
    }
    m.enqueue(passes != 0 ? passes : m.program.launch.passes);
    m.end.record(m.stream.get(), "the profile end event");
    const bool host_aborted = m.wait();
    amk_diag_t d = m.read_diag();
    if (host_aborted && d.status == AMK_STATUS_OK) d.status = AMK_STATUS_ABORTED;
    if (d.status != AMK_STATUS_OK) {
      const std::string status = launch_status_name(d.status);
      throw Error(status == "timeout" ? ErrorKind::timeout : ErrorKind::launch, "launch." + status,
                  m.launch_label(),
                  "profile sample " + std::to_string(i) +
                      " did not finish ok: " + describe_diag(d));
    }
    const double ms = cu::elapsed_ms(m.start, m.end, "the profile events");
    if (i >= warmup) samples.push_back(ms);
  }
  ProfileStats s = summarize_samples(std::move(samples));
  s.warmup = warmup;
  s.iterations = iterations;
  s.scope = scope;
  return s;
}

HostBuffers GpuExecutable::download() const {
  Impl& m = impl();
  m.require_idle("download");
  m.context.make_current();
  HostBuffers out;
  out.data.resize(m.program.buffers.size());
  uint64_t total = 0;
  for (const Buffer& b : m.program.buffers) total += b.bytes();
  ByteProgress progress("download", total);
  for (size_t i = 0; i < out.data.size(); ++i) {
    out.data[i] = host_bytes(m.program.buffers[i].bytes());  // (huge pages: see host_bytes)
    cu::copy_to_host(out.data[i], m.addresses[i], m.stream.get(), m.buffer_label(i));
    progress.add(out.data[i].size());
  }
  m.stream.synchronize("the buffer download");
  return out;
}

void GpuExecutable::upload(const InitialData& data) {
  Impl& m = impl();
  m.require_idle("upload");
  m.context.make_current();
  require(data.size() == m.program.buffers.size(), "internal.upload_buffers",
          "contents for " + std::to_string(data.size()) + " buffers, the program has " +
              std::to_string(m.program.buffers.size()));
  for (uint32_t i = 0; i < data.size(); ++i) m.check_copy(i, data[i].size);
  cu::upload_initial(data, m.addresses, m.context, m.stream.get(),
                     [&m](size_t i) { return m.buffer_label(static_cast<uint32_t>(i)); });
}

void GpuExecutable::upload_buffer(uint32_t index, std::span<const std::byte> data) {
  Impl& m = impl();
  m.require_idle("upload_buffer");
  m.check_copy(index, data.size());
  m.context.make_current();
  cu::copy_to_device(m.addresses[index], data, m.stream.get(), m.buffer_label(index));
  m.stream.synchronize("the buffer upload");
}

void GpuExecutable::download_buffer(uint32_t index, std::span<std::byte> out) const {
  Impl& m = impl();
  m.require_idle("download_buffer");
  m.check_copy(index, out.size());
  m.context.make_current();
  cu::copy_to_host(out, m.addresses[index], m.stream.get(), m.buffer_label(index));
  m.stream.synchronize("the buffer download");
}

void GpuExecutable::bind_buffer(uint32_t index, uint64_t address) {
  Impl& m = impl();
  m.require_idle("bind_buffer");
  const uint64_t bytes = index < m.program.buffers.size() ? m.program.buffers[index].bytes() : 0;
  m.check_copy(index, bytes);
  m.context.make_current();
  const std::string what = m.buffer_label(index);
  cu::check_caller_memory(address, bytes, m.context.get(), m.options.device, what);
  // The VM's shared-memory buffer table packs a dtype above bit 56 (as for the arena).
  if (address + bytes < address || (address + bytes) >> 56 != 0)
    throw Error(ErrorKind::device, "device.memory", what,
                "bind: memory at " + cu::hex_address(address) +
                    " lies above 2^56, where amk's VM "
                    "cannot address it");
  // Everything that can fail first, on copies; then the tables change together.
  std::vector<uint64_t> addresses = m.addresses;
  addresses[index] = address;
  std::vector<CUtensorMap> tma = cu::encode_tma(m.program, addresses);
  std::vector<amk_buffer_t> table = m.table;
  table[index].address = address;
  m.buffer_table.upload(bytes_of(table), 0, m.stream.get(), "the buffer table");
  m.stream.synchronize("the buffer table upload");
  m.addresses = std::move(addresses);
  m.table = std::move(table);
  m.tma = std::move(tma);
}

const std::vector<std::pair<std::string, double>>& GpuExecutable::setup_timings_ms() const {
  return impl().timings;
}
const DeviceInfo& GpuExecutable::device() const { return impl().device; }
uint64_t GpuExecutable::buffer_address(uint32_t index) const {
  Impl& m = impl();
  m.check_copy(index, index < m.program.buffers.size() ? m.program.buffers[index].bytes() : 0);
  return m.addresses[index];
}
const KernelResources& GpuExecutable::kernel() const { return impl().kernel; }
const CompileOutput& GpuExecutable::compiled() const { return impl().compiled; }
uint32_t GpuExecutable::grid() const { return impl().grid; }
uint32_t GpuExecutable::block() const { return impl().block; }
uint32_t GpuExecutable::dynamic_smem() const { return impl().dynamic_smem; }
const VmChoice& GpuExecutable::vm() const { return impl().vm; }
const Plan& GpuExecutable::plan() const { return impl().plan; }
const Program& GpuExecutable::program() const { return impl().program; }
uint64_t GpuExecutable::timeout_ms() const { return impl().timeout_ms; }

GpuExecutable::StepLaunch GpuExecutable::step_launch() const {
  const Impl& m = impl();
  m.context.make_current();
  StepLaunch l;
  l.function = m.step_function;
  l.stream = m.stream.get();
  l.program = m.device_program(1);
  l.tma = m.tma.empty() ? nullptr : m.tma.data();
  l.block = m.block;
  l.dynamic_smem = m.dynamic_smem;
  return l;
}

void GpuExecutable::enqueue_reset() {
  Impl& m = impl();
  m.context.make_current();
  m.reset_state();
}

amk_diag_t GpuExecutable::wait_idle() {
  Impl& m = impl();
  m.context.make_current();
  const bool host_aborted = m.wait();
  amk_diag_t d = m.read_diag();
  if (host_aborted && d.status == AMK_STATUS_OK) d.status = AMK_STATUS_ABORTED;
  return d;
}

std::vector<uint64_t> GpuExecutable::trace() const {
  Impl& m = impl();
  std::vector<uint64_t> words;
  if (m.trace_words.get() == 0) return words;
  m.context.make_current();
  words.resize(m.trace_words.size() / sizeof(uint64_t));
  m.trace_words.download(std::as_writable_bytes(std::span<uint64_t>(words)), 0, m.stream.get(),
                         "the trace");
  m.stream.synchronize("the trace download");
  return words;
}

void GpuExecutable::close() {
  if (!impl_) return;
  std::unique_ptr<Impl> m = std::move(impl_);
  try {
    if (!m->hung && m->context) m->context.make_current();  // the frees below act on it
    if (!m->hung && m->pending != 0) {  // a started launch ends before its memory goes
      m->pending = 0;
      (void)m->outcome(m->started);
    }
  } catch (const Error& e) {
    spdlog::debug("closing the GPU executable: {}", e.what());
  }
  if (m->hung) {
    // A kernel may still be running: freeing its memory or module could block forever or pull
    // memory from under it. Hand every handle out unfreed; the process is expected to exit.
    (void)m->arena.release(), (void)m->instructions.release(), (void)m->queue_offsets.release();
    (void)m->queue_items.release(), (void)m->buffer_table.release(), (void)m->counters.release();
    (void)m->abort_flag.release(), (void)m->trace_words.release(), (void)m->control.release();
    (void)m->stream.release(), (void)m->abort_stream.release(), (void)m->start.release();
    (void)m->end.release(), (void)m->before.release(), (void)m->after.release();
    (void)m->module.release(), (void)m->context.release();
    return;
  }
  m.reset();  // members in reverse declaration order; the context goes last
}

DeviceInfo check_device_target(const Program& program, int ordinal) {
  check_ordinal(ordinal, cu::device_count());  // device.ordinal, not cuDeviceGet's driver error
  DeviceInfo d = cu::query_device(ordinal);
  if (const auto mismatches = target_mismatches(program, d); !mismatches.empty()) {
    std::string msg = "program '" + program.name + "' cannot run on " + d.name + " (" + d.arch() +
                      ", device fingerprint " + d.fingerprint() + "): ";
    for (size_t i = 0; i < mismatches.size(); ++i) msg += (i ? "; " : "") + mismatches[i];
    throw Error(ErrorKind::device, "device.target", "/target", msg);
  }
  // The buffers against the device's memory, before the host data is built (the allocation
  // checks the free memory again).
  uint64_t need = 0;
  for (const Buffer& b : program.buffers)
    need = need > UINT64_MAX - b.bytes() ? UINT64_MAX : need + b.bytes();
  if (d.global_mem_bytes != 0 && need > d.global_mem_bytes)
    throw Error(ErrorKind::device, "device.memory", "/buffers",
                "the program's buffers need " + std::to_string(need >> 20) + " MiB (" +
                    std::to_string(need) + " bytes); " + d.name + " has " +
                    std::to_string(d.global_mem_bytes >> 20) + " MiB of memory");
  return d;
}

bool gpu_available(std::string* why) {
  if (!cu::driver_available(why)) return false;
  try {
    if (cu::device_count() > 0) return true;
    if (why != nullptr) *why = "the NVIDIA driver reports no CUDA devices";
  } catch (const Error& e) {
    if (why != nullptr) *why = e.message();
  }
  return false;
}

std::vector<DeviceInfo> list_devices() {
  const int n = cu::device_count();
  std::vector<DeviceInfo> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(cu::query_device(i));
  return out;
}

}  // namespace amk
