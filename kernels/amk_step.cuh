// One instruction per launch: the baseline `amk bench` compares the persistent VM against. The
// host launches amk_step once per instruction, one block each, in a legal order on one stream
// (or replays that sequence as a CUDA graph), so stream order does what the VM's counters do:
// there are no waits and no signals here, only the op, run through the VM's own dispatch so both
// entry points execute exactly the same op code. Compiled in only when the generated source
// defines AMK_STEP_KERNEL (CompileOptions::step_kernel), after amk_vm.cuh.
#ifndef AMK_STEP_CUH
#define AMK_STEP_CUH

#include "amk_vm.cuh"

#if AMK_STEP_KERNEL

// Same parameters as amk_vm plus the instruction index, which comes second so the tensor-map
// table stays the last (and 64-byte aligned) parameter. Launch with 1 block of AMK_BLOCK_THREADS
// threads and the VM's dynamic shared memory (the TMA gemv stages its tiles there).
extern "C" __global__ void __launch_bounds__(AMK_BLOCK_THREADS, 1)
    amk_step(const __grid_constant__ amk_device_program_t prog, uint32_t instruction
#if AMK_TMA_COUNT > 0
             ,
             const __grid_constant__ amk_tma_table_t tma
#endif
    ) {
  if (instruction >= prog.n_instructions) return;
  // The block state the ops rely on, as the VM sets it up: stop flag, watchdog origin, buffer
  // table, and the "queue position" a failing op reports (here: the instruction index).
  if (threadIdx.x == 0) {
    amk_state.stop = 0;
    amk_state.rope_valid = 0;
    amk_attn_block_init();  // (attention's K/V copy barrier, where the tiled path has one)
    amk_state.block_start = amk_globaltimer();
#ifdef AMK_TRACE
    amk_state.marks = nullptr;  // one launch an instruction: no trace
#endif
  }
  amk_buffers_init(prog);
  if (threadIdx.x % kAmkWarpSize == 0)
    amk_state.queue_pos[threadIdx.x / kAmkWarpSize] = instruction;
  __syncthreads();
  const amk_instruction_t& ins = prog.instructions[instruction];
  amk_no_wait no_wait;  // stream order stands for the waits
#if AMK_TMA_GEMV
  amk_dispatch(prog, ins, &tma, no_wait);
#else
  amk_dispatch(prog, ins, no_wait);
#endif
}

#endif  // AMK_STEP_KERNEL
#endif  // AMK_STEP_CUH
