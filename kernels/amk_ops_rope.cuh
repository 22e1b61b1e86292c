// The rope and kv_append ops (op ids 12, 13), and the RoPE angles attention_decode shares with
// them. Semantics and shape rules: the registry summaries, verify/op_rules.cpp and the CPU
// reference in backend/cpu_ops.cpp.
#pragma once

#include "amk_device.cuh"

__device__ __forceinline__ float amk_neg_inf() { return -__int_as_float(0x7f800000); }

// (cos, sin) pairs that fit in the op scratch; longer heads compute each pair where it is used.
constexpr uint32_t kAmkRopeTable = kAmkScratchBytes / (2 * sizeof(float));
constexpr double kAmkTwoPi = 6.283185307179586;         // 2*pi rounded to double
constexpr double kAmkTwoPiLo = 2.4492935982947064e-16;  // 2*pi - kAmkTwoPi
constexpr double kAmkInvTwoPi = 0.15915494309189535;
constexpr double kAmkInvPi = 0.3183098861837907;
// Where the RoPE params start (position, theta, scaling_factor, low_freq_factor,
// high_freq_factor, original_max_position, in this order); head_dim is param 0 of both ops.
constexpr uint32_t kAmkRopeParamsOfRope = 1;
constexpr uint32_t kAmkRopeParamsOfAttention = 2;

// cos and sin of position * inv_freq_i, the RoPE params from ins.params[at]. inv_freq is Hugging
// Face's Llama 3 scaling (_compute_llama3_parameters) and the angle is formed and reduced in
// double, so long positions keep their accuracy (the CPU reference does the same); only the
// results round to f32.
__device__ __forceinline__ void amk_rope_cos_sin(const amk_instruction_t& ins, uint32_t at,
                                                 uint32_t i, float& c, float& s) {
  const uint32_t hd = ins.params[0];
  const double theta = __uint_as_float(ins.params[at + 1]);
  const double factor = __uint_as_float(ins.params[at + 2]);
  double inv = pow(theta, -2.0 * i / hd);
  if (factor != 0.0) {
    const double low = __uint_as_float(ins.params[at + 3]);
    const double high = __uint_as_float(ins.params[at + 4]);
    const double original_max = ins.params[at + 5];
    const double wavelen = kAmkTwoPi / inv;
    if (wavelen > original_max / low) {
      inv = inv / factor;
    } else if (!(wavelen < original_max / high)) {  // the band in between: interpolate
      const double smooth = (original_max / wavelen - low) / (high - low);
      inv = (1.0 - smooth) * inv / factor + smooth * inv;
    }
  }
  const double angle = static_cast<double>(ins.params[at]) * inv;
  const double turns = rint(angle * kAmkInvTwoPi);
  const double r = fma(-turns, kAmkTwoPiLo, fma(-turns, kAmkTwoPi, angle));  // |r| <= ~pi
  // sincospi needs no large-argument reduction (sincos would compile one in, with a stack frame).
  double sd, cd;
  sincospi(r * kAmkInvPi, &sd, &cd);
  c = static_cast<float>(cd);
  s = static_cast<float>(sd);
}

// y[i] = x[i] cos - x[i + hd/2] sin, y[i + hd/2] = x[i + hd/2] cos + x[i] sin for each head.
// One thread per (head, i) pair reads both inputs before writing: y may alias x.
__device__ __forceinline__ void amk_op_rope(const amk_device_program_t&,
                                            const amk_instruction_t& ins, unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view y = amk_operand(ins, 1);
  const uint32_t hd = ins.params[0];
  if (hd < 2) return;
  const uint32_t half = hd / 2;
  const uint32_t pairs = x.n / hd * half;
  float* table = reinterpret_cast<float*>(scratch);
  const bool tabled = half <= kAmkRopeTable;
  if (tabled) {  // every head shares the angles: one double-precision evaluation per frequency
    for (uint32_t i = threadIdx.x; i < half; i += kAmkBlockThreads)
      amk_rope_cos_sin(ins, kAmkRopeParamsOfRope, i, table[2 * i], table[2 * i + 1]);
    __syncthreads();
  }
  for (uint32_t p = threadIdx.x; p < pairs; p += kAmkBlockThreads) {
    const uint32_t head = p / half, i = p - head * half;
    float c, s;
    if (tabled) {
      c = table[2 * i];
      s = table[2 * i + 1];
    } else {
      amk_rope_cos_sin(ins, kAmkRopeParamsOfRope, i, c, s);
    }
    const uint64_t base = static_cast<uint64_t>(head) * hd;
    const float a = amk_load_f32(x, base + i);
    const float b = amk_load_f32(x, base + i + half);
    amk_store_f32(y, base + i, fmaf(a, c, -b * s));
    amk_store_f32(y, base + i + half, fmaf(b, c, a * s));
  }
}

// cache[h, position, :] = x[h*hd : (h+1)*hd]; cache is [n_kv, max_len, hd], head-major.
__device__ __forceinline__ void amk_op_kv_append(const amk_device_program_t&,
                                                 const amk_instruction_t& ins) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view cache = amk_operand(ins, 1);
  const uint32_t hd = ins.params[0];
  const uint64_t position = ins.params[1], max_len = ins.params[2];
  if (hd == 0) return;
  for (uint32_t e = threadIdx.x; e < x.n; e += kAmkBlockThreads) {
    const uint32_t h = e / hd, d = e - h * hd;
    amk_store_f32(cache, (h * max_len + position) * hd + d, amk_load_f32(x, e));
  }
}
