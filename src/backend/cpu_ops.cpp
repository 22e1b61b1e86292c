// CPU reference implementations of the built-in ops (semantics: ops/registry.cpp summaries).
//
// Precision: elementwise ops (add, mul, scale, silu_mul) compute in f32 like the device, so they
// match it bit for bit up to libm's expf. Reductions (gemv, rmsnorm, softmax) accumulate in
// double: the reference is then more accurate than any f32 device order, and device results are
// compared to it by normalized error. Outputs are rounded to their dtype by store_element
// (round to nearest even). rope computes its angles and the rotation in double, attention in
// double throughout. Inputs are copied out before outputs are written, so an output that
// aliases an input (y = a + y, gemv residual == y) reads the old values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "backend/cpu_backend.hpp"
#include "core/error.hpp"
#include "core/numeric.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

// f16 -> f32 of every bit pattern: the gemv inner loop decodes weights by table lookup.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

struct View {
  std::byte* base = nullptr;
  DType dtype = DType::f32;
  uint64_t extent = 0;
  bool present = false;
};

float load_f(const View& v, uint64_t i) noexcept {
  switch (v.dtype) {
    case DType::f32: {
      float f;
      std::memcpy(&f, v.base + i * 4, 4);
      return f;
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, v.base + i * 2, 2);
      return f16_table()[h];
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, v.base + i * 2, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return static_cast<float>(load_element(v.base, v.dtype, i));
  }
}

// double -> float first (exact when v came from a float), then the dtype's rounding.
void store_f(const View& v, uint64_t i, double value) noexcept {
  store_element(v.base, v.dtype, i, value);
}

std::vector<float> to_floats(const View& v) {
  std::vector<float> out(v.extent);
  if (v.dtype == DType::f32) {
    if (v.extent) std::memcpy(out.data(), v.base, v.extent * 4);
  } else {
    for (uint64_t i = 0; i < v.extent; ++i) out[i] = load_f(v, i);
  }
  return out;
}

int64_t load_index(const View& v, uint64_t i) noexcept {
  switch (v.dtype) {
    case DType::i32: {
      int32_t x;
      std::memcpy(&x, v.base + i * 4, 4);
      return x;
    }
    case DType::u32: {
      uint32_t x;
      std::memcpy(&x, v.base + i * 4, 4);
      return x;
    }
    case DType::i64: {
      int64_t x;
      std::memcpy(&x, v.base + i * 8, 8);
      return x;
    }
    default: return static_cast<int64_t>(load_element(v.base, v.dtype, i));
  }
}

