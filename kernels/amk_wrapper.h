// The wrapper ABI: what amk hands a compiler-made megakernel (schemas/wrapper.md). A wrapper
// includes it as `#include "amk_wrapper.h"` (NVRTC gets it from amk, embedded); amk's host code
// includes it too, so the record layouts have one definition. C layout, no toolkit headers: NVRTC
// has no <stdint.h> or <cuda.h> without extra include paths.
#pragma once

#include "amk_abi.h"

// ---- the kernel's parameters ----

// The first 14 parameters are device pointers to the launch package's arrays, in this order
// (executor.py's launch_wrapper order); TMA descriptors follow, one per spec, from index 14.
#define AMK_WRAPPER_PARAM_INSTRUCTIONS 0u
#define AMK_WRAPPER_PARAM_QUEUE_OFFSETS 1u
#define AMK_WRAPPER_PARAM_QUEUE_LENGTHS 2u
#define AMK_WRAPPER_PARAM_SLOTS 3u
#define AMK_WRAPPER_PARAM_COMMS 4u
#define AMK_WRAPPER_PARAM_BARRIER_INIT_OFFSETS 5u
#define AMK_WRAPPER_PARAM_BARRIER_INIT_LENGTHS 6u
#define AMK_WRAPPER_PARAM_BARRIER_INIT_INDICES 7u
#define AMK_WRAPPER_PARAM_ARGS 8u
#define AMK_WRAPPER_PARAM_TENSOR_ARGS 9u
#define AMK_WRAPPER_PARAM_INPUT_SLOTS 10u
#define AMK_WRAPPER_PARAM_TASK_COORDS 11u
#define AMK_WRAPPER_PARAM_GLOBAL_STAGING 12u
#define AMK_WRAPPER_PARAM_FLAGS 13u
#define AMK_WRAPPER_POINTER_PARAMS 14u
#define AMK_WRAPPER_MAX_TMA 64u

// ---- records ----

// One tensor argument, as amk writes it into the tensor_args array (parameter 9), one record per
// tensor argument in program order: device address, dtype (AMK_DTYPE_*), rank, row-major shape
// and strides in elements; entries past `rank` are zero. 144 bytes, little endian.
#define AMK_WRAPPER_MAX_RANK 8u
#define AMK_WRAPPER_TENSOR_ARG_BYTES 144u
typedef struct amk_wrapper_tensor_arg {
  uint64_t data;
  uint32_t dtype;
  uint32_t rank;
  uint64_t shape[AMK_WRAPPER_MAX_RANK];
  int64_t strides[AMK_WRAPPER_MAX_RANK];
} amk_wrapper_tensor_arg_t;

// One comm record of the comms array (parameter 4), as the compiler writes it. amk reads `kind`
// only: an HBM send or receive makes amk zero the flags array before each launch.
#define AMK_WRAPPER_COMM_BYTES 32u
#define AMK_WRAPPER_COMM_HBM_SEND 3u
#define AMK_WRAPPER_COMM_HBM_RECV 4u
typedef struct amk_wrapper_comm {
  uint32_t kind;
  uint32_t peer;
  uint64_t send_offset;
  uint64_t recv_offset;
  uint64_t bytes;
} amk_wrapper_comm_t;

// Sizes are checked wherever the header is compiled as C++; field offsets on the host (NVRTC has
// no offsetof), which shares the layout rules of the device.
#ifdef __cplusplus
static_assert(sizeof(amk_wrapper_tensor_arg_t) == AMK_WRAPPER_TENSOR_ARG_BYTES, "tensor-arg ABI");
static_assert(sizeof(amk_wrapper_comm_t) == AMK_WRAPPER_COMM_BYTES, "comm record ABI");
#if !defined(__CUDACC_RTC__)
#include <stddef.h>
static_assert(offsetof(amk_wrapper_tensor_arg_t, dtype) == 8, "tensor-arg ABI");
static_assert(offsetof(amk_wrapper_tensor_arg_t, rank) == 12, "tensor-arg ABI");
static_assert(offsetof(amk_wrapper_tensor_arg_t, shape) == 16, "tensor-arg ABI");
static_assert(offsetof(amk_wrapper_tensor_arg_t, strides) == 80, "tensor-arg ABI");
static_assert(offsetof(amk_wrapper_comm_t, send_offset) == 8, "comm record ABI");
static_assert(offsetof(amk_wrapper_comm_t, bytes) == 24, "comm record ABI");
#endif
#endif

// ---- the abort word ----

// Word 0 of the flags array (parameter 13, read as uint32_t) is amk's: the host watchdog writes
// AMK_WRAPPER_ABORT there when the launch passes its deadline, and a wrapper that polls it returns
// so the launch ends (exit 8) instead of hanging. A wrapper that polls it keeps its own flags from
// word 1 on. amk allocates at least one word of flags, and zeroes word 0 with the others when the
// flags are reset.
#define AMK_WRAPPER_ABORT_WORD 0u
#define AMK_WRAPPER_ABORT 1u

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// Byte-for-byte the driver's CUtensorMap (128 bytes, 64-byte aligned), so a wrapper needs no
// <cuda.h>; declare TMA parameters `const __grid_constant__ amk_wrapper_tensor_map_t`.
typedef struct alignas(64) amk_wrapper_tensor_map {
  unsigned long long opaque[16];
} amk_wrapper_tensor_map_t;
static_assert(sizeof(amk_wrapper_tensor_map_t) == 128, "CUtensorMap is 128 bytes");

// True once the host has asked the launch to end (a volatile load: the host writes it while the
// kernel runs).
static __device__ __forceinline__ bool amk_wrapper_abort_requested(const uint32_t* flags) {
  return *(const volatile uint32_t*)(flags + AMK_WRAPPER_ABORT_WORD) == AMK_WRAPPER_ABORT;
}

// The 14 pointer parameters with amk's types, for a wrapper that wants them:
//   extern "C" __global__ void KERNEL(AMK_WRAPPER_PARAMS,
//                                     const __grid_constant__ amk_wrapper_tensor_map_t tma_0);
// A wrapper may declare any pointer types instead; only the order and count are fixed.
#define AMK_WRAPPER_PARAMS                                                                         \
  const uint8_t *instructions, const uint8_t *queue_offsets, const uint8_t *queue_lengths,         \
      uint8_t *slots, const amk_wrapper_comm_t *comms, const uint8_t *barrier_init_offsets,        \
      const uint8_t *barrier_init_lengths, const uint8_t *barrier_init_indices,                    \
      const uint8_t *args, const amk_wrapper_tensor_arg_t *tensor_args,                            \
      const uint8_t *input_slots, const uint8_t *task_coords, uint8_t *global_staging,             \
      uint32_t *flags
#endif
