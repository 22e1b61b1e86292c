// The artifact record (FILE.json beside a cubin FILE): writing, reading with located errors, and
// the comparison that decides whether the cubin may be loaded.
#include "report/artifact.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "report/outputs.hpp"

namespace amk {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

// The whole file, refusing a missing one, a folder and one over `limit` bytes. `missing` is the
// message for a file that is not there.
std::string read_limited(const fs::path& path, uint64_t limit, const std::string& missing) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw_io_error("io.missing", path.string(), missing);
  if (!fs::is_regular_file(st)) throw_io_error("io.read", path.string(), "is not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw_io_error("io.read", path.string(), "cannot read its size: " + ec.message());
  if (size > limit)
    throw_io_error("io.too_large", path.string(),
                   "the file is " + std::to_string(size) + " bytes, more than the " +
                       std::to_string(limit) + " amk reads here");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw_io_error("io.read", path.string(), std::string("cannot open: ") + std::strerror(errno));
  std::string data(static_cast<size_t>(size), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (static_cast<uintmax_t>(in.gcount()) != size)
    throw_io_error("io.read", path.string(), "read failed (the file changed while it was read?)");
  return data;
}

// The field `key` of the record, which must exist; `where` is the file.
const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end())
    throw_io_error("io.artifact.field", where + "#/" + key,
                   std::string("the artifact record has no '") + key + "'");
  return *it;
}

[[noreturn]] void wrong_type(const char* key, const std::string& where, const char* expected) {
  throw_io_error("io.artifact.field", where + "#/" + key,
                 std::string("'") + key + "' must be " + expected);
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = field(j, key, where);
  if (!v.is_string()) wrong_type(key, where, "a string");
  return v.get<std::string>();
}

uint64_t unsigned_field(const nlohmann::json& j, const char* key, const std::string& where,
                        uint64_t max) {
  const nlohmann::json& v = field(j, key, where);
  if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
    wrong_type(key, where, ("an integer in 0.." + std::to_string(max)).c_str());
  return v.get<uint64_t>();
}

std::string joined(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + v[i];
  return s + "]";
}

}  // namespace

fs::path artifact_record_path(const fs::path& cubin) { return fs::path(cubin.string() + ".json"); }

ordered_json artifact_json(const ArtifactRecord& r) {
  ordered_json j;
  j["format"] = kArtifactFormat;
  j["version"] = kArtifactVersion;
  j["arch"] = r.arch;
  j["kernel_name"] = r.kernel_name;
  j["tma_count"] = r.tma_count;
  j["nvrtc_version"] = r.nvrtc_version;
  j["amk_version"] = r.amk_version;
  j["source_fingerprint"] = r.source_fingerprint;
  j["program_fingerprint"] = r.program_fingerprint;
  j["options"] = r.options;
  j["cubin_bytes"] = r.cubin_bytes;
  j["cubin_sha256"] = r.cubin_sha256;
  return j;
}

ArtifactRecord parse_artifact_record(std::string_view text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw_io_error("io.artifact.syntax", where,
                   "the artifact record is not JSON (byte " + std::to_string(e.byte) + ")");
  }
  if (!j.is_object())
    throw_io_error("io.artifact.syntax", where, "the artifact record is not a JSON object");
  // Format and version first: a record of another kind or version is named as such, not by the
  // first field it lacks.
  if (const nlohmann::json& f = field(j, "format", where);
      !f.is_string() || f.get<std::string>() != kArtifactFormat)
    throw_io_error("io.artifact.format", where + "#/format",
                   "not an amk artifact record (format must be \"" + std::string(kArtifactFormat) +
                       "\")");
  if (const nlohmann::json& v = field(j, "version", where);
      !v.is_number_unsigned() || v.get<uint64_t>() != kArtifactVersion)
    throw_io_error("io.artifact.format", where + "#/version",
                   "artifact record version " + v.dump() + " is not the one this amk reads (" +
                       std::to_string(kArtifactVersion) + "): compile the program again");
  ArtifactRecord r;
  r.arch = string_field(j, "arch", where);
  r.kernel_name = string_field(j, "kernel_name", where);
  r.tma_count = static_cast<uint32_t>(unsigned_field(j, "tma_count", where, UINT32_MAX));
  r.nvrtc_version = string_field(j, "nvrtc_version", where);
  r.amk_version = string_field(j, "amk_version", where);
  r.source_fingerprint = string_field(j, "source_fingerprint", where);
  r.program_fingerprint = string_field(j, "program_fingerprint", where);
  const nlohmann::json& options = field(j, "options", where);
  if (!options.is_array() ||
      !std::all_of(options.begin(), options.end(), [](const auto& o) { return o.is_string(); }))
    wrong_type("options", where, "an array of strings");
  r.options = options.get<std::vector<std::string>>();
  r.cubin_bytes = unsigned_field(j, "cubin_bytes", where, kMaxArtifactCubinBytes);
  r.cubin_sha256 = string_field(j, "cubin_sha256", where);
  return r;
}

