// What src/session shares with the public API (not installed; CUDA builds only): `amk run`,
// `amk profile` and `amk inspect --attributes` open, launch and read their executable through
// Executable, so the command line runs the API's own code.
#pragma once

#include <cstdint>
#include <string>

#include "amk/amk.hpp"
#include "amk_abi.h"
#include "backend/initial_data.hpp"
#include "cuda/executor.hpp"
#include "cuda/wrapper_exec.hpp"
#include "program/program.hpp"

namespace amk::detail {

struct LaunchOutcome {
  std::string status;       // ok | timeout | bad_operand
  std::string message;      // one line for a non-ok status (the watchdog's or the op's record)
  amk_diag_t diag{};        // (a wrapper's launch has none)
  double host_ms = 0;       // reset + launch + wait, host clock
  uint32_t passes_run = 0;  // the passes asked for, or fewer where feed_token met its eos id
};

struct ExecutableAccess {
  // An already loaded and verified program with every buffer's initial contents (what
  // Executable::open makes from the file; `amk run` makes them itself: --check poisons, --reseed).
  [[nodiscard]] static Executable open(const Program& program, const InitialData& initial,
                                       const GpuOptions& options);
  // A checked wrapper program (wrapper_compile_arch has passed) and the initial contents of
  // wrapper_buffers(w).
  [[nodiscard]] static Executable open_wrapper(const WrapperProgram& w, const InitialData& initial,
                                               const WrapperGpuOptions& options);
  // The executable underneath (Error(internal) for the other kind).
  [[nodiscard]] static const GpuExecutable& gpu(const Executable& exe);
  [[nodiscard]] static const WrapperExecutable& wrapper(const Executable& exe);
  // Executable::launch without the throw for a watchdog stop or a bad operand: `amk run` reports
  // those with the diag record.
  [[nodiscard]] static LaunchOutcome launch(Executable& exe, uint32_t passes);
  // Takes the outcome of the launch launch_async started, if one is still untaken, and throws
  // as Executable::launch does when it did not finish ok.
  static void settle(Executable::Impl& m);
  // A VM launch's result as the API reports it (passes run, the diag as one line).
  [[nodiscard]] static LaunchOutcome outcome(Executable::Impl& m, const LaunchResult& r,
                                             uint32_t passes);
};

// Throws what Executable::launch throws for a launch that did not finish ok.
inline void throw_if_failed(const LaunchOutcome& r) {
  if (r.status != "ok")
    throw Error(r.status == "timeout" ? ErrorKind::timeout : ErrorKind::launch, "run." + r.status,
                "", r.message);
}

}  // namespace amk::detail
