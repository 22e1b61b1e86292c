// amk inspect PROGRAM [--attributes]: a static summary (buffers and bytes, instructions by op,
// queues, counters, critical path) and, with --attributes, the compiled kernel's resources on
// this machine's GPU.
#include <algorithm>
#include <map>
#include <sstream>

#include "cli/common.hpp"
#include "session/gpu_session.hpp"
#include "session/inspect.hpp"
#include "core/error.hpp"
#include "ops/registry.hpp"
#include "plan/plan.hpp"
#include "verify/verify.hpp"

namespace amk::cli {
namespace {

struct InspectOptions {
  ProgramArgs program;
  bool attributes = false;
  uint32_t grid_hint = kDefaultGridHint;
  bool list_buffers = true;
  int device = 0;
  CacheArgs cache;
  VmArgs vm;
  std::string cubin;
  bool trust_source = false;
};

std::string dims_text(const std::vector<uint64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// A wrapper program: kernel, launch shape, package arrays, tensor arguments, TMA specs, target.
int inspect_wrapper(const GlobalOptions& g, const InspectOptions& o) {
  if (o.attributes && (!o.vm.vm.empty() || o.vm.line_info))
    throw Error(ErrorKind::usage, "usage.wrapper.attributes",
                o.vm.line_info ? "--lineinfo" : "--vm",
                "--vm and --lineinfo configure amk's VM; a wrapper brings its own kernel");
  WrapperSummary s;
  const WrapperProgram w = load_and_check_wrapper(o.program, &s);
  if (o.attributes) (void)wrapper_compile_arch(w, "", o.trust_source);  // refuses untrusted
  ordered_json j;
  std::ostringstream t;
  j["status"] = "ok";
  j["kind"] = "wrapper";
  j["name"] = w.name;
  j["path"] = o.program.path;
  t << w.name << "  (" << o.program.path << ", wrapper program)\n";
  if (!w.description.empty()) t << "  " << w.description << "\n";

  std::vector<std::string> defines;
  for (const auto& d : w.wrapper.defines)
    defines.push_back(d.value ? d.name + "=" + *d.value : d.name);
  j["wrapper"] = {{"kernel_name", w.wrapper.kernel_name},
                  {"source", w.wrapper.source_path.empty() ? "inline" : w.wrapper.source_path},
                  {"source_bytes", w.wrapper.source.size()},
                  {"defines", defines}};
  t << "kernel        " << w.wrapper.kernel_name << " ("
    << (w.wrapper.source_path.empty() ? std::string("inline source") : w.wrapper.source_path)
    << ", " << format_bytes(w.wrapper.source.size()) << ")\n";
  for (const auto& d : defines) t << "  -D " << d << "\n";

  const auto b = w.launch.block3();
  j["launch"] = {{"grid", w.launch.queues},
                 {"block_dim", w.launch.block_dim},
                 {"dynamic_smem_bytes", w.launch.dynamic_smem_bytes},
                 {"cluster_size", w.launch.cluster_size},
                 {"scheduling_policy", "load_balancing"},
                 {"timeout_ms", w.launch.timeout_ms}};
  t << "launch        grid " << w.launch.queues << " (one block per queue), block " << b[0] << "x"
    << b[1] << "x" << b[2] << ", cluster " << w.launch.cluster_size
    << " (load_balancing), dynamic smem " << w.launch.dynamic_smem_bytes << " B, timeout "
    << w.launch.timeout_ms << " ms\n";

  ordered_json pkg = ordered_json::array();
  t << "package       (kernel parameters 0-13, in this order)\n";
  for (size_t i = 0; i < kPackageArrays; ++i) {
    const auto a = static_cast<PackageArray>(i);
    const PackageEntry& e = w.package[i];
    const bool amk_writes = a == PackageArray::tensor_args;
    const uint64_t bytes = amk_writes ? s.tensor_args_bytes : e.bytes();
    const uint64_t records = amk_writes ? w.tensor_args.size() : e.present ? e.records() : 0;
    const std::string source = amk_writes       ? "written by amk"
                               : !e.present     ? "absent"
                               : e.count() == 0 ? "empty"
                               : e.buffer.init.kind == InitKind::values
                                   ? "inline"
                                   : std::string(init_kind_name(e.buffer.init.kind));
    pkg.push_back({{"name", std::string(package_array_name(a))},
                   {"dtype", std::string(dtype_name(e.buffer.dtype))},
                   {"count", amk_writes ? bytes : e.count()},
                   {"bytes", bytes},
                   {"record_bytes", e.record_bytes},
                   {"records", records},
                   {"source", source}});
    t << "  " << i << (i < 10 ? "  " : " ") << package_array_name(a) << "  "
      << dtype_name(e.buffer.dtype) << "[" << (amk_writes ? bytes : e.count()) << "]  "
      << format_bytes(bytes) << ", " << records << " records of " << e.record_bytes << " B  ("
      << source << ")\n";
  }
  j["package"] = {{"arrays", pkg},
                  {"instruction_count", s.instruction_count},
                  {"comm_records", s.comm_count},
                  {"flags_reset_before_launch", s.flags_need_reset}};
  t << "instructions  " << s.instruction_count << " records; comms " << s.comm_count
    << " records; flags "
    << (s.flags_need_reset ? "reset before each launch (HBM send/recv)" : "not reset") << "\n";

  ordered_json tensors = ordered_json::array();
  t << "tensor args   " << w.tensor_args.size() << " (" << sizeof(WrapperTensorArgRecord)
    << "-byte records)\n";
  for (const Buffer& tb : w.tensor_args) {
    tensors.push_back({{"name", tb.name},
                       {"dtype", std::string(dtype_name(tb.dtype))},
                       {"shape", tb.shape},
                       {"bytes", tb.bytes()},
                       {"init", std::string(init_kind_name(tb.init.kind))},
                       {"output", tb.output}});
    t << "  " << (tb.output ? "out " : "    ") << tb.name << "  " << dtype_name(tb.dtype)
      << dims_text(tb.shape) << "  " << format_bytes(tb.bytes()) << "  init "
      << init_kind_name(tb.init.kind) << "\n";
  }
  j["tensor_args"] = std::move(tensors);

  ordered_json tma = ordered_json::array();
  if (!w.tma.empty()) t << "tma specs     " << w.tma.size() << " (kernel parameters 14..)\n";
  for (size_t i = 0; i < w.tma.size(); ++i) {
    const TmaSpec& spec = w.tma[i];
    std::vector<uint64_t> box(spec.box.begin(), spec.box.end());
    tma.push_back({{"name", spec.name},
                   {"tensor", w.tensor_args[spec.buffer].name},
                   {"dims", spec.dims},
                   {"box", box}});
    t << "  " << 14 + i << "  " << spec.name << " -> " << w.tensor_args[spec.buffer].name
      << "  dims " << dims_text(spec.dims) << " box " << dims_text(box) << "\n";
  }
  j["tma"] = std::move(tma);

  const TargetSnapshot& tg = w.target;
  const std::string arch = "sm_" + std::to_string(tg.arch) + (tg.arch_specific ? "a" : "");
  j["target"] = {{"arch", arch},
                 {"sm_count", tg.sm_count},
                 {"max_shared_memory_per_block", tg.max_shared_memory_per_block},
                 {"max_shared_memory_per_block_optin", tg.max_shared_memory_per_block_optin},
                 {"max_shared_memory_per_sm", tg.max_shared_memory_per_sm},
                 {"cluster_launch", tg.cluster_launch},
                 {"compiler_version", tg.compiler_version},
                 {"fingerprint", tg.fingerprint}};
  j["artifact_fingerprint"] = w.artifact_fingerprint;
  t << "target        " << arch << ", " << tg.sm_count << " SMs, smem opt-in "
    << tg.max_shared_memory_per_block_optin << " B, cluster launch "
    << (tg.cluster_launch ? "yes" : "no") << ", compiler " << tg.compiler_version << "\n"
    << "fingerprints  target " << tg.fingerprint << ", artifact "
    << (w.artifact_fingerprint.empty() ? std::string("(none)") : w.artifact_fingerprint) << "\n";
  if (o.attributes) {
    GpuRequest req;
    req.device = o.device;
    req.use_cache = !o.cache.no_cache;
    if (!o.cache.cache_dir.empty()) req.cache_dir = o.cache.cache_dir;
    req.cubin = cubin_request(o.cubin);
    j["attributes"] = wrapper_attributes(w, o.program.load_options(), req, t);
  }
  emit(g, j, t.str());
  return 0;
}

int run_inspect(const GlobalOptions& g, const InspectOptions& o) {
  if (is_wrapper_file(o.program.path)) return inspect_wrapper(g, o);
  VerifySummary summary;
  Program p = load_and_verify(o.program, &summary);

  std::ostringstream t;
  ordered_json j = inspect_program(p, summary, o.program.path, o.grid_hint, o.list_buffers, t);
  if (o.attributes) {
    GpuRequest req;
    req.vm = parse_vm_args(o.vm);
    req.line_info = o.vm.line_info;
    req.device = o.device;
    req.use_cache = !o.cache.no_cache;
    if (!o.cache.cache_dir.empty()) req.cache_dir = o.cache.cache_dir;
    req.cubin = cubin_request(o.cubin);
    ordered_json attrs = kernel_attributes(p, o.program.load_options(), req, t);
    j["attributes"] = std::move(attrs);
  }
  emit(g, j, t.str());
  return 0;
}

}  // namespace

void setup_inspect(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "summarize a program (and its compiled kernel)");
  add_program_args(cmd, o->program);
  auto* attributes =
      cmd->add_flag("--attributes", o->attributes,
                    "compile for this machine's GPU and show the kernel's resources and occupancy");
  cmd->add_option("--grid-hint", o->grid_hint,
                  "blocks to schedule over when the program has no queues and grid is auto");
  // (the GPU's options mean something with --attributes only: refused without it)
  add_device_option(cmd, o->device)->needs(attributes);
  add_cache_args(cmd, o->cache);
  o->cache.no_cache_option->needs(attributes);
  o->cache.cache_dir_option->needs(attributes);
  add_vm_args(cmd, o->vm);
  add_cubin_option(cmd, o->cubin)->needs(attributes);
  add_trust_source_flag(cmd, o->trust_source)->needs(attributes);
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_inspect(g, *o); }; });
}

}  // namespace amk::cli
