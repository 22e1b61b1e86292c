// The public API over src/cuda (builds with the CUDA toolkit): an Executable is a GpuExecutable
// (a VM program) or a WrapperExecutable (a wrapper program), plus the host-side book of its
// buffers (api/host.hpp) and what crossed between host and device.
#include <cstdio>
#include <memory>
#include <span>
#include <utility>

#include "amk/amk.hpp"
#include "api/host.hpp"
#include "api/internal.hpp"
#include "core/error.hpp"
#include "cuda/bench.hpp"
#include "cuda/executor.hpp"
#include "verify/ranks.hpp"
#include "cuda/wrapper_exec.hpp"
#include "ops/registry.hpp"

namespace amk {

struct Executable::Impl {
  std::optional<GpuExecutable> gpu;          // a VM program
  std::optional<WrapperExecutable> wrapper;  // a wrapper program
  detail::BufferBook book;
  ExecutableStats stats;
  uint32_t passes_run = 0;      // the last launch's
  uint32_t started_passes = 0;  // launch_async's, until its outcome is taken
};

namespace {

std::string instruction_label(const Program& p, uint32_t index) {
  if (index >= p.instructions.size()) return "instruction " + std::to_string(index);
  const Instruction& ins = p.instructions[index];
  std::string s = "instruction " + std::to_string(index);
  if (!ins.name.empty()) s += " '" + ins.name + "'";
  s += " (" + op_name(p, ins.op) + ")";
  return s;
}

std::string counter_label(const Program& p, uint32_t index) {
  std::string s;  // (appended: GCC 12 warns, wrongly, about "'" + a std::string)
  if (index < p.counters.size())
    s.append("'").append(p.counters[index].name).append("'");
  else
    s.append("#").append(std::to_string(index));
  return s;
}

// One line for a launch the watchdog stopped or an op refused (status timeout | bad_operand).
std::string diag_message(const Program& p, const amk_diag_t& d, const std::string& status,
                         uint64_t timeout_ms) {
  char buf[512];
  if (status == "timeout" && d.counter == 0xFFFFFFFFu) {  // (no counter: a wait in the block)
    std::snprintf(buf, sizeof buf,
                  "watchdog stopped the launch after %llu ms: block %u, queue position %u, %s "
                  "waits for %s",
                  static_cast<unsigned long long>(timeout_ms), d.block, d.queue_pos,
                  instruction_label(p, d.instruction).c_str(), block_wait_text(d.detail).c_str());
  } else if (status == "timeout") {
    std::snprintf(buf, sizeof buf,
                  "watchdog stopped the launch after %llu ms: block %u, queue position %u, %s "
                  "waits for counter %s >= %u but it is %u",
                  static_cast<unsigned long long>(timeout_ms), d.block, d.queue_pos,
                  instruction_label(p, d.instruction).c_str(), counter_label(p, d.counter).c_str(),
                  d.need, d.have);
  } else {
    std::snprintf(buf, sizeof buf, "block %u, queue position %u, %s found invalid data (value %u)",
                  d.block, d.queue_pos, instruction_label(p, d.instruction).c_str(), d.detail);
  }
  return buf;
}

[[noreturn]] void throw_wrong_kind(const char* wanted) {
  throw Error(ErrorKind::internal, "internal.executable_kind", "",
              std::string("the executable is not ") + wanted);
}

}  // namespace

namespace detail {

Executable ExecutableAccess::open(const Program& program, const InitialData& initial,
                                  const GpuOptions& options) {
  return Executable(std::make_unique<Executable::Impl>(Executable::Impl{
      GpuExecutable::open(program, initial, options), {}, BufferBook(program), {}}));
}

Executable ExecutableAccess::open_wrapper(const WrapperProgram& w, const InitialData& initial,
                                          const WrapperGpuOptions& options) {
  WrapperExecutable exe = WrapperExecutable::open(w, initial, options);
  // The kernel may write any array it is given; the records are amk's alone.
  std::vector<bool> written(exe.buffers().buffers.size(), true);
  written[static_cast<size_t>(PackageArray::tensor_args)] = false;
  BufferBook book(exe.buffers(), std::move(written));
  return Executable(std::make_unique<Executable::Impl>(
      Executable::Impl{std::nullopt, std::move(exe), std::move(book), {}}));
}

const GpuExecutable& ExecutableAccess::gpu(const Executable& exe) {
  Executable::Impl& m = exe.impl("gpu");
  if (!m.gpu) throw_wrong_kind("a VM program's executable");
  return *m.gpu;
}

const WrapperExecutable& ExecutableAccess::wrapper(const Executable& exe) {
  Executable::Impl& m = exe.impl("wrapper");
  if (!m.wrapper) throw_wrong_kind("a wrapper program's executable");
  return *m.wrapper;
}

LaunchOutcome ExecutableAccess::launch(Executable& exe, uint32_t passes) {
  Executable::Impl& m = exe.impl("launch");
  settle(m);
  if (passes == 0) passes = m.wrapper ? 1 : m.gpu->program().launch.passes;
  if (m.wrapper && passes != 1)
    throw Error(ErrorKind::usage, "api.wrapper.passes", "passes",
                "a wrapper program's launch is one grid of its own kernel: passes must be 1, not " +
                    std::to_string(passes));
  ++m.stats.launches;
  m.book.launched();  // (also when it fails: it may have written before it stopped)
  if (m.wrapper) {
    const WrapperLaunchResult r = m.wrapper->launch();
    LaunchOutcome out{r.status, "", {}, r.host_ms, 1};
    m.passes_run = 1;
    if (r.status != "ok")
      out.message = "the wrapper passed its " + std::to_string(m.wrapper->timeout_ms()) +
                    " ms deadline and returned on the abort word (flags word " +
                    std::to_string(AMK_WRAPPER_ABORT_WORD) + ")";
    return out;
  }
  return outcome(m, m.gpu->launch(passes), passes);
}

LaunchOutcome ExecutableAccess::outcome(Executable::Impl& m, const LaunchResult& r,
                                        uint32_t passes) {
  // feed_token's eos at pass k ends the launch after pass k + 1 (amk_vm_main).
  const uint32_t run = r.stop_pass != 0 && r.stop_pass < passes ? r.stop_pass + 1 : passes;
  LaunchOutcome out{r.status, "", r.diag, r.host_ms, run};
  m.passes_run = r.status == "ok" ? run : 0;
  if (r.status != "ok")
    out.message = diag_message(m.gpu->program(), r.diag, r.status, m.gpu->timeout_ms());
  return out;
}

void ExecutableAccess::settle(Executable::Impl& m) {
  // (The executor's own flag: a start that threw before it launched leaves nothing to take.)
  const uint32_t passes = std::exchange(m.started_passes, 0);
  if (!m.gpu || !m.gpu->started()) return;
  throw_if_failed(outcome(m, m.gpu->finish(), passes));
}

}  // namespace detail

Executable::Executable() noexcept = default;
Executable::Executable(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;
Executable::~Executable() = default;

Executable::Impl& Executable::impl(const char* call) const {
  if (!impl_) detail::throw_closed(call);
  return *impl_;
}

void Executable::close() noexcept { impl_.reset(); }

Executable Executable::open(const std::string& program_path, const OpenOptions& options) {
  return detail::open_opened(detail::load_for_open(program_path, options), options);
}

Executable detail::open_opened(OpenedProgram opened, const OpenOptions& options) {
  if (opened.wrapper) {
    WrapperGpuOptions o;
    o.device = options.device;
    o.checked_device = check_wrapper_device(*opened.wrapper, options.device);
    o.compile.use_cache = options.use_cache;
    if (!options.cache_dir.empty()) o.compile.cache_dir = options.cache_dir;
    o.timeout_ms = options.timeout_ms;
    const InitialData initial = initial_data(opened.program, opened.load);
    return ExecutableAccess::open_wrapper(*opened.wrapper, initial, o);
  }
  refuse_ranks_on_gpu(opened.ranks);  // (verify/ranks.hpp)
  GpuOptions o;
  o.device = options.device;
  // The device refuses before the host data is made (for a decode step's weights, minutes).
  o.checked_device = check_device_target(opened.program, options.device);
  o.compile.use_cache = options.use_cache;
  if (!options.cache_dir.empty()) o.compile.cache_dir = options.cache_dir;
  o.vm = std::move(opened.vm);
  o.trust_custom_ops = options.trust_custom_ops;
  o.timeout_ms = options.timeout_ms;
  const InitialData initial = initial_data(opened.program, opened.load);
  return ExecutableAccess::open(opened.program, initial, o);
}

const std::vector<BufferInfo>& Executable::buffers() const { return impl("buffers").book.infos(); }

void Executable::set_input(std::string_view name, const void* data, size_t bytes,
                           std::string_view dtype) {
  Impl& m = impl("set_input");
  detail::ExecutableAccess::settle(m);
  const uint32_t i = m.book.find(name, "set_input");
  m.book.check(i, bytes, dtype, "set_input");
  detail::check_host_pointer(data, name, "set_input");
  const std::span<const std::byte> span(static_cast<const std::byte*>(data), bytes);
  const std::optional<uint64_t> fingerprint = m.book.needs_upload(i, span);
  if (!fingerprint) {
    ++m.stats.skipped_uploads;
    return;
  }
  if (m.wrapper)
    m.wrapper->upload_buffer(i, span);
  else
    m.gpu->upload_buffer(i, span);
  m.book.uploaded(i, *fingerprint);
  ++m.stats.uploads;
  m.stats.uploaded_bytes += bytes;
}

void Executable::bind(std::string_view name, uint64_t device_pointer, size_t bytes,
                      std::string_view dtype) {
  Impl& m = impl("bind");
  detail::ExecutableAccess::settle(m);
  const uint32_t i = m.book.find(name, "bind");
  m.book.check(i, bytes, dtype, "bind");
  m.book.check_bind(i, device_pointer);
  if (m.wrapper)
    m.wrapper->bind_buffer(i, device_pointer);
  else
    m.gpu->bind_buffer(i, device_pointer);
  m.book.bound(i);
}

void Executable::launch(uint32_t passes) {
  detail::throw_if_failed(detail::ExecutableAccess::launch(*this, passes));
}

void Executable::launch_async(uint64_t stream, uint32_t passes) {
  Impl& m = impl("launch_async");
  detail::ExecutableAccess::settle(m);
  if (m.wrapper)
    throw Error(ErrorKind::usage, "api.wrapper.async", "launch_async",
                "a wrapper program's launch waits for its kernel: use launch()");
  if (passes == 0) passes = m.gpu->program().launch.passes;
  ++m.stats.launches;
  m.book.launched();
  m.passes_run = 0;
  m.started_passes = passes;
  m.gpu->start(passes, reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream)));
}

