// libFuzzer harness for the JSON encoding: parse, then verify and plan what parses. Only
// amk::Error may escape the library; anything else (a crash, a sanitizer report, another
// exception) is a bug the fuzzer reports. What parses must also survive a canonical round trip.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "io/load.hpp"
#include "plan/plan.hpp"
#include "verify/verify.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  amk::LoadOptions options;
  options.trust_custom_ops = true;
  amk::Program program;
  try {
    program = amk::parse_json_program(text, options);
  } catch (const amk::Error&) {
    return 0;
  }
  // A program that parsed must print and re-parse to the same program.
  const amk::Program again = amk::parse_json_program(amk::program_to_json(program), options);
  if (!(again == program)) __builtin_trap();
  try {
    (void)amk::verify(program);
    amk::PlanOptions plan_options;
    plan_options.grid_hint = 4;
    (void)amk::make_plan(program, plan_options);
  } catch (const amk::Error&) {
  }
  return 0;
}
