#include "core/interrupt.hpp"

#include <atomic>

namespace amk {
namespace {

std::atomic<bool> requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler stores it");

}  // namespace

void request_interrupt() noexcept { requested.store(true, std::memory_order_relaxed); }

bool take_interrupt() noexcept { return requested.exchange(false, std::memory_order_relaxed); }

}  // namespace amk