void Executable::wait() { detail::ExecutableAccess::settle(impl("wait")); }

uint32_t Executable::passes_run() const { return impl("passes_run").passes_run; }

void Executable::read_output(std::string_view name, void* data, size_t bytes,
                             std::string_view dtype) const {
  Impl& m = impl("read_output");
  detail::ExecutableAccess::settle(m);
  const uint32_t i = m.book.find(name, "read_output");
  m.book.check(i, bytes, dtype, "read_output");
  detail::check_host_pointer(data, name, "read_output");
  const std::span<std::byte> out(static_cast<std::byte*>(data), bytes);
  if (m.wrapper)
    m.wrapper->download_buffer(i, out);
  else
    m.gpu->download_buffer(i, out);
  m.stats.downloaded_bytes += bytes;
}

ProfileResult Executable::profile(const ProfileOptions& options) {
  Impl& m = impl("profile");
  detail::ExecutableAccess::settle(m);
  m.book.launched();
  const uint64_t flush = options.flush_l2 ? BenchOptions{}.flush_bytes : 0;
  const ProfileStats s =
      m.wrapper ? m.wrapper->profile(options.warmup, options.iterations, options.scope, flush)
                : m.gpu->profile(options.warmup, options.iterations, options.scope, flush);
  return ProfileResult{s.samples_ms, s.median_ms, s.min_ms,    s.max_ms,
                       s.mean_ms,    s.stddev_ms, s.rel_spread};
}

