// compile_vm and the cubin cache behind it.
#include "cuda/cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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

}  // namespace

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
                            const std::string& arch, const std::string& nvrtc_version) {
  Sha256 h;
  hash_field(h, "amk.cubin-cache");
  hash_field(h, std::to_string(kCubinCacheVersion) + "/" + std::to_string(kVmCodegenVersion));
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
  const auto t0 = std::chrono::steady_clock::now();
  CompileOutput out;
  out.kernel_name = std::string(kKernelName);
  out.arch = options.arch;
  out.tma_count = tma_count;
  out.options = nvrtc_options(options);
  out.nvrtc_version = nvrtc_version_string();
  const std::string key = cubin_cache_key(source, out.options, out.arch, out.nvrtc_version);
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

  NvrtcResult r = nvrtc_compile(source, out.options);
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
