#include "cuda/bench.hpp"
#include "cuda/codegen.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "core/error.hpp"
#include "core/numeric.hpp"
#include "cuda/driver.hpp"
#include "cuda/resources.hpp"
#include "report/trace.hpp"

namespace amk {
namespace {

using Clock = std::chrono::steady_clock;

enum Arm : size_t { kMegakernel = 0, kLaunches = 1, kGraph = 2, kArms = 3 };

// Arm-to-arm tolerance per output dtype: the same as `amk run --check` against the CPU (the arms
// run the same op code, so they normally agree bit for bit; atomics may reorder float sums).
constexpr double kTolF32 = 1e-4, kTolF16 = 2e-3, kTolBf16 = 1e-2;

double tolerance_for(DType t) noexcept {
  switch (t) {
    case DType::f32: return kTolF32;
    case DType::f16: return kTolF16;
    case DType::bf16: return kTolBf16;
    default: return 0.0;
  }
}

// A captured graph and its executable instance: move-only owners, freed unchecked (destructors
// must not throw; after a sticky fault every release fails anyway).
class Graph {
public:
  Graph() = default;
  explicit Graph(CUgraph g) : graph_(g) {}
  Graph(Graph&& o) noexcept : graph_(std::exchange(o.graph_, nullptr)) {}
  Graph& operator=(Graph&&) = delete;
  ~Graph() {
    if (graph_ != nullptr)
      if (const cu::DriverApi* d = cu::driver_if_loaded()) (void)d->graph_destroy(graph_);
  }
  [[nodiscard]] CUgraph get() const noexcept { return graph_; }

private:
  CUgraph graph_ = nullptr;
};

class GraphExec {
public:
  GraphExec() = default;
  explicit GraphExec(CUgraphExec g) : exec_(g) {}
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&&) = delete;
  ~GraphExec() {
    if (exec_ != nullptr)
      if (const cu::DriverApi* d = cu::driver_if_loaded()) (void)d->graph_exec_destroy(exec_);
  }
  [[nodiscard]] CUgraphExec get() const noexcept { return exec_; }

private:
  CUgraphExec exec_ = nullptr;
};

// One amk_step launch per instruction of `sequence`, in order, on the launch stream.
void enqueue_steps(const GpuExecutable::StepLaunch& l, const std::vector<uint32_t>& sequence) {
  const cu::DriverApi& d = cu::driver();
  amk_device_program_t prog = l.program;
  uint32_t index = 0;
  void* params[3] = {&prog, &index, const_cast<CUtensorMap*>(l.tma)};
  for (const uint32_t i : sequence) {
    index = i;  // kernelParams are copied at launch (and at capture)
    cu::check(d.launch_kernel(l.function, 1, 1, 1, l.block, 1, 1, l.dynamic_smem, l.stream, params,
                              nullptr),
              "cuLaunchKernel", [&] {
                return std::string("kernel ") + kStepKernelName + ", instruction " +
                       std::to_string(i) + ", block " + std::to_string(l.block) + ", " +
                       std::to_string(l.dynamic_smem) + " bytes dynamic shared memory";
              });
  }
}

GraphExec capture_steps(const GpuExecutable::StepLaunch& l, const std::vector<uint32_t>& sequence) {
  const cu::DriverApi& d = cu::driver();
  // Thread-local: other threads' unsafe calls (none in amk) would not invalidate the capture.
  cu::check(d.stream_begin_capture(l.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture", "the launch stream (graph arm)");
  CUgraph raw = nullptr;
  try {
    enqueue_steps(l, sequence);
  } catch (...) {
    (void)d.stream_end_capture(l.stream, &raw);  // leave the stream usable
    Graph discard(raw);
    throw;
  }
  cu::check(d.stream_end_capture(l.stream, &raw), "cuStreamEndCapture",
            "the launch stream (graph arm)");
  Graph graph(raw);
  CUgraphExec exec = nullptr;
  cu::check(d.graph_instantiate_with_flags(&exec, graph.get(), 0), "cuGraphInstantiateWithFlags",
            [&] { return "a graph of " + std::to_string(sequence.size()) + " amk_step launches"; });
  return GraphExec(exec);
}

void require_ok(const amk_diag_t& d, const char* arm, const std::string& when) {
  if (d.status == AMK_STATUS_OK) return;
  const std::string status = launch_status_name(d.status);
  throw Error(status == "timeout" ? ErrorKind::timeout : ErrorKind::launch, "launch." + status,
              std::string("bench arm ") + arm, when + " did not finish ok: " + describe_diag(d));
}

// The buffers the arms are compared on: the outputs, or every buffer when none is flagged.
std::vector<uint32_t> compared_buffers(const Program& program) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < program.buffers.size(); ++i)
    if (program.buffers[i].output) out.push_back(i);
  if (out.empty())
    for (uint32_t i = 0; i < program.buffers.size(); ++i) out.push_back(i);
  return out;
}

BenchCheck compare(const Program& program, uint32_t i, const char* arm,
                   const std::vector<std::byte>& got, const std::vector<std::byte>& want) {
  const Buffer& b = program.buffers[i];
  BenchCheck c;
  c.arm = arm;
  c.buffer = i;
  c.buffer_name = b.name;
  c.tolerance = tolerance_for(b.dtype);
  c.bitwise_equal = got == want;
  if (c.bitwise_equal || got.size() != want.size()) {
    c.error = c.bitwise_equal ? 0.0 : std::numeric_limits<double>::infinity();
    c.passed = c.bitwise_equal;
    return c;
  }
  const uint64_t n = b.elements();
  if (dtype_is_float(b.dtype)) {
    double diff = 0, ref = 0;
    for (uint64_t k = 0; k < n; ++k) {
      const double x = load_element(got.data(), b.dtype, k);
      const double y = load_element(want.data(), b.dtype, k);
      if (std::isnan(x) || std::isnan(y)) {
        if (std::isnan(x) && std::isnan(y)) continue;
        diff = std::numeric_limits<double>::infinity();
        break;
      }
      diff += (x - y) * (x - y);
      ref += y * y;
    }
    c.error = std::isinf(diff) ? diff : std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
  } else {
    uint64_t mismatched = 0;
    for (uint64_t k = 0; k < n; ++k)
      mismatched += load_element(got.data(), b.dtype, k) != load_element(want.data(), b.dtype, k);
    c.error = n ? static_cast<double>(mismatched) / static_cast<double>(n) : 0.0;
  }
  c.passed = c.error <= c.tolerance;
  return c;
}

}  // namespace

