// The output folder: one .npy per output buffer (optionally inputs/ with the initial contents
// of the other buffers), then manifest.json. Each file is replaced atomically and the manifest
// goes last, so a manifest never names a file that is not complete. Format: schemas/outputs.md.
#include <algorithm>
#include <cctype>
#include <set>
#include <system_error>

#include "core/hash.hpp"
#include "io/load.hpp"
#include "report/outputs.hpp"

namespace amk {
namespace {

// NAME_MAX is 255 on every filesystem we target; leave room for "_<n>" and ".npy".
constexpr size_t kMaxStem = 240;
constexpr std::string_view kNpyExt = ".npy";
constexpr std::string_view kInputsDir = "inputs";
constexpr std::string_view kManifestName = "manifest.json";

bool is_safe_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Assigns each listed buffer a unique file name. Names that are already safe keep their name;
// the rest take the sanitized stem, or stem_2, stem_3 ... Compared without case so that the
// folder also works on case-insensitive filesystems.
std::vector<std::string> assign_file_names(const Program& program,
                                           const std::vector<uint32_t>& indices) {
  std::vector<std::string> names(indices.size());
  std::set<std::string> used;
  std::vector<size_t> pending;
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::string& name = program.buffers[indices[i]].name;
    std::string stem = safe_file_stem(name);
    std::string file = stem + std::string(kNpyExt);
    if (stem == name && used.insert(lower(file)).second)
      names[i] = std::move(file);
    else
      pending.push_back(i);
  }
  for (size_t i : pending) {
    const std::string stem = safe_file_stem(program.buffers[indices[i]].name);
    std::string file = stem + std::string(kNpyExt);
    for (uint64_t n = 2; !used.insert(lower(file)).second; ++n)
      file = stem + "_" + std::to_string(n) + std::string(kNpyExt);
    names[i] = std::move(file);
  }
  return names;
}

void check_buffers(const Program& program, const HostBuffers& buffers, const char* which) {
  if (buffers.data.size() != program.buffers.size())
    throw Error(ErrorKind::internal, "outputs.buffers", which,
                std::to_string(buffers.data.size()) + " buffers given, the program has " +
                    std::to_string(program.buffers.size()));
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    if (buffers.data[i].size() != program.buffers[i].bytes())
      throw Error(ErrorKind::internal, "outputs.buffers", which,
                  "buffer '" + program.buffers[i].name + "' has " +
                      std::to_string(buffers.data[i].size()) + " bytes, expected " +
                      std::to_string(program.buffers[i].bytes()));
  }
}

void make_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec && !std::filesystem::is_directory(dir, ec))
    ec = std::make_error_code(std::errc::not_a_directory);
  if (ec)
    throw Error(ErrorKind::io, "io.mkdir", dir.string(), "cannot create folder: " + ec.message());
}

// Writes one buffer's .npy and returns its manifest entry.
nlohmann::ordered_json write_buffer(const std::filesystem::path& dir, const std::string& rel_file,
                                    const Buffer& buffer, const std::vector<std::byte>& data) {
  const std::vector<std::byte> npy = encode_npy(buffer.dtype, buffer.shape, data);
  write_file_atomic(dir / rel_file, npy);
  nlohmann::ordered_json e;
  e["name"] = buffer.name;
  e["file"] = rel_file;
  e["dtype"] = dtype_name(buffer.dtype);
  e["stored_dtype"] = dtype_name(npy_stored_dtype(buffer.dtype));
  e["shape"] = buffer.shape;
  e["elements"] = buffer.elements();
  e["bytes"] = npy.size();
  e["sha256"] = sha256_hex(npy);
  return e;
}

}  // namespace

std::string safe_file_stem(std::string_view name) {
  std::string s(name.substr(0, kMaxStem));
  for (char& c : s)
    if (!is_safe_char(c)) c = '_';
  // No hidden files, and never "." or "..".
  if (s.empty() || s.front() == '.') s = "_" + s.substr(s.empty() ? 0 : 1);
  return s;
}

nlohmann::json write_outputs(const std::filesystem::path& dir, const Program& program,
                             const HostBuffers& buffers, bool include_inputs,
                             const HostBuffers* initial) {
  check_buffers(program, buffers, "buffers");
  if (include_inputs) {
    if (initial == nullptr)
      throw Error(ErrorKind::internal, "outputs.inputs", "",
                  "include_inputs needs the initial buffer contents");
    check_buffers(program, *initial, "initial");
  }

  std::vector<uint32_t> outputs, inputs;
  for (uint32_t i = 0; i < program.buffers.size(); ++i) {
    if (program.buffers[i].output)
      outputs.push_back(i);
    else if (include_inputs)
      inputs.push_back(i);
  }
  // One namespace for both folders keeps every file name in the manifest unique on its own.
  std::vector<uint32_t> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  const std::vector<std::string> files = assign_file_names(program, all);

  make_directory(dir);
  if (include_inputs) make_directory(dir / kInputsDir);

  nlohmann::ordered_json manifest;
  manifest["schema_version"] = kManifestSchemaVersion;
  manifest["program"] = program.name;
  manifest["program_fingerprint"] = program_fingerprint(program);
  manifest["outputs"] = nlohmann::ordered_json::array();
  manifest["inputs"] = nlohmann::ordered_json::array();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const uint32_t i = outputs[k];
    manifest["outputs"].push_back(write_buffer(dir, files[k], program.buffers[i], buffers.data[i]));
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    const uint32_t i = inputs[k];
    const std::string rel = std::string(kInputsDir) + "/" + files[outputs.size() + k];
    manifest["inputs"].push_back(write_buffer(dir, rel, program.buffers[i], initial->data[i]));
  }
  // The program name comes from the user's file (.amkb bytes need not be UTF-8).
  write_text_atomic(dir / kManifestName,
                    manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return manifest;
}

std::string program_fingerprint(const Program& program) {
  return sha256_hex(program_to_json(program));
}

std::string data_fingerprint(const HostBuffers& buffers) {
  Sha256 h;
  for (const auto& b : buffers.data) {
    // Sizes are hashed so that moving bytes between adjacent buffers changes the fingerprint.
    std::byte size_le[8];
    const uint64_t n = b.size();
    for (int k = 0; k < 8; ++k) size_le[k] = static_cast<std::byte>((n >> (8 * k)) & 0xff);
    h.update(std::span<const std::byte>(size_le, 8));
    h.update(std::span<const std::byte>(b.data(), b.size()));
  }
  return h.finish_hex();
}

}  // namespace amk
