// Shared helpers of the backend unit tests: temp files, hand-built programs and instructions,
// and error capture that reports the code (so a test can assert the exact code).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "amk_abi.h"
#include "backend/cpu_backend.hpp"
#include "backend/host_data.hpp"
#include "core/numeric.hpp"
#include "core/error.hpp"
#include "ops/registry.hpp"
#include "program/program.hpp"

namespace amk::test {

// An op's id as the instruction field holds it.
constexpr uint16_t id(OpId op) { return static_cast<uint16_t>(op); }

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "amk_backend_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] std::filesystem::path operator/(std::string_view name) const {
    return path_ / name;
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

inline void append(std::vector<std::byte>& out, const void* p, size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}
inline void append(std::vector<std::byte>& out, std::string_view s) {
  append(out, s.data(), s.size());
}
template <typename T>
void append_value(std::vector<std::byte>& out, T v) {
  append(out, &v, sizeof v);
}
template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out;
  append(out, v.data(), v.size() * sizeof(T));
  return out;
}
template <typename T>
std::vector<T> values_of(const std::vector<std::byte>& b) {
  std::vector<T> out(b.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

// The code of the amk::Error that f throws, or "<none>" / "<other exception>".
template <typename F>
std::string error_code(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  } catch (...) {
    return "<other exception>";
  }
  return "<none>";
}

template <typename F>
std::optional<Error> caught(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// Random floats in [lo, hi) that are never zero (|v| >= 1/64), so a dropped operand shows.
inline std::vector<float> nonzero_floats(size_t n, uint32_t seed, float lo = -2.0f,
                                         float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = dist(rng);
    while (std::fabs(x) < 1.0f / 64);
  }
  return v;
}

inline Buffer make_buffer(std::string name, DType dtype, std::vector<uint64_t> shape) {
  Buffer b;
  b.name = std::move(name);
  b.dtype = dtype;
  b.shape = std::move(shape);
  return b;
}

inline BufferInit init_of(InitKind kind) {
  BufferInit i;
  i.kind = kind;
  return i;
}

inline Buffer with_init(Buffer b, BufferInit init) {
  b.init = std::move(init);
  return b;
}

// A program with one buffer of every init kind, its files written into `dir`: zeros f32[3],
// constant 1.5 f16[2,2], random normal bf16[100], values i32 {4,-5,6}, npy f32[4] (npy_values),
// raw u8 {7,6,5,4}, safetensors i64 {-3, 2^50}, constant 7 u32 scalar.
struct EveryInit {
  Program program;
  std::vector<float> npy_values;
};

inline EveryInit every_init_program(const TempDir& dir) {
  Program p;
  p.base_dir = dir.path().string();

  BufferInit constant = init_of(InitKind::constant);
  constant.constant = 1.5;
  BufferInit random = init_of(InitKind::random);
  random.seed = 9;
  random.distribution = Distribution::normal;
  random.a = 0;
  random.b = 1;
  BufferInit values = init_of(InitKind::values);
  values.data = bytes_of(std::vector<int32_t>{4, -5, 6});
  // npy: f32 [2, 2].
  const std::vector<float> npy_values = nonzero_floats(4, 1);
  std::vector<std::byte> npy_file;
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  append(npy_file, "\x93NUMPY\x01");
  append_value<uint8_t>(npy_file, 0);
  append_value<uint16_t>(npy_file, static_cast<uint16_t>(header.size()));
  append(npy_file, header);
  append(npy_file, npy_values.data(), 16);
  std::filesystem::create_directory(dir / "data");
  write_bytes(dir / "data" / "w.npy", npy_file);
  BufferInit npy = init_of(InitKind::npy);
  npy.path = "data/w.npy";
  // raw: u8 bytes 2..5 of a file.
  write_bytes(dir / "r.bin", bytes_of(std::vector<uint8_t>{9, 8, 7, 6, 5, 4}));
  BufferInit raw = init_of(InitKind::raw);
  raw.path = "r.bin";
  raw.offset = 2;
  // safetensors: one I64 tensor.
  const std::string st_header =
      R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})";
  std::vector<std::byte> st;
  append_value<uint64_t>(st, st_header.size());
  append(st, st_header);
  const std::vector<int64_t> ids = {-3, 1LL << 50};
  append(st, ids.data(), 16);
  write_bytes(dir / "m.safetensors", st);
  BufferInit safet = init_of(InitKind::safetensors);
  safet.path = "m.safetensors";
  safet.tensor = "ids";

  p.buffers = {
      make_buffer("zeros", DType::f32, {3}),
      with_init(make_buffer("constant", DType::f16, {2, 2}), constant),
      with_init(make_buffer("random", DType::bf16, {100}), random),
      with_init(make_buffer("values", DType::i32, {3}), values),
      with_init(make_buffer("npy", DType::f32, {4}), npy),
      with_init(make_buffer("raw", DType::u8, {4}), raw),
      with_init(make_buffer("safet", DType::i64, {2}), safet),
      with_init(make_buffer("scalar", DType::u32, {}), constant),
  };
  p.buffers[7].init.constant = 7;
  return {std::move(p), npy_values};
}

