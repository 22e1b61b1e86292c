#include "core/error.hpp"

namespace amk {
namespace {

std::string compose(ErrorKind kind, const std::string& code, const std::string& where,
                    const std::string& message) {
  std::string s;
  s.reserve(code.size() + where.size() + message.size() + 16);
  s += kind_name(kind);
  s += " error [";
  s += code;
  s += "]";
  if (!where.empty()) {
    s += " at ";
    s += where;
  }
  s += ": ";
  s += message;
  return s;
}

}  // namespace

ExitCode exit_code_for(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::internal: return ExitCode::internal;
    case ErrorKind::usage: return ExitCode::usage;
    case ErrorKind::program: return ExitCode::invalid_program;
    case ErrorKind::io: return ExitCode::io;
    case ErrorKind::device: return ExitCode::device;
    case ErrorKind::nvrtc: return ExitCode::compile;
    case ErrorKind::driver: return ExitCode::launch;
    case ErrorKind::launch: return ExitCode::launch;
    case ErrorKind::timeout: return ExitCode::timeout;
    case ErrorKind::mismatch: return ExitCode::mismatch;
  }
  return ExitCode::internal;
}

std::string_view kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::internal: return "internal";
    case ErrorKind::usage: return "usage";
    case ErrorKind::program: return "program";
    case ErrorKind::io: return "io";
    case ErrorKind::device: return "device";
    case ErrorKind::driver: return "driver";
    case ErrorKind::nvrtc: return "nvrtc";
    case ErrorKind::launch: return "launch";
    case ErrorKind::timeout: return "timeout";
    case ErrorKind::mismatch: return "mismatch";
  }
  return "internal";
}

Error::Error(ErrorKind kind, std::string code, std::string where, std::string message)
    : std::runtime_error(compose(kind, code, where, message)), kind_(kind), code_(std::move(code)),
      where_(std::move(where)), message_(std::move(message)) {}

void throw_program_error(std::string code, std::string where, std::string message) {
  throw Error(ErrorKind::program, std::move(code), std::move(where), std::move(message));
}

void throw_io_error(std::string code, std::string where, std::string message) {
  throw Error(ErrorKind::io, std::move(code), std::move(where), std::move(message));
}

}  // namespace amk
