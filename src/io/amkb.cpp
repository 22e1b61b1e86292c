// Placeholder until the binary encoding lands (owned by the .amkb work).
#include "core/error.hpp"
#include "io/load.hpp"

namespace amk {

Program parse_amkb_program(std::span<const std::byte>, const LoadOptions&) {
  throw_program_error("amkb.unsupported", "", ".amkb reading is not implemented yet");
}

std::vector<std::byte> program_to_amkb(const Program&) {
  throw_program_error("amkb.unsupported", "", ".amkb writing is not implemented yet");
}

}  // namespace amk
