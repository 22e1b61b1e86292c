// What -v shows: a phase's start and end with its time, a failed phase, and the progress of a
// long transfer (quiet for a short one, at most every half second, with a rate).
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/phase_log.hpp"
#include "common/files.hpp"

using namespace amk;
using amk_test::contains;

namespace {

// Captures what spdlog's default logger writes at `level` while it lives.
struct Capture {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  explicit Capture(spdlog::level::level_enum level) {
    auto logger = std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
    logger->set_pattern("%l: %v");
    logger->set_level(level);
    spdlog::set_default_logger(logger);
  }
  ~Capture() { spdlog::set_default_logger(previous); }
  std::string text() const { return out.str(); }
};

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a phase logs its start and its end with its time, once, at info") {
  Capture c(spdlog::level::info);
  double ms = -1;
  {
    Phase phase("upload");
    CHECK(c.text() == "info: upload ...\n");
    ms = phase.finish();
    CHECK(phase.finish() >= ms);  // (a second finish logs nothing)
  }
  CHECK(ms >= 0);
  CHECK(contains(c.text(), "info: upload done in "));
  CHECK(count(c.text(), "upload done") == 1);
  { Phase phase("compile"); }  // the destructor ends it
  CHECK(contains(c.text(), "info: compile done in "));
}

TEST_CASE("a phase an exception ends says it failed") {
  Capture c(spdlog::level::info);
  try {
    Phase phase("materialize");
    throw std::runtime_error("no data");
  } catch (const std::runtime_error&) {
  }
  CHECK(contains(c.text(), "info: materialize failed after "));
  CHECK(!contains(c.text(), "materialize done"));
}

TEST_CASE("phases are quiet without -v (the default level is warn)") {
  Capture c(spdlog::level::warn);
  {
    Phase phase("load");
    ByteProgress progress("upload", 10);
    progress.add(10);
  }
  CHECK(c.text().empty());
}

TEST_CASE("byte progress: nothing in the first second, then a line with the rate") {
  Capture c(spdlog::level::info);
  ByteProgress progress("upload", 4 << 20);
  progress.add(1 << 20);
  progress.add(1 << 20);
  CHECK(c.text().empty());  // short transfers log nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  progress.add(1 << 20);
  CHECK(contains(c.text(), "info: upload: 3.0 of 4.0 MiB (75%), "));
  CHECK(contains(c.text(), " MB/s"));
  const auto last = std::chrono::steady_clock::now();
  progress.add(0);
  if (std::chrono::steady_clock::now() - last < std::chrono::milliseconds(400))
    CHECK(count(c.text(), "upload:") == 1);  // within half a second of the last line: nothing
  progress.add(1 << 20);                     // complete: always a last line, once
  CHECK(contains(c.text(), "upload: 4.0 of 4.0 MiB (100%)"));
  progress.add(0);
  CHECK(count(c.text(), "(100%)") == 1);
  CHECK(progress.done() == 4u << 20);
}
