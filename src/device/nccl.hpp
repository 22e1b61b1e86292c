// NCCL, loaded with dlopen at first use as the driver is: amk never links it, so the same binary
// runs where NCCL is absent (CI, the development boxes). The library is $AMK_NCCL_LIBRARY when
// set (a path), else libnccl.so.2 on the loader's path. NVLink multicast stays off: loading sets
// NCCL_NVLS_ENABLE=0 unless the environment already sets it (multicast objects can take a shared
// host's GPUs out of service).
#pragma once

#include <cstdint>
#include <string>

namespace amk::nccl {

// The declarations amk calls, in NCCL's C ABI (nccl.h: ncclUniqueId is 128 opaque bytes,
// ncclComm_t an opaque pointer, ncclResult_t an int, 0 success).
struct UniqueId {
  char internal[128];
};
using Comm = struct OpaqueComm*;
using Result = int;

struct Api {
  Result (*get_version)(int* version);
  Result (*get_unique_id)(UniqueId* id);
  Result (*comm_init_rank)(Comm* comm, int ranks, UniqueId id, int rank);
  Result (*comm_destroy)(Comm comm);
  Result (*comm_count)(Comm comm, int* count);
  Result (*comm_user_rank)(Comm comm, int* rank);
  const char* (*get_error_string)(Result result);
};

// The loaded library, or nullptr with the reason in *why (not found, a symbol missing).
[[nodiscard]] const Api* api(std::string* why = nullptr);

// What `amk devices` reports: whether NCCL loads, from where, and its version ("2.28.3").
struct Status {
  bool available = false;
  std::string library;  // the name or path dlopen was given
  std::string version;
  std::string notice;  // why it is not available
};
[[nodiscard]] Status status();

// NCCL's version code (NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch from 2.9 on) as
// "major.minor.patch".
[[nodiscard]] std::string version_text(int code);

}  // namespace amk::nccl
