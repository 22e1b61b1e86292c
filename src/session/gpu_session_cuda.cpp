// The GPU session over src/cuda (builds with the CUDA toolkit): run, profile, trace and inspect
// --attributes open, launch and read their executable through the public API (src/api).
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string_view>

#include "session/api_json.hpp"
#include "session/gpu_session.hpp"
#include "amk/amk.hpp"
#include "api/internal.hpp"
#include "core/error.hpp"
#include "core/numeric.hpp"
#include "core/phase_log.hpp"
#include "cuda/bench.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compile.hpp"
#include "cuda/executor.hpp"
#include "cuda/wrapper_exec.hpp"
#include "config/choose.hpp"
#include "ops/registry.hpp"
#include "report/outputs.hpp"
#include "report/trace.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {
namespace {

GpuOptions gpu_options(const GpuRequest& r) {
  GpuOptions o;
  o.device = r.device;
  o.timeout_ms = r.timeout_ms;
  o.trace = r.trace;
  o.checked_device = r.checked_device;
  o.compile.use_cache = r.use_cache;
  if (r.cache_dir) o.compile.cache_dir = *r.cache_dir;
  o.compile.line_info = r.line_info;
  if (r.cubin) o.compile.cubin_file = *r.cubin;
  o.trust_custom_ops = r.trust_custom_ops;
  o.vm = r.vm;
  return o;
}

// The VM's configuration as JSON: each field's value and why it has it.
ordered_json vm_json(const VmChoice& c) {
  ordered_json fields = ordered_json::object();
  for (const VmField& f : vm_fields()) {
    ordered_json v;
    if (f.kind == VmField::Kind::boolean)
      v = f.get(c.config) != 0;
    else if (f.kind == VmField::Kind::tile)
      v = vm_field_text(f, c.config);
    else
      v = f.get(c.config);
    fields[std::string(f.name)] = {{"value", v}, {"why", choice_why(c, f.name)}};
  }
  return fields;
}

ordered_json diag_json(const Program& p, const amk_diag_t& d, const std::string& status) {
  ordered_json j;
  j["status"] = status;
  j["block"] = d.block;
  j["queue_position"] = d.queue_pos;
  j["instruction"] = d.instruction;
  if (d.instruction < p.instructions.size()) {
    j["instruction_name"] = p.instructions[d.instruction].name;
    j["op"] = op_name(p, p.instructions[d.instruction].op);
  }
  if (status == "timeout") {
    j["counter"] = d.counter;
    j["counter_name"] = d.counter < p.counters.size() ? p.counters[d.counter].name : "";
    j["have"] = d.have;
    j["need"] = d.need;
    j["elapsed_ms"] = static_cast<double>(d.elapsed_ns) / 1e6;
  } else {
    j["detail"] = d.detail;
  }
  return j;
}

ordered_json versions_json(const GpuExecutable& ex) {
  return {{"amk", AMK_VERSION},
          {"nvrtc", ex.compiled().nvrtc_version},
          {"driver", ex.device().driver_version}};
}

ordered_json timings_json(const std::vector<std::pair<std::string, double>>& t) {
  ordered_json j = ordered_json::object();
  for (const auto& [k, v] : t) j[k] = v;
  return j;
}

// `amk compile`'s result: the compile and the files written (empty: none).
ordered_json compile_json(const CompileOutput& out, const std::string& cubin_out,
                          const std::string& record_out) {
  ordered_json j;
  j["status"] = "ok";
  j["arch"] = out.arch;
  j["kernel"] = out.kernel_name;
  j["cubin_bytes"] = out.cubin.size();
  j["cache_hit"] = out.cache_hit;
  j["compile_ms"] = out.compile_ms;
  j["nvrtc_version"] = out.nvrtc_version;
  j["fingerprint"] = out.source_fingerprint;
  j["options"] = out.options;
  j["log"] = out.log;
  if (!cubin_out.empty()) j["output"] = cubin_out;
  if (!record_out.empty()) j["output_record"] = record_out;
  return j;
}

}  // namespace

bool gpu_present(std::string* why) { return gpu_available(why); }

DeviceInfo check_gpu(const Program& program, int device) {
  return check_device_target(program, device);
}

