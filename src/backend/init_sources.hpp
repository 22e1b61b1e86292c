// The sources of a buffer's initial contents, one function each, independent of the program
// loader so they can be tested on hand-built files. materialize_buffer (host_data.hpp) resolves
// the path and dispatches here. The rules are documented in schemas/init.md.
//
// Every function returns exactly elements * dtype_size(dtype) bytes or throws amk::Error:
// kind io (`io.missing`, `io.read`) when a file cannot be read, kind program (`init.*`) when
// its contents do not fit the buffer. `where` is the program pointer used in errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "program/program.hpp"

namespace amk {

// ---- seeded random (counter-based: element i is computed independently) ----

// The SplitMix64 output function (Steele, Lea, Flood 2014).
[[nodiscard]] uint64_t splitmix64_mix(uint64_t z) noexcept;
// Draw k of the stream for `seed`: output k (0-based) of the standard SplitMix64 generator whose
// state starts at splitmix64_mix(seed), i.e. mix(mix(seed) + (k + 1) * 0x9E3779B97F4A7C15).
[[nodiscard]] uint64_t random_bits(uint64_t seed, uint64_t k) noexcept;
// The top 53 bits of draw k as a double in [0, 1).
[[nodiscard]] double random_unit(uint64_t seed, uint64_t k) noexcept;
// Element i before it is stored (the double that store_element rounds to the dtype).
[[nodiscard]] double random_value(const BufferInit& init, DType dtype, uint64_t i) noexcept;

// Checks the init's parameters (`init.random.range`, `init.random.std`) and fills. With a
// window (init.window_of), `shape` is the buffer's and element i is the tensor's element
// window_element(init, shape, i): the block of the tensor that the whole fill would make.
[[nodiscard]] std::vector<std::byte> random_fill(const BufferInit& init, DType dtype,
                                                 uint64_t elements, const std::string& where,
                                                 const std::vector<uint64_t>& shape = {});

// ---- windows ----

// Element i (row-major) of a buffer of shape `shape` whose init reads the block at
// init.window_at of a tensor of shape init.window_of: that element's index in the tensor
// (i itself without a window).
[[nodiscard]] uint64_t window_element(const BufferInit& init, const std::vector<uint64_t>& shape,
                                      uint64_t i) noexcept;
// The window's block of `tensor` (the whole tensor's elements, `item` bytes each).
[[nodiscard]] std::vector<std::byte> window_gather(const BufferInit& init,
                                                   const std::vector<uint64_t>& shape,
                                                   const std::vector<std::byte>& tensor,
                                                   size_t item);

// ---- files ----

// Where a file-backed init's bytes lie: `bytes` bytes at `offset` of `file`, every size checked
// against the file's real size. The bytes are the buffer's contents as they are.
struct FileRange {
  std::filesystem::path file;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
// The locate_* functions check a file as its read_* does and return where the bytes lie;
// read_* reads them. locate_npy returns nullopt for a file read with conversion (f32 into bf16).
[[nodiscard]] std::optional<FileRange> locate_npy(const std::filesystem::path& file, DType dtype,
                                                  uint64_t elements, const std::string& where);
[[nodiscard]] FileRange locate_raw(const std::filesystem::path& file, uint64_t offset, DType dtype,
                                   uint64_t elements, const std::string& where);
[[nodiscard]] FileRange locate_safetensors(const std::filesystem::path& file,
                                           const std::string& tensor, DType dtype,
                                           uint64_t elements, const std::string& where);

// A .npy file (format 1.0, 2.0 or 3.0). Codes init.npy.*.
[[nodiscard]] std::vector<std::byte> read_npy(const std::filesystem::path& file, DType dtype,
                                              uint64_t elements, const std::string& where);
// elements * dtype_size(dtype) raw little-endian bytes at byte `offset`. Code init.raw.range.
[[nodiscard]] std::vector<std::byte> read_raw(const std::filesystem::path& file, uint64_t offset,
                                              DType dtype, uint64_t elements,
                                              const std::string& where);
// Tensor `tensor` of a .safetensors file. Codes init.safetensors.*.
[[nodiscard]] std::vector<std::byte> read_safetensors(const std::filesystem::path& file,
                                                      const std::string& tensor, DType dtype,
                                                      uint64_t elements, const std::string& where);

// Largest safetensors JSON header accepted (the format's reference implementation uses 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
// Nesting a .safetensors header may have (the format uses three levels; __metadata__ two).
inline constexpr int kMaxSafetensorsDepth = 8;
// Largest .npy header accepted (numpy writes a few hundred bytes).
inline constexpr uint64_t kMaxNpyHeader = 1u << 20;

}  // namespace amk
