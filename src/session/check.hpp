// `amk run --check`: every output of a run compared with the CPU reference backend's, by
// normalized error at the output's tolerance (backend/tolerance.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/host_data.hpp"
#include "program/program.hpp"

namespace amk {

// ||a - b|| / ||b|| over the finite elements (b: the reference); a NaN or an infinity in one
// that the other does not hold at the same element gives +inf.
[[nodiscard]] double normalized_error(DType t, const std::vector<std::byte>& a,
                                      const std::vector<std::byte>& b, uint64_t elements);

// Runs the CPU backend from `initial` (in place: pass a copy when the caller still needs it) and
// compares every output buffer with `result`. `poisoned` (indexed like the buffers, may be empty):
// outputs both runs started poisoned (backend/check_inputs.hpp); an element the reference writes
// that still holds the poison in `result` fails the check whatever its value.
// Returns {passed, summary, worst, poisoned, outputs: [{name, dtype, error, tolerance, poisoned,
// unwritten, passed}]}.
[[nodiscard]] nlohmann::ordered_json check_against_cpu(const Program& program, HostBuffers initial,
                                                       const HostBuffers& result,
                                                       uint32_t iterations,
                                                       const std::vector<bool>& poisoned);

}  // namespace amk