// A program's buffers with host contents, filled from floats (rounded to the buffer's dtype),
// and single instructions run on them by the CPU reference.
struct HostFixture {
  Program program;
  HostBuffers host;

  uint32_t add(const std::string& name, DType t, uint64_t n) {
    program.buffers.push_back(make_buffer(name, t, {n}));
    host.data.emplace_back(n * dtype_size(t));
    return static_cast<uint32_t>(program.buffers.size() - 1);
  }
  // Stores v rounded to t; a test's reference reads the rounded values back with get().
  uint32_t add(const std::string& name, DType t, const std::vector<float>& v) {
    const uint32_t b = add(name, t, v.size());
    for (size_t i = 0; i < v.size(); ++i) store_element(host.data[b].data(), t, i, v[i]);
    return b;
  }
  [[nodiscard]] double get(uint32_t b, uint64_t i) const {
    return load_element(host.data[b].data(), program.buffers[b].dtype, i);
  }
  [[nodiscard]] std::vector<double> all(uint32_t b) const {
    std::vector<double> out(host.data[b].size() / dtype_size(program.buffers[b].dtype));
    for (size_t i = 0; i < out.size(); ++i) out[i] = get(b, i);
    return out;
  }
  void run(const amk_instruction_t& ins, uint32_t pass = 1) {
    cpu_execute_instruction(program, ins, host, pass, &stop_word);
  }
  uint32_t stop_word = 0;  // the launch's (feed_token's eos)
};

struct OperandSpec {
  uint32_t buffer = AMK_NO_BUFFER;
  uint64_t offset = 0;
  uint64_t extent = 0;
};

// An ABI instruction filled by hand (plan.cpp's encoder is not used here on purpose).
inline amk_instruction_t make_ins(uint16_t op, uint32_t index,
                                  std::initializer_list<OperandSpec> operands,
                                  std::initializer_list<uint32_t> params = {},
                                  std::initializer_list<amk_wait_t> waits = {},
                                  std::initializer_list<amk_signal_t> signals = {}) {
  amk_instruction_t ins;
  std::memset(&ins, 0, sizeof ins);
  ins.op = op;
  ins.index = index;
  for (auto& o : ins.operands) o.buffer = AMK_NO_BUFFER;
  for (const OperandSpec& o : operands) {
    amk_ins_operand(ins, ins.n_operands++) =
        amk_operand_t{o.offset, static_cast<uint32_t>(o.extent), o.buffer};
  }
  for (uint32_t p : params) ins.params[ins.n_params++] = p;
  for (const amk_wait_t& w : waits) ins.waits[ins.n_waits++] = w;
  for (const amk_signal_t& s : signals) ins.signals[ins.n_signals++] = s;
  return ins;
}

}  // namespace amk::test
