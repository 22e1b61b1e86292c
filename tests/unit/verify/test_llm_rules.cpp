// Verifier shape and param rules of the decode-step ops, with exact codes and locations.
#include <doctest/doctest.h>

#include <cmath>

#include "verify/verify.hpp"

#include "common/program_builder.hpp"

using namespace amk;
using namespace amk::test;

namespace {

// The params given, then the signature's defaults for the rest.
void set_params(Builder& b, std::vector<uint32_t> params) {
  const OpSig* sig = find_op(b.last().op);
  for (size_t k = params.size(); k < sig->params.size(); ++k)
    params.push_back(*encode_param(sig->params[k].type, sig->params[k].default_value.value_or(0)));
  b.last().params = std::move(params);
}

std::vector<uint32_t> rope_params(uint32_t hd, uint32_t pos, float theta = 500000.0f,
                                  float factor = 32.0f, float low = 1.0f, float high = 4.0f,
                                  uint32_t orig = 8192) {
  return {hd, pos, f32_bits(theta), f32_bits(factor), f32_bits(low), f32_bits(high), orig};
}

// attention_decode's params: head_dim, scale, position, theta, then the rope op's scaling.
std::vector<uint32_t> attention_params(uint32_t hd, float scale = 0.0f, uint32_t pos = 0,
                                       float theta = 0.0f, float factor = 32.0f, float low = 1.0f,
                                       float high = 4.0f, uint32_t orig = 8192) {
  return {
      hd,  f32_bits(scale), pos, f32_bits(theta), f32_bits(factor), f32_bits(low), f32_bits(high),
      orig};
}

}  // namespace

TEST_CASE("rope rules") {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, 4 * 128);
  const uint32_t y = b.buffer("y", DType::bf16, 4 * 128);
  const uint32_t i32 = b.buffer("ids", DType::i32, 4 * 128);
  b.add("rope", {b.whole(x), b.whole(y), none()});
  set_params(b, rope_params(128, 5));
  CHECK_NOTHROW(check_instruction(b.p, 0));
  set_params(b, rope_params(128, 5, 10000.0f, 0.0f, 0.0f, 0.0f, 0));  // plain: factors unused
  CHECK_NOTHROW(check_instruction(b.p, 0));

  set_params(b, rope_params(0, 5));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  set_params(b, rope_params(127, 5));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  set_params(b, rope_params(96, 5));  // 512 % 96 != 0
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/x");
  set_params(b, rope_params(128, 5, 0.0f));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/theta");
  set_params(b, rope_params(128, 5, 500000.0f, -1.0f));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/scaling_factor");
  set_params(b, rope_params(128, 5, 500000.0f, 8.0f, 0.0f));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/low_freq_factor");
  set_params(b, rope_params(128, 5, 500000.0f, 8.0f, 4.0f, 4.0f));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/high_freq_factor");
  set_params(b, rope_params(128, 5, 500000.0f, 8.0f, 1.0f, 4.0f, 0));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param",
              "/instructions/0/params/original_max_position");

  set_params(b, rope_params(128, 5));
  b.last().operands[1] = slice(y, 0, 3 * 128);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/y");
  b.last().operands[1] = b.whole(i32);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/y");
}

TEST_CASE("kv_append rules") {
  Builder b;
  const uint32_t hd = 64, n_kv = 2, max_len = 16;
  const uint32_t x = b.buffer("x", DType::f32, n_kv * hd);
  const uint32_t cache = b.buffer("cache", DType::bf16, n_kv * max_len * hd + 64);
  b.add("kv_append", {b.whole(x), slice(cache, 64, n_kv * max_len * hd), none()});
  set_params(b, {hd, max_len - 1, max_len});
  CHECK_NOTHROW(check_instruction(b.p, 0));

  set_params(b, {hd, max_len, max_len});
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/position");
  set_params(b, {hd, 0, 0});
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/max_len");
  set_params(b, {0, 0, max_len});
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  set_params(b, {48, 0, max_len});  // 128 % 48 != 0
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/x");
  set_params(b, {hd, 0, max_len - 1});  // the cache is larger than n_kv * max_len * hd
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/cache");
  set_params(b, {hd / 2, 0, max_len});  // 4 heads of 32: the same extent, also valid
  CHECK_NOTHROW(check_instruction(b.p, 0));
}

