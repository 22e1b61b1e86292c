// amk's log lines on stderr, "amk: LEVEL: message", as the command line and the Python module
// print them (the pipeline's phases log at info, core/phase_log.hpp). Header-only, like
// phase_log.hpp: a stage that installs it links spdlog itself.
#pragma once

#include <memory>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace amk {

// Makes the "amk" stderr logger (made once a process) spdlog's default, at `level`.
inline void log_to_stderr(spdlog::level::level_enum level) {
  std::shared_ptr<spdlog::logger> logger = spdlog::get("amk");
  if (!logger) logger = spdlog::stderr_color_mt("amk");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("amk: %^%l%$: %v");
  spdlog::set_level(level);
}

}  // namespace amk
