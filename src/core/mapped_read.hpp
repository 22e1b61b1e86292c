// Reads of memory-mapped data files that survive the file shrinking underneath: such a read
// faults with SIGBUS (the pages past the new end are gone), which would kill the process. Inside
// these calls the fault ends the call with `false` instead, on the thread that faulted; any other
// SIGBUS goes to the handler installed before amk's, or takes the default action.
#pragma once

#include <cstddef>

namespace amk {

// Runs fn(context); false when a read in it faulted with SIGBUS (fn did not finish). fn must only
// read and compute into memory it was given: nothing it does is unwound.
[[nodiscard]] bool run_guarded(void (*fn)(void*), void* context) noexcept;

// memcpy(dst, src, bytes) under run_guarded.
[[nodiscard]] bool copy_mapped(void* dst, const void* src, size_t bytes) noexcept;

}  // namespace amk