GpuOutcome run_on_gpu(const Program& program, const InitialData& initial, const GpuRequest& req) {
  GpuOutcome out;
  Executable exe = detail::ExecutableAccess::open(program, initial, gpu_options(req));
  const GpuExecutable& ex = detail::ExecutableAccess::gpu(exe);
  out.timings_ms = ex.setup_timings_ms();
  out.device = ex.device().to_json();
  out.versions = versions_json(ex);
  out.target_fingerprint = ex.device().fingerprint();
  out.artifact_fingerprint = ex.compiled().source_fingerprint;
  out.grid = ex.grid();
  out.block = ex.block();
  Phase launch("launch");
  const detail::LaunchOutcome r = detail::ExecutableAccess::launch(exe, req.iterations);
  launch.finish();
  out.timings_ms.emplace_back("launch", r.host_ms);
  out.status = r.status;
  out.passes_run = r.passes_run;
  if (r.status != "ok") {
    out.diagnostics = diag_json(program, r.diag, r.status);
    out.message = r.message;
    return out;
  }
  // The outputs only, each through the API's read_output: the other buffers stay empty (a
  // decode step's weights are gigabytes that nothing reads back).
  Phase download("download");
  uint64_t total = 0;
  for (const BufferInfo& b : exe.buffers())
    if (b.output) total += b.bytes;
  ByteProgress progress("download", total);
  for (const BufferInfo& b : exe.buffers()) {
    out.buffers.data.emplace_back();
    if (!b.output) continue;
    out.buffers.data.back() = host_bytes(b.bytes);  // (huge pages: see host_bytes)
    exe.read_output(b.name, out.buffers.data.back().data(), b.bytes, b.dtype);
    progress.add(b.bytes);
  }
  out.timings_ms.emplace_back("download", download.finish());
  if (req.trace) out.trace = ex.trace();
  return out;
}

namespace {

WrapperGpuOptions wrapper_options(const GpuRequest& r) {
  WrapperGpuOptions o;
  o.device = r.device;
  o.checked_device = r.checked_device;
  o.compile.use_cache = r.use_cache;
  if (r.cache_dir) o.compile.cache_dir = *r.cache_dir;
  o.compile.line_info = r.line_info;
  if (r.cubin) o.compile.cubin_file = *r.cubin;
  o.timeout_ms = r.timeout_ms;
  return o;
}

// What report.json says of a wrapper's launch (under `extra.wrapper`).
ordered_json wrapper_json(const WrapperExecutable& ex) {
  const WrapperProgram& w = ex.program();
  const auto b = w.launch.block3();
  ordered_json j;
  j["kernel"] = ex.compiled().kernel_name;
  j["arch"] = ex.compiled().arch;
  j["grid"] = w.launch.queues;
  j["block"] = {b[0], b[1], b[2]};
  j["cluster_size"] = w.launch.cluster_size;
  j["launch"] = w.launch.cluster_size > 1 ? "cluster" : "cooperative";
  j["dynamic_smem_bytes"] = w.launch.dynamic_smem_bytes;
  j["static_smem_bytes"] = ex.kernel().static_smem;
  j["registers_per_thread"] = ex.kernel().regs_per_thread;
  j["instruction_count"] = w.entry(PackageArray::instructions).records();
  j["tensor_args"] = w.tensor_args.size();
  j["tma_maps"] = w.tma.size();
  j["flags_reset"] = ex.flags_reset();
  j["timeout_ms"] = ex.timeout_ms();
  j["target_fingerprint"] = w.target.fingerprint;
  j["device_fingerprint"] = ex.device().fingerprint();
  j["artifact_fingerprint"] = w.artifact_fingerprint;
  j["compiled_fingerprint"] = ex.compiled().source_fingerprint;
  j["cache_hit"] = ex.compiled().cache_hit;
  return j;
}

}  // namespace

DeviceInfo check_wrapper_gpu(const WrapperProgram& w, int device) {
  return check_wrapper_device(w, device);
}

GpuOutcome run_wrapper_on_gpu(const WrapperProgram& w, const InitialData& initial,
                              const GpuRequest& req) {
  GpuOutcome out;
  Executable exe = detail::ExecutableAccess::open_wrapper(w, initial, wrapper_options(req));
  const WrapperExecutable& ex = detail::ExecutableAccess::wrapper(exe);
  out.timings_ms = ex.setup_timings_ms();
  out.device = ex.device().to_json();
  out.versions = {{"amk", AMK_VERSION},
                  {"nvrtc", ex.compiled().nvrtc_version},
                  {"driver", ex.device().driver_version}};
  out.target_fingerprint = w.target.fingerprint;
  out.artifact_fingerprint =
      w.artifact_fingerprint.empty() ? ex.compiled().source_fingerprint : w.artifact_fingerprint;
  out.grid = w.launch.queues;
  const auto b = w.launch.block3();
  out.block = b[0] * b[1] * b[2];
  out.wrapper = wrapper_json(ex);
  Phase launch("launch");
  const detail::LaunchOutcome r = detail::ExecutableAccess::launch(exe, 1);
  launch.finish();
  out.timings_ms.emplace_back("launch", r.host_ms);
  out.status = r.status;
  if (r.status != "ok") {
    out.diagnostics = {{"status", r.status},
                       {"timeout_ms", ex.timeout_ms()},
                       {"abort_word", AMK_WRAPPER_ABORT_WORD},
                       {"elapsed_ms", r.host_ms}};
    out.message = r.message;
    return out;
  }
  Phase download("staging_download");
  for (const BufferInfo& bi : exe.buffers()) {
    out.buffers.data.emplace_back();
    if (!bi.output) continue;
    out.buffers.data.back() = host_bytes(bi.bytes);
    exe.read_output(bi.name, out.buffers.data.back().data(), bi.bytes, bi.dtype);
  }
  out.timings_ms.emplace_back("staging_download", download.finish());
  Phase cleanup("cleanup");
  exe.close();
  out.timings_ms.emplace_back("cleanup", cleanup.finish());
  return out;
}

