// The device ABI is stored in .amkb files and read by NVRTC-compiled code: its layout is fixed.
#include <doctest/doctest.h>

#include <cstddef>

#include "amk_abi.h"

TEST_CASE("instruction layout") {
  CHECK(sizeof(amk_instruction_t) == 256);
  CHECK(alignof(amk_instruction_t) == 16);
  CHECK(offsetof(amk_instruction_t, op) == 0);
  CHECK(offsetof(amk_instruction_t, n_operands) == 2);
  CHECK(offsetof(amk_instruction_t, n_waits) == 3);
  CHECK(offsetof(amk_instruction_t, n_signals) == 4);
  CHECK(offsetof(amk_instruction_t, n_params) == 5);
  CHECK(offsetof(amk_instruction_t, flags) == 6);
  CHECK(offsetof(amk_instruction_t, index) == 8);
  CHECK(offsetof(amk_instruction_t, operands) == 16);
  CHECK(offsetof(amk_instruction_t, waits) == 112);
  CHECK(offsetof(amk_instruction_t, signals) == 144);
  CHECK(offsetof(amk_instruction_t, params) == 176);
  CHECK(offsetof(amk_instruction_t, operand6) == 240);
}

TEST_CASE("operand, buffer, diag and program layout") {
  CHECK(sizeof(amk_operand_t) == 16);
  CHECK(offsetof(amk_operand_t, offset) == 0);
  CHECK(offsetof(amk_operand_t, extent) == 8);
  CHECK(offsetof(amk_operand_t, buffer) == 12);
  CHECK(sizeof(amk_wait_t) == 8);
  CHECK(sizeof(amk_signal_t) == 8);
  CHECK(sizeof(amk_buffer_t) == 32);
  CHECK(offsetof(amk_buffer_t, address) == 0);
  CHECK(offsetof(amk_buffer_t, elements) == 8);
  CHECK(offsetof(amk_buffer_t, bytes) == 16);
  CHECK(offsetof(amk_buffer_t, dtype) == 24);
  CHECK(offsetof(amk_buffer_t, flags) == 28);
  CHECK(sizeof(amk_diag_t) == 64);
  CHECK(offsetof(amk_diag_t, elapsed_ns) == 32);
  CHECK(offsetof(amk_diag_t, detail) == 40);
  CHECK(sizeof(amk_device_program_t) == 96);
  CHECK(offsetof(amk_device_program_t, timeout_ns) == 64);
  CHECK(offsetof(amk_device_program_t, n_instructions) == 72);
  CHECK(offsetof(amk_device_program_t, iterations) == 88);
}

// Op ids are stored in .amkb files and dispatched on by the device: never renumbered. Retired
// ids (16..18) stay reserved below AMK_OP_ID_END.

TEST_CASE("op ids") {
  CHECK(static_cast<uint16_t>(amk_op::nop) == 0);
  CHECK(static_cast<uint16_t>(amk_op::gemv) == 9);
  CHECK(static_cast<uint16_t>(amk_op::rope) == 12);
  CHECK(static_cast<uint16_t>(amk_op::attention_decode) == 14);
  CHECK(static_cast<uint16_t>(amk_op::attention_combine) == 15);
  CHECK(static_cast<uint16_t>(amk_op::feed_token) == 19);
  CHECK(static_cast<uint16_t>(amk_op::all_reduce) == 20);
  CHECK(static_cast<uint16_t>(amk_op::send) == 21);
  CHECK(static_cast<uint16_t>(amk_op::recv) == 22);
  CHECK(AMK_OP_ID_END == 23);
  CHECK(AMK_CUSTOM_OP_BASE == 1000);
}
