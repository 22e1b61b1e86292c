// The unit tests' valid wrapper program: tests/wrapper/sample (written by its make_sample.py).
#pragma once

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "wrapper/wrapper.hpp"

namespace amk::test {

inline const std::filesystem::path kWrapperSampleDir =
    std::filesystem::path(AMK_SOURCE_DIR) / "tests" / "wrapper" / "sample";

inline WrapperProgram sample_wrapper() {
  return load_wrapper_file(kWrapperSampleDir / "wrapper.json");
}

// The sample's JSON text as a JSON value (tests edit it and load the result).
inline nlohmann::json sample_wrapper_json() {
  std::ifstream in(kWrapperSampleDir / "wrapper.json");
  return nlohmann::json::parse(in);
}

}  // namespace amk::test
