// NCCL, loaded at run time (device/nccl.hpp): an absent library is a notice naming its path, and
// loading turns NVLink multicast off for NCCL; its version codes as text. (The library is loaded
// once a process: this binary names one that does not exist.)
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "device/nccl.hpp"

using namespace amk;

TEST_CASE("NCCL: a library that is not there is reported with its path, never fatal") {
  const char* kPath = "/nonexistent/amk-test/libnccl.so.2";
  setenv("AMK_NCCL_LIBRARY", kPath, 1);
  unsetenv("NCCL_NVLS_ENABLE");
  std::string why;
  CHECK(nccl::api(&why) == nullptr);
  CHECK(why.find(kPath) != std::string::npos);
  CHECK(why.find("AMK_NCCL_LIBRARY") != std::string::npos);
  const nccl::Status s = nccl::status();
  CHECK_FALSE(s.available);
  CHECK(s.library == kPath);
  CHECK(s.notice == why);
  // Loading sets NVLink multicast off for NCCL, whether or not the library is there.
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  REQUIRE(nvls != nullptr);
  CHECK(std::string(nvls) == "0");
}

TEST_CASE("NCCL version codes as text, both encodings") {
  CHECK(nccl::version_text(22803) == "2.28.3");  // 2.9 on: major * 10000 + minor * 100 + patch
  CHECK(nccl::version_text(21903) == "2.19.3");
  CHECK(nccl::version_text(2804) == "2.8.4");  // before 2.9: major * 1000 + minor * 100 + patch
  CHECK(nccl::version_text(0) == "unknown");
}