BenchResult run_bench(GpuExecutable& exe, const Program& program, const InitialData& initial,
                      const BenchOptions& options) {
  const GpuExecutable::StepLaunch l = exe.step_launch();
  if (l.function == nullptr)
    throw Error(ErrorKind::usage, "bench.step_kernel", "",
                "amk bench needs the executable opened with GpuOptions::step_kernel");
  const Plan& ran = exe.plan();

  BenchResult result;
  result.instructions = static_cast<uint32_t>(ran.instructions.size());
  for (const Instruction& ins : program.instructions)
    result.operand_bytes += instruction_bytes(program, ins);

  // The serial order, without the sync-only nops (an eager framework has nothing to launch).
  const std::vector<uint32_t> order =
      bench::serial_order(ran.instructions, ran.queue_offsets, ran.queue_items, ran.n_counters);
  if (order.size() != ran.queue_items.size())
    throw Error(ErrorKind::program, "bench.order", "",
                "the plan's queues do not drain when run one instruction at a time: " +
                    std::to_string(order.size()) + " of " + std::to_string(ran.queue_items.size()) +
                    " instructions ran");
  std::vector<uint32_t> sequence;
  sequence.reserve(order.size());
  for (const uint32_t i : order)
    if (ran.instructions[i].op != 0) sequence.push_back(i);
  result.skipped_nops = static_cast<uint32_t>(order.size() - sequence.size());
  if (sequence.empty())
    throw Error(ErrorKind::usage, "bench.empty", "",
                "program '" + program.name + "' has no instruction with an op to launch");

  const cu::DriverApi& d = cu::driver();
  const cu::Event start = cu::Event::create("the bench start event");
  const cu::Event end = cu::Event::create("the bench end event");
  cu::L2Flush flush;
  if (options.cold) flush = cu::L2Flush(options.flush_bytes);
  const GraphExec graph = capture_steps(l, sequence);

  // ---- correctness, once: B and C against A from the same initial contents ----
  exe.upload(initial);
  {
    const LaunchResult r = exe.launch(1);
    if (r.status != "ok") require_ok(r.diag, "megakernel", "the reference launch");
  }
  const HostBuffers want = exe.download();
  const auto check_arm = [&](const char* arm, auto&& enqueue) {
    exe.upload(initial);
    exe.enqueue_reset();
    enqueue();
    require_ok(exe.wait_idle(), arm, "the checking run");
    const HostBuffers got = exe.download();
    for (const uint32_t i : compared_buffers(program))
      result.checks.push_back(compare(program, i, arm, got.data[i], want.data[i]));
  };
  check_arm("launches", [&] { enqueue_steps(l, sequence); });
  check_arm("graph", [&] {
    cu::check(d.graph_launch(graph.get(), l.stream), "cuGraphLaunch", "the amk_step graph");
  });
  result.outputs_agree = true;
  std::string worst;
  for (const BenchCheck& c : result.checks)
    if (!c.passed) {
      result.outputs_agree = false;
      worst += (worst.empty() ? "" : "; ") + c.arm + " '" + c.buffer_name + "' error " +
               std::to_string(c.error) + " (tolerance " + std::to_string(c.tolerance) + ")";
    }
  if (!result.outputs_agree)
    throw Error(ErrorKind::mismatch, "bench.mismatch", "",
                "one launch per instruction does not compute what the megakernel does: " + worst);

  // ---- sampling ----
  const auto prepare = [&](bool reset) {
    if (options.cold) flush.enqueue(l.stream);
    if (reset) exe.enqueue_reset();
    // Idle before the start event: B's span then includes its host launch cost in both modes.
    require_ok(exe.wait_idle(), "prepare", "the flush and reset");
  };
  const auto sample = [&](size_t arm, const std::string& when) -> double {
    if (arm == kMegakernel) {
      prepare(false);  // profile's "launch" scope times the reset itself
      // One pass, as the other arms run each instruction once (a generation's first step).
      return exe.profile(0, 1, "launch", 0, 1).samples_ms.front();
    }
    prepare(true);
    start.record(l.stream, "the bench start event");
    if (arm == kLaunches)
      enqueue_steps(l, sequence);
    else
      cu::check(d.graph_launch(graph.get(), l.stream), "cuGraphLaunch", "the amk_step graph");
    end.record(l.stream, "the bench end event");
    require_ok(exe.wait_idle(), arm == kLaunches ? "launches" : "graph", when);
    return cu::elapsed_ms(start, end, "the bench events");
  };

  for (uint32_t w = 0; w < options.warmup; ++w)
    for (size_t arm = 0; arm < kArms; ++arm) (void)sample(arm, "warm-up " + std::to_string(w));

  std::vector<double> samples[kArms];
  bench::RunningStats running[kArms];
  bench::StopTracker tracker(options.stop);
  const auto t0 = Clock::now();
  bench::StopReason reason = bench::StopReason::none;
  while (reason == bench::StopReason::none) {
    for (size_t arm = 0; arm < kArms; ++arm) {
      const double ms = sample(arm, "sample " + std::to_string(result.rounds));
      samples[arm].push_back(ms);
      running[arm].add(ms);
    }
    ++result.rounds;
    result.sampling_s = std::chrono::duration<double>(Clock::now() - t0).count();
    reason = tracker.update(running, result.sampling_s);
  }
  result.stop_reason = std::string(bench::stop_reason_name(reason));
  spdlog::debug("bench: {} rounds in {:.3f} s ({})", result.rounds, result.sampling_s,
                result.stop_reason);

  const char* names[kArms] = {"megakernel", "launches", "graph"};
  const char* what[kArms] = {
      "one persistent launch of amk_vm (counter reset included)",
      "one amk_step launch per instruction, in a legal serial order, one stream",
      "the same launches captured once into a CUDA graph, replayed"};
  const uint32_t launches[kArms] = {1, static_cast<uint32_t>(sequence.size()),
                                    static_cast<uint32_t>(sequence.size())};
  for (size_t arm = 0; arm < kArms; ++arm) {
    BenchArm a;
    a.name = names[arm];
    a.description = what[arm];
    a.launches = launches[arm];
    a.stats = summarize_samples(std::move(samples[arm]));
    a.stats.warmup = options.warmup;
    a.stats.iterations = static_cast<uint32_t>(a.stats.samples_ms.size());
    a.stats.scope = a.name;
    result.arms.push_back(std::move(a));
  }
  return result;
}

}  // namespace amk
