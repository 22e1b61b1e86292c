// `amk inspect`'s static summary of a loaded, verified program: buffers and bytes, instructions by
// op, counters, queues (as amk plans them for `grid_hint` blocks where the program leaves the
// grid to amk), critical path, launch and target. The CLI prints `text`; the Python module's
// Program.inspect() returns the JSON.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "program/program.hpp"
#include "verify/verify.hpp"

namespace amk {

[[nodiscard]] nlohmann::ordered_json inspect_program(const Program& p, const VerifySummary& summary,
                                                     const std::string& path, uint32_t grid_hint,
                                                     bool list_buffers, std::ostream& text);

}  // namespace amk
