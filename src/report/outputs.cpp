// The output folder: one .npy per output buffer (optionally inputs/ with the initial contents
// of the other buffers), then manifest.json, written into a staging folder beside DIR that
// replaces DIR with one rename. Format and rules: schemas/outputs.md.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
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
constexpr std::string_view kReportName = "report.json";
constexpr std::string_view kTempPrefix = ".amk-tmp-";  // write_file_atomic's temporary files
// Room in NAME_MAX for ".", ".amk-new-", a pid and 16 hex digits around DIR's name.
constexpr size_t kMaxHiddenStem = 200;
// A manifest or report larger than this is not one amk wrote.
constexpr uintmax_t kMaxOwnedJson = uintmax_t{64} << 20;

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

// `outputs_only`: the other buffers may be left empty (a GPU run downloads its outputs only).
void check_buffers(const Program& program, const HostBuffers& buffers, const char* which,
                   bool outputs_only) {
  if (buffers.data.size() != program.buffers.size())
    throw Error(ErrorKind::internal, "outputs.buffers", which,
                std::to_string(buffers.data.size()) + " buffers given, the program has " +
                    std::to_string(program.buffers.size()));
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    if (outputs_only && !program.buffers[i].output && buffers.data[i].empty()) continue;
    if (buffers.data[i].size() != program.buffers[i].bytes())
      throw Error(ErrorKind::internal, "outputs.buffers", which,
                  "buffer '" + program.buffers[i].name + "' has " +
                      std::to_string(buffers.data[i].size()) + " bytes, expected " +
                      std::to_string(program.buffers[i].bytes()));
  }
}

void check_arguments(const Program& program, const HostBuffers& buffers, bool include_inputs,
                     const HostBuffers* initial) {
  check_buffers(program, buffers, "buffers", true);
  if (include_inputs) {
    if (initial == nullptr)
      throw Error(ErrorKind::internal, "outputs.inputs", "",
                  "include_inputs needs the initial buffer contents");
    check_buffers(program, *initial, "initial", false);
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

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whether `path` is a regular file of JSON, an object with every key in `keys`: how amk tells
// its own manifest.json and report.json from a user's file of the same name.
bool is_amk_json(const std::filesystem::path& path, std::initializer_list<const char*> keys) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec)) ||
      std::filesystem::file_size(path, ec) > kMaxOwnedJson || ec)
    return false;
  std::ifstream in(path, std::ios::binary);
  const nlohmann::json j = nlohmann::json::parse(std::istreambuf_iterator<char>(in),
                                                 std::istreambuf_iterator<char>(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  return std::all_of(keys.begin(), keys.end(), [&](const char* k) { return j.contains(k); });
}

// A file amk writes into the output folder (or an older amk left there): a .npy, or a
// temporary file of write_file_atomic. Symbolic links are never amk's.
bool is_amk_file(const std::filesystem::directory_entry& e) {
  std::error_code ec;
  const std::string name = e.path().filename().string();
  return e.is_regular_file(ec) && !e.is_symlink(ec) &&
         (ends_with(name, kNpyExt) || starts_with(name, kTempPrefix));
}

// Why amk may not replace `dir` (an existing folder, symbolic links resolved): the first entry
// that is not an earlier run's, or that the folder holds no amk manifest or report. Empty when
// it may: it is empty, or it holds amk's manifest.json or report.json and only files amk
// writes (.npy files, inputs/ with .npy files, temporary files of an older amk).
std::string foreign_entry(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  bool empty = true, owned = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    empty = false;
    const fs::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    if (name == kManifestName &&
        is_amk_json(e.path(), {"schema_version", "program_fingerprint", "outputs"})) {
      owned = true;
    } else if (name == kReportName &&
               is_amk_json(e.path(), {"schema_version", "amk_version", "command", "status"})) {
      owned = true;
    } else if (name == kInputsDir && e.is_directory(ec) && !e.is_symlink(ec)) {
      for (fs::directory_iterator in(e.path(), ec); !ec && in != end; in.increment(ec))
        if (!is_amk_file(*in))
          return "'" + std::string(kInputsDir) + "/" + in->path().filename().string() +
                 "' is not an amk output";
    } else if (!is_amk_file(e)) {
      return "'" + name + "' is not an amk output";
    }
  }
  if (ec) return "cannot list it: " + ec.message();
  if (!empty && !owned) return "it holds no manifest.json or report.json of amk";
  return {};
}

[[noreturn]] void refuse_out_dir(const std::filesystem::path& dir, const std::string& why) {
  throw Error(ErrorKind::usage, "usage.out_dir", dir.string(),
              "amk replaces the whole output folder, so it writes only to a new or empty folder "
              "or one that holds an earlier run's outputs: " +
                  why);
}

