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

// `bytes` zeroed bytes. Large ones (8 MiB and up) are first offered to the kernel as transparent
// huge pages (a hint): a decode step's weights are gigabytes of fresh memory, and on a virtual
// machine first-touch page faults in 4 KiB pages cost more than writing the bytes.
[[nodiscard]] std::vector<std::byte> host_bytes(size_t bytes);
// A copy of every buffer, each made by host_bytes.
[[nodiscard]] HostBuffers copy_host_buffers(const HostBuffers& from);

}  // namespace amk
