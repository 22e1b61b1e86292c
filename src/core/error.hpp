// amk::Error (declared in the public amk/error.hpp, which the library installs) and the
// shorthands the loader and verifier throw it with.
#pragma once

#include <string>

#include "amk/error.hpp"

namespace amk {

// Shorthands used throughout the loader and verifier.
[[noreturn]] void throw_program_error(std::string code, std::string where, std::string message);
[[noreturn]] void throw_io_error(std::string code, std::string where, std::string message);

}  // namespace amk
