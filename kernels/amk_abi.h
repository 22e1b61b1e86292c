// amk device ABI, version 1.
//
// The plain-old-data structs that the host builds and the persistent VM reads. This header is
// compiled by the host C++ compiler and by NVRTC (embedded at build time), and the binary program
// format (.amkb) stores the instruction table in exactly this layout so that it uploads as is.
// The host asserts every size and field offset (src/plan/abi_check.cpp); change nothing here
// without bumping AMK_ABI_VERSION.
#pragma once

#if defined(__CUDACC_RTC__)
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#else
#include <stdint.h>
#endif

#define AMK_ABI_VERSION 1u

// Fixed instruction geometry: one instruction is AMK_INSTRUCTION_BYTES, 16-byte aligned, so a
// block fetches it with sixteen 16-byte loads.
#define AMK_INSTRUCTION_BYTES 256u
#define AMK_MAX_OPERANDS 7u
#define AMK_INLINE_OPERANDS 6u  // slots 0-5 sit in operands[]; slot 6 in operand6, after params
#define AMK_MAX_WAITS 4u
#define AMK_MAX_SIGNALS 4u
#define AMK_MAX_PARAMS 16u

// Built-in op ids (amk_instruction_t::op). Part of the binary format and the device ABI: never
// renumber. Retired ids stay reserved: a program that uses one is refused (op.retired).
#ifdef __cplusplus
enum class amk_op : uint16_t {
  nop = 0,  // waits and signals only
  copy = 1,
  fill = 2,
  add = 3,
  mul = 4,
  scale = 5,
  silu_mul = 6,
  rmsnorm = 7,
  softmax = 8,
  gemv = 9,
  argmax = 10,
  embedding = 11,
  rope = 12,               // rotary position embedding (Llama 3 frequency scaling)
  kv_append = 13,          // one position of every kv head into a layer's cache
  attention_decode = 14,   // one kv head, a chunk of positions, its group of query heads
  attention_combine = 15,  // merges attention_decode partials across chunks
  // 16 (gemv_splitk), 17 (attention_combine_splitk), 18 (gemv_t): retired.
  feed_token = 19,  // a generation step's next token: the prompt's, then the argmax
  // Between the ranks of a program with launch.ranks > 1 (the CPU backend runs them).
  all_reduce = 20,  // x = the sum of x over every rank
  send = 21,        // x to rank `peer`'s matching recv
  recv = 22,        // y from rank `peer`'s matching send
};
#endif
// One past the highest id ever assigned to a built-in op; custom ops start at 1000.
#define AMK_OP_ID_END 23u
#define AMK_CUSTOM_OP_BASE 1000u

// An operand slot that the instruction leaves empty (optional operands).
#define AMK_NO_BUFFER 0xFFFFFFFFu

// Element types. The numeric values are part of the binary format.
#define AMK_DTYPE_F32 0u
#define AMK_DTYPE_F16 1u
#define AMK_DTYPE_BF16 2u
#define AMK_DTYPE_I32 3u
#define AMK_DTYPE_U32 4u
#define AMK_DTYPE_I64 5u
#define AMK_DTYPE_U8 6u
#define AMK_DTYPE_COUNT 7u

// Buffer flags.
#define AMK_BUFFER_OUTPUT 1u

// Diagnostic status written by the VM into host-mapped memory.
#define AMK_STATUS_OK 0u
#define AMK_STATUS_TIMEOUT 1u      // a wait passed the launch deadline
#define AMK_STATUS_ABORTED 2u      // the host or another block raised the abort flag
#define AMK_STATUS_BAD_OPERAND 3u  // an op found invalid data (e.g. an embedding id out of range)

// Elements [offset, offset + extent) of buffer `buffer`, counted in the buffer's dtype.
typedef struct amk_operand {
  uint64_t offset;
  uint32_t extent;
  uint32_t buffer;  // index into the buffer table, or AMK_NO_BUFFER
} amk_operand_t;

// amk_instruction_t::flags, set by the planner: the op's streamed operands (gemv w and w2;
// attention_decode's k and v views) are written by no instruction of the program, so the op may
// read them before its waits are met.
#define AMK_INS_CONST_WEIGHTS 1u

// Wait until counters[counter] >= value * pass (monotonic within a launch; pass counts the
// block's passes over its queue from 1). With AMK_WAIT_CARRIED set in `counter`, the wait is
// on the previous pass's signals: counters[counter & ~AMK_WAIT_CARRIED] >= value * (pass - 1),
// which holds at once in the first pass.
#define AMK_WAIT_CARRIED 0x80000000u
typedef struct amk_wait {
  uint32_t counter;
  uint32_t value;
} amk_wait_t;