ProfileOptions profile_options(const ProfileRequest& req) {
  return {
      .warmup = req.warmup, .iterations = req.iterations, .scope = req.scope, .flush_l2 = req.cold};
}

// The fields every `amk profile --events` result starts with.
ordered_json profile_head(const std::string& name, const std::string& fingerprint,
                          const ProfileRequest& req, uint64_t flush_bytes) {
  ordered_json j;
  j["status"] = "ok";
  j["program"] = name;
  j["program_fingerprint"] = fingerprint;
  j["scope"] = req.scope;
  j["cold"] = req.cold;
  if (req.cold) j["flush_bytes"] = flush_bytes;
  j["warmup"] = req.warmup;
  j["iterations"] = req.iterations;
  return j;
}

// `amk profile --events`' two lines: the samples' statistics, then the setup phases.
void profile_text(std::ostringstream& text, const std::string& title, const DeviceInfo& device,
                  const ProfileRequest& req, const ProfileResult& s,
                  const std::vector<std::pair<std::string, double>>& setup, bool cache_hit) {
  char line[256];
  std::snprintf(line, sizeof line,
                "%s on %s: %u launches (%s scope%s, %u warm-up): median %.4f ms, min %.4f, "
                "max %.4f, spread %.2f%%\n",
                title.c_str(), device.name.c_str(), req.iterations, req.scope.c_str(),
                req.cold ? ", L2 flushed before each" : "", req.warmup, s.median_ms, s.min_ms,
                s.max_ms, 100.0 * s.rel_spread);
  text << line << "setup:";
  for (const auto& [k, v] : setup) {
    std::snprintf(line, sizeof line, " %s %.2f ms", k.c_str(), v);
    text << line;
  }
  text << (cache_hit ? " (kernel from cache)\n" : " (kernel compiled)\n");
}

ordered_json profile_on_gpu(const Program& program, const InitialData& initial,
                            const ProfileRequest& req, std::ostringstream& text) {
  Executable exe = detail::ExecutableAccess::open(program, initial, gpu_options(req.gpu));
  const GpuExecutable& ex = detail::ExecutableAccess::gpu(exe);
  const uint64_t flush_bytes = req.cold ? BenchOptions{}.flush_bytes : 0;
  Phase phase("profile");
  const ProfileResult s = exe.profile(profile_options(req));
  phase.finish();
  ordered_json j = profile_head(program.name, program_fingerprint(program), req, flush_bytes);
  j["passes"] = program.launch.passes;  // each timed launch runs them all
  put_stats(j, s);
  j["setup_timings_ms"] = timings_json(ex.setup_timings_ms());
  j["cache_hit"] = ex.compiled().cache_hit;
  j["attributes"] = resources_json(exe.attributes());
  j["device"] = ex.device().to_json();
  j["versions"] = versions_json(ex);
  j["target_fingerprint"] = ex.device().fingerprint();
  j["artifact_fingerprint"] = ex.compiled().source_fingerprint;
  j["vm"] = vm_json(ex.vm());
  profile_text(text, program.name, ex.device(), req, s, ex.setup_timings_ms(),
               ex.compiled().cache_hit);
  return j;
}

ordered_json profile_wrapper_on_gpu(const WrapperProgram& w, const InitialData& initial,
                                    const ProfileRequest& req, std::ostringstream& text) {
  Executable exe = detail::ExecutableAccess::open_wrapper(w, initial, wrapper_options(req.gpu));
  const WrapperExecutable& ex = detail::ExecutableAccess::wrapper(exe);
  const uint64_t flush_bytes = req.cold ? BenchOptions{}.flush_bytes : 0;
  Phase phase("profile");
  const ProfileResult s = exe.profile(profile_options(req));
  phase.finish();
  ordered_json j = profile_head(w.name, wrapper_fingerprint(w), req, flush_bytes);
  put_stats(j, s);
  j["setup_timings_ms"] = timings_json(ex.setup_timings_ms());
  j["cache_hit"] = ex.compiled().cache_hit;
  j["attributes"] = resources_json(exe.attributes());
  j["device"] = ex.device().to_json();
  j["versions"] = {{"amk", AMK_VERSION},
                   {"nvrtc", ex.compiled().nvrtc_version},
                   {"driver", ex.device().driver_version}};
  j["target_fingerprint"] = w.target.fingerprint;
  j["artifact_fingerprint"] =
      w.artifact_fingerprint.empty() ? ex.compiled().source_fingerprint : w.artifact_fingerprint;
  j["wrapper"] = wrapper_json(ex);
  profile_text(text, w.name + " (wrapper " + ex.compiled().kernel_name + ")", ex.device(), req, s,
               ex.setup_timings_ms(), ex.compiled().cache_hit);
  return j;
}

