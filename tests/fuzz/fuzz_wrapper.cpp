// libFuzzer harness for wrapper programs (schemas/wrapper.md), both encodings: input starting
// with the .amkb magic ("AMKW") goes to the binary decoder, anything else to the JSON reader.
// Only amk::Error may escape; what parses must survive a canonical round trip through the same
// encoding, then the structural checks run. The base folder is the working directory, so a
// source_path or data file names nothing outside it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/error.hpp"
#include "wrapper/amkb.hpp"
#include "wrapper/wrapper.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const bool binary = amk::is_wrapper_amkb(text);
  (void)amk::is_wrapper_json(text);
  amk::WrapperProgram program;
  try {
    program = binary ? amk::parse_amkb_wrapper(bytes, ".") : amk::parse_json_wrapper(text, ".");
  } catch (const amk::Error&) {
    return 0;
  }
  const amk::WrapperProgram again =
      binary ? amk::parse_amkb_wrapper(amk::wrapper_to_amkb(program), ".")
             : amk::parse_json_wrapper(amk::wrapper_to_json(program), ".");
  if (!(again == program)) __builtin_trap();
  try {
    (void)amk::check_wrapper(program);
  } catch (const amk::Error&) {
  }
  return 0;
}