void write_artifact(const fs::path& cubin_path, std::span<const std::byte> cubin,
                    ArtifactRecord record) {
  record.cubin_bytes = cubin.size();
  record.cubin_sha256 = sha256_hex(cubin);
  write_file_atomic(cubin_path, cubin);
  write_text_atomic(artifact_record_path(cubin_path), artifact_json(record).dump(2) + "\n");
}

LoadedArtifact read_artifact(const fs::path& cubin_path) {
  const fs::path record_path = artifact_record_path(cubin_path);
  LoadedArtifact a;
  const std::string bin = read_limited(cubin_path, kMaxArtifactCubinBytes, "no such cubin");
  const std::string text =
      read_limited(record_path, kMaxArtifactRecordBytes,
                   "no artifact record beside the cubin " + cubin_path.string() +
                       " (amk compile PROGRAM -o FILE writes FILE and FILE.json)");
  a.record = parse_artifact_record(text, record_path.string());
  if (bin.size() < sizeof kElfMagic ||
      !std::equal(std::begin(kElfMagic), std::end(kElfMagic),
                  reinterpret_cast<const unsigned char*>(bin.data())))
    throw_io_error("io.artifact.cubin", cubin_path.string(), "not a cubin (no ELF header)");
  a.cubin.resize(bin.size());
  std::memcpy(a.cubin.data(), bin.data(), bin.size());
  return a;
}

std::vector<std::string> artifact_mismatches(const LoadedArtifact& loaded,
                                             const ArtifactRecord& expected) {
  const ArtifactRecord& r = loaded.record;
  std::vector<std::string> out;
  const auto differ = [&](const char* name, const std::string& recorded, const std::string& want,
                          const char* what) {
    if (recorded != want)
      out.push_back(std::string(name) + ": recorded " + recorded + ", expected " + want + " (" +
                    what + ")");
  };
  differ("arch", r.arch, expected.arch, "the device's");
  differ("kernel_name", r.kernel_name, expected.kernel_name, "this amk's entry point");
  differ("tma_count", std::to_string(r.tma_count), std::to_string(expected.tma_count),
         "the program's tensor maps");
  differ("nvrtc_version", r.nvrtc_version, expected.nvrtc_version, "this amk's NVRTC");
  differ("amk_version", r.amk_version, expected.amk_version, "this amk");
  differ("source_fingerprint", r.source_fingerprint, expected.source_fingerprint,
         "the VM source, headers, options and versions this run compiles: another program's ops, "
         "--vm, --lineinfo or amk build differs");
  if (r.options != expected.options) {
    std::vector<std::string> only_recorded, only_expected;
    for (const std::string& o : r.options)
      if (std::find(expected.options.begin(), expected.options.end(), o) == expected.options.end())
        only_recorded.push_back(o);
    for (const std::string& o : expected.options)
      if (std::find(r.options.begin(), r.options.end(), o) == r.options.end())
        only_expected.push_back(o);
    out.push_back("options: recorded " + joined(r.options) + ", expected " +
                  joined(expected.options) + " (only recorded " + joined(only_recorded) +
                  ", only expected " + joined(only_expected) + ")");
  }
  // The file itself against its record: a cubin replaced or rewritten since amk compile.
  if (r.cubin_bytes != loaded.cubin.size())
    out.push_back("cubin_bytes: recorded " + std::to_string(r.cubin_bytes) + ", the file has " +
                  std::to_string(loaded.cubin.size()));
  if (const std::string digest = sha256_hex(loaded.cubin); r.cubin_sha256 != digest)
    out.push_back("cubin_sha256: recorded " + r.cubin_sha256 + ", the file has " + digest);
  return out;
}

void check_artifact(const fs::path& cubin_path, const LoadedArtifact& loaded,
                    const ArtifactRecord& expected) {
  const std::vector<std::string> mismatches = artifact_mismatches(loaded, expected);
  if (mismatches.empty()) return;
  std::string msg = "the cubin was not built for this run (" + std::to_string(mismatches.size()) +
                    " difference(s)): ";
  for (size_t i = 0; i < mismatches.size(); ++i) msg += (i ? "; " : "") + mismatches[i];
  msg += "; compile it again with amk compile PROGRAM --arch " + expected.arch + " -o FILE";
  throw Error(ErrorKind::device, "artifact.mismatch", cubin_path.string(), msg);
}

}  // namespace amk
