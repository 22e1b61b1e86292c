#include "device/nccl.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace amk::nccl {
namespace {

constexpr const char* kDefaultLibrary = "libnccl.so.2";

struct Loaded {
  Api api{};
  bool ok = false;
  std::string library;
  std::string why;  // set when !ok
};

// Loads once; the library stays loaded for the life of the process (no dlclose).
Loaded load() {
  Loaded l;
  const char* env = std::getenv("AMK_NCCL_LIBRARY");
  l.library = env != nullptr && *env != '\0' ? env : kDefaultLibrary;
  // Before NCCL reads its environment (at its first call): no NVLink multicast (NVLS).
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  dlerror();
  void* handle = dlopen(l.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    l.why = "NCCL (" + l.library + ") could not be loaded (" +
            (err != nullptr ? err : "unknown dlopen error") +
            "); programs with ranks run on the GPUs through NCCL: install it or name the "
            "library with AMK_NCCL_LIBRARY";
    return l;
  }
  std::vector<std::string> missing;
  auto resolve = [&](const char* symbol, auto& member) {
    void* p = dlsym(handle, symbol);
    if (p == nullptr) missing.emplace_back(symbol);
    member = reinterpret_cast<std::remove_reference_t<decltype(member)>>(p);
  };
  resolve("ncclGetVersion", l.api.get_version);
  resolve("ncclGetUniqueId", l.api.get_unique_id);
  resolve("ncclCommInitRank", l.api.comm_init_rank);
  resolve("ncclCommDestroy", l.api.comm_destroy);
  resolve("ncclCommCount", l.api.comm_count);
  resolve("ncclCommUserRank", l.api.comm_user_rank);
  resolve("ncclGetErrorString", l.api.get_error_string);
  if (!missing.empty()) {
    std::string names;
    for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
    l.why = l.library + " lacks " + names + ": it is not an NCCL 2 library";
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const Api* api(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why != nullptr) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

std::string version_text(int code) {
  if (code <= 0) return "unknown";
  // From NCCL 2.9 the code is major * 10000 + minor * 100 + patch; before, major * 1000 + ...
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

Status status() {
  Status s;
  s.library = loaded().library;
  std::string why;
  const Api* a = api(&why);
  if (a == nullptr) {
    s.notice = why;
    return s;
  }
  int code = 0;
  const Result r = a->get_version(&code);
  if (r != 0) {
    s.notice = std::string("ncclGetVersion failed: ") + a->get_error_string(r);
    return s;
  }
  s.available = true;
  s.version = version_text(code);
  return s;
}

}  // namespace amk::nccl
