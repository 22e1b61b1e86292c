// compile_vm and the cubin cache behind it.
#include "cuda/cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <system_error>

#include "amk_abi.h"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "cuda/codegen.hpp"
#include "cuda/embedded.hpp"
#include "cuda/nvrtc.hpp"

namespace amk {
namespace fs = std::filesystem;
namespace {

constexpr size_t kElfHeaderBytes = 64;
constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

// Length-prefixed, so no two different inputs hash the same stream.
void hash_field(Sha256& h, std::string_view text) {
  const std::string len = std::to_string(text.size()) + ":";
  h.update(len);
  h.update(text);
}

bool looks_like_cubin(const std::vector<std::byte>& bytes) {
  return bytes.size() >= kElfHeaderBytes &&
         std::equal(std::begin(kElfMagic), std::end(kElfMagic),
                    reinterpret_cast<const unsigned char*>(bytes.data()));
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return data;
}

// Writes `data` to a temporary file beside `path`, flushes, then renames over `path`.
bool write_atomically(const fs::path& path, std::string_view data) {
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

// An exclusive flock on `<key>.lock`, released on destruction. Not held if the directory cannot
// take it (read-only cache): the caller then compiles without storing.
class CacheLock {
public:
  explicit CacheLock(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;
  ~CacheLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  [[nodiscard]] bool held() const noexcept { return fd_ >= 0; }

private:
  int fd_ = -1;
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& o : v) {
    if (!s.empty()) s += ' ';
    s += o;
  }
  return s;
}

// ELF64 little endian, as NVRTC writes cubins: the fields read here, at their offsets.
constexpr size_t kShoffAt = 0x28, kShentsizeAt = 0x3A, kShnumAt = 0x3C, kShstrndxAt = 0x3E;
// .nv.info.<kernel> records (the attribute format and the parameter attribute) as cuobjdump
// names them: EIFMT_SVAL, EIATTR_KPARAM_INFO.
constexpr uint8_t kEifmtSval = 4, kEiattrKparamInfo = 0x17;
constexpr size_t kSectionBytes = 64, kSymbolBytes = 24;
constexpr uint32_t kShtSymtab = 2;
constexpr uint8_t kSttFunc = 2;
constexpr uint8_t kStoCudaEntry = 0x10;  // st_other of a __global__ function

template <typename T>
T read_le(const std::vector<std::byte>& b, uint64_t at) {
  T v{};
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

}  // namespace

bool cubin_has_entry(const std::vector<std::byte>& cubin, std::string_view name) {
  if (!looks_like_cubin(cubin)) return false;
  const uint64_t size = cubin.size();
  const auto shoff = read_le<uint64_t>(cubin, kShoffAt);
  const auto shentsize = read_le<uint16_t>(cubin, kShentsizeAt);
  const auto shnum = read_le<uint16_t>(cubin, kShnumAt);
  if (shentsize != kSectionBytes || shoff > size || shnum > (size - shoff) / kSectionBytes)
    return false;
  auto section = [&](uint64_t i) { return shoff + i * kSectionBytes; };
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint64_t s = section(i);
    if (read_le<uint32_t>(cubin, s + 4) != kShtSymtab) continue;
    const auto off = read_le<uint64_t>(cubin, s + 0x18);
    const auto bytes = read_le<uint64_t>(cubin, s + 0x20);
    const auto link = read_le<uint32_t>(cubin, s + 0x28);  // the symbols' string table
    if (off > size || bytes > size - off || link >= shnum) return false;
    const auto str_off = read_le<uint64_t>(cubin, section(link) + 0x18);
    const auto str_bytes = read_le<uint64_t>(cubin, section(link) + 0x20);
    if (str_off > size || str_bytes > size - str_off) return false;
    const std::string_view strings(reinterpret_cast<const char*>(cubin.data()) + str_off,
                                   str_bytes);
    for (uint64_t sym = off; sym + kSymbolBytes <= off + bytes; sym += kSymbolBytes) {
      const auto name_at = read_le<uint32_t>(cubin, sym);
      const auto info = read_le<uint8_t>(cubin, sym + 4);
      const auto other = read_le<uint8_t>(cubin, sym + 5);
      if ((info & 0xF) != kSttFunc || (other & kStoCudaEntry) == 0 || name_at >= strings.size())
        continue;
      const std::string_view sym_name = strings.substr(name_at);
      if (sym_name.substr(0, sym_name.find('\0')) == name) return true;
    }
  }
  return false;
}

std::optional<std::vector<KernelParam>> cubin_kernel_params(const std::vector<std::byte>& cubin,
                                                            std::string_view name) {
  if (!looks_like_cubin(cubin)) return std::nullopt;
  const uint64_t size = cubin.size();
  const auto shoff = read_le<uint64_t>(cubin, kShoffAt);
  const auto shentsize = read_le<uint16_t>(cubin, kShentsizeAt);
  const auto shnum = read_le<uint16_t>(cubin, kShnumAt);
  const auto shstrndx = read_le<uint16_t>(cubin, kShstrndxAt);
  if (shentsize != kSectionBytes || shoff > size || shnum > (size - shoff) / kSectionBytes ||
      shstrndx >= shnum)
    return std::nullopt;
  auto section = [&](uint64_t i) { return shoff + i * kSectionBytes; };
  const auto names_off = read_le<uint64_t>(cubin, section(shstrndx) + 0x18);
  const auto names_bytes = read_le<uint64_t>(cubin, section(shstrndx) + 0x20);
  if (names_off > size || names_bytes > size - names_off) return std::nullopt;
  const std::string_view names(reinterpret_cast<const char*>(cubin.data()) + names_off,
                               names_bytes);
  const std::string wanted = ".nv.info." + std::string(name);
  for (uint64_t i = 0; i < shnum; ++i) {
    const auto name_at = read_le<uint32_t>(cubin, section(i));
    if (name_at >= names.size()) continue;
    const std::string_view sec_name = names.substr(name_at);
    if (sec_name.substr(0, sec_name.find('\0')) != wanted) continue;
    const auto off = read_le<uint64_t>(cubin, section(i) + 0x18);
    const auto bytes = read_le<uint64_t>(cubin, section(i) + 0x20);
    if (off > size || bytes > size - off) return std::nullopt;
    // Attribute records: format byte, attribute byte, then a 2-byte value (EIFMT_HVAL) or a
    // 2-byte length and that many bytes (EIFMT_SVAL). A parameter is EIATTR_KPARAM_INFO: index
    // u32, ordinal u16, offset u16, and a word whose top 14 bits are the size in bytes.
    std::vector<KernelParam> params;
    for (uint64_t at = off; at + 4 <= off + bytes;) {
      const auto format = read_le<uint8_t>(cubin, at);
      const auto attribute = read_le<uint8_t>(cubin, at + 1);
      const auto value = read_le<uint16_t>(cubin, at + 2);
      if (format != kEifmtSval) {
        at += 4;
        continue;
      }
      if (value > off + bytes - at - 4) return std::nullopt;
      if (attribute == kEiattrKparamInfo && value >= 12)
        params.push_back({read_le<uint16_t>(cubin, at + 8), read_le<uint16_t>(cubin, at + 10),
                          read_le<uint32_t>(cubin, at + 12) >> 18});
      at += 4 + value;
    }
    std::sort(params.begin(), params.end(),
              [](const KernelParam& a, const KernelParam& b) { return a.ordinal < b.ordinal; });
    for (size_t k = 0; k < params.size(); ++k)
      if (params[k].ordinal != k) return std::nullopt;  // not the one list of parameters
    return params;
  }
  return std::nullopt;
}

std::optional<fs::path> resolve_cache_dir(const CompileOptions& options) {
  if (options.cache_dir) return *options.cache_dir;
  if (const char* d = std::getenv("AMK_CACHE_DIR"); d != nullptr && *d != '\0') return fs::path(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return fs::path(x) / "amk";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return fs::path(home) / ".cache" / "amk";
  return std::nullopt;
}

std::string cubin_cache_key(const std::string& source, const std::vector<std::string>& options,
                            const std::string& arch, const std::string& nvrtc_version,
                            const std::string& generator) {
  Sha256 h;
  hash_field(h, "amk.cubin-cache");
  hash_field(h, std::to_string(kCubinCacheVersion) + "/" + generator);
  hash_field(h, std::to_string(AMK_ABI_VERSION));
  hash_field(h, arch);
  hash_field(h, nvrtc_version);
  hash_field(h, source);
  std::vector<EmbeddedFile> files(embedded_kernel_files().begin(), embedded_kernel_files().end());
  std::sort(files.begin(), files.end(),
            [](const EmbeddedFile& a, const EmbeddedFile& b) { return a.name < b.name; });
  hash_field(h, std::to_string(files.size()));
  for (const EmbeddedFile& f : files) {
    hash_field(h, f.name);
    hash_field(h, f.text);
  }
  std::vector<std::string> sorted = options;
  std::sort(sorted.begin(), sorted.end());
  hash_field(h, std::to_string(sorted.size()));
  for (const std::string& o : sorted) hash_field(h, o);
  return h.finish_hex();
}

std::optional<CachedCubin> cache_load(const fs::path& dir, const std::string& key) {
  const auto meta_text = read_file(dir / (key + ".json"));
  if (!meta_text) return std::nullopt;
  const auto bin = read_file(dir / (key + ".cubin"));
  if (!bin) return std::nullopt;
  const nlohmann::json meta = nlohmann::json::parse(*meta_text, nullptr, false);
  if (meta.is_discarded() || !meta.is_object()) return std::nullopt;
  const auto bytes = meta.find("cubin_bytes");
  const auto digest = meta.find("cubin_sha256");
  if (bytes == meta.end() || digest == meta.end() || !bytes->is_number_unsigned() ||
      !digest->is_string())
    return std::nullopt;
  if (bytes->get<uint64_t>() != bin->size() || digest->get<std::string>() != sha256_hex(*bin))
    return std::nullopt;
  CachedCubin entry;
  entry.cubin.resize(bin->size());
  std::copy(bin->begin(), bin->end(), reinterpret_cast<char*>(entry.cubin.data()));
  if (!looks_like_cubin(entry.cubin)) return std::nullopt;
  if (auto log = meta.find("log"); log != meta.end() && log->is_string()) entry.log = *log;
  return entry;
}

bool cache_store(const fs::path& dir, const std::string& key, const CompileOutput& out) {
  const std::string_view bin(reinterpret_cast<const char*>(out.cubin.data()), out.cubin.size());
  nlohmann::ordered_json meta;
  meta["format"] = "amk.cubin-cache";
  meta["version"] = kCubinCacheVersion;
  meta["key"] = key;
  meta["kernel_name"] = out.kernel_name;
  meta["arch"] = out.arch;
  meta["options"] = out.options;
  meta["nvrtc_version"] = out.nvrtc_version;
  meta["abi_version"] = AMK_ABI_VERSION;
  meta["tma_count"] = out.tma_count;
  meta["cubin_bytes"] = out.cubin.size();
  meta["cubin_sha256"] = sha256_hex(bin);
  meta["log"] = out.log;
  // The cubin first: a sidecar never names a cubin that is not there yet.
  return write_atomically(dir / (key + ".cubin"), bin) &&
         write_atomically(dir / (key + ".json"), meta.dump(2) + "\n");
}

std::string vm_ptx(const std::string& source, const CompileOptions& options) {
  CompileOptions virt = options;
  if (virt.arch.rfind("sm_", 0) == 0) virt.arch = "compute_" + virt.arch.substr(3);
  std::vector<std::string> opts = nvrtc_options(virt);
  std::erase_if(opts, [](const std::string& o) { return o.rfind("--ptxas-options", 0) == 0; });
  NvrtcResult r = nvrtc_compile(source, opts);
  if (!r.ok)
    throw Error(ErrorKind::nvrtc, "nvrtc.compile", virt.arch,
                "NVRTC " + nvrtc_version_string() + " failed to compile " +
                    std::string(kKernelName) + " to PTX for " + virt.arch +
                    " (options: " + join(opts) + ")")
        .with_detail(r.log);
  return r.ptx;
}

CompileOutput compile_vm(const std::string& source, uint32_t tma_count,
                         const CompileOptions& options) {
  CompileUnit unit;
  unit.source = source;
  unit.kernel_name = std::string(kKernelName);
  unit.tma_count = tma_count;
  unit.generator = std::to_string(kVmCodegenVersion);  // (the VM's keys predate CompileUnit)
  return compile_unit(unit, options);
}

CompileOutput compile_unit(const CompileUnit& unit, const CompileOptions& options) {
  const std::string& source = unit.source;
  const auto t0 = std::chrono::steady_clock::now();
  CompileOutput out;
  out.kernel_name = unit.kernel_name;
  out.arch = options.arch;
  out.tma_count = unit.tma_count;
  out.options = nvrtc_options(options);
  out.options.insert(out.options.end(), unit.defines.begin(), unit.defines.end());
  out.nvrtc_version = nvrtc_version_string();
  const std::string key =
      cubin_cache_key(source, out.options, out.arch, out.nvrtc_version, unit.generator);
  out.source_fingerprint = key;
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto take = [&](CachedCubin&& entry) {
    out.ok = true;
    out.cache_hit = true;
    out.cubin = std::move(entry.cubin);
    out.log = std::move(entry.log);
    out.compile_ms = elapsed_ms();
    return out;
  };
  if (options.cubin_file) {  // ahead of time (amk compile -o): checked, never compiled or cached
    load_vm_artifact(*options.cubin_file, out);
    out.compile_ms = elapsed_ms();
    return out;
  }

  std::optional<fs::path> dir;
  if (options.use_cache) dir = resolve_cache_dir(options);
  std::optional<CacheLock> lock;
  if (dir) {
    if (auto hit = cache_load(*dir, key)) return take(std::move(*hit));
    std::error_code ec;
    fs::create_directories(*dir, ec);
    if (ec) {
      spdlog::warn("cubin cache {} is not usable ({}); compiling without it", dir->string(),
                   ec.message());
      dir.reset();
    } else {
      lock.emplace(*dir / (key + ".lock"));
      if (!lock->held()) {
        spdlog::warn("cannot lock the cubin cache in {}; compiling without it", dir->string());
        dir.reset();
      } else if (auto hit = cache_load(*dir, key)) {  // another process built it meanwhile
        return take(std::move(*hit));
      }
    }
  }

  NvrtcResult r = nvrtc_compile(source, out.options, unit.file_name);
  out.log = std::move(r.log);
  out.compile_ms = elapsed_ms();
  if (!r.ok)
    throw Error(ErrorKind::nvrtc, "nvrtc.compile", out.arch,
                "NVRTC " + out.nvrtc_version + " failed to compile " + out.kernel_name + " for " +
                    out.arch + " (options: " + join(out.options) + ")")
        .with_detail(out.log);
  out.ok = true;
  out.cubin = std::move(r.cubin);
  if (!looks_like_cubin(out.cubin))
    throw Error(ErrorKind::nvrtc, "nvrtc.cubin", out.arch,
                "NVRTC returned " + std::to_string(out.cubin.size()) +
                    " bytes that are not an ELF cubin");
  if (dir && !cache_store(*dir, key, out))
    spdlog::warn("could not write the cubin cache entry {} in {}", key, dir->string());
  return out;
}

}  // namespace amk