TEST_CASE("attention_decode rules") {
  Builder b;
  const uint32_t hd = 128, group = 4, len = 64;
  const uint32_t q = b.buffer("q", DType::f32, group * hd);
  const uint32_t k = b.buffer("k", DType::bf16, 2 * len * hd);
  const uint32_t v = b.buffer("v", DType::bf16, 2 * len * hd);
  const uint32_t out = b.buffer("out", DType::f32, 2 * group * (hd + 2));
  const uint32_t out16 = b.buffer("out16", DType::bf16, group * (hd + 2));
  b.add("attention_decode",
        {b.whole(q), slice(k, len * hd, len * hd), slice(v, len * hd, len * hd),
         slice(out, group * (hd + 2), group * (hd + 2)), none(), none(), none()});
  set_params(b, attention_params(hd));
  CHECK_NOTHROW(check_instruction(b.p, 0));
  set_params(b, attention_params(hd, 0.125f));
  CHECK_NOTHROW(check_instruction(b.p, 0));

  set_params(b, attention_params(0));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  set_params(b, attention_params(512));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  set_params(b, attention_params(hd, INFINITY));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/scale");
  set_params(b, attention_params(96));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/q");

  set_params(b, attention_params(hd));
  b.last().operands[1] = slice(k, 0, len * hd + 1);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/k");
  b.last().operands[1] = slice(k, 0, (len - 1) * hd);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/v");
  b.last().operands[1] = slice(k, 0, len * hd);
  b.last().operands[3] = slice(out, 0, group * (hd + 2) - 1);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/out");
  b.last().operands[3] = b.whole(out16);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/out");
}

TEST_CASE("attention_decode rules: fused RoPE and the new token's row") {
  Builder b;
  const uint32_t hd = 64, group = 4, len = 32;
  const uint32_t q = b.buffer("q", DType::f32, group * hd);
  const uint32_t k = b.buffer("k", DType::bf16, len * hd);
  const uint32_t v = b.buffer("v", DType::bf16, len * hd);
  const uint32_t out = b.buffer("out", DType::f32, group * (hd + 2));
  const uint32_t kn = b.buffer("k_new", DType::f32, 2 * hd);
  const uint32_t vn = b.buffer("v_new", DType::bf16, hd);
  const uint32_t ids = b.buffer("ids", DType::i32, hd);
  b.add("attention_decode",
        {b.whole(q), b.whole(k), b.whole(v), b.whole(out), slice(kn, hd, hd), b.whole(vn), none()});
  set_params(b, attention_params(hd, 0.0f, 17, 500000.0f));
  CHECK_NOTHROW(check_instruction(b.p, 0));
  // Plain RoPE: the Llama 3 factors are unused.
  set_params(b, attention_params(hd, 0.0f, 17, 10000.0f, 0.0f, 0.0f, 0.0f, 0));
  CHECK_NOTHROW(check_instruction(b.p, 0));
  // No rotation: the scaling params are not looked at.
  set_params(b, attention_params(hd, 0.0f, 17, 0.0f, -1.0f, 0.0f, 0.0f, 0));
  CHECK_NOTHROW(check_instruction(b.p, 0));

  SUBCASE("theta") {
    set_params(b, attention_params(hd, 0.0f, 17, -1.0f));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/theta");
    set_params(b, attention_params(hd, 0.0f, 17, INFINITY));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/theta");
    set_params(b, attention_params(hd, 0.0f, 17, NAN));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/theta");
  }
  SUBCASE("the rope op's scaling rules apply when theta != 0") {
    set_params(b, attention_params(hd, 0.0f, 17, 500000.0f, -1.0f));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/scaling_factor");
    set_params(b, attention_params(hd, 0.0f, 17, 500000.0f, 8.0f, 0.0f));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param",
                "/instructions/0/params/low_freq_factor");
    set_params(b, attention_params(hd, 0.0f, 17, 500000.0f, 8.0f, 4.0f, 4.0f));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param",
                "/instructions/0/params/high_freq_factor");
    set_params(b, attention_params(hd, 0.0f, 17, 500000.0f, 8.0f, 1.0f, 4.0f, 0));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param",
                "/instructions/0/params/original_max_position");
  }
  SUBCASE("head_dim must be even with theta, may be odd without") {
    const uint32_t odd = 63;
    b.last().operands = {slice(q, 0, 4 * odd),
                         slice(k, 0, 8 * odd),
                         slice(v, 0, 8 * odd),
                         slice(out, 0, 4 * (odd + 2)),
                         slice(kn, 0, odd),
                         slice(vn, 0, odd),
                         none()};
    set_params(b, attention_params(odd));
    CHECK_NOTHROW(check_instruction(b.p, 0));
    set_params(b, attention_params(odd, 0.0f, 17, 500000.0f));
    CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  }
  SUBCASE("k_new and v_new: both or neither, one head each, float") {
    b.last().operands[5] = none();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/v_new");
    b.last().operands[5] = b.whole(vn);
    b.last().operands[4] = none();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/k_new");
    b.last().operands[4] = b.whole(kn);  // two heads
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/k_new");
    b.last().operands[4] = slice(kn, 0, hd);
    b.last().operands[5] = slice(vn, 0, hd - 2);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/v_new");
    b.last().operands[5] = b.whole(ids);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/v_new");
  }
  SUBCASE("an empty cache chunk needs the new row") {
    b.last().operands[1] = slice(k, len * hd, 0);
    b.last().operands[2] = slice(v, len * hd, 0);
    CHECK_NOTHROW(check_instruction(b.p, 0));
    b.last().operands[2] = slice(v, 0, hd);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/v");
    b.last().operands[2] = slice(v, 0, 0);
    b.last().operands[4] = none();
    b.last().operands[5] = none();
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/k");
    // The other operands of the op, and other ops, still refuse an empty operand.
    b.last().operands[3] = slice(out, 0, 0);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.extent",
                "/instructions/0/operands/out/extent");
  }
  SUBCASE("empty operands stay refused for other ops and slots") {
    b.last().operands[4] = slice(kn, 0, 0);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.extent",
                "/instructions/0/operands/k_new/extent");
    b.add("rope", {slice(q, 0, 0), b.whole(q), none()});
    set_params(b, rope_params(hd, 5));
    CHECK_ERROR(check_instruction(b.p, 1), "verify.operand.extent",
                "/instructions/1/operands/x/extent");
  }
}

