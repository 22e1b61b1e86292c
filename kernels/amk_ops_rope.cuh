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

// cos and sin of position() * inv_freq_i, with theta, scaling_factor, low_freq_factor,
// high_freq_factor and original_max_position from ins.params[theta_at] on. inv_freq is Hugging
// Face's Llama 3 scaling (_compute_llama3_parameters) and the angle is formed and reduced in
// double, so long positions keep their accuracy (the CPU reference does the same); only the
// results round to f32. `position` returns a double where the angle needs it.
template <class Position>
__device__ __forceinline__ void amk_rope_cos_sin_at(const amk_instruction_t& ins, uint32_t theta_at,
                                                    uint32_t i, float& c, float& s,
                                                    Position&& position) {
  const uint32_t hd = ins.params[0];
  const double theta = __uint_as_float(ins.params[theta_at]);
  const double factor = __uint_as_float(ins.params[theta_at + 1]);
  double inv = pow(theta, -2.0 * i / hd);
  if (factor != 0.0) {
    const double low = __uint_as_float(ins.params[theta_at + 2]);
    const double high = __uint_as_float(ins.params[theta_at + 3]);
    const double original_max = ins.params[theta_at + 4];
    const double wavelen = kAmkTwoPi / inv;
    if (wavelen > original_max / low) {
      inv = inv / factor;
    } else if (!(wavelen < original_max / high)) {  // the band in between: interpolate
      const double smooth = (original_max / wavelen - low) / (high - low);
      inv = (1.0 - smooth) * inv / factor + smooth * inv;
    }
  }
  const double angle = position() * inv;
  const double turns = rint(angle * kAmkInvTwoPi);
  const double r = fma(-turns, kAmkTwoPiLo, fma(-turns, kAmkTwoPi, angle));  // |r| <= ~pi
  // sincospi needs no large-argument reduction (sincos would compile one in, with a stack frame).
  double sd, cd;
  sincospi(r * kAmkInvPi, &sd, &cd);
  c = static_cast<float>(cd);
  s = static_cast<float>(sd);
}
// The same with the position in ins.params[at] and the rest of the block after it.
__device__ __forceinline__ void amk_rope_cos_sin(const amk_instruction_t& ins, uint32_t at,
                                                 uint32_t i, float& c, float& s) {
  amk_rope_cos_sin_at(ins, at + 1, i, c, s, [&] { return static_cast<double>(ins.params[at]); });
}

// Each head of hd elements of x rotated: y[i] = x[i] cos - x[i + hd/2] sin, y[i + hd/2] =
// x[i + hd/2] cos + x[i] sin, handed to store(e, y[e]) (e indexes x). One thread per (head, i)
// pair reads both inputs before storing, so y may overwrite x. cos_sin(i, c, s) gives pair i's
// angles; every head shares them, so where they fit in the scratch they are computed once per
// frequency (then a barrier).
template <class CosSin, class Store>
__device__ __forceinline__ void amk_rope_heads(const amk_view& x, uint32_t hd,
                                               unsigned char* scratch, CosSin&& cos_sin,
                                               Store&& store) {
  const uint32_t half = hd / 2;
  const uint32_t pairs = x.n / hd * half;
  float* table = reinterpret_cast<float*>(scratch);
  const bool tabled = half <= kAmkRopeTable;
  if (tabled) {  // one double-precision evaluation per frequency
    for (uint32_t i = threadIdx.x; i < half; i += kAmkBlockThreads)
      cos_sin(i, table[2 * i], table[2 * i + 1]);
    amk_sync();
  }
  for (uint32_t p = threadIdx.x; p < pairs; p += kAmkBlockThreads) {
    const uint32_t head = p / half, i = p - head * half;
    float c, s;
    if (tabled) {
      c = table[2 * i];
      s = table[2 * i + 1];
    } else {
      cos_sin(i, c, s);
    }
    const uint64_t base = static_cast<uint64_t>(head) * hd;
    const float a = amk_load_f32(x, base + i);
    const float b = amk_load_f32(x, base + i + half);
    store(base + i, fmaf(a, c, -b * s));
    store(base + i + half, fmaf(b, c, a * s));
  }
}

