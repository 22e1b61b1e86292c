// The gpu tier's guard: a test program includes this first; without a usable GPU it exits with
// 77, which CTest reports as skipped (SKIP_RETURN_CODE), before any test case runs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda/executor.hpp"

namespace amk::test {

inline const bool g_have_gpu = [] {
  std::string why;
  if (!gpu_available(&why)) {
    std::fprintf(stderr, "skipped: no GPU (%s)\n", why.c_str());
    std::_Exit(77);
  }
  return true;
}();

}  // namespace amk::test
