// Host-side buffer contents: materializing a program's initial data, and numeric helpers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
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
// Running out of host memory while building it is Error device `host.memory` at the buffer.
[[nodiscard]] std::vector<std::byte> materialize_buffer(const Program& program, uint32_t index,
                                                        const LoadOptions& options = {});
// Buffer `index`'s bytes; a shape that overflows or exceeds kMaxBufferBytes is Error program
// `init.size` at its shape.
[[nodiscard]] uint64_t checked_buffer_bytes(const Program& program, uint32_t index);
// One element of a constant init in the buffer's dtype (little endian, the rest zero); a value the
// dtype cannot hold is Error program `init.value`.
[[nodiscard]] std::array<std::byte, 8> constant_element(const Program& program, uint32_t index);
// Every buffer, after check_host_memory against host_memory_available().
[[nodiscard]] HostBuffers materialize_all(const Program& program, const LoadOptions& options = {});

// Bytes of memory this process can still take: Linux's MemAvailable (MemFree + Buffers + Cached
// on kernels without it), capped by the cgroup's memory limit less its usage. nullopt where
// neither can be read.
[[nodiscard]] std::optional<uint64_t> host_memory_available();
// Refuses, before anything is allocated, a program whose buffers need more host memory than
// `available` (nullopt: unknown, nothing refused): Error device (exit 5) `host.memory` at the
// biggest buffer, naming the bytes needed, the bytes available and that buffer.
// `counted`: the buffers that take host memory (empty: all).
void check_host_memory(const Program& program, std::optional<uint64_t> available,
                       const std::vector<bool>& counted = {});

// `bytes` zeroed bytes. Large ones (8 MiB and up) are first offered to the kernel as transparent
// huge pages (a hint): a decode step's weights are gigabytes of fresh memory, and on a virtual
// machine first-touch page faults in 4 KiB pages cost more than writing the bytes.
[[nodiscard]] std::vector<std::byte> host_bytes(size_t bytes);
// A copy of every buffer, each made by host_bytes.
[[nodiscard]] HostBuffers copy_host_buffers(const HostBuffers& from);

}  // namespace amk