// Dot product of one weight row with x, eight partial sums so the loop pipelines; products are
// exact in double (24 + 24 mantissa bits).
template <typename Decode>
double dot_row(const std::byte* row, const float* x, uint64_t k, size_t item, Decode decode) {
  double acc[8] = {};
  uint64_t j = 0;
  for (; j + 8 <= k; j += 8)
    for (int u = 0; u < 8; ++u)
      acc[u] += static_cast<double>(decode(row + (j + u) * item)) * x[j + u];
  for (; j < k; ++j) acc[0] += static_cast<double>(decode(row + j * item)) * x[j];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

class Context {
public:
  Context(const Program& program, const amk_instruction_t& ins, HostBuffers& buffers,
          const OpSig& sig, uint32_t pass, uint32_t& stop_word)
      : program_(program), ins_(ins), buffers_(buffers), sig_(sig), pass_(pass),
        stop_word_(stop_word), where_("/instructions/" + std::to_string(ins.index)) {}

  uint32_t pass() const { return pass_; }
  uint32_t& stop_word() const { return stop_word_; }

  [[noreturn]] void fail(const std::string& code, const std::string& message) const {
    throw_program_error(code, where_, std::string(sig_.name) + ": " + message);
  }
  void require(bool ok, const std::string& message) const {
    if (!ok) fail("run.operand.shape", message);
  }

  View operand(size_t slot) const {
    const OperandSig& os = sig_.operands[slot];
    View v;
    const amk_operand_t& o = amk_ins_operand(ins_, static_cast<uint32_t>(slot));
    if (slot >= ins_.n_operands || o.buffer == AMK_NO_BUFFER) {
      if (!os.optional)
        fail("run.operand.missing", "operand '" + std::string(os.name) + "' is absent");
      return v;
    }
    if (o.buffer >= program_.buffers.size() || o.buffer >= buffers_.data.size()) {
      fail("run.operand.buffer", "operand '" + std::string(os.name) + "' names buffer " +
                                     std::to_string(o.buffer) + " of " +
                                     std::to_string(buffers_.data.size()));
    }
    v.dtype = program_.buffers[o.buffer].dtype;
    if ((dtype_bit(v.dtype) & os.dtypes) == 0) {
      fail("run.operand.dtype",
           "operand '" + std::string(os.name) + "' has dtype " + std::string(dtype_name(v.dtype)));
    }
    std::vector<std::byte>& data = buffers_.data[o.buffer];
    const uint64_t elements = data.size() / dtype_size(v.dtype);
    if (o.offset > elements || o.extent > elements - o.offset) {
      fail("run.operand.range", "operand '" + std::string(os.name) + "' [" +
                                    std::to_string(o.offset) + ", +" + std::to_string(o.extent) +
                                    ") is outside buffer '" + program_.buffers[o.buffer].name +
                                    "' of " + std::to_string(elements) + " elements");
    }
    v.base = data.data() + o.offset * dtype_size(v.dtype);
    v.extent = o.extent;
    v.present = true;
    return v;
  }

  uint32_t param_word(size_t i) const {
    if (i < ins_.n_params) return ins_.params[i];
    const ParamSig& ps = sig_.params[i];
    if (!ps.default_value)
      fail("run.param.missing", "param '" + std::string(ps.name) + "' is absent");
    return encode_param(ps.type, *ps.default_value).value_or(0);
  }
  float param_f32(size_t i) const { return bits_f32(param_word(i)); }

private:
  const Program& program_;
  const amk_instruction_t& ins_;
  HostBuffers& buffers_;
  const OpSig& sig_;
  uint32_t pass_;
  uint32_t& stop_word_;
  std::string where_;
};

std::string n(uint64_t v) { return std::to_string(v); }

void run_copy(const Context& c) {
  const View x = c.operand(0), y = c.operand(1);
  c.require(x.extent == y.extent, "extent(x) " + n(x.extent) + " != extent(y) " + n(y.extent));
  if (x.dtype == y.dtype) {
    if (x.extent) std::memmove(y.base, x.base, x.extent * dtype_size(x.dtype));
    return;
  }
  if (!dtype_is_float(x.dtype) || !dtype_is_float(y.dtype)) {
    c.fail("run.operand.dtype", "copy converts only between float types (" +
                                    std::string(dtype_name(x.dtype)) + " -> " +
                                    std::string(dtype_name(y.dtype)) + ")");
  }
  // Different dtypes are different buffers: no overlap.
  for (uint64_t i = 0; i < x.extent; ++i) store_f(y, i, load_f(x, i));
}

void run_fill(const Context& c) {
  const View y = c.operand(0);
  const double value = c.param_f32(0);
  std::byte one[8];
  store_element(one, y.dtype, 0, value);
  const size_t item = dtype_size(y.dtype);
  for (uint64_t i = 0; i < y.extent; ++i) std::memcpy(y.base + i * item, one, item);
}

template <typename F>
void run_binary(const Context& c, F f) {
  const View a = c.operand(0), b = c.operand(1), y = c.operand(2);
  c.require(a.extent == y.extent && b.extent == y.extent,
            "extents a " + n(a.extent) + ", b " + n(b.extent) + ", y " + n(y.extent) + " differ");
  const std::vector<float> av = to_floats(a), bv = to_floats(b);
  for (uint64_t i = 0; i < y.extent; ++i) store_f(y, i, f(av[i], bv[i]));
}

void run_scale(const Context& c) {
  const View x = c.operand(0), y = c.operand(1);
  c.require(x.extent == y.extent, "extent(x) " + n(x.extent) + " != extent(y) " + n(y.extent));
  const float alpha = c.param_f32(0);
  const std::vector<float> xv = to_floats(x);
  for (uint64_t i = 0; i < y.extent; ++i) store_f(y, i, alpha * xv[i]);
}

void run_rmsnorm(const Context& c) {
  const View x = c.operand(0), w = c.operand(1), y = c.operand(2);
  const uint64_t cols = w.extent;
  c.require(cols > 0 && x.extent == y.extent && x.extent % cols == 0,
            "extent(x) " + n(x.extent) + " and extent(y) " + n(y.extent) +
                " must be equal multiples of extent(weight) " + n(cols));
  const double eps = c.param_f32(0);
  const std::vector<float> xv = to_floats(x), wv = to_floats(w);
  for (uint64_t r = 0; r < x.extent / cols; ++r) {
    const float* row = xv.data() + r * cols;
    double ss = 0.0;
    for (uint64_t j = 0; j < cols; ++j) ss += static_cast<double>(row[j]) * row[j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (uint64_t j = 0; j < cols; ++j)
      store_f(y, r * cols + j, static_cast<double>(row[j]) * inv * wv[j]);
  }
}

void run_softmax(const Context& c) {
  const View x = c.operand(0), y = c.operand(1);
  c.require(x.extent == y.extent, "extent(x) " + n(x.extent) + " != extent(y) " + n(y.extent));
  if (x.extent == 0) return;
  const uint64_t cols = c.param_word(0) == 0 ? x.extent : c.param_word(0);
  c.require(x.extent % cols == 0,
            "extent " + n(x.extent) + " is not a multiple of cols " + n(cols));
  const double scale = c.param_f32(1);
  const std::vector<float> xv = to_floats(x);
  std::vector<double> e(cols);
  for (uint64_t r = 0; r < x.extent / cols; ++r) {
    const float* row = xv.data() + r * cols;
    double m = -std::numeric_limits<double>::infinity();
    for (uint64_t j = 0; j < cols; ++j) m = std::max(m, scale * row[j]);
    double sum = 0.0;
    for (uint64_t j = 0; j < cols; ++j) sum += (e[j] = std::exp(scale * row[j] - m));
    for (uint64_t j = 0; j < cols; ++j) store_f(y, r * cols + j, e[j] / sum);
  }
}

// Row r of the matrix m (rows of k weights) dotted with x, in double.
double gemv_row(const Context& c, const View& m, uint64_t r, uint64_t k, const float* x) {
  const size_t item = dtype_size(m.dtype);
  const std::byte* row = m.base + r * k * item;
  switch (m.dtype) {
    case DType::f32:
      return dot_row(row, x, k, item, [](const std::byte* p) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      });
    case DType::f16: {
      const float* table = f16_table();
      return dot_row(row, x, k, item, [table](const std::byte* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return table[h];
      });
    }
    case DType::bf16:
      return dot_row(row, x, k, item, [](const std::byte* p) {
        // Inline decode: bits_f32 lives in another translation unit.
        uint16_t h;
        std::memcpy(&h, p, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
      });
    default: c.fail("run.operand.dtype", "gemv weights must be a float type");
  }
}

// y[r] = v[r] (+ residual[r]); v = W x' or, with w2, silu(W x') * (W2 x'); x' = x or, with
// norm, rmsnorm(x) * norm computed as run_rmsnorm does (x' rounded to f32, like an f32 buffer
// between the two ops would hold it).
void combine_head(const std::vector<float>& pv, uint64_t chunks, uint64_t block, uint64_t hd,
                  uint64_t g, std::vector<double>& acc);

void run_gemv(const Context& c) {
  const View w = c.operand(0), x = c.operand(1), y = c.operand(2), res = c.operand(3),
             norm = c.operand(4), w2 = c.operand(5);
  const uint32_t combine_hd = c.param_word(1), heads = c.param_word(2);
  const uint64_t k = gemv_k(x.extent, combine_hd, heads);
  c.require(k > 0 && w.extent % k == 0,
            "extent(w) " + n(w.extent) + " is not a multiple of extent(x) " + n(k));
  const uint64_t rows = w.extent / k;
  c.require(y.extent == rows, "extent(y) " + n(y.extent) + " != rows " + n(rows));
  c.require(!res.present || res.extent == rows,
            "extent(residual) " + n(res.extent) + " != rows " + n(rows));
  c.require(!norm.present || norm.extent == k,
            "extent(norm) " + n(norm.extent) + " != extent(x) " + n(k));
  c.require(!w2.present || w2.extent == w.extent,
            "extent(w2) " + n(w2.extent) + " != extent(w) " + n(w.extent));
  std::vector<float> xv = to_floats(x);
  if (combine_hd != 0) {
    // x' = attention_combine(x), rounded to f32 as the device stages it.
    const uint64_t block = uint64_t{heads} * (combine_hd + 2);
    c.require(heads > 0 && x.extent % block == 0,
              "extent(x) " + n(x.extent) + " is not a multiple of heads * (head_dim + 2) " +
                  n(block));
    std::vector<float> merged(k);
    std::vector<double> acc;
    for (uint64_t g = 0; g < heads; ++g) {
      combine_head(xv, x.extent / block, block, combine_hd, g, acc);
      for (uint64_t d = 0; d < combine_hd; ++d)
        merged[g * combine_hd + d] = static_cast<float>(acc[d]);
    }
    xv = std::move(merged);
  }
  if (norm.present) {
    const double eps = c.param_f32(0);
    const std::vector<float> nv = to_floats(norm);
    double ss = 0.0;
    for (uint64_t j = 0; j < k; ++j) ss += static_cast<double>(xv[j]) * xv[j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(k) + eps);
    for (uint64_t j = 0; j < k; ++j)
      xv[j] = static_cast<float>(static_cast<double>(xv[j]) * inv * nv[j]);
  }
  std::vector<float> rv;
  if (res.present) rv = to_floats(res);
  for (uint64_t r = 0; r < rows; ++r) {
    double acc = gemv_row(c, w, r, k, xv.data());
    if (w2.present) acc = acc / (1.0 + std::exp(-acc)) * gemv_row(c, w2, r, k, xv.data());
    if (res.present) acc += rv[r];
    store_f(y, r, acc);
  }
}

void run_argmax(const Context& c) {
  const View x = c.operand(0), idx = c.operand(1), value = c.operand(2), map = c.operand(3);
  const uint64_t rows = idx.extent;
  c.require(rows > 0 && x.extent % rows == 0 && x.extent / rows > 0,
            "extent(x) " + n(x.extent) + " must be a positive multiple of extent(index) " +
                n(rows));
  c.require(!value.present || value.extent == rows,
            "extent(value) " + n(value.extent) + " != extent(index) " + n(rows));
  c.require(!map.present || map.extent == x.extent,
            "extent(index_map) " + n(map.extent) + " != extent(x) " + n(x.extent));
  const uint64_t cols = x.extent / rows;
  const double base = static_cast<double>(c.param_word(0));
  for (uint64_t r = 0; r < rows; ++r) {
    // First index of the maximum; NaN is skipped (an all-NaN row gives 0, value NaN).
    uint64_t best = 0;
    float best_v = std::numeric_limits<float>::quiet_NaN();
    bool found = false;
    for (uint64_t j = 0; j < cols; ++j) {
      const float v = load_f(x, r * cols + j);
      if (std::isnan(v)) continue;
      if (!found || v > best_v) {
        best = j;
        best_v = v;
        found = true;
      }
    }
    const double at = map.present ? static_cast<double>(load_index(map, r * cols + best))
                                  : static_cast<double>(best);
    store_element(idx.base, idx.dtype, r, base + at);
    if (value.present) store_f(value, r, best_v);
  }
}

void run_embedding(const Context& c) {
  const View table = c.operand(0), ids = c.operand(1), y = c.operand(2);
  c.require(ids.extent > 0 && y.extent % ids.extent == 0 && y.extent / ids.extent > 0,
            "extent(y) " + n(y.extent) + " must be a positive multiple of extent(ids) " +
                n(ids.extent));
  const uint64_t dim = y.extent / ids.extent;
  c.require(table.extent % dim == 0,
            "extent(table) " + n(table.extent) + " is not a multiple of dim " + n(dim));
  const uint64_t rows = table.extent / dim;
  // Validate every id before writing anything: a failed op leaves y untouched.
  std::vector<uint64_t> id(ids.extent);
  for (uint64_t i = 0; i < ids.extent; ++i) {
    const int64_t v = load_index(ids, i);
    if (v < 0 || static_cast<uint64_t>(v) >= rows) {
      c.fail("run.embedding.id",
             "ids element " + n(i) + ": id " + std::to_string(v) + " outside [0, " + n(rows) + ")");
    }
    id[i] = static_cast<uint64_t>(v);
  }
  const size_t item = dtype_size(y.dtype);
  for (uint64_t i = 0; i < ids.extent; ++i) {
    if (table.dtype == y.dtype) {
      std::memmove(y.base + i * dim * item, table.base + id[i] * dim * item, dim * item);
    } else {
      for (uint64_t j = 0; j < dim; ++j) store_f(y, i * dim + j, load_f(table, id[i] * dim + j));
    }
  }
}

// ---- the ops of a Llama decode step ----

// Llama 3 inverse frequency of pair i (Hugging Face _compute_llama3_parameters), in double.
double rope_inv_freq(uint32_t i, uint32_t head_dim, double theta, double factor, double low,
                     double high, double original_max) {
  const double inv = std::pow(theta, -2.0 * i / head_dim);
  if (factor == 0.0) return inv;
  const double wavelen = 2.0 * std::numbers::pi / inv;
  if (wavelen < original_max / high) return inv;
  if (wavelen > original_max / low) return inv / factor;
  const double smooth = (original_max / wavelen - low) / (high - low);
  return (1.0 - smooth) * inv / factor + smooth * inv;
}

// The op's position: with the position operand (slot `slot`) position[0] + pass - 1, else the
// param `param`.
uint64_t op_position(const Context& c, size_t slot, size_t param) {
  const View pos = c.operand(slot);
  if (!pos.present) return c.param_word(param);
  c.require(pos.extent >= 1, "the position operand is empty");
  const int64_t p0 = load_index(pos, 0);
  if (p0 < 0) c.fail("run.position", "position " + std::to_string(p0) + " is negative");
  return static_cast<uint64_t>(p0) + c.pass() - 1;
}

// The RoPE rotation at `position`: (cos, sin) of each pair from the params theta,
// scaling_factor, low_freq_factor, high_freq_factor, original_max_position at index `at`
// (rope: 2, attention_decode: 3, kv_append: 3); head_dim is param 0.
struct RopeAngles {
  uint32_t half = 0;
  std::vector<double> cs, sn;

  RopeAngles(const Context& c, uint64_t position, size_t at) {
    const uint32_t hd = c.param_word(0);
    half = hd / 2;
    cs.resize(half);
    sn.resize(half);
    for (uint32_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(position) * rope_inv_freq(i, hd, c.param_f32(at), c.param_f32(at + 1),
                                                        c.param_f32(at + 2), c.param_f32(at + 3),
                                                        static_cast<double>(c.param_word(at + 4)));
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
    }
  }
  // Rotates the head of 2 * half values at x (HF rotate_half pairs i, i + half) into y.
  template <class In, class Out>
  void rotate(const In* x, Out* y) const {
    for (uint32_t i = 0; i < half; ++i) {
      const double a = x[i], b = x[i + half];
      y[i] = static_cast<Out>(a * cs[i] - b * sn[i]);
      y[i + half] = static_cast<Out>(b * cs[i] + a * sn[i]);
    }
  }
};

void run_rope(const Context& c) {
  const View x = c.operand(0), y = c.operand(1);
  const uint32_t hd = c.param_word(0);
  c.require(hd > 0 && hd % 2 == 0, "head_dim " + n(hd) + " must be even and > 0");
  c.require(x.extent % hd == 0 && x.extent == y.extent,
            "extent(x) " + n(x.extent) + " and extent(y) " + n(y.extent) +
                " must be equal multiples of head_dim " + n(hd));
  const RopeAngles rope(c, op_position(c, 2, 1), 2);
  const std::vector<float> xv = to_floats(x);  // y may alias x
  std::vector<double> head(hd);
  for (uint64_t base = 0; base < x.extent; base += hd) {
    rope.rotate(xv.data() + base, head.data());
    for (uint32_t d = 0; d < hd; ++d) store_f(y, base + d, head[d]);
  }
}

void run_kv_append(const Context& c) {
  const View x = c.operand(0), cache = c.operand(1);
  const uint64_t hd = c.param_word(0), position = op_position(c, 2, 1), max_len = c.param_word(2);
  c.require(hd > 0 && x.extent % hd == 0,
            "extent(x) " + n(x.extent) + " is not a multiple of head_dim " + n(hd));
  if (position >= max_len)
    c.fail("run.position", "position " + n(position) + " >= max_len " + n(max_len));
  c.require(cache.extent == x.extent * max_len, "extent(cache) " + n(cache.extent) +
                                                    " != n_kv_heads * max_len * head_dim " +
                                                    n(x.extent * max_len));
  std::vector<float> xv = to_floats(x);
  if (c.param_f32(3) != 0.0f) {  // rotated like rope first
    c.require(hd % 2 == 0, "head_dim " + n(hd) + " must be even with theta");
    const RopeAngles rope(c, position, 3);
    for (uint64_t base = 0; base < x.extent; base += hd)
      rope.rotate(xv.data() + base, xv.data() + base);
  }
  for (uint64_t e = 0; e < x.extent; ++e) {
    const uint64_t h = e / hd, d = e % hd;
    store_f(cache, (h * max_len + position) * hd + d, xv[e]);
  }
}

// With theta != 0, q and k_new are rotated in double (RopeAngles) before the dot products; the
// new token's row (k_new, v_new) is position `len` of the chunk, after the cached rows. With the
// position operand (P), k and v are cache rows from `start` on: the rows below P count, and the
// new row when P falls in the chunk; a chunk with no row writes o = 0, m = -inf, l = 0.
void run_attention_decode(const Context& c) {
  const View q = c.operand(0), k_all = c.operand(1), v_all = c.operand(2), out = c.operand(3),
             k_new_op = c.operand(4), v_new_op = c.operand(5), pos = c.operand(6);
  const uint64_t hd = c.param_word(0);
  c.require(k_new_op.present == v_new_op.present,
            "k_new and v_new must be both present or both absent");
  c.require(!k_new_op.present || (k_new_op.extent == hd && v_new_op.extent == hd),
            "extents k_new " + n(k_new_op.extent) + ", v_new " + n(v_new_op.extent) +
                " must equal head_dim " + n(hd));
  c.require(hd > 0 && q.extent % hd == 0 && k_all.extent % hd == 0 &&
                (k_all.extent > 0 || k_new_op.present) && v_all.extent == k_all.extent,
            "extents q " + n(q.extent) + ", k " + n(k_all.extent) + ", v " + n(v_all.extent) +
                " must be multiples of head_dim " + n(hd) +
                " with extent(v) == extent(k) (0 only with k_new)");
  const float theta = c.param_f32(3);
  c.require(theta == 0.0f || hd % 2 == 0, "head_dim " + n(hd) + " must be even with theta");
  const uint64_t position = op_position(c, 6, 2);
  View k = k_all, v = v_all, k_new = k_new_op, v_new = v_new_op;
  if (pos.present) {  // the attended rows follow the position
    const uint64_t start = c.param_word(8), rows = k.extent / hd;
    const uint64_t used = position <= start ? 0 : std::min(rows, position - start);
    k.extent = v.extent = used * hd;
    const bool holds = position >= start && position - start < rows;
    if (!holds) k_new.present = v_new.present = false;
  }
  const uint64_t group = q.extent / hd, cached = k.extent / hd;
  const uint64_t len = cached + (k_new.present ? 1 : 0);
  c.require(out.extent == group * (hd + 2),
            "extent(out) " + n(out.extent) + " != group * (head_dim + 2) " + n(group * (hd + 2)));
  const float scale_param = c.param_f32(1);
  const double scale = scale_param != 0.0f ? scale_param : 1.0 / std::sqrt(static_cast<double>(hd));
  const std::vector<float> qf = to_floats(q), kf = to_floats(k), vf = to_floats(v);
  std::vector<double> qv(qf.begin(), qf.end()), kv(kf.begin(), kf.end()), vv(vf.begin(), vf.end());
  if (k_new.present) {
    const std::vector<float> kn = to_floats(k_new), vn = to_floats(v_new);
    kv.insert(kv.end(), kn.begin(), kn.end());
    vv.insert(vv.end(), vn.begin(), vn.end());
  }
  if (theta != 0.0f) {
    const RopeAngles rope(c, position, 3);
    for (uint64_t g = 0; g < group; ++g) rope.rotate(qv.data() + g * hd, qv.data() + g * hd);
    if (k_new.present) rope.rotate(kv.data() + cached * hd, kv.data() + cached * hd);
  }
  std::vector<double> s(len), o(hd);
  if (len == 0) {  // (only with the position operand: a chunk past the position)
    for (uint64_t g = 0; g < group; ++g) {
      const uint64_t at = g * (hd + 2);
      for (uint64_t d = 0; d < hd; ++d) store_f(out, at + d, 0.0);
      store_f(out, at + hd, -std::numeric_limits<double>::infinity());
      store_f(out, at + hd + 1, 0.0);
    }
    return;
  }
  for (uint64_t g = 0; g < group; ++g) {
    double m = -std::numeric_limits<double>::infinity();
    for (uint64_t t = 0; t < len; ++t) {
      double dot = 0.0;
      for (uint64_t d = 0; d < hd; ++d) dot += qv[g * hd + d] * kv[t * hd + d];
      s[t] = scale * dot;
      m = std::max(m, s[t]);
    }
    double l = 0.0;
    std::fill(o.begin(), o.end(), 0.0);
    for (uint64_t t = 0; t < len; ++t) {
      const double p = std::exp(s[t] - m);
      l += p;
      for (uint64_t d = 0; d < hd; ++d) o[d] += p * vv[t * hd + d];
    }
    const uint64_t at = g * (hd + 2);
    for (uint64_t d = 0; d < hd; ++d) store_f(out, at + d, o[d] / l);
    store_f(out, at + hd, m);
    store_f(out, at + hd + 1, l);
  }
}

// Query head g of chunk-major attention_decode partials pv (chunks blocks of `block` floats, head
// g's row of hd + 2 at g * (hd + 2)): sum_c w_c o_c / sum_c w_c, w_c = l_c exp(m_c - M), in double.
void combine_head(const std::vector<float>& pv, uint64_t chunks, uint64_t block, uint64_t hd,
                  uint64_t g, std::vector<double>& acc) {
  double big = -std::numeric_limits<double>::infinity();
  for (uint64_t ch = 0; ch < chunks; ++ch)
    big = std::max<double>(big, pv[ch * block + g * (hd + 2) + hd]);
  std::vector<double> w(chunks);
  double total = 0.0;
  for (uint64_t ch = 0; ch < chunks; ++ch) {
    const float* p = pv.data() + ch * block + g * (hd + 2);
    w[ch] = static_cast<double>(p[hd + 1]) * std::exp(static_cast<double>(p[hd]) - big);
    total += w[ch];
  }
  acc.assign(hd, 0.0);
  for (uint64_t ch = 0; ch < chunks; ++ch)
    for (uint64_t d = 0; d < hd; ++d) acc[d] += w[ch] * pv[ch * block + g * (hd + 2) + d];
  for (uint64_t d = 0; d < hd; ++d) acc[d] /= total;
}

// partials: kv_heads kv heads back to back, each `chunks` blocks of group * (hd + 2) floats; out:
// their query heads in the same order.
void run_attention_combine(const Context& c) {
  const View partials = c.operand(0), out = c.operand(1);
  const uint64_t hd = c.param_word(0), kv = c.param_word(1);
  c.require(hd > 0 && kv > 0 && out.extent % (hd * kv) == 0,
            "extent(out) " + n(out.extent) + " is not a multiple of head_dim * kv_heads " +
                n(hd * kv));
  const uint64_t group = out.extent / (hd * kv), block = group * (hd + 2);
  c.require(partials.extent % (block * kv) == 0, "extent(partials) " + n(partials.extent) +
                                                     " is not a multiple of kv_heads * group * "
                                                     "(head_dim + 2) " +
                                                     n(block * kv));
  const uint64_t chunks = partials.extent / (block * kv);
  const std::vector<float> all = to_floats(partials);
  std::vector<double> acc;
  for (uint64_t h = 0; h < kv; ++h) {
    const std::vector<float> pv(all.begin() + static_cast<ptrdiff_t>(h * chunks * block),
                                all.begin() + static_cast<ptrdiff_t>((h + 1) * chunks * block));
    for (uint64_t g = 0; g < group; ++g) {
      combine_head(pv, chunks, block, hd, g, acc);
      for (uint64_t d = 0; d < hd; ++d) store_f(out, (h * group + g) * hd + d, acc[d]);
    }
  }
}

// Step s = pass - 1 of a generation: the next step's token, the generated ids, the step's
// logits, and with eos the stop word (registry summary; amk_op_feed_token on the device).
void run_feed_token(const Context& c) {
  const View index = c.operand(0), prompt = c.operand(1), token = c.operand(2), ids = c.operand(3),
             logits = c.operand(4), all = c.operand(5), eos = c.operand(6);
  c.require(index.extent == 1 && token.extent == 1 && prompt.extent >= 1,
            "index and token hold one element and prompt at least one");
  c.require(logits.present == all.present, "logits and all_logits must be both present or absent");
  c.require(!eos.present || eos.extent == 1, "eos holds one element");
  uint32_t& stop = c.stop_word();
  if (eos.present && stop != 0 && stop < c.pass()) return;  // the launch is ending
  const uint64_t s = c.pass() - 1, np = prompt.extent;
  const int64_t t = s + 1 < np ? load_index(prompt, s + 1) : load_index(index, 0);
  store_element(token.base, token.dtype, 0, static_cast<double>(t));
  if (ids.present && s + 1 >= np && s + 1 - np < ids.extent)
    store_element(ids.base, ids.dtype, s + 1 - np, static_cast<double>(t));
  if (eos.present && s + 1 >= np && t == load_index(eos, 0)) stop = c.pass();
  if (logits.present && (s + 1) * logits.extent <= all.extent)
    for (uint64_t i = 0; i < logits.extent; ++i)
      store_f(all, s * logits.extent + i, load_f(logits, i));
}

}  // namespace

void cpu_execute_instruction(const Program& program, const amk_instruction_t& ins,
                             HostBuffers& buffers, uint32_t pass, uint32_t* stop_word) {
  uint32_t own_stop = 0;
  const std::string where = "/instructions/" + std::to_string(ins.index);
  if (ins.op >= kCustomOpBase) {
    throw_program_error("run.custom.no_reference", where,
                        "custom op '" + op_name(program, ins.op) +
                            "' has no CPU reference; run the program on the cuda backend");
  }
  const OpSig* sig = find_op(ins.op);
  if (!sig) throw_program_error("run.op.unknown", where, "unknown op id " + std::to_string(ins.op));
  const Context c(program, ins, buffers, *sig, pass, stop_word ? *stop_word : own_stop);
  switch (sig->id) {
    case OpId::nop: return;
    case OpId::copy: return run_copy(c);
    case OpId::fill: return run_fill(c);
    case OpId::add: return run_binary(c, [](float a, float b) { return a + b; });
    case OpId::mul: return run_binary(c, [](float a, float b) { return a * b; });
    case OpId::scale: return run_scale(c);
    case OpId::silu_mul:
      return run_binary(c, [](float g, float u) { return g / (1.0f + std::exp(-g)) * u; });
    case OpId::rmsnorm: return run_rmsnorm(c);
    case OpId::softmax: return run_softmax(c);
    case OpId::gemv: return run_gemv(c);
    case OpId::argmax: return run_argmax(c);
    case OpId::embedding: return run_embedding(c);
    case OpId::rope: return run_rope(c);
    case OpId::kv_append: return run_kv_append(c);
    case OpId::attention_decode: return run_attention_decode(c);
    case OpId::attention_combine: return run_attention_combine(c);
    case OpId::feed_token: return run_feed_token(c);
    case OpId::all_reduce:
    case OpId::send:
    case OpId::recv:
      // (A program with ranks runs as its expansion over the ranks, which has no comm ops.)
      throw_program_error("run.op.ranks", where,
                          std::string(sig->name) +
                              " runs only in a program with launch.ranks >= 2");
  }
  throw_program_error("run.op.unknown", where, "unknown op id " + std::to_string(ins.op));
}

}  // namespace amk
