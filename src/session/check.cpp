#include "session/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "backend/check_inputs.hpp"
#include "backend/cpu_backend.hpp"
#include "backend/tolerance.hpp"
#include "core/numeric.hpp"
#include "plan/plan.hpp"
#include "session/gpu_session.hpp"

namespace amk {

double normalized_error(DType t, const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                        uint64_t elements) {
  double diff = 0.0, ref = 0.0;
  for (uint64_t i = 0; i < elements; ++i) {
    const double x = load_element(a.data(), t, i);
    const double y = load_element(b.data(), t, i);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      // NaN beside NaN, or the same infinity (an empty attention chunk's max score is -inf),
      // matches; anything else beside a non-finite value does not.
      if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
      return std::numeric_limits<double>::infinity();
    }
    diff += (x - y) * (x - y);
    ref += y * y;
  }
  if (diff == 0.0) return 0.0;
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

ordered_json check_against_cpu(const Program& program, HostBuffers ref, const HostBuffers& result,
                               uint32_t iterations, const std::vector<bool>& poisoned) {
  PlanOptions popts;
  popts.grid_hint = kDefaultGridHint;
  Plan plan = make_plan(program, popts);
  CpuRunOptions copts;
  copts.iterations = iterations;
  (void)run_cpu(program, plan, ref, copts);

  const std::vector<double> tols = check_tolerances(program);
  ordered_json outs = ordered_json::array();
  bool passed = true;
  double worst_ratio = -1.0;
  std::string worst, summary, loosened;  // loosened: outputs held to a coarser dtype's tolerance
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    if (!b.output) continue;
    const uint64_t n = b.elements();
    const double tol = tols[i];
    const bool coarser = tol > check_tolerance(b.dtype);
    if (coarser) {
      char part[64];
      std::snprintf(part, sizeof part, " at %.3g", tol);
      loosened += (loosened.empty() ? "" : ", ") + b.name + part;
    }
    double err = 0.0;
    uint64_t mismatched = 0;
    bool ok;
    if (dtype_is_float(b.dtype)) {
      err = normalized_error(b.dtype, result.data[i], ref.data[i], n);
      ok = err <= tol;
    } else {
      for (uint64_t k = 0; k < n; ++k)
        if (load_element(result.data[i].data(), b.dtype, k) !=
            load_element(ref.data[i].data(), b.dtype, k))
          ++mismatched;
      err = n ? static_cast<double>(mismatched) / static_cast<double>(n) : 0.0;
      ok = mismatched == 0;
    }
    // A poisoned output: elements one run wrote and the other left poisoned (NaN poison beside a
    // NaN result would pass the error above).
    const bool poison = i < poisoned.size() && poisoned[i];
    const PoisonDiff pd =
        poison ? compare_poison(b.dtype, result.data[i], ref.data[i], n) : PoisonDiff{};
    const bool written = pd.unwritten == 0 && pd.extra == 0;
    double ratio = tol > 0 ? err / tol : (ok ? 0.0 : std::numeric_limits<double>::infinity());
    if (!written) ratio = std::numeric_limits<double>::infinity();
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = "/buffers/" + std::to_string(i) + " (" + b.name + ")";
      char line[256];
      if (!written)
        std::snprintf(line, sizeof line,
                      "%llu element(s) the CPU reference writes were never written (still the "
                      "poison set before the run) and %llu written only by this run, first at "
                      "element %llu",
                      static_cast<unsigned long long>(pd.unwritten),
                      static_cast<unsigned long long>(pd.extra),
                      static_cast<unsigned long long>(pd.first));
      else
        std::snprintf(line, sizeof line,
                      "differs from the CPU reference: %s %.3g (tolerance %.3g%s)",
                      dtype_is_float(b.dtype) ? "normalized error" : "mismatched fraction", err,
                      tol, coarser ? ", a coarser dtype's: it follows bf16/f16 stores" : "");
      summary = "output " + b.name + ": " + line;
    }
    ok = ok && written;
    passed = passed && ok;
    outs.push_back({{"name", b.name},
                    {"dtype", std::string(dtype_name(b.dtype))},
                    {"error", err},
                    {"tolerance", tol},
                    {"poisoned", poison},
                    {"unwritten", pd.unwritten},
                    {"passed", ok}});
  }
  if (passed)
    summary = "every output matches the CPU reference" +
              (loosened.empty() ? std::string()
                                : " (" + loosened +
                                      ": following bf16/f16 stores, at a coarser "
                                      "dtype's tolerance)");
  return ordered_json{{"passed", passed},
                      {"summary", summary},
                      {"worst", worst},
                      {"poisoned", buffer_names(program, poisoned)},
                      {"outputs", outs}};
}

}  // namespace amk
