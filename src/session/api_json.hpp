// The public API's results as JSON (amk profile / inspect --attributes reports, the Python
// module's dicts).
#pragma once

#include <nlohmann/json.hpp>

#include "amk/amk.hpp"

namespace amk {

// The compiled kernel's resources and launch (KernelAttributes but its device and cache_hit).
inline nlohmann::ordered_json resources_json(const KernelAttributes& a) {
  nlohmann::ordered_json j;
  j["kernel"] = a.kernel;
  j["arch"] = a.arch;
  j["registers_per_thread"] = a.registers_per_thread;
  j["static_smem_bytes"] = a.static_smem_bytes;
  j["dynamic_smem_bytes"] = a.dynamic_smem_bytes;  // as launched (blocks_per_sm counts it)
  j["local_bytes"] = a.local_bytes;
  j["const_bytes"] = a.const_bytes;
  j["max_threads_per_block"] = a.max_threads_per_block;
  j["block"] = a.block;
  j["blocks_per_sm"] = a.blocks_per_sm;
  j["sms"] = a.sms;
  j["max_coresident_grid"] = a.max_coresident_grid;
  j["grid"] = a.grid;
  j["max_cluster_size"] = a.max_cluster_size;
  j["max_active_clusters"] = a.max_active_clusters;
  return j;
}

// A sample set's statistics into j (median_ms ... samples_ms): a ProfileResult or ProfileStats.
template <class Stats>
void put_stats(nlohmann::ordered_json& j, const Stats& s) {
  j["median_ms"] = s.median_ms;
  j["min_ms"] = s.min_ms;
  j["max_ms"] = s.max_ms;
  j["mean_ms"] = s.mean_ms;
  j["stddev_ms"] = s.stddev_ms;
  j["rel_spread"] = s.rel_spread;
  j["samples_ms"] = s.samples_ms;
}

}  // namespace amk
