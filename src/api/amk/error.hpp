// The one error type of amk: a kind (which decides the exit code), a stable code, the place it
// refers to, and a message. Built only on failure. Public: the library's API (amk/amk.hpp) throws
// it, and the amk command line prints it.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace amk {

// Documented exit codes (README "Exit codes"). Stable: scripts depend on them.
enum class ExitCode : int {
  ok = 0,
  internal = 1,         // a bug in amk
  usage = 2,            // bad command line, or a bad argument to the API
  invalid_program = 3,  // the program failed to load or verify
  io = 4,               // a file could not be read or written
  device = 5,           // no usable GPU, or the GPU cannot run this program
  compile = 6,          // NVRTC rejected the kernel source
  launch = 7,           // launch failure or device fault
  timeout = 8,          // the watchdog stopped a hung launch
  mismatch = 9,         // --check found outputs that differ from the CPU reference
};

enum class ErrorKind {
  internal,
  usage,
  program,  // load / verify / plan of a user's program
  io,
  device,    // capability or compatibility refusal
  driver,    // a CUDA driver call failed
  nvrtc,     // NVRTC failed
  launch,    // launch failure or sticky device fault
  timeout,   // watchdog
  mismatch,  // --check
};

[[nodiscard]] ExitCode exit_code_for(ErrorKind kind) noexcept;
[[nodiscard]] std::string_view kind_name(ErrorKind kind) noexcept;

class Error : public std::runtime_error {
public:
  // code: stable dotted identifier (e.g. "json.buffer.dtype"); where: a JSON pointer
  // ("/buffers/3/dtype"), "section INSTR byte 1024", a file path, or empty.
  Error(ErrorKind kind, std::string code, std::string where, std::string message);

  [[nodiscard]] ErrorKind kind() const noexcept { return kind_; }
  [[nodiscard]] const std::string& code() const noexcept { return code_; }
  [[nodiscard]] const std::string& where() const noexcept { return where_; }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  [[nodiscard]] ExitCode exit_code() const noexcept { return exit_code_for(kind_); }

  // Extra multi-line detail (an NVRTC log, the list of stuck queues); not part of what().
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
  Error& with_detail(std::string detail) {
    detail_ = std::move(detail);
    return *this;
  }

private:
  ErrorKind kind_;
  std::string code_;
  std::string where_;
  std::string message_;
  std::string detail_;
};

}  // namespace amk
