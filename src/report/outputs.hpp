// Outputs and reports: .npy files, the manifest, report.json. Every file is written atomically
// (temporary file in the same folder, flush, rename); the manifest is written last.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/host_data.hpp"
#include "core/error.hpp"
#include "program/program.hpp"

namespace amk {

inline constexpr int kReportSchemaVersion = 1;
inline constexpr int kManifestSchemaVersion = 1;

// Writes bytes to `path` atomically: temp file beside it, fsync, rename, fsync the folder.
// On failure the target is untouched, the temp file is removed, and Error(io, "io.write") is
// thrown.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes);
void write_text_atomic(const std::filesystem::path& path, const std::string& text);

// .npy (format 1.0, little endian, C order). bf16 has no numpy dtype: it is widened to f32
// and the manifest records the original dtype.
[[nodiscard]] std::vector<std::byte> encode_npy(DType dtype, std::span<const uint64_t> shape,
                                                std::span<const std::byte> data);
// The dtype a buffer is stored as in its .npy file (bf16 -> f32, others unchanged) and the
// numpy descr of a stored dtype ("<f4", "|u1", ...).
[[nodiscard]] DType npy_stored_dtype(DType dtype) noexcept;
[[nodiscard]] std::string_view npy_descr(DType stored) noexcept;
// File stem for a buffer name: characters outside [A-Za-z0-9_.-] and a leading '.' become '_',
// cut to a length that leaves room for a suffix within NAME_MAX. Collisions are resolved by
// write_outputs.
[[nodiscard]] std::string safe_file_stem(std::string_view name);
// Writes every output buffer (or also the inputs with `include_inputs`, under inputs/) and
// then manifest.json. Returns the manifest.
nlohmann::json write_outputs(const std::filesystem::path& dir, const Program& program,
                             const HostBuffers& buffers, bool include_inputs = false,
                             const HostBuffers* initial = nullptr);

// Program fingerprint: sha256 (hex) of the canonical JSON text of the program. Data files are
// named by path only; their contents are fingerprinted separately by data_fingerprint.
[[nodiscard]] std::string program_fingerprint(const Program& program);
// sha256 (hex) over the initial contents of every buffer, in order.
[[nodiscard]] std::string data_fingerprint(const HostBuffers& buffers);

// report.json (schemas/report.schema.json). The CLI fills what it knows; absent parts are null.
struct RunReport {
  std::string command = "run";  // run | profile | bench
  std::string status = "ok";    // ok | timeout | error | rejected | mismatch
  std::string backend;          // cpu | cuda
  std::string program_path;
  std::string program_name;
  std::string program_fingerprint;
  std::string data_fingerprint;
  std::string target_fingerprint;    // device snapshot fingerprint (cuda)
  std::string artifact_fingerprint;  // compiled kernel fingerprint (cuda)
  uint32_t grid = 0, block = 0;
  uint64_t instructions = 0;
  std::vector<std::pair<std::string, double>> timings_ms;  // phase -> ms, in order
  nlohmann::json device;                                   // DeviceInfo::to_json() or null
  nlohmann::json versions;                                 // amk, nvrtc, driver ...
  nlohmann::json error;        // {kind, code, where, message, detail} or null
  nlohmann::json diagnostics;  // watchdog / fault record or null
  nlohmann::json check;        // --check results or null
  nlohmann::json outputs;      // the manifest or null
  nlohmann::json extra;        // command-specific (profile statistics) or null
  std::string created_utc;     // ISO 8601; empty = the time make_report runs
};
// Keys in the documented order (schemas/outputs.md).
[[nodiscard]] nlohmann::ordered_json make_report(const RunReport& report);
// make_report, pretty-printed, written atomically.
void write_report(const std::filesystem::path& path, const RunReport& report);
// {kind, code, where, message, detail} for RunReport::error.
[[nodiscard]] nlohmann::json error_to_json(const Error& error);
// "YYYY-MM-DDTHH:MM:SSZ" (UTC, whole seconds).
[[nodiscard]] std::string utc_timestamp(std::chrono::system_clock::time_point when);

}  // namespace amk
