// NCCL on the GPU machine, loaded at run time: a communicator of one rank on device 0 (the first
// step of programs with ranks across GPUs). Exits 77 (skipped) without a GPU, and without NCCL
// (the GPU machine's NCCL lives in its Python environment: gpu_check.sh names it with
// AMK_NCCL_LIBRARY), saying why.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "device/nccl.hpp"
#include "gpu_support.hpp"

using namespace amk;

namespace {

const nccl::Api* const g_nccl = [] {
  std::string why;
  const nccl::Api* a = nccl::api(&why);
  if (a == nullptr) {
    std::fprintf(stderr, "skipped: %s\n", why.c_str());
    std::_Exit(77);
  }
  return a;
}();

}  // namespace

TEST_CASE("NCCL loads, says its version, and keeps NVLink multicast off") {
  const nccl::Status s = nccl::status();
  CHECK(s.available);
  CHECK(s.version.rfind("2.", 0) == 0);
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  REQUIRE(nvls != nullptr);
  CHECK(std::string(nvls) == "0");
}

TEST_CASE("a communicator of one rank on device 0: made, asked, destroyed") {
  nccl::UniqueId id{};
  REQUIRE(g_nccl->get_unique_id(&id) == 0);
  nccl::Comm comm = nullptr;
  const nccl::Result r = g_nccl->comm_init_rank(&comm, 1, id, 0);
  REQUIRE_MESSAGE(r == 0, g_nccl->get_error_string(r));
  int count = 0, rank = -1;
  CHECK(g_nccl->comm_count(comm, &count) == 0);
  CHECK(count == 1);
  CHECK(g_nccl->comm_user_rank(comm, &rank) == 0);
  CHECK(rank == 0);
  CHECK(g_nccl->comm_destroy(comm) == 0);
}
