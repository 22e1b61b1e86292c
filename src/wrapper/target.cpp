#include <string>
#include <vector>

#include "core/error.hpp"
#include "device/device.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {
namespace {

template <class T>
void differ(std::vector<std::string>& out, const char* what, const T& snapshot, const T& device) {
  if (snapshot != device)
    out.push_back(std::string(what) + ": snapshot " + std::to_string(snapshot) + ", device " +
                  std::to_string(device));
}

}  // namespace

std::vector<std::string> wrapper_target_mismatches(const WrapperProgram& w, const DeviceInfo& d) {
  std::vector<std::string> out;
  const TargetSnapshot& t = w.target;
  if (wrapper_arch(t) != d.arch())
    out.push_back("arch: snapshot " + wrapper_arch(t) + ", device " + d.arch());
  differ<uint64_t>(out, "sm_count", t.sm_count, d.sm_count);
  // (The per-block default and per-SM limits are optional in the snapshot: 0 is not recorded.)
  if (t.max_shared_memory_per_block != 0)
    differ<uint64_t>(out, "max_shared_memory_per_block", t.max_shared_memory_per_block,
                     d.smem_per_block);
  differ<uint64_t>(out, "max_shared_memory_per_block_optin", t.max_shared_memory_per_block_optin,
                   d.smem_per_block_optin);
  if (t.max_shared_memory_per_sm != 0)
    differ<uint64_t>(out, "max_shared_memory_per_sm", t.max_shared_memory_per_sm, d.smem_per_sm);
  if (t.cluster_launch != d.cluster_launch)
    out.push_back(std::string("cluster_launch: snapshot ") + (t.cluster_launch ? "true" : "false") +
                  ", device " + (d.cluster_launch ? "true" : "false"));
  // What the launch asks of this device, whatever the snapshot says.
  const auto b = w.launch.block3();
  const uint64_t threads = uint64_t{b[0]} * b[1] * b[2];
  if (d.max_threads_per_block != 0 && threads > d.max_threads_per_block)
    out.push_back("block_dim: " + std::to_string(threads) + " threads, the device allows " +
                  std::to_string(d.max_threads_per_block) + " per block");
  if (w.launch.dynamic_smem_bytes > d.smem_per_block_optin)
    out.push_back("dynamic_smem_bytes: " + std::to_string(w.launch.dynamic_smem_bytes) +
                  ", the device's opt-in limit is " + std::to_string(d.smem_per_block_optin));
  if (w.launch.cluster_size > 1 && !d.cluster_launch)
    out.push_back("cluster_size " + std::to_string(w.launch.cluster_size) +
                  ": the device has no cluster launch");
  return out;
}

void check_wrapper_target(const WrapperProgram& w, const DeviceInfo& d) {
  const std::vector<std::string> m = wrapper_target_mismatches(w, d);
  if (m.empty()) return;
  std::string msg = "wrapper '" + w.name + "' was built for another device than " + d.name +
                    " (snapshot fingerprint " +
                    (w.target.fingerprint.empty() ? "<none>" : w.target.fingerprint) +
                    ", device fingerprint " + d.fingerprint() + "): ";
  for (size_t i = 0; i < m.size(); ++i) msg += (i ? "; " : "") + m[i];
  throw Error(ErrorKind::device, "device.target", "/target", msg);
}

}  // namespace amk
