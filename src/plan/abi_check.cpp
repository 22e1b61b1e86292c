// The ABI size guard: the planner writes amk_instruction_t and friends byte for byte into
// uploads and .amkb files, and NVRTC-compiled code reads them with the same header. Any
// layout drift between the host compiler and the device view must fail the build here.
#include <cstddef>

#include "amk_abi.h"

namespace amk::detail {

static_assert(AMK_ABI_VERSION == 1u, "update this guard with the ABI version");
static_assert(sizeof(amk_operand_t) == 16 && offsetof(amk_operand_t, offset) == 0 &&
              offsetof(amk_operand_t, extent) == 8 && offsetof(amk_operand_t, buffer) == 12);
static_assert(sizeof(amk_wait_t) == 8 && sizeof(amk_signal_t) == 8);
static_assert(sizeof(amk_instruction_t) == AMK_INSTRUCTION_BYTES &&
              alignof(amk_instruction_t) == 16);
static_assert(
    offsetof(amk_instruction_t, op) == 0 && offsetof(amk_instruction_t, n_operands) == 2 &&
    offsetof(amk_instruction_t, n_waits) == 3 && offsetof(amk_instruction_t, n_signals) == 4 &&
    offsetof(amk_instruction_t, n_params) == 5 && offsetof(amk_instruction_t, flags) == 6 &&
    offsetof(amk_instruction_t, index) == 8 && offsetof(amk_instruction_t, operands) == 16 &&
    offsetof(amk_instruction_t, waits) == 112 && offsetof(amk_instruction_t, signals) == 144 &&
    offsetof(amk_instruction_t, params) == 176 && offsetof(amk_instruction_t, operand6) == 240);
static_assert(sizeof(amk_buffer_t) == 32 && offsetof(amk_buffer_t, elements) == 8 &&
              offsetof(amk_buffer_t, bytes) == 16 && offsetof(amk_buffer_t, dtype) == 24 &&
              offsetof(amk_buffer_t, flags) == 28);
static_assert(sizeof(amk_diag_t) == 64 && offsetof(amk_diag_t, elapsed_ns) == 32);
static_assert(sizeof(amk_device_program_t) == 96 &&
              offsetof(amk_device_program_t, timeout_ns) == 64 &&
              offsetof(amk_device_program_t, n_instructions) == 72 &&
              offsetof(amk_device_program_t, iterations) == 88);

}  // namespace amk::detail
