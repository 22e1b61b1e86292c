// Row reductions: rmsnorm and softmax. One row at a time over the whole block (decode rows are
// long and few); block reductions through warp shuffles. Each thread rereads its own elements
// for the output pass, so y may alias x.
#ifndef AMK_OPS_NORM_CUH
#define AMK_OPS_NORM_CUH

#include "amk_device.cuh"

#if AMK_USE_OP_RMSNORM
// y = x / sqrt(mean(x^2) + eps) * weight, rows of extent(weight).
AMK_OP_FN void amk_op_rmsnorm(const amk_device_program_t&, const amk_instruction_t& ins,
                              unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view w = amk_operand(ins, 1);
  const amk_view y = amk_operand(ins, 2);
  const float eps = __uint_as_float(ins.params[0]);
  const uint32_t d = w.n;
  if (d == 0) return;
  const uint32_t rows = x.n / d;
  for (uint32_t r = 0; r < rows; ++r) {
    const uint64_t base = static_cast<uint64_t>(r) * d;
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < d; i += AMK_BLOCK_THREADS) {
      const float v = amk_load_f32(x, base + i);
      ss = fmaf(v, v, ss);
    }
    ss = amk_block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    for (uint32_t i = threadIdx.x; i < d; i += AMK_BLOCK_THREADS)
      amk_store_f32(y, base + i, amk_load_f32(x, base + i) * inv * amk_load_f32(w, i));
  }
}
#endif

#if AMK_USE_OP_SOFTMAX
// Row-wise softmax(scale * x) over rows of `cols` elements (0: the whole extent).
AMK_OP_FN void amk_op_softmax(const amk_device_program_t&, const amk_instruction_t& ins,
                              unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view y = amk_operand(ins, 1);
  const uint32_t cols = ins.params[0] != 0 ? ins.params[0] : x.n;
  const float scale = __uint_as_float(ins.params[1]);
  if (cols == 0) return;
  const uint32_t rows = x.n / cols;
  for (uint32_t r = 0; r < rows; ++r) {
    const uint64_t base = static_cast<uint64_t>(r) * cols;
    float m = -__int_as_float(0x7f800000);
    for (uint32_t i = threadIdx.x; i < cols; i += AMK_BLOCK_THREADS)
      m = fmaxf(m, scale * amk_load_f32(x, base + i));
    m = amk_block_max(m, scratch);
    float s = 0.0f;
    for (uint32_t i = threadIdx.x; i < cols; i += AMK_BLOCK_THREADS)
      s += expf(scale * amk_load_f32(x, base + i) - m);
    s = amk_block_sum(s, scratch);
    const float inv = 1.0f / s;
    for (uint32_t i = threadIdx.x; i < cols; i += AMK_BLOCK_THREADS)
      amk_store_f32(y, base + i, expf(scale * amk_load_f32(x, base + i) - m) * inv);
  }
}
#endif

#endif  // AMK_OPS_NORM_CUH