// A stepped op whose position is not valid stops the launch (detail: the position's low word).
__device__ __forceinline__ bool amk_position_failed(const amk_device_program_t& prog,
                                                    const amk_instruction_t& ins,
                                                    const amk_position& pos) {
  if (!pos.ok && threadIdx.x == 0) amk_fail_operand(prog, ins, static_cast<uint32_t>(pos.value));
  return !pos.ok;
}

// rope: y = x rotated at `position`, or with the position operand (stepped programs) at
// position[0] + pass - 1.
__device__ __forceinline__ void amk_op_rope(const amk_device_program_t& prog,
                                            const amk_instruction_t& ins, unsigned char* scratch) {
  const amk_view x = amk_operand(ins, 0);
  const amk_view y = amk_operand(ins, 1);
  const uint32_t hd = ins.params[0];
  if (hd < 2) return;
  auto store = [&](uint64_t e, float v) { amk_store_f32(y, e, v); };
  if constexpr (kAmkCfg.stepped) {
    const amk_position pos = amk_op_position(ins, 2, kAmkRopeParamsOfRope);
    if (amk_position_failed(prog, ins, pos)) return;
    const double position = static_cast<double>(pos.value);
    amk_rope_heads(
        x, hd, scratch,
        [&](uint32_t i, float& c, float& s) {
          amk_rope_cos_sin_at(ins, kAmkRopeParamsOfRope + 1, i, c, s, [&] { return position; });
        },
        store);
  } else {
    (void)prog;
    amk_rope_heads(
        x, hd, scratch,
        [&](uint32_t i, float& c, float& s) {
          amk_rope_cos_sin(ins, kAmkRopeParamsOfRope, i, c, s);
        },
        store);
  }
}

// cache[h, position, :] = x[h*hd : (h+1)*hd]; cache is [n_kv, max_len, hd], head-major. In
// stepped programs: with the position operand at P = position[0] + pass - 1 (a P past max_len
// stops the launch instead of writing out of bounds), and theta != 0 rotates each head like rope
// at that position before it is stored.
__device__ __forceinline__ void amk_op_kv_append(const amk_device_program_t& prog,
                                                 const amk_instruction_t& ins,
                                                 unsigned char* scratch) {
  // kv_append's params: position at 1, then max_len, then theta and the scaling params from 3.
  // (Constants here, not at namespace scope: NVRTC keeps every namespace-scope constant in the
  // cubin, and a VM without the stepped paths stays the VM it was.)
  constexpr uint32_t kPosition = 1, kTheta = 3;
  const amk_view x = amk_operand(ins, 0);
  const amk_view cache = amk_operand(ins, 1);
  const uint32_t hd = ins.params[0];
  uint64_t position = ins.params[kPosition];
  const uint64_t max_len = ins.params[2];
  if (hd == 0) return;
  if constexpr (kAmkCfg.stepped) {
    amk_position pos = amk_op_position(ins, 2, kPosition);
    pos.ok = pos.ok && pos.value < max_len;
    if (amk_position_failed(prog, ins, pos)) return;
    position = pos.value;
    if (__uint_as_float(ins.params[kTheta]) != 0.0f && hd % 2 == 0) {
      const double angle_pos = static_cast<double>(position);
      amk_rope_heads(
          x, hd, scratch,
          [&](uint32_t i, float& c, float& s) {
            amk_rope_cos_sin_at(ins, kTheta, i, c, s, [&] { return angle_pos; });
          },
          [&](uint64_t e, float v) {
            const uint64_t h = e / hd, d = e - h * hd;
            amk_store_f32(cache, (h * max_len + position) * hd + d, v);
          });
      return;
    }
  } else {
    (void)prog;
    (void)scratch;
  }
  for (uint32_t e = threadIdx.x; e < x.n; e += kAmkBlockThreads) {
    const uint32_t h = e / hd, d = e - h * hd;
    amk_store_f32(cache, (h * max_len + position) * hd + d, amk_load_f32(x, e));
  }
}