ordered_json wrapper_attributes(const WrapperProgram& w, const LoadOptions& load,
                                const GpuRequest& req, std::ostringstream& text) {
  GpuRequest r = req;
  r.checked_device = check_wrapper_device(w, req.device);
  const InitialData initial = initial_data(wrapper_buffers(w), load);
  const Executable exe = detail::ExecutableAccess::open_wrapper(w, initial, wrapper_options(r));
  const KernelAttributes a = exe.attributes();
  text << "kernel        " << a.kernel << " for " << a.arch << " on " << a.device << "\n"
       << "  registers/thread " << a.registers_per_thread << ", static smem " << a.static_smem_bytes
       << " B, dynamic smem " << a.dynamic_smem_bytes << " B, local " << a.local_bytes
       << " B, const " << a.const_bytes << " B, max threads " << a.max_threads_per_block << "\n"
       << "  blocks/SM " << a.blocks_per_sm << " x SMs " << a.sms << " = max co-resident grid "
       << a.max_coresident_grid << " (this wrapper: grid " << a.grid << ", block " << a.block
       << ")\n";
  if (w.launch.cluster_size > 1)
    text << "  cluster " << w.launch.cluster_size << ": max size " << a.max_cluster_size
         << ", max active clusters " << a.max_active_clusters << "\n";
  return resources_json(a);
}

ordered_json profile_arms_on_gpu(const Program& program, const InitialData& initial,
                                 const ProfileRequest& req, std::ostringstream& text) {
  const std::vector<TuningArm>& arms = req.arms;
  std::vector<Executable> exes;
  exes.reserve(arms.size());
  uint64_t bytes = 0;  // one arm's buffers
  for (const InitialSource& s : initial.sources()) bytes += s.size;
  for (const TuningArm& arm : arms) {
    GpuRequest r = req.gpu;
    for (const VmOverride& o : arm.overrides) {
      std::erase_if(r.vm, [&](const VmOverride& x) { return x.field == o.field; });
      r.vm.push_back(o);
    }
    exes.push_back(detail::ExecutableAccess::open(program, initial, gpu_options(r)));
    // Every arm holds its own copy of the buffers: refuse before the device runs out.
    const uint64_t mem = detail::ExecutableAccess::gpu(exes[0]).device().global_mem_bytes;
    if (exes.size() == 1 && mem != 0 && static_cast<double>(bytes) * arms.size() > 0.9 * mem)
      throw Error(ErrorKind::device, "device.memory", "--tuning-arms",
                  std::to_string(arms.size()) + " arms hold " + std::to_string(arms.size()) +
                      " copies of the program's " + std::to_string(bytes >> 20) +
                      " MiB of buffers, more than 90% of the device's " +
                      std::to_string(mem >> 20) + " MiB; compare fewer arms at once");
  }
  const uint64_t flush_bytes = req.cold ? BenchOptions{}.flush_bytes : 0;
  std::vector<std::vector<double>> samples(arms.size()), round_medians(arms.size());
  for (uint32_t round = 0; round < req.rounds; ++round)
    for (size_t a = 0; a < arms.size(); ++a) {
      const ProfileResult s = exes[a].profile(profile_options(req));
      samples[a].insert(samples[a].end(), s.samples_ms.begin(), s.samples_ms.end());
      round_medians[a].push_back(s.median_ms);
    }
  const DeviceInfo& device = detail::ExecutableAccess::gpu(exes[0]).device();
  ordered_json j = profile_head(program.name, program_fingerprint(program), req, flush_bytes);
  j["rounds"] = req.rounds;
  j["device"] = device.to_json();
  j["target_fingerprint"] = device.fingerprint();
  char line[320];
  std::snprintf(line, sizeof line,
                "%s on %s: %zu tuning arms, %u interleaved rounds of %u launches each (%s "
                "scope%s, %u warm-up)\n",
                program.name.c_str(), device.name.c_str(), arms.size(), req.rounds, req.iterations,
                req.scope.c_str(), req.cold ? ", L2 flushed before each" : "", req.warmup);
  text << line;
  ordered_json out = ordered_json::array();
  double first = 0.0;
  for (size_t a = 0; a < arms.size(); ++a) {
    const ProfileStats s = summarize_samples(samples[a]);
    if (a == 0) first = s.median_ms;
    const double ratio = first > 0.0 ? s.median_ms / first : 0.0;
    ordered_json arm = {{"name", arms[a].name}, {"vm", overrides_text(arms[a].overrides)}};
    put_stats(arm, s);
    arm["round_medians_ms"] = round_medians[a];
    arm["ratio_to_first"] = ratio;
    const KernelAttributes attributes = exes[a].attributes();
    arm["cache_hit"] = attributes.cache_hit;
    arm["artifact_fingerprint"] =
        detail::ExecutableAccess::gpu(exes[a]).compiled().source_fingerprint;
    arm["attributes"] = resources_json(attributes);
    out.push_back(std::move(arm));
    std::string rounds;
    for (double m : round_medians[a]) {
      std::snprintf(line, sizeof line, "%s%.4f", rounds.empty() ? "" : " / ", m);
      rounds += line;
    }
    std::snprintf(line, sizeof line,
                  "  %-40s median %.4f ms (rounds %s), min %.4f, max %.4f, spread %.2f%%, "
                  "%.3fx the first\n",
                  arms[a].name.c_str(), s.median_ms, rounds.c_str(), s.min_ms, s.max_ms,
                  100.0 * s.rel_spread, ratio);
    text << line;
  }
  j["arms"] = std::move(out);
  return j;
}

