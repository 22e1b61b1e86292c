// libFuzzer harness for wrapper programs (schemas/wrapper.md): parse, then check what parses.
// Only amk::Error may escape; what parses must survive a canonical round trip. The base folder is
// the working directory, so a source_path or data file names nothing outside it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "wrapper/wrapper.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)amk::is_wrapper_json(text);
  amk::WrapperProgram program;
  try {
    program = amk::parse_json_wrapper(text, ".");
  } catch (const amk::Error&) {
    return 0;
  }
  const amk::WrapperProgram again = amk::parse_json_wrapper(amk::wrapper_to_json(program), ".");
  if (!(again == program)) __builtin_trap();
  try {
    (void)amk::check_wrapper(program);
  } catch (const amk::Error&) {
  }
  return 0;
}