TEST_CASE("attention_combine rules") {
  Builder b;
  const uint32_t hd = 64, group = 2, chunks = 3;
  const uint32_t part = b.buffer("partials", DType::f32, chunks * group * (hd + 2));
  const uint32_t part16 = b.buffer("partials16", DType::f16, chunks * group * (hd + 2));
  const uint32_t out = b.buffer("out", DType::bf16, group * hd);
  b.add("attention_combine", {b.whole(part), b.whole(out)});
  set_params(b, {hd, 1});
  CHECK_NOTHROW(check_instruction(b.p, 0));
  set_params(b, {hd, 2});  // two kv heads of one query head each, 3 chunks apiece
  CHECK_NOTHROW(check_instruction(b.p, 0));

  set_params(b, {0, 1});
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  set_params(b, {48, 1});  // 128 % 48 != 0
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/out");
  set_params(b, {hd, 0});
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/kv_heads");
  set_params(b, {hd, 4});  // out holds 2 query heads: not 4 kv heads' worth
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/out");
  set_params(b, {hd, 1});
  b.last().operands[0] = slice(part, 0, chunks * group * (hd + 2) - 2);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/partials");
  // 2 kv heads of 1 query head: partials must be 2 x chunks x (hd + 2); 5 rows are not.
  set_params(b, {hd, 2});
  b.last().operands[0] = slice(part, 0, 5 * (hd + 2));
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/partials");
  set_params(b, {hd, 1});
  b.last().operands[0] = b.whole(part16);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/partials");
}

