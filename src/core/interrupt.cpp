#include "core/interrupt.hpp"

#include <atomic>

namespace amk {
namespace {

std::atomic<bool> requested{false};
std::atomic<int> waits{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "a signal handler reads and stores them");

}  // namespace

void request_interrupt() noexcept { requested.store(true, std::memory_order_relaxed); }

// (a load first: the launch's wait calls this at every poll)
bool take_interrupt() noexcept {
  return requested.load(std::memory_order_relaxed) &&
         requested.exchange(false, std::memory_order_relaxed);
}

InterruptibleWait::InterruptibleWait() noexcept { waits.fetch_add(1, std::memory_order_relaxed); }
InterruptibleWait::~InterruptibleWait() { waits.fetch_sub(1, std::memory_order_relaxed); }

bool wait_under_way() noexcept { return waits.load(std::memory_order_relaxed) > 0; }

}  // namespace amk
