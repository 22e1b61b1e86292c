// The driver-free parts of the executor: diag status names and text, profile statistics.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "cuda/executor.hpp"

namespace amk {

std::string launch_status_name(uint32_t status) {
  switch (status) {
    case AMK_STATUS_OK: return "ok";
    case AMK_STATUS_TIMEOUT: return "timeout";
    case AMK_STATUS_ABORTED: return "timeout";  // only the watchdog path or the host abort sets it
    case AMK_STATUS_BAD_OPERAND: return "bad_operand";
    default:
      throw Error(ErrorKind::launch, "launch.diag", "",
                  "the VM wrote unknown diag status " + std::to_string(status) +
                      " (kernel and host disagree on the ABI)");
  }
}

std::string describe_diag(const amk_diag_t& d) {
  std::string status;
  switch (d.status) {
    case AMK_STATUS_OK: status = "ok"; break;
    case AMK_STATUS_TIMEOUT: status = "timeout"; break;
    case AMK_STATUS_ABORTED: status = "aborted"; break;
    case AMK_STATUS_BAD_OPERAND: status = "bad_operand"; break;
    default: status = "unknown(" + std::to_string(d.status) + ")"; break;
  }
  return "status " + status + ", block " + std::to_string(d.block) + ", queue position " +
         std::to_string(d.queue_pos) + ", instruction " + std::to_string(d.instruction) + ", op " +
         std::to_string(d.op) + ", counter " + std::to_string(d.counter) + ", have " +
         std::to_string(d.have) + ", need " + std::to_string(d.need) + ", waited " +
         std::to_string(d.elapsed_ns) + " ns, detail " + std::to_string(d.detail);
}

std::string block_wait_text(uint32_t detail) { return "its TMA tile " + std::to_string(detail); }

ProfileStats summarize_samples(std::vector<double> samples_ms) {
  ProfileStats s;
  s.samples_ms = std::move(samples_ms);
  const size_t n = s.samples_ms.size();
  if (n == 0) return s;
  std::vector<double> sorted = s.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  s.min_ms = sorted.front();
  s.max_ms = sorted.back();
  s.median_ms = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  s.mean_ms = std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(n);
  if (n > 1) {
    double sq = 0;
    for (double v : sorted) sq += (v - s.mean_ms) * (v - s.mean_ms);
    s.stddev_ms = std::sqrt(sq / static_cast<double>(n - 1));
  }
  s.rel_spread = s.mean_ms > 0 ? s.stddev_ms / s.mean_ms : 0.0;
  return s;
}

}  // namespace amk