// gemv with head_dim / heads: x is chunk-major attention partials (chunks x heads x (head_dim + 2)
// f32), merged into x' of K = heads * head_dim before the row dot products.
TEST_CASE("gemv merging attention partials: rules") {
  Builder b;
  const uint32_t hd = 64, heads = 4, chunks = 3, k = heads * hd;
  const uint32_t w = b.buffer("w", DType::bf16, 20 * k);
  const uint32_t parts = b.buffer("parts", DType::f32, chunks * heads * (hd + 2));
  const uint32_t parts16 = b.buffer("parts16", DType::bf16, chunks * heads * (hd + 2));
  const uint32_t y = b.buffer("y", DType::f32, 20);
  const uint32_t norm = b.buffer("norm", DType::f32, k);
  b.add("gemv", {b.whole(w), b.whole(parts), b.whole(y), none(), none(), none()});
  set_params(b, {f32_bits(1e-5f), hd, heads});
  CHECK_NOTHROW(check_instruction(b.p, 0));
  // The same operands without the merge: K would be extent(x), which does not divide w.
  set_params(b, {f32_bits(1e-5f), 0, 0});
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/w");
  // Two chunks are as good as three (any whole number of them, 1 to 64).
  set_params(b, {f32_bits(1e-5f), hd, heads});
  b.last().operands[1] = slice(parts, 0, 2 * heads * (hd + 2));
  CHECK_NOTHROW(check_instruction(b.p, 0));
  b.last().operands[1] = slice(parts, 0, 2 * heads * (hd + 2) + 1);  // not whole chunks
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/x");
  b.last().operands[1] = b.whole(parts16);  // partials are f32
  CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/x");
  b.last().operands[1] = b.whole(parts);
  set_params(b, {f32_bits(1e-5f), 62, heads});  // head_dim a multiple of 4
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
  set_params(b, {f32_bits(1e-5f), hd, 0});
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/heads");
  set_params(b, {f32_bits(1e-5f), 128, 33});  // K = 4224 > the 4096 staged floats
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/heads");
  set_params(b, {f32_bits(1e-5f), hd, heads});
  b.last().operands[4] = b.whole(norm);  // no rmsnorm of a merged x
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/norm");
  b.last().operands[4] = none();
  b.last().operands[5] = b.whole(w);  // no GLU either
  CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/w2");
  b.last().operands[5] = none();
  CHECK_NOTHROW(check_instruction(b.p, 0));
  // More than kGemvCombineMaxChunks chunks.
  const uint32_t many = b.buffer("many", DType::f32, 65 * 1 * (4 + 2));
  const uint32_t w4 = b.buffer("w4", DType::bf16, 3 * 4);
  const uint32_t y3 = b.buffer("y3", DType::f32, 3);
  b.add("gemv", {b.whole(w4), b.whole(many), b.whole(y3), none(), none(), none()});
  set_params(b, {f32_bits(1e-5f), 4, 1});
  CHECK_ERROR(check_instruction(b.p, 1), "verify.shape", "/instructions/1/operands/x");
  b.last().operands[1] = slice(many, 0, 64 * 6);
  CHECK_NOTHROW(check_instruction(b.p, 1));
}

// The position operand of rope (slot 2), kv_append (slot 2) and attention_decode (slot 6): one u32
// or i32 element.
TEST_CASE("position operand rules") {
  Builder b;
  const uint32_t hd = 8, max_len = 4;
  const uint32_t x = b.buffer("x", DType::f32, 2 * hd);
  const uint32_t cache = b.buffer("cache", DType::f32, 2 * max_len * hd);
  const uint32_t out = b.buffer("out", DType::f32, hd + 2);
  const uint32_t pos = b.buffer("pos", DType::u32, 2);
  const uint32_t ipos = b.buffer("ipos", DType::i32, 1);
  const uint32_t fpos = b.buffer("fpos", DType::f32, 1);
  b.add("rope", {b.whole(x), b.whole(x), slice(pos, 1, 1)});
  set_params(b, rope_params(hd, 0));
  b.add("kv_append", {b.whole(x), b.whole(cache), slice(pos, 0, 1)});
  set_params(b, {hd, 0, max_len});
  b.add("attention_decode",
        {slice(x, 0, hd), slice(cache, 0, max_len * hd), slice(cache, max_len * hd, max_len * hd),
         b.whole(out), none(), none(), b.whole(ipos)});
  set_params(b, attention_params(hd));
  for (uint32_t i = 0; i < 3; ++i) CHECK_NOTHROW(check_instruction(b.p, i));

  const char* where[] = {"/instructions/0/operands/position", "/instructions/1/operands/position",
                         "/instructions/2/operands/position"};
  const size_t slot[] = {2, 2, 6};
  for (uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    Operand& p = b.p.instructions[i].operands[slot[i]];
    const Operand keep = p;
    p = b.whole(pos);  // two elements
    CHECK_ERROR(check_instruction(b.p, i), "verify.shape", where[i]);
    p = b.whole(fpos);
    CHECK_ERROR(check_instruction(b.p, i), "verify.dtype", where[i]);
    p = b.whole(ipos);
    CHECK_NOTHROW(check_instruction(b.p, i));
    p = keep;
  }
  // With the operand, kv_append's position param is not used: only without it must it fit.
  b.p.instructions[1].params[1] = max_len;  // position
  CHECK_NOTHROW(check_instruction(b.p, 1));
  b.p.instructions[1].operands[2] = none();
  CHECK_ERROR(check_instruction(b.p, 1), "verify.param", "/instructions/1/params/position");
}