ordered_json trace_on_gpu(const Program& program, const InitialData& initial, const GpuRequest& req,
                          const std::string& trace_path, std::ostringstream& text) {
  GpuRequest traced = req;
  traced.trace = true;
  GpuOptions options = gpu_options(traced);
  options.trace = true;
  Executable exe = detail::ExecutableAccess::open(program, initial, options);
  const GpuExecutable& ex = detail::ExecutableAccess::gpu(exe);
  Phase launch("launch");
  exe.launch(1);  // a watchdog stop or a bad operand throws run.timeout / run.bad_operand
  launch.finish();
  const Plan& ran = ex.plan();
  const std::vector<uint64_t> words = ex.trace();
  const std::vector<TraceSpan> spans = trace_spans(words, ran.queue_offsets, ran.queue_items);
  write_text_atomic(trace_path, chrome_trace(program, spans).dump() + "\n");
  ordered_json summary = trace_summary(program, spans, ran.n_queues());
  char line[256];
  std::snprintf(line, sizeof line, "traced %zu instructions over %u blocks in %.2f us -> %s\n",
                spans.size(), ran.n_queues(), summary["span_ns"].get<uint64_t>() / 1000.0,
                trace_path.c_str());
  text << line;
  text << "  op                 count   total us    mean us    GB/s\n";
  for (const auto& o : summary["ops"]) {
    std::snprintf(line, sizeof line, "  %-18s %5llu %10.2f %10.3f %7.1f\n",
                  o["op"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(o["count"].get<uint64_t>()),
                  o["total_ns"].get<uint64_t>() / 1000.0, o["mean_ns"].get<double>() / 1000.0,
                  o["gb_per_s"].get<double>());
    text << line;
    if (o.contains("marks")) {  // mean time from the start to each of the op's marks
      text << "  " << std::string(18, ' ') << " marks:";
      for (const auto& m : o["marks"]) {
        if (m["count"].get<uint64_t>() == 0) continue;
        std::snprintf(line, sizeof line, " %s %.3f us", m["name"].get<std::string>().c_str(),
                      m["mean_ns"].get<double>() / 1000.0);
        text << line;
      }
      text << "\n";
    }
  }
  const auto& t = summary["totals"];
  const double all =
      static_cast<double>(t["busy_ns"].get<uint64_t>() + t["waiting_ns"].get<uint64_t>() +
                          t["idle_ns"].get<uint64_t>());
  if (all > 0) {
    std::snprintf(line, sizeof line, "  blocks: busy %.1f%%, waiting %.1f%%, idle %.1f%%\n",
                  100.0 * t["busy_ns"].get<uint64_t>() / all,
                  100.0 * t["waiting_ns"].get<uint64_t>() / all,
                  100.0 * t["idle_ns"].get<uint64_t>() / all);
    text << line;
  }
  summary["trace_file"] = trace_path;
  return summary;
}

ordered_json bench_on_gpu(const Program& program, const InitialData& initial,
                          const BenchRequest& req, std::ostringstream& text) {
  GpuOptions opts = gpu_options(req.gpu);
  opts.step_kernel = true;
  GpuExecutable ex = GpuExecutable::open(program, initial, opts);
  BenchOptions bo;
  bo.warmup = req.warmup;
  bo.stop.min_samples = req.min_samples;
  bo.stop.min_time_s = req.min_time_s;
  bo.stop.max_noise = req.max_noise;
  bo.stop.time_limit_s = req.time_limit_s;
  bo.cold = req.cold;
  bo.roofline_bytes_per_s = req.roofline_bytes_per_s;
  Phase phase("bench");
  const BenchResult r = run_bench(ex, program, initial, bo);
  phase.finish();

  const double mega_ms = r.arms.at(0).stats.median_ms;
  const auto bytes_per_s = [&](double ms) {
    return ms > 0 ? static_cast<double>(r.operand_bytes) / (ms * 1e-3) : 0.0;
  };
  ordered_json j;
  j["schema_version"] = 1;
  j["status"] = "ok";
  j["command"] = "bench";
  j["program"] = program.name;
  j["program_fingerprint"] = program_fingerprint(program);
  j["artifact_fingerprint"] = ex.compiled().source_fingerprint;
  j["target_fingerprint"] = ex.device().fingerprint();
  j["device"] = ex.device().to_json();
  j["versions"] = versions_json(ex);
  j["mode"] = req.cold ? "cold" : "hot";
  if (req.cold) j["flush_bytes"] = bo.flush_bytes;
  j["grid"] = ex.grid();
  j["block"] = ex.block();
  j["instructions"] = r.instructions;
  j["skipped_nops"] = r.skipped_nops;
  j["operand_bytes"] = r.operand_bytes;
  j["roofline_bytes_per_s"] = req.roofline_bytes_per_s;
  j["sampling"] = {{"warmup", req.warmup},
                   {"rounds", r.rounds},
                   {"stop_reason", r.stop_reason},
                   {"elapsed_s", r.sampling_s},
                   {"min_samples", req.min_samples},
                   {"min_time_s", req.min_time_s},
                   {"max_noise", req.max_noise},
                   {"time_limit_s", req.time_limit_s},
                   {"order", "megakernel, launches, graph in every round"}};
  ordered_json arms = ordered_json::array();
  for (const BenchArm& a : r.arms) {
    const ProfileStats& s = a.stats;
    ordered_json aj;
    aj["name"] = a.name;
    aj["description"] = a.description;
    aj["launches"] = a.launches;
    aj["samples"] = s.samples_ms.size();
    aj["median_ms"] = s.median_ms;
    aj["min_ms"] = s.min_ms;
    aj["max_ms"] = s.max_ms;
    aj["mean_ms"] = s.mean_ms;
    aj["stddev_ms"] = s.stddev_ms;
    aj["rel_spread"] = s.rel_spread;
    aj["ratio_to_megakernel"] = mega_ms > 0 ? s.median_ms / mega_ms : 0.0;
    aj["per_launch_us"] = a.launches ? 1e3 * s.median_ms / a.launches : 0.0;
    aj["bytes_per_s"] = bytes_per_s(s.median_ms);
    aj["roofline_fraction"] = bytes_per_s(s.median_ms) / req.roofline_bytes_per_s;
    aj["samples_ms"] = s.samples_ms;
    arms.push_back(std::move(aj));
  }
  j["arms"] = std::move(arms);
  j["ratios"] = {{"launches_over_megakernel", j["arms"][1]["ratio_to_megakernel"]},
                 {"graph_over_megakernel", j["arms"][2]["ratio_to_megakernel"]}};
  ordered_json outs = ordered_json::array();
  uint32_t bitwise = 0;
  for (const BenchCheck& c : r.checks) {
    bitwise += c.bitwise_equal;
    outs.push_back({{"arm", c.arm},
                    {"buffer", c.buffer},
                    {"name", c.buffer_name},
                    {"bitwise_equal", c.bitwise_equal},
                    {"error", c.error},
                    {"tolerance", c.tolerance},
                    {"passed", c.passed}});
  }
  j["check"] = {{"against", "megakernel"}, {"passed", r.outputs_agree}, {"outputs", outs}};
  j["setup_timings_ms"] = timings_json(ex.setup_timings_ms());
  j["cache_hit"] = ex.compiled().cache_hit;

  char line[256];
  std::snprintf(line, sizeof line,
                "%s on %s: %s L2, %u rounds in %.2f s (%s); %u instructions (%u sync-only nops "
                "not launched), operands %s\n",
                program.name.c_str(), ex.device().name.c_str(), req.cold ? "cold" : "hot", r.rounds,
                r.sampling_s, r.stop_reason.c_str(), r.instructions, r.skipped_nops,
                format_bytes(r.operand_bytes).c_str());
  text << line;
  text << "  arm         launches   median ms      min ms      max ms  spread  vs mega     GB/s"
          "  % roofline\n";
  for (const BenchArm& a : r.arms) {
    const ProfileStats& s = a.stats;
    const double bps = bytes_per_s(s.median_ms);
    std::snprintf(line, sizeof line,
                  "  %-10s %9u %11.4f %11.4f %11.4f %6.2f%% %7.2fx %8.1f %10.1f%%\n",
                  a.name.c_str(), a.launches, s.median_ms, s.min_ms, s.max_ms, 100.0 * s.rel_spread,
                  mega_ms > 0 ? s.median_ms / mega_ms : 0.0, bps / 1e9,
                  100.0 * bps / req.roofline_bytes_per_s);
    text << line;
  }
  std::snprintf(line, sizeof line,
                "outputs: launches and graph match the megakernel (%u of %zu buffer comparisons "
                "bitwise equal)\n",
                bitwise, r.checks.size());
  text << line;
  return j;
}

ordered_json kernel_attributes(const Program& program, const LoadOptions& load,
                               const GpuRequest& req, std::ostringstream& text) {
  GpuRequest r = req;
  r.checked_device = check_gpu(program, req.device);
  r.trust_custom_ops = load.trust_custom_ops;
  Phase materialize("materialize");
  const InitialData initial = initial_data(program, load);
  materialize.finish();
  const Executable exe = detail::ExecutableAccess::open(program, initial, gpu_options(r));
  const KernelAttributes a = exe.attributes();
  text << "kernel        " << a.kernel << " for " << a.arch << " on " << a.device << "\n"
       << "  registers/thread " << a.registers_per_thread << ", static smem " << a.static_smem_bytes
       << " B, dynamic smem " << a.dynamic_smem_bytes << " B (program "
       << program.launch.dynamic_smem << "), local " << a.local_bytes << " B, const "
       << a.const_bytes << " B, max threads " << a.max_threads_per_block << "\n"
       << "  blocks/SM " << a.blocks_per_sm << " x SMs " << a.sms << " = max co-resident grid "
       << a.max_coresident_grid << " (this program: grid " << a.grid << ", block " << a.block
       << ")\n";
  if (program.launch.mode == LaunchMode::cluster)
    text << "  cluster: max size " << a.max_cluster_size << ", max active clusters "
         << a.max_active_clusters << "\n";
  return resources_json(a);
}

ordered_json compile_wrapper_for_arch(const WrapperProgram& w, const std::string& arch,
                                      const GpuRequest& req, const std::string& cubin_out,
                                      std::ostringstream& text) {
  CompileOptions co = gpu_options(req).compile;
  co.arch = arch;
  co.cubin_file.reset();
  const CompileOutput out = compile_wrapper(w, co);
  if (!cubin_out.empty()) {
    const std::filesystem::path dir = std::filesystem::absolute(cubin_out).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      throw Error(ErrorKind::io, "io.write", cubin_out,
                  "the folder " + dir.string() + " does not exist (nothing was written)");
  }
  const std::string program_fingerprint =
      "wrapper " + w.name + (w.artifact_fingerprint.empty() ? "" : " " + w.artifact_fingerprint);
  const std::string record_out =
      cubin_out.empty() ? std::string()
                        : write_cubin_artifact(cubin_out, out, program_fingerprint).string();
  ordered_json j = compile_json(out, cubin_out, record_out);
  j["kind"] = "wrapper";
  j["target_fingerprint"] = w.target.fingerprint;
  j["artifact_fingerprint"] = w.artifact_fingerprint;
  char line[256];
  std::snprintf(line, sizeof line,
                "compiled wrapper %s for %s: %zu bytes of cubin, %s in %.1f ms (NVRTC %s)\n",
                out.kernel_name.c_str(), out.arch.c_str(), out.cubin.size(),
                out.cache_hit ? "cache hit" : "compiled", out.compile_ms,
                out.nvrtc_version.c_str());
  text << line;
  std::istringstream log(out.log);
  for (std::string l; std::getline(log, l);)
    if (l.find("ptxas") != std::string::npos || l.find("registers") != std::string::npos)
      text << "  " << l << "\n";
  for (const std::string* f : {&cubin_out, &record_out})
    if (!f->empty()) text << "wrote " << *f << "\n";
  return j;
}

ordered_json compile_for_arch(const Program& program, const std::string& arch,
                              const GpuRequest& req, const CompileOutputs& files, bool explain,
                              std::ostringstream& text) {
  const CompileOptions co = [&] {
    CompileOptions c = gpu_options(req).compile;
    c.arch = arch;
    return c;
  }();
  // The device a compile without one targets: the arch's own capabilities. sm_NN with an optional
  // a/f suffix; the VM's cache policies need sm_80 or newer.
  uint32_t number = 0;
  size_t digits = 0;
  while (3 + digits < arch.size() && arch[3 + digits] >= '0' && arch[3 + digits] <= '9' &&
         digits < 4)
    number = number * 10 + static_cast<uint32_t>(arch[3 + digits++] - '0');
  const std::string_view suffix = std::string_view(arch).substr(std::min(arch.size(), 3 + digits));
  if (arch.rfind("sm_", 0) != 0 || digits < 2 || (suffix != "" && suffix != "a" && suffix != "f"))
    throw Error(ErrorKind::usage, "usage.arch", "--arch",
                "expected a real architecture sm_NN[a|f] (e.g. sm_90a), got '" + arch + "'");
  if (number < 80)
    throw Error(ErrorKind::usage, "usage.arch", "--arch",
                "the VM needs sm_80 or newer (its loads use L2 cache policies), got '" + arch +
                    "'");
  // The program's target (target.min_arch, its features, its shared memory) against what the
  // arch provides, before NVRTC runs.
  const DeviceCaps caps = caps_for_arch(number);
  const DeviceInfo as_device = device_for_arch(number, caps.smem_optin);
  if (const auto mismatches = target_mismatches(program, as_device); !mismatches.empty()) {
    std::string msg = "program '" + program.name + "' cannot be compiled for " + arch + ": ";
    for (size_t i = 0; i < mismatches.size(); ++i) msg += (i ? "; " : "") + mismatches[i];
    throw Error(ErrorKind::device, "device.target", "--arch", msg);
  }
  ChooseOptions chosen;
  chosen.overrides = req.vm;
  const VmChoice vm = choose(program_facts(program), caps, chosen);
  const std::string source = vm_source(program, vm, req.trust_custom_ops);
  CompileOutput out = compile_vm(source, static_cast<uint32_t>(program.tma.size()), co);
  const std::string& cubin_out = files.cubin;
  // Everything is produced (the PTX compile may fail) and every folder checked before the first
  // file is written, so a failure leaves none of the requested files behind.
  const std::string ptx = files.ptx.empty() ? std::string() : vm_ptx(source, co);
  for (const std::string* f : {&cubin_out, &files.source, &files.ptx}) {
    if (f->empty()) continue;
    const std::filesystem::path dir = std::filesystem::absolute(*f).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      throw Error(ErrorKind::io, "io.write", *f,
                  "the folder " + dir.string() + " does not exist (nothing was written)");
  }
  auto write_text = [](const std::string& path, const std::string& s) {
    write_file_atomic(path, std::as_bytes(std::span(s.data(), s.size())));
  };
  const std::string record_out =  // the cubin and, beside it, what it was built for
      cubin_out.empty()
          ? std::string()
          : write_cubin_artifact(cubin_out, out, program_fingerprint(program)).string();
  if (!files.source.empty()) write_text(files.source, source);
  if (!files.ptx.empty()) write_text(files.ptx, ptx);
  ordered_json j = compile_json(out, cubin_out, record_out);
  if (!files.source.empty()) j["source_output"] = files.source;
  if (!files.ptx.empty()) j["ptx_output"] = files.ptx;
  j["vm"] = vm_json(vm);
  j["vm_dynamic_smem"] = vm.dynamic_smem;
  char line[256];
  std::snprintf(
      line, sizeof line, "compiled %s for %s: %zu bytes of cubin, %s in %.1f ms (NVRTC %s)\n",
      out.kernel_name.c_str(), out.arch.c_str(), out.cubin.size(),
      out.cache_hit ? "cache hit" : "compiled", out.compile_ms, out.nvrtc_version.c_str());
  text << line;
  if (explain) {
    // Every field: its value and why the chooser picked it (config/choose.cpp).
    text << "  vm config (--vm FIELD=VALUE overrides a tunable field):\n";
    for (const VmField& f : vm_fields()) {
      std::snprintf(line, sizeof line, "    %-20s %-6s %s", std::string(f.name).c_str(),
                    vm_field_text(f, vm.config).c_str(), f.tunable ? "" : "(program) ");
      text << line << choice_why(vm, f.name) << "\n";
    }
  } else {
    // The fields whose value differs from the default.
    const VmConfig def{};
    text << "  vm:";
    for (const VmField& f : vm_fields())
      if (f.tunable && f.get(vm.config) != f.get(def))
        text << " " << f.name << "=" << vm_field_text(f, vm.config);
    text << " (--explain: every field and why)\n";
  }
  // ptxas resource lines from the log (registers, spills).
  std::istringstream log(out.log);
  for (std::string l; std::getline(log, l);)
    if (l.find("ptxas") != std::string::npos || l.find("registers") != std::string::npos)
      text << "  " << l << "\n";
  for (const std::string* f : {&cubin_out, &record_out, &files.source, &files.ptx})
    if (!f->empty()) text << "wrote " << *f << "\n";
  return j;
}

ordered_json list_gpus(std::ostringstream& text) {
  // No driver or no device is an answer (zero devices), not an error.
  std::string why;
  if (!gpu_available(&why)) {
    text << "no CUDA devices: " << why << "\n";
    return ordered_json{{"status", "ok"}, {"devices", ordered_json::array()}, {"notice", why}};
  }
  std::vector<DeviceInfo> devices = list_devices();
  ordered_json arr = ordered_json::array();
  for (const auto& d : devices) {
    arr.push_back(ordered_json(d.to_json()));
    text << d.ordinal << ": " << d.name << "  " << d.arch() << ", " << d.sm_count << " SMs, "
         << format_bytes(d.global_mem_bytes) << ", L2 " << format_bytes(d.l2_bytes)
         << ", smem/block opt-in " << d.smem_per_block_optin << " B, cooperative "
         << (d.cooperative_launch ? "yes" : "no") << ", cluster "
         << (d.cluster_launch ? "yes" : "no") << ", driver " << d.driver_version << "\n";
  }
  return ordered_json{{"status", "ok"}, {"devices", arr}};
}

}  // namespace amk
