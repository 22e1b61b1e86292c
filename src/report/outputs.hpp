// Outputs and reports: .npy files, the manifest, report.json. The output folder is replaced as a
// whole (OutputFolder); other files are written atomically (temporary file beside, flush,
// rename).
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

// The output folder, replaced as a whole (schemas/outputs.md, "Replacing the folder"): a new
// folder is built beside DIR under a hidden name, `.DIR.amk-new-<pid>-<random>`, and swapped in
// with one rename, so a reader, a killed run or a failed one sees the complete old outputs or
// the complete new ones.
class OutputFolder {
public:
  // Resolves DIR (symbolic links are followed) and refuses, with Error(usage, "usage.out_dir"),
  // one amk may not replace: not a folder, the current folder or one above it, or a folder that
  // holds anything but an earlier amk run's files. Then removes what killed runs left beside DIR
  // (hidden staging folders of processes that are gone; DIR itself is put back if a run died
  // between the two renames of the fallback) and creates the staging folder, and DIR's parents.
  explicit OutputFolder(const std::filesystem::path& dir);
  ~OutputFolder();  // removes the staging folder unless committed
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  // The folder the outputs go to, resolved; the staging folder that is written instead.
  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  [[nodiscard]] const std::filesystem::path& staging() const noexcept { return staging_; }
  [[nodiscard]] bool committed() const noexcept { return committed_; }
  // DIR.failed-report.json beside DIR as named: where a failed run's report goes.
  [[nodiscard]] std::filesystem::path failed_report_path() const;
  // Syncs the staging folder, checks DIR again (it may have changed during the run), swaps the
  // staging folder in with renameat2(RENAME_EXCHANGE) (a new DIR: RENAME_NOREPLACE), syncs the
  // parent and removes the old contents. Where the filesystem cannot exchange (or `exchange` is
  // false, for tests): DIR -> .DIR.amk-old-<pid>-<random>, staging -> DIR, with DIR absent in
  // between. Throws Error(io, "io.rename") and leaves DIR as it was when a rename fails.
  void commit(bool exchange = true);

private:
  [[nodiscard]] std::filesystem::path hidden_name(std::string_view kind) const;
  void clean_stale() const;

  std::filesystem::path named_;    // absolute, as given (for the failed report)
  std::filesystem::path dir_;      // named_ with symbolic links resolved
  std::filesystem::path staging_;  // .DIR.amk-new-<pid>-<random> beside dir_
  bool committed_ = false;
};

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
// then manifest.json into `folder`, which must hold none of those files (a staging folder).
// `buffers` needs the outputs' contents; the others may be empty. Returns the manifest.
nlohmann::json write_output_files(const std::filesystem::path& folder, const Program& program,
                                  const HostBuffers& buffers, bool include_inputs = false,
                                  const HostBuffers* initial = nullptr);
// write_output_files into an OutputFolder for `dir`, committed: DIR changes as a whole.
nlohmann::json write_outputs(const std::filesystem::path& dir, const Program& program,
                             const HostBuffers& buffers, bool include_inputs = false,
                             const HostBuffers* initial = nullptr);

// Program fingerprint: sha256 (hex) of the canonical JSON text of the program. Data files are
// named by path only; their contents are fingerprinted separately by data_fingerprint
// (backend/initial_data.hpp).
[[nodiscard]] std::string program_fingerprint(const Program& program);

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
  uint32_t passes = 1;      // passes over the program in the launch (a generation's steps)
  uint32_t passes_run = 0;  // those that ran (fewer after a generation's eos); 0: all of them
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

namespace detail {
// Creates `path` (it must not exist), writes, fsyncs and closes it; removes it on failure
// (Error(io, "io.write")). For files in a private staging folder, which no reader sees.
void write_file_new(const std::filesystem::path& path, std::span<const std::byte> bytes);
// fsync of a folder (ignored where the filesystem cannot sync one); Error(io, "io.write").
void sync_folder(const std::filesystem::path& dir);
// rename(2), or renameat2 with RENAME_EXCHANGE / RENAME_NOREPLACE. Returns 0 or the errno
// (ENOSYS where the system has no renameat2).
enum class RenameMode { replace, exchange, no_replace };
[[nodiscard]] int rename_paths(const std::filesystem::path& from, const std::filesystem::path& to,
                               RenameMode mode) noexcept;
}  // namespace detail

}  // namespace amk
