// Host-side buffer contents: materializing a program's initial data, and numeric helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

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

// Scalar conversions used by the CPU reference (round to nearest even for f16 / bf16).
[[nodiscard]] float f16_to_f32(uint16_t h) noexcept;
[[nodiscard]] uint16_t f32_to_f16(float f) noexcept;
[[nodiscard]] float bf16_to_f32(uint16_t h) noexcept;
[[nodiscard]] uint16_t f32_to_bf16(float f) noexcept;

// Element i of a buffer of dtype t as double / stored from double (saturating for integers).
[[nodiscard]] double load_element(const std::byte* base, DType t, uint64_t i) noexcept;
void store_element(std::byte* base, DType t, uint64_t i, double v) noexcept;

}  // namespace amk
