// The unit tests' valid wrapper program: tests/wrapper/sample (written by its make_sample.py).
#pragma once

#include <filesystem>

#include "wrapper/wrapper.hpp"

namespace amk::test {

inline const std::filesystem::path kWrapperSampleDir =
    std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "wrapper" / "sample";

inline WrapperProgram sample_wrapper() {
  return load_wrapper_file(kWrapperSampleDir / "wrapper.json");
}

}  // namespace amk::test
