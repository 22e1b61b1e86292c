// A request to stop the launch a host thread is waiting for (a Ctrl-C): one process-wide flag,
// set from anywhere (a signal handler included) and taken by the launch's wait, which then
// raises the device abort flag at once instead of at the deadline.
#pragma once

namespace amk {

// Async-signal-safe. A request made while no launch waits applies to the next wait.
void request_interrupt() noexcept;
// True once for each request (clears it).
[[nodiscard]] bool take_interrupt() noexcept;

// Marks a launch's wait as under way while it lives (the wait takes requests then).
class InterruptibleWait {
public:
  InterruptibleWait() noexcept;
  ~InterruptibleWait();
  InterruptibleWait(const InterruptibleWait&) = delete;
  InterruptibleWait& operator=(const InterruptibleWait&) = delete;
};
// True while some launch's wait is under way. Async-signal-safe: a SIGINT handler asks for an
// interrupt only then, and otherwise lets the signal end the process.
[[nodiscard]] bool wait_under_way() noexcept;

}  // namespace amk
