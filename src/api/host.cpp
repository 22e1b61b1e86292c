#include "api/host.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/interrupt.hpp"
#include "ops/registry.hpp"
#include "verify/ranks.hpp"
#include "verify/verify.hpp"

namespace amk::detail {

namespace {

// What `options` say, checked before anything is loaded.
OpenedProgram checked_options(const OpenOptions& options) {
  OpenedProgram out;
  if (!options.vm.empty()) out.vm = parse_vm_overrides(options.vm, "vm");
  if (options.timeout_ms && (*options.timeout_ms == 0 || *options.timeout_ms > kMaxTimeoutMs))
    throw Error(ErrorKind::usage, "api.timeout", "timeout_ms",
                "expected a deadline of 1.." + std::to_string(kMaxTimeoutMs) + " ms, got " +
                    std::to_string(*options.timeout_ms));
  out.load.allow_outside_paths = options.allow_outside_paths;
  out.load.trust_custom_ops = options.trust_custom_ops;
  return out;
}

}  // namespace

OpenedProgram load_for_open(const std::string& path, const OpenOptions& options) {
  OpenedProgram out = checked_options(options);
  if (is_wrapper_file(path)) {
    WrapperProgram w = load_trusted_wrapper(path, out.load, options.trust_source);
    if (!options.vm.empty())
      throw Error(ErrorKind::usage, "api.vm.wrapper", "vm",
                  "vm fields configure amk's VM; a wrapper program brings its own kernel");
    out.program = wrapper_buffers(w);
    out.wrapper = std::move(w);
    return out;
  }
  return opened_program(load_program_file(path, out.load), options);
}

OpenedProgram opened_program(Program program, const OpenOptions& options) {
  OpenedProgram out = checked_options(options);
  out.program = std::move(program);
  (void)verify(out.program);
  out.ranks = out.program.launch.ranks;
  if (out.ranks > 1) {
    RankExpansion x = expand_ranks(out.program);
    out.program = std::move(x.program);
    out.rank_origin = std::move(x.origin);
  }
  return out;
}

void throw_no_cuda() {
  throw Error(ErrorKind::device, "device.unsupported", "",
              "this amk was built without the CUDA toolkit; only the CPU backend is available");
}

void throw_closed(std::string_view call) {
  throw Error(ErrorKind::usage, "api.closed", std::string(call),
              "the executable is closed (or was never opened, or was moved from)");
}

void check_host_pointer(const void* data, std::string_view name, std::string_view call) {
  if (data == nullptr)
    throw Error(ErrorKind::usage, "api.data", std::string(name),
                std::string(call) + ": a null host pointer for buffer '" + std::string(name) + "'");
}

std::vector<bool> written_buffers(const Program& program) {
  std::vector<bool> written(program.buffers.size(), false);
  for (const Instruction& in : program.instructions) {
    const OpSig* sig = in.op < kCustomOpBase ? find_op(in.op) : nullptr;
    for (size_t k = 0; k < in.operands.size(); ++k) {
      const uint32_t b = in.operands[k].buffer;
      if (b < written.size() &&
          (sig == nullptr || k >= sig->operands.size() || sig->operands[k].access != Access::read))
        written[b] = true;
    }
  }
  return written;
}

BufferBook::BufferBook(const Program& program, std::optional<std::vector<bool>> written_override)
    : uploaded_(program.buffers.size()), program_name_(program.name) {
  const std::vector<bool> written =
      written_override ? std::move(*written_override) : written_buffers(program);
  infos_.reserve(program.buffers.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    BufferInfo info;
    info.name = b.name;
    info.dtype = std::string(dtype_name(b.dtype));
    info.shape = b.shape;
    info.bytes = b.bytes();
    info.output = b.output;
    info.written = written[i];
    infos_.push_back(std::move(info));
    index_.emplace(b.name, static_cast<uint32_t>(i));
  }
}

uint32_t BufferBook::find(std::string_view name, std::string_view call) const {
  if (const auto it = index_.find(name); it != index_.end()) return it->second;
  constexpr size_t kNamesShown = 8;
  std::string names;
  for (size_t i = 0; i < infos_.size() && i < kNamesShown; ++i)
    names += (i ? ", " : "") + infos_[i].name;
  if (infos_.size() > kNamesShown) names += ", ... (" + std::to_string(infos_.size()) + " in all)";
  throw Error(ErrorKind::usage, "api.buffer", std::string(name),
              std::string(call) + ": program '" + program_name_ + "' has no buffer '" +
                  std::string(name) + "' (its buffers: " + names + ")");
}

void BufferBook::check(uint32_t index, uint64_t bytes, std::string_view dtype,
                       std::string_view call) const {
  const BufferInfo& b = infos_.at(index);
  std::string shape;
  for (size_t d = 0; d < b.shape.size(); ++d) {
    if (d != 0) shape += ",";
    shape += std::to_string(b.shape[d]);
  }
  const std::string what = std::string(call) + ": buffer '" + b.name + "' is " + b.dtype + "[" +
                           shape + "], " + std::to_string(b.bytes) + " bytes";
  if (dtype != b.dtype)
    throw Error(ErrorKind::usage, "api.dtype", b.name,
                what + "; the caller's elements are " + std::string(dtype));
  if (bytes != b.bytes)
    throw Error(ErrorKind::usage, "api.size", b.name,
                what + "; the caller's are " + std::to_string(bytes) + " bytes");
}

void BufferBook::check_bind(uint32_t index, uint64_t address) const {
  constexpr uint64_t kBindAlignment = 16;
  const std::string& name = infos_.at(index).name;
  if (address == 0)
    throw Error(ErrorKind::usage, "api.bind.pointer", name,
                "bind: a null device pointer for buffer '" + name + "'");
  if (address % kBindAlignment != 0) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(address));
    throw Error(ErrorKind::usage, "api.bind.alignment", name,
                "bind: device pointer " + std::string(hex) + " for buffer '" + name +
                    "' is not 16-byte aligned (the VM's vector loads and tensor maps need it)");
  }
}

std::optional<uint64_t> BufferBook::needs_upload(uint32_t index,
                                                 std::span<const std::byte> data) const {
  if (infos_.at(index).bound) return 0;  // always uploaded; no fingerprint is kept
  const uint64_t fingerprint = xxh64(data);
  if (uploaded_[index] == fingerprint) return std::nullopt;
  return fingerprint;
}

void BufferBook::uploaded(uint32_t index, uint64_t fingerprint) {
  if (!infos_.at(index).bound) uploaded_[index] = fingerprint;
}

void BufferBook::bound(uint32_t index) {
  infos_.at(index).bound = true;
  uploaded_[index].reset();
}

void BufferBook::launched() {
  for (size_t i = 0; i < infos_.size(); ++i)
    if (infos_[i].written) uploaded_[i].reset();
}

}  // namespace amk::detail

namespace amk {

void interrupt_launch() noexcept { request_interrupt(); }

}  // namespace amk