// counters[counter] += add, after the instruction's stores are complete and fenced.
typedef struct amk_signal {
  uint32_t counter;
  uint32_t add;
} amk_signal_t;

// One instruction. `params` are 32-bit words whose meaning (f32 or u32/i32) the op's signature
// fixes, in signature order.
typedef struct alignas(16) amk_instruction {
  uint16_t op;         // op id (src/ops/registry): built-ins below 1000, custom ops from 1000
  uint8_t n_operands;  // operand slots used (trailing optional slots may hold AMK_NO_BUFFER)
  uint8_t n_waits;
  uint8_t n_signals;
  uint8_t n_params;
  uint16_t flags;  // zero in files; the planner sets AMK_INS_* bits in the device copy
  uint32_t index;  // position of this instruction in the program
  uint32_t reserved0;
  amk_operand_t operands[AMK_INLINE_OPERANDS];
  amk_wait_t waits[AMK_MAX_WAITS];
  amk_signal_t signals[AMK_MAX_SIGNALS];
  uint32_t params[AMK_MAX_PARAMS];
  amk_operand_t operand6;  // operand slot 6 (its own field: slots 0-5 keep their offsets)
} amk_instruction_t;

// Operand slot k (< AMK_MAX_OPERANDS) of an instruction.
#if defined(__CUDACC_RTC__)
#define AMK_ABI_FN __device__ __forceinline__
#else
#define AMK_ABI_FN inline
#endif
#ifdef __cplusplus
AMK_ABI_FN const amk_operand_t& amk_ins_operand(const amk_instruction_t& ins, uint32_t k) {
  return k < AMK_INLINE_OPERANDS ? ins.operands[k] : ins.operand6;
}
AMK_ABI_FN amk_operand_t& amk_ins_operand(amk_instruction_t& ins, uint32_t k) {
  return k < AMK_INLINE_OPERANDS ? ins.operands[k] : ins.operand6;
}
#endif

// One entry of the buffer table.
typedef struct alignas(16) amk_buffer {
  uint64_t address;  // device address (0 in a plan that is not yet placed)
  uint64_t elements;
  uint64_t bytes;
  uint32_t dtype;  // AMK_DTYPE_*
  uint32_t flags;  // AMK_BUFFER_*
} amk_buffer_t;

// What the watchdog or an op saw, written once by the first block that stops the launch.
// Lives in host-mapped memory so the host can read it even after the launch misbehaved.
typedef struct alignas(16) amk_diag {
  uint32_t status;  // AMK_STATUS_*
  uint32_t block;
  uint32_t queue_pos;
  uint32_t instruction;
  uint32_t op;
  uint32_t counter;
  uint32_t have;
  uint32_t need;
  uint64_t elapsed_ns;  // time the stuck wait had spun
  uint32_t detail;      // op-specific (e.g. the offending id)
  uint32_t reserved[5];
} amk_diag_t;

// The kernel's single parameter (besides __grid_constant__ tensor maps).
typedef struct alignas(16) amk_device_program {
  const amk_instruction_t* instructions;
  const uint32_t* queue_offsets;  // n_queues + 1 entries into queue_items
  const uint32_t* queue_items;    // instruction indices, queue after queue
  const amk_buffer_t* buffers;
  uint32_t* counters;    // zeroed before each launch
  uint32_t* abort_flag;  // device memory; nonzero stops every block
  amk_diag_t* diag;      // host-mapped
  uint64_t* trace;       // optional per-instruction timestamps (null when off)
  uint64_t timeout_ns;   // per-launch deadline, measured from each block's start
  uint32_t n_instructions;
  uint32_t n_queues;
  uint32_t n_buffers;
  uint32_t n_counters;
  uint32_t iterations;  // passes in this launch (waits compare value * pass)
} amk_device_program_t;

#if !defined(__CUDACC_RTC__) && defined(__cplusplus)
static_assert(sizeof(amk_operand_t) == 16, "amk ABI: operand size");
static_assert(sizeof(amk_instruction_t) == AMK_INSTRUCTION_BYTES, "amk ABI: instruction size");
static_assert(sizeof(amk_buffer_t) == 32, "amk ABI: buffer size");
static_assert(sizeof(amk_diag_t) == 64, "amk ABI: diag size");
#endif
