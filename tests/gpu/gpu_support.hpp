// The gpu tier's shared pieces. The guard: without a usable GPU a test program exits with 77,
// which CTest reports as skipped (SKIP_RETURN_CODE), before any test case runs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda/executor.hpp"
#include "program/program.hpp"

namespace amk::test {

inline const bool g_have_gpu = [] {
  std::string why;
  if (!gpu_available(&why)) {
    std::fprintf(stderr, "skipped: no GPU (%s)\n", why.c_str());
    std::_Exit(77);
  }
  return true;
}();

// Appends an f32 buffer of n elements with the given init to a hand-built program.
inline void add_f32_buffer(Program& p, const char* name, uint64_t n, InitKind kind, uint64_t seed,
                           bool output) {
  Buffer b;
  b.name = name;
  b.dtype = DType::f32;
  b.shape = {n};
  b.init.kind = kind;
  b.init.seed = seed;
  b.output = output;
  p.buffers.push_back(b);
}

}  // namespace amk::test
