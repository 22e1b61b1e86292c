// Ahead-of-time VM artifacts: `amk compile -o FILE` writes the cubin FILE and beside it the
// record FILE.json of what it was built for (README "Ahead of time"); `--cubin FILE` reads both
// back and compares the record with what this run would compile, before the cubin reaches the
// driver. Plain data and files only (no CUDA): the CUDA layer fills the records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace amk {

inline constexpr std::string_view kArtifactFormat = "amk.cubin";
inline constexpr uint32_t kArtifactVersion = 1;
// A cubin larger than this is not one amk wrote (the VM's is about a megabyte).
inline constexpr uint64_t kMaxArtifactCubinBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxArtifactRecordBytes = uint64_t{1} << 20;

// What a cubin was built for. Every field but program_fingerprint, cubin_bytes and cubin_sha256
// is compared with the run's own (artifact_mismatches); the cubin serves any program whose VM
// source is the same, so the program's fingerprint is kept for people, not checked.
struct ArtifactRecord {
  std::string arch;         // "sm_90a": --gpu-architecture
  std::string kernel_name;  // "amk_vm"
  uint32_t tma_count = 0;   // CUtensorMap parameters after the program struct
  std::string nvrtc_version;
  std::string amk_version;
  std::string source_fingerprint;  // CompileOutput::source_fingerprint (the cache key)
  std::string program_fingerprint;
  std::vector<std::string> options;  // the NVRTC options, in order
  uint64_t cubin_bytes = 0;
  std::string cubin_sha256;
};

struct LoadedArtifact {
  std::vector<std::byte> cubin;
  ArtifactRecord record;
};

// FILE.json beside FILE.
[[nodiscard]] std::filesystem::path artifact_record_path(const std::filesystem::path& cubin);

// The record as JSON (format and version first).
[[nodiscard]] nlohmann::ordered_json artifact_json(const ArtifactRecord& record);

// Parses a record's text; `where` names the file. Throws Error(io): io.artifact.syntax (at
// `where`, with the byte offset), io.artifact.format (another format or version, at
// `where#/format` or `where#/version`), io.artifact.field (a missing field or one of the wrong
// type, at `where#/FIELD`).
[[nodiscard]] ArtifactRecord parse_artifact_record(std::string_view text, const std::string& where);

// Writes the cubin to `cubin_path`, then the record (its cubin_bytes and cubin_sha256 filled in
// from `cubin`) to FILE.json, each atomically (report/outputs.hpp's write_file_atomic): the
// record last, so one that names a cubin that is not there, or another one, is refused by
// artifact_mismatches. Throws Error(io, io.write).
void write_artifact(const std::filesystem::path& cubin_path, std::span<const std::byte> cubin,
                    ArtifactRecord record);

// Reads FILE and FILE.json. Throws Error(io): io.missing or io.read (at the file's path; a
// missing record names `amk compile -o`), io.too_large, io.artifact.cubin (FILE is not an ELF
// file), or parse_artifact_record's errors.
[[nodiscard]] LoadedArtifact read_artifact(const std::filesystem::path& cubin_path);

// Every way `loaded` is not the artifact `expected` describes, one "FIELD: recorded X, expected
// Y" entry each, in record order; the cubin's own size and sha256 are compared with its record
// too. Empty: it may be loaded.
[[nodiscard]] std::vector<std::string> artifact_mismatches(const LoadedArtifact& loaded,
                                                           const ArtifactRecord& expected);

// Throws Error(device, artifact.mismatch) at `cubin_path` with every entry of
// artifact_mismatches in one line, unless there is none.
void check_artifact(const std::filesystem::path& cubin_path, const LoadedArtifact& loaded,
                    const ArtifactRecord& expected);

}  // namespace amk
