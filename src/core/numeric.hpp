// Element conversions shared by the loader (inline values), the CPU backend and the reports.
// f16 and bf16 conversions round to nearest even, like the device's cvt.rn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "program/program.hpp"

namespace amk {

[[nodiscard]] float f16_to_f32(uint16_t h) noexcept;
[[nodiscard]] uint16_t f32_to_f16(float f) noexcept;
[[nodiscard]] float bf16_to_f32(uint16_t h) noexcept;
[[nodiscard]] uint16_t f32_to_bf16(float f) noexcept;

// Element i of an array of dtype t, as double. Integers convert exactly up to 2^53.
[[nodiscard]] double load_element(const std::byte* base, DType t, uint64_t i) noexcept;
// Stores v as dtype t: floats round to nearest even (f32 first, then f16/bf16); integers are
// rounded toward zero and saturated to the type's range (NaN stores 0).
void store_element(std::byte* base, DType t, uint64_t i, double v) noexcept;

// Whether v can be stored as dtype t without saturating (integers:
// an integral value inside the range; floats: finite values up to the type's max, or inf/nan).
[[nodiscard]] bool value_fits(DType t, double v) noexcept;

// Human-readable byte count ("12.5 MiB").
[[nodiscard]] std::string format_bytes(uint64_t bytes);

}  // namespace amk
