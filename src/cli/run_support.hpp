// Helpers shared by run / profile: --check against the CPU backend, output summaries.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "backend/host_data.hpp"
#include "backend/tolerance.hpp"
#include "cli/common.hpp"
#include "program/program.hpp"

namespace amk::cli {

// ||a - b|| / ||b|| over every element (b: the reference); NaN anywhere in a that is not NaN in
// b gives +inf.
[[nodiscard]] double normalized_error(DType t, const std::vector<std::byte>& a,
                                      const std::vector<std::byte>& b, uint64_t elements);

// Runs the CPU backend from `initial` (in place: pass a copy when the caller still needs it) and
// compares every output buffer with `result`. `poisoned` (indexed like the buffers, may be empty):
// outputs both runs started poisoned (backend/check_inputs.hpp); an element the reference writes
// that still holds the poison in `result` fails the check whatever its value.
// Returns {passed, summary, worst, poisoned, outputs: [{name, dtype, error, tolerance, poisoned,
// unwritten, passed}]}.
[[nodiscard]] ordered_json check_against_cpu(const Program& program, HostBuffers initial,
                                             const HostBuffers& result, uint32_t iterations,
                                             const std::vector<bool>& poisoned);

// "name f32[4] = [0.1, 0.2, ...]  (min, max, mean)" per output buffer.
[[nodiscard]] std::string describe_outputs(const Program& program, const HostBuffers& buffers);

// "load_verify 1.2 ms, plan 0.3 ms, ..."
[[nodiscard]] std::string format_ms(const std::vector<std::pair<std::string, double>>& timings);

}  // namespace amk::cli
