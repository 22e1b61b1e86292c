// What `-v` shows: each phase of a command as it starts and as it ends with its time, and for a
// long phase that moves bytes, its progress with a rate. Logged through spdlog at info (shown
// with -v); header-only, so a stage that logs links spdlog itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace amk {

// One phase, RAII: logs "NAME ..." now and "NAME done in T ms" (or "NAME failed after T ms" when
// an exception unwinds it) when it ends: at finish() or on destruction, once.
//   { Phase phase("upload"); ...; timings.emplace_back("upload", phase.finish()); }
class Phase {
public:
  explicit Phase(std::string name) : name_(std::move(name)), start_(Clock::now()) {
    spdlog::info("{} ...", name_);
  }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
  ~Phase() {
    if (done_) return;
    if (std::uncaught_exceptions() > exceptions_)
      spdlog::info("{} failed after {:.1f} ms", name_, elapsed_ms());
    else
      (void)finish();
  }

  // Ends the phase (logs its time once); returns the milliseconds since it started.
  double finish() {
    const double ms = elapsed_ms();
    if (!done_) spdlog::info("{} done in {:.1f} ms", name_, ms);
    done_ = true;
    return ms;
  }
  [[nodiscard]] double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }
  [[nodiscard]] const std::string& name() const { return name_; }

private:
  using Clock = std::chrono::steady_clock;
  std::string name_;
  Clock::time_point start_;
  int exceptions_ = std::uncaught_exceptions();
  bool done_ = false;
};

// Phases one after another, each timed into `timings` when the next one starts:
//   PhaseSequence phases(timings); phases.next("compile"); ...; phases.next("upload"); ...;
//   phases.end();
class PhaseSequence {
public:
  explicit PhaseSequence(std::vector<std::pair<std::string, double>>& timings)
      : timings_(timings) {}
  void next(const char* name) {
    end();
    current_.emplace(name);
  }
  void end() {
    if (!current_) return;
    timings_.emplace_back(current_->name(), current_->finish());
    current_.reset();
  }

private:
  std::vector<std::pair<std::string, double>>& timings_;
  std::optional<Phase> current_;
};

// Progress of a phase that moves `total` bytes: after each piece, add(bytes). Once the phase has
// run a second, logs "WHAT: DONE of TOTAL MiB (P%), R MB/s" at most every half second, and a
// last line when it completes (short phases log nothing).
class ByteProgress {
public:
  ByteProgress(std::string what, uint64_t total) : what_(std::move(what)), total_(total) {}

  void add(uint64_t bytes) {
    done_ += bytes;
    const auto now = Clock::now();
    const bool complete = done_ >= total_;
    if (now - start_ < kQuiet || (!complete && now - last_ < kInterval)) return;
    if (logged_complete_) return;
    last_ = now;
    logged_complete_ = complete;
    const double s = std::chrono::duration<double>(now - start_).count();
    spdlog::info("{}: {:.1f} of {:.1f} MiB ({:.0f}%), {:.1f} MB/s", what_, mib(done_), mib(total_),
                 total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done_) / total_,
                 s > 0 ? static_cast<double>(done_) / s / 1e6 : 0.0);
  }
  [[nodiscard]] uint64_t done() const { return done_; }

private:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kQuiet = std::chrono::seconds(1);            // no lines before this
  static constexpr auto kInterval = std::chrono::milliseconds(500);  // at most one line per
  static double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
  std::string what_;
  uint64_t total_ = 0, done_ = 0;
  Clock::time_point start_ = Clock::now(), last_ = start_;
  bool logged_complete_ = false;
};

}  // namespace amk
