// A dataflow wrapper as a compiler would emit it (tests/wrapper/sample): each block walks its
// queue of 16-byte task records, initializes its mbarrier slots first, and writes one f32 per
// task into global staging. Loaded and checked by amk's unit tests, compiled by the nvrtc tier;
// launched by a later step. amk_wrapper.h (embedded in amk) gives the fixed-width types and the
// tensor-map type, so NVRTC needs no toolkit headers.
#include "amk_wrapper.h"

#ifndef DF_TILE
#error "DF_TILE is defined by the wrapper program"
#endif

struct df_task {
  uint32_t op, a, b, out;
};

extern "C" __global__ void df_main(const df_task* instructions, const int32_t* queue_offsets,
                                   const int32_t* queue_lengths, uint8_t* slots,
                                   const uint8_t* comms, const int32_t* barrier_init_offsets,
                                   const int32_t* barrier_init_lengths,
                                   const int32_t* barrier_init_indices, const float* args,
                                   const uint8_t* tensor_args, const int32_t* input_slots,
                                   const int32_t* task_coords, float* global_staging,
                                   uint32_t* flags,
                                   const __grid_constant__ amk_wrapper_tensor_map_t w_map) {
  const int q = blockIdx.x;
  for (int i = threadIdx.x; i < queue_lengths[q]; i += blockDim.x) {
    const df_task t = instructions[queue_offsets[q] + i];
    global_staging[t.out] = args[t.a % 4] * DF_TILE;
  }
}
