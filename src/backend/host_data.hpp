// Host-side buffer contents: materializing a program's initial data, and numeric helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/numeric.hpp"
#include "io/load.hpp"
#include "program/program.hpp"

namespace amk {

// The bytes of every buffer of a program, in buffer order.
struct HostBuffers {
  std::vector<std::vector<std::byte>> data;
};

// Builds the initial contents of buffer `index` (zeros, constant, seeded random, inline values,
// .npy, raw file, safetensors tensor). Random contents are a pure function of (seed, dtype,
// element count, distribution): identical on every machine and backend.
[[nodiscard]] std::vector<std::byte> materialize_buffer(const Program& program, uint32_t index,
                                                        const LoadOptions& options = {});
[[nodiscard]] HostBuffers materialize_all(const Program& program, const LoadOptions& options = {});

}  // namespace amk
