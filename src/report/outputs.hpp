// Outputs and reports: .npy files, the manifest, report.json. Every file is written atomically
// (temporary file in the same folder, flush, rename); the manifest is written last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/host_data.hpp"
#include "program/program.hpp"

namespace amk {

inline constexpr int kReportSchemaVersion = 1;
inline constexpr int kManifestSchemaVersion = 1;

// Writes bytes to `path` atomically: temp file beside it, fsync, rename.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes);
void write_text_atomic(const std::filesystem::path& path, const std::string& text);

// .npy (format 1.0, little endian, C order). bf16 has no numpy dtype: it is widened to f32
// and the manifest records the original dtype.
[[nodiscard]] std::vector<std::byte> encode_npy(DType dtype, std::span<const uint64_t> shape,
                                                std::span<const std::byte> data);
struct NpyArray {
  std::string descr;  // e.g. "<f4"
  std::vector<uint64_t> shape;
  bool fortran_order = false;
  std::vector<std::byte> data;  // raw element bytes
};
// Parses a .npy file; `where` names it in errors (code io.npy.*).
[[nodiscard]] NpyArray decode_npy(std::span<const std::byte> bytes, const std::string& where);

// Writes every output buffer (or also the inputs with `include_inputs`, under inputs/) and
// then manifest.json. Returns the manifest.
nlohmann::json write_outputs(const std::filesystem::path& dir, const Program& program,
                             const HostBuffers& buffers, bool include_inputs = false,
                             const HostBuffers* initial = nullptr);

// Program fingerprint: sha256 of the canonical JSON text plus the contents fingerprint of every
// data file it names is not included (paths only). Hex string.
[[nodiscard]] std::string program_fingerprint(const Program& program);

}  // namespace amk