KernelAttributes Executable::attributes() const {
  const Impl& m = impl("attributes");
  const DeviceInfo& d = m.wrapper ? m.wrapper->device() : m.gpu->device();
  const KernelResources& k = m.wrapper ? m.wrapper->kernel() : m.gpu->kernel();
  const CompileOutput& c = m.wrapper ? m.wrapper->compiled() : m.gpu->compiled();
  KernelAttributes a;
  a.kernel = c.kernel_name;
  a.arch = c.arch;
  a.device = d.name;
  a.registers_per_thread = k.regs_per_thread;
  a.static_smem_bytes = k.static_smem;
  a.local_bytes = k.local_bytes;
  a.const_bytes = k.const_bytes;
  a.max_threads_per_block = k.max_threads;
  a.blocks_per_sm = k.blocks_per_sm;
  a.sms = d.sm_count;
  a.max_coresident_grid = static_cast<uint64_t>(k.blocks_per_sm) * d.sm_count;
  a.max_cluster_size = k.max_cluster_size;
  a.max_active_clusters = k.max_active_clusters;
  a.cache_hit = c.cache_hit;
  if (m.wrapper) {
    const WrapperLaunch& l = m.wrapper->program().launch;
    const auto b = l.block3();
    a.dynamic_smem_bytes = l.dynamic_smem_bytes;
    a.block = b[0] * b[1] * b[2];
    a.grid = l.queues;
  } else {
    a.dynamic_smem_bytes = m.gpu->dynamic_smem();
    a.block = m.gpu->block();
    a.grid = m.gpu->grid();
  }
  return a;
}

ExecutableStats Executable::stats() const { return impl("stats").stats; }

uint64_t Executable::device_pointer(std::string_view name) const {
  const Impl& m = impl("device_pointer");
  const uint32_t i = m.book.find(name, "device_pointer");
  return m.wrapper ? m.wrapper->buffer_address(i) : m.gpu->buffer_address(i);
}

std::vector<std::pair<std::string, double>> Executable::setup_timings() const {
  const Impl& m = impl("setup_timings");
  return m.wrapper ? m.wrapper->setup_timings_ms() : m.gpu->setup_timings_ms();
}

}  // namespace amk
