// The on-disk cubin cache (jitify2-style): key = sha256 of everything that decides the cubin;
// entries written to a temporary file and renamed under a per-key flock, re-checked after the
// lock is taken; an entry that does not verify is ignored and rebuilt.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cuda/compile.hpp"

namespace amk {

// Cache layout version (part of the key and of each sidecar).
inline constexpr uint32_t kCubinCacheVersion = 1;

// options.cache_dir, else $AMK_CACHE_DIR, else $XDG_CACHE_HOME/amk, else ~/.cache/amk; nullopt
// when none can be named.
[[nodiscard]] std::optional<std::filesystem::path> resolve_cache_dir(const CompileOptions& options);

// sha256 over the source, every embedded header (name and text), the sorted NVRTC options (a
// wrapper's defines among them), the arch, the NVRTC version, AMK_ABI_VERSION, the cache version
// and `generator`, what wrote the source (CompileUnit::generator).
[[nodiscard]] std::string cubin_cache_key(const std::string& source,
                                          const std::vector<std::string>& options,
                                          const std::string& arch, const std::string& nvrtc_version,
                                          const std::string& generator);

struct CachedCubin {
  std::vector<std::byte> cubin;
  std::string log;
};

// The entry `<dir>/<key>.cubin` with its sidecar `<key>.json`, if both exist and the cubin's
// size and sha256 match the sidecar.
[[nodiscard]] std::optional<CachedCubin> cache_load(const std::filesystem::path& dir,
                                                    const std::string& key);

// Writes an entry (temporary files + rename; the caller holds the key's lock). False on any
// filesystem error: the cache is an optimization, never a reason to fail.
bool cache_store(const std::filesystem::path& dir, const std::string& key,
                 const CompileOutput& out);

}  // namespace amk
