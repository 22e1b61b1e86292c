#include "cuda/driver.hpp"

#include <dlfcn.h>

#include <vector>

#include "core/error.hpp"

namespace amk::cu {
namespace {

constexpr const char* kDriverLibrary = "libcuda.so.1";

struct LoadedDriver {
  DriverApi api;
  bool ok = false;
  std::string why;  // set when !ok
};

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) {
    if (!s.empty()) s += ", ";
    s += item;
  }
  return s;
}

// Loads once; the library stays loaded for the life of the process (destructors of RAII wrappers
// may still call into it at exit), so there is no dlclose.
LoadedDriver load_driver() {
  LoadedDriver d;
  dlerror();
  void* handle = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    d.why = std::string("the NVIDIA driver library ") + kDriverLibrary + " could not be loaded (" +
            (err != nullptr ? err : "unknown dlopen error") +
            "); amk needs an NVIDIA driver to use a GPU (the cpu backend works "
            "without one)";
    return d;
  }
  // cuGetProcAddress_v2 is the CUDA 12+ entry; everything else is fetched through it at the
  // header's CUDA_VERSION so that unversioned names resolve to the ABI this file compiled against.
  auto get_proc =
      reinterpret_cast<decltype(&cuGetProcAddress)>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    d.why = std::string(kDriverLibrary) +
            " has no cuGetProcAddress_v2: the installed NVIDIA driver predates "
            "CUDA 12.0; "
            "amk needs a driver for CUDA " +
            std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) +
            " or newer";
    return d;
  }
  std::vector<std::string> missing;
  auto resolve = [&](const char* symbol, void** out) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = get_proc(symbol, out, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || *out == nullptr) {
      *out = nullptr;
      missing.push_back(std::string(symbol) + (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                                   ? " (driver too old)"
                                                   : ""));
    }
  };
  {
    void* p = nullptr;
    resolve("cuInit", &p);
    d.api.init = reinterpret_cast<decltype(&cuInit)>(p);
  }
#define AMK_DRIVER_RESOLVE(member, symbol)                                                         \
  {                                                                                                \
    void* p = nullptr;                                                                             \
    resolve(#symbol, &p);                                                                          \
    d.api.member = reinterpret_cast<decltype(&symbol)>(p);                                         \
  }
  AMK_DRIVER_FUNCTIONS(AMK_DRIVER_RESOLVE)
#undef AMK_DRIVER_RESOLVE
  if (!missing.empty()) {
    d.why = std::string(kDriverLibrary) + " lacks driver entry points amk needs: " + join(missing) +
            "; update the NVIDIA driver";
    return d;
  }
  CUresult r = d.api.init(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    const char* text = nullptr;
    d.api.get_error_name(r, &name);
    d.api.get_error_string(r, &text);
    d.why = std::string("cuInit failed: ") +
            (name != nullptr ? name : "CUresult " + std::to_string(r)) + " (" +
            (text != nullptr ? text : "no description") + ")";
    return d;
  }
  d.ok = true;
  return d;
}

const LoadedDriver& loaded() {
  static const LoadedDriver d = load_driver();  // thread-safe one-time load
  return d;
}

}  // namespace

bool driver_available(std::string* why) {
  const LoadedDriver& d = loaded();
  if (!d.ok && why != nullptr) *why = d.why;
  return d.ok;
}

const DriverApi& driver() {
  const LoadedDriver& d = loaded();
  if (!d.ok) throw Error(ErrorKind::device, "device.no_driver", "", d.why);
  return d.api;
}

const DriverApi* driver_if_loaded() noexcept {
  const LoadedDriver& d = loaded();
  return d.ok ? &d.api : nullptr;
}

bool is_sticky(CUresult result) noexcept {
  switch (result) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_EXTERNAL_DEVICE: return true;
    default: return false;
  }
}

ErrorKind error_kind(CUresult result) noexcept {
  if (result == CUDA_ERROR_LAUNCH_TIMEOUT) return ErrorKind::timeout;
  return is_sticky(result) ? ErrorKind::launch : ErrorKind::driver;
}

std::string error_name(CUresult result) {
  const LoadedDriver& d = loaded();
  const char* name = nullptr;
  if (d.api.get_error_name != nullptr && d.api.get_error_name(result, &name) == CUDA_SUCCESS &&
      name != nullptr)
    return name;
  return "CUresult " + std::to_string(static_cast<int>(result));
}

std::string error_string(CUresult result) {
  const LoadedDriver& d = loaded();
  const char* text = nullptr;
  if (d.api.get_error_string != nullptr && d.api.get_error_string(result, &text) == CUDA_SUCCESS &&
      text != nullptr)
    return text;
  return "no description from the driver";
}

void throw_driver_error(CUresult result, std::string_view call, std::string what) {
  const std::string name = error_name(result);
  std::string message(call);
  if (!what.empty()) message += " for " + what;
  message += " failed: " + name + " (" + error_string(result) + ")";
  const ErrorKind kind = error_kind(result);
  if (kind == ErrorKind::timeout) {
    message += "; the driver's own limit on a kernel's run time (a display watchdog) stopped it, "
               "and the CUDA context is no longer usable";
    throw Error(kind, "launch.driver_timeout", std::move(what), std::move(message));
  }
  if (kind == ErrorKind::launch) {
    message += "; the CUDA context is no longer usable";
    throw Error(kind, "launch.fault", std::move(what), std::move(message));
  }
  // Error codes use the driver's own name; strip nothing so they stay greppable.
  std::string code = "driver." + (name.rfind("CUresult ", 0) == 0
                                      ? "CUresult_" + std::to_string(static_cast<int>(result))
                                      : name);
  throw Error(ErrorKind::driver, std::move(code), std::move(what), std::move(message));
}

}  // namespace amk::cu