// kill(pid, 0): gone when there is no such process (EPERM: it exists, owned by someone else).
bool process_alive(long pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::string random_hex() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 0; i < 16; ++i) s[i] = kHex[(v >> (4 * (15 - i))) & 0xf];
  return s;
}

[[noreturn]] void throw_rename_error(const std::filesystem::path& dir, const std::string& what,
                                     int err) {
  std::string msg = what + ": " + std::system_category().message(err);
  if (err == EXDEV || err == EBUSY) msg += " (is the output folder a mount point?)";
  throw Error(ErrorKind::io, "io.rename", dir.string(), msg);
}

// Writes one buffer's .npy and returns its manifest entry.
nlohmann::ordered_json write_buffer(const std::filesystem::path& dir, const std::string& rel_file,
                                    const Buffer& buffer, const std::vector<std::byte>& data) {
  const std::vector<std::byte> npy = encode_npy(buffer.dtype, buffer.shape, data);
  detail::write_file_new(dir / rel_file, npy);
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
  if (s.empty())
    s = "_";
  else if (s.front() == '.')
    s.front() = '_';
  return s;
}

OutputFolder::OutputFolder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  named_ = fs::absolute(dir, ec).lexically_normal();
  if (!ec && !named_.has_filename()) named_ = named_.parent_path();  // "out/" -> "out"
  if (!ec) dir_ = fs::weakly_canonical(named_, ec);
  if (ec) refuse_out_dir(dir, "cannot resolve the path: " + ec.message());
  // Swapping the current folder (or one above it) would leave the shell in a deleted folder.
  const fs::path cwd = fs::weakly_canonical(fs::current_path(ec), ec);
  if (!dir_.has_parent_path() || dir_ == dir_.root_path() ||
      (!ec && std::mismatch(dir_.begin(), dir_.end(), cwd.begin(), cwd.end()).first == dir_.end()))
    refuse_out_dir(dir, "it is the current folder or holds it; name a folder below it");
  const fs::file_status st = fs::status(dir_, ec);
  if (fs::exists(st) && !fs::is_directory(st)) refuse_out_dir(dir, "it is not a folder");
  if (fs::is_directory(st)) {
    const std::string why = foreign_entry(dir_);
    if (!why.empty()) refuse_out_dir(dir, why);
  }

  make_directory(dir_.parent_path());
  clean_stale();
  // The random part keeps two runs of one process (or a reused pid) apart.
  for (int attempt = 0;; ++attempt) {
    staging_ = hidden_name("new");
    if (fs::create_directory(staging_, ec)) break;
    if ((ec && ec != std::errc::file_exists) || attempt == 8)
      throw Error(ErrorKind::io, "io.mkdir", staging_.string(),
                  "cannot create the staging folder: " +
                      (ec ? ec.message() : std::string("it exists")));
  }
}

