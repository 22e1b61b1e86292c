// libFuzzer harness for the .amkb reader. A clean amk::Error is the expected outcome for bad
// input; any other exception, a sanitizer report or a failed round trip is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.hpp"
#include "io/load.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  amk::LoadOptions options;
  options.trust_custom_ops = true;  // reach the custom-op paths too
  amk::Program program;
  try {
    program = amk::parse_amkb_program(bytes, options);
  } catch (const amk::Error&) {
    return 0;
  }
  // Whatever the reader accepts, the writer must encode, and the result must read back equal
  // and encode to the same bytes again (the encoding is canonical).
  const std::vector<std::byte> again = amk::program_to_amkb(program);
  const amk::Program reparsed = amk::parse_amkb_program(again, options);
  if (!(reparsed == program)) __builtin_trap();
  if (amk::program_to_amkb(reparsed) != again) __builtin_trap();
  return 0;
}