TEST_CASE("kv_append with RoPE") {
  Builder b;
  const uint32_t hd = 6, max_len = 4;
  const uint32_t x = b.buffer("x", DType::f32, 2 * hd);
  const uint32_t cache = b.buffer("cache", DType::bf16, 2 * max_len * hd);
  b.add("kv_append", {b.whole(x), b.whole(cache), none()});
  // theta, then the rope op's scaling params.
  auto params = [&](uint32_t head_dim, float theta, float factor = 32.0f, float low = 1.0f,
                    float high = 4.0f, uint32_t orig = 8192) {
    set_params(b, {head_dim, 0, max_len, f32_bits(theta), f32_bits(factor), f32_bits(low),
                   f32_bits(high), orig});
  };
  params(hd, 500000.0f);
  CHECK_NOTHROW(check_instruction(b.p, 0));
  params(hd, 0.0f, -1.0f);  // no rotation: the scaling params are not looked at
  CHECK_NOTHROW(check_instruction(b.p, 0));

  params(hd, -1.0f);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/theta");
  params(hd, NAN);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/theta");
  params(hd, 500000.0f, -1.0f);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/scaling_factor");
  params(hd, 500000.0f, 8.0f, 4.0f, 4.0f);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/high_freq_factor");
  // RoPE pairs the halves of a head: an odd head_dim only without rotation.
  b.p.instructions[0].operands = {slice(x, 0, 3 * 3), slice(cache, 0, 3 * max_len * 3), none()};
  params(3, 0.0f);
  CHECK_NOTHROW(check_instruction(b.p, 0));
  params(3, 10000.0f, 0.0f);
  CHECK_ERROR(check_instruction(b.p, 0), "verify.param", "/instructions/0/params/head_dim");
}

TEST_CASE("feed_token rules") {
  Builder b;
  const uint32_t vocab = 5, steps = 3;
  const uint32_t index = b.buffer("index", DType::u32, 2);
  const uint32_t prompt = b.buffer("prompt", DType::i32, 4);
  const uint32_t token = b.buffer("token", DType::u32, 2);
  const uint32_t ids = b.buffer("ids", DType::i64, 8);
  const uint32_t logits = b.buffer("logits", DType::f32, vocab);
  const uint32_t all = b.buffer("all_logits", DType::f32, steps * vocab + 1);
  const uint32_t half = b.buffer("half", DType::f16, vocab);
  b.add("feed_token", {slice(index, 0, 1), b.whole(prompt), slice(token, 1, 1), b.whole(ids),
                       b.whole(logits), slice(all, 0, steps * vocab), none()});
  CHECK_NOTHROW(check_instruction(b.p, 0));
  Instruction& ins = b.last();
  SUBCASE("index and token are one element") {
    ins.operands[0] = b.whole(index);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/index");
    ins.operands[0] = slice(index, 1, 1);
    ins.operands[2] = b.whole(token);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/token");
  }
  SUBCASE("a prompt of one token is enough, of none is not") {
    ins.operands[1] = slice(prompt, 3, 1);
    CHECK_NOTHROW(check_instruction(b.p, 0));
    ins.operands[1] = slice(prompt, 3, 0);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.operand.extent",
                "/instructions/0/operands/prompt/extent");
  }
  SUBCASE("ids and the logits are optional; logits and all_logits go together") {
    ins.operands[3] = none();
    ins.operands[4] = none();
    ins.operands[5] = none();
    CHECK_NOTHROW(check_instruction(b.p, 0));
    ins.operands[4] = b.whole(logits);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/all_logits");
    ins.operands[4] = none();
    ins.operands[5] = b.whole(all);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/logits");
  }
  SUBCASE("all_logits holds whole rows of logits") {
    ins.operands[5] = b.whole(all);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.shape", "/instructions/0/operands/all_logits");
    ins.operands[5] = slice(all, 1, vocab);  // one step's row is enough
    CHECK_NOTHROW(check_instruction(b.p, 0));
  }
  SUBCASE("dtypes") {
    ins.operands[4] = b.whole(half);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/logits");
    ins.operands[4] = b.whole(logits);
    ins.operands[2] = slice(all, 0, 1);
    CHECK_ERROR(check_instruction(b.p, 0), "verify.dtype", "/instructions/0/operands/token");
  }
}