OutputFolder::~OutputFolder() {
  if (committed_ || staging_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(staging_, ec);
}

std::filesystem::path OutputFolder::failed_report_path() const {
  return named_.parent_path() / (named_.filename().string() + ".failed-report.json");
}

std::filesystem::path OutputFolder::hidden_name(std::string_view kind) const {
  const std::string stem = dir_.filename().string().substr(0, kMaxHiddenStem);
  return dir_.parent_path() / ("." + stem + ".amk-" + std::string(kind) + "-" +
                               std::to_string(::getpid()) + "-" + random_hex());
}

// Hidden siblings `.DIR.amk-new-<pid>-*` / `.DIR.amk-old-<pid>-*` whose process is gone: a
// staging folder or old contents a killed run left. An old folder comes back as DIR when DIR is
// missing (a run died between the two renames of the fallback); the rest is removed. Folders
// of live processes (a concurrent run into the same DIR) are left alone.
void OutputFolder::clean_stale() const {
  namespace fs = std::filesystem;
  const std::string prefix = "." + dir_.filename().string().substr(0, kMaxHiddenStem) + ".amk-";
  std::vector<fs::path> old_folders, other;
  std::error_code ec;
  for (fs::directory_iterator it(dir_.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!starts_with(name, prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    const bool is_old = starts_with(rest, "old-");
    if (!is_old && !starts_with(rest, "new-")) continue;
    const std::string_view pid_text = rest.substr(4, rest.find('-', 4) - 4);
    if (pid_text.empty() ||
        !std::all_of(pid_text.begin(), pid_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const long pid = pid_text.size() > 9 ? -1 : std::stol(std::string(pid_text));
    if (pid == ::getpid() || process_alive(pid)) continue;
    (is_old ? old_folders : other).push_back(it->path());
  }
  for (const fs::path& p : old_folders) {
    if (!fs::exists(fs::symlink_status(dir_, ec)) &&
        detail::rename_paths(p, dir_, detail::RenameMode::replace) == 0)
      continue;
    other.push_back(p);
  }
  // Best effort: what cannot be removed now is tried again by the next run.
  for (const fs::path& p : other) fs::remove_all(p, ec);
}

void OutputFolder::commit(bool exchange) {
  namespace fs = std::filesystem;
  using detail::RenameMode;
  if (committed_)
    throw Error(ErrorKind::internal, "outputs.commit", dir_.string(), "committed twice");
  std::error_code ec;
  for (fs::directory_iterator it(staging_, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) detail::sync_folder(it->path());
  detail::sync_folder(staging_);

  fs::path old;  // where DIR's old contents are after the swap
  // A DIR that appears or vanishes between the check and the rename is looked at again.
  for (int attempt = 0; old.empty(); ++attempt) {
    if (attempt == 3) throw_rename_error(dir_, "the output folder keeps changing", EAGAIN);
    const fs::file_status st = fs::symlink_status(dir_, ec);
    if (!fs::exists(st)) {
      int err = detail::rename_paths(staging_, dir_, RenameMode::no_replace);
      if (err == EINVAL || err == ENOSYS || err == ENOTSUP)
        err = detail::rename_paths(staging_, dir_, RenameMode::replace);
      if (err == 0) break;
      if (err == EEXIST || err == ENOTEMPTY) continue;
      throw_rename_error(dir_, "cannot rename " + staging_.string() + " to the output folder", err);
    }
    if (!fs::is_directory(st)) refuse_out_dir(dir_, "it is not a folder");
    const std::string why = foreign_entry(dir_);
    if (!why.empty()) refuse_out_dir(dir_, why);
    struct stat dir_stat {};
    if (::stat(dir_.c_str(), &dir_stat) == 0)  // the new folder keeps DIR's permissions
      (void)::chmod(staging_.c_str(), dir_stat.st_mode & 07777);

    int err = exchange ? detail::rename_paths(staging_, dir_, RenameMode::exchange) : ENOSYS;
    if (err == 0) {
      old = staging_;
    } else if (err == ENOENT) {
      continue;
    } else if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
      // No RENAME_EXCHANGE here: DIR is absent between these two renames; a run killed there
      // leaves it at the hidden old name, and the next run puts it back (clean_stale).
      const fs::path aside = hidden_name("old");
      err = detail::rename_paths(dir_, aside, RenameMode::replace);
      if (err == ENOENT) continue;
      if (err != 0) throw_rename_error(dir_, "cannot move the old output folder aside", err);
      err = detail::rename_paths(staging_, dir_, RenameMode::replace);
      if (err != 0) {
        (void)detail::rename_paths(aside, dir_, RenameMode::replace);
        throw_rename_error(dir_, "cannot rename " + staging_.string() + " to the output folder",
                           err);
      }
      old = aside;
    } else {
      throw_rename_error(dir_, "cannot exchange " + staging_.string() + " with the output folder",
                         err);
    }
  }
  committed_ = true;
  try {
    detail::sync_folder(dir_.parent_path());
  } catch (const Error&) {
    // The swap is done and its data synced; only its durability across a crash is at stake.
  }
  // Best effort: a leftover carries this process's id and goes with the next run's clean_stale.
  if (!old.empty()) fs::remove_all(old, ec);
}

nlohmann::json write_outputs(const std::filesystem::path& dir, const Program& program,
                             const HostBuffers& buffers, bool include_inputs,
                             const HostBuffers* initial) {
  check_arguments(program, buffers, include_inputs, initial);
  OutputFolder folder(dir);
  nlohmann::json manifest =
      write_output_files(folder.staging(), program, buffers, include_inputs, initial);
  folder.commit();
  return manifest;
}

nlohmann::json write_output_files(const std::filesystem::path& dir, const Program& program,
                                  const HostBuffers& buffers, bool include_inputs,
                                  const HostBuffers* initial) {
  check_arguments(program, buffers, include_inputs, initial);

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
  const std::string text =
      manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  detail::write_file_new(dir / kManifestName,
                         std::as_bytes(std::span<const char>(text.data(), text.size())));
  return manifest;
}

std::string program_fingerprint(const Program& program) {
  return sha256_hex(program_to_json(program));
}

}  // namespace amk
