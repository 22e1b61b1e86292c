// .npy encoding: exact bytes against hand-written headers for every dtype and ranks 0..3, and a
// round trip through numpy when the system Python has it.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "report/outputs.hpp"

#include "support.hpp"

using amk::DType;
using amk::encode_npy;

namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

template <typename T>
std::vector<std::byte> as_bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Magic, version 1.0, header length (little endian; 118 makes 128 bytes in all, the first
// multiple of 64), the dict padded with `pad` spaces, '\n', then the data.
std::vector<std::byte> expected_npy(const std::string& dict, size_t pad,
                                    const std::vector<std::byte>& data, int header_len = 118) {
  std::string h = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header_len & 0xff) +
                  static_cast<char>(header_len >> 8) + dict + std::string(pad, ' ') + "\n";
  std::vector<std::byte> out(h.size());
  std::memcpy(out.data(), h.data(), h.size());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

}  // namespace

TEST_CASE("npy f32 1-D: exact bytes") {
  const auto data = as_bytes_of(std::vector<float>{1.0f, -2.5f, 3.0f});
  const uint64_t shape[] = {3};
  const auto npy = encode_npy(DType::f32, shape, data);
  CHECK(npy.size() == 128 + 12);
  CHECK(npy == expected_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 60, data));
}

TEST_CASE("npy scalar (rank 0)") {
  const auto data = as_bytes_of(std::vector<float>{7.0f});
  const auto npy = encode_npy(DType::f32, std::span<const uint64_t>(), data);
  CHECK(npy == expected_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 62, data));
}

TEST_CASE("npy f16 rank 2") {
  const auto data =
      as_bytes_of(std::vector<uint16_t>{0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600});
  const uint64_t shape[] = {2, 3};
  CHECK(encode_npy(DType::f16, shape, data) ==
        expected_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 58, data));
}

TEST_CASE("npy u8 rank 3") {
  const auto data = bytes({1, 2, 250, 255});
  const uint64_t shape[] = {2, 1, 2};
  CHECK(encode_npy(DType::u8, shape, data) ==
        expected_npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1, 2), }", 55, data));
}

TEST_CASE("npy integer dtypes") {
  const uint64_t shape[] = {4};
  SUBCASE("i32") {
    const auto data = as_bytes_of(std::vector<int32_t>{-1, 0, 1, INT32_MIN});
    CHECK(encode_npy(DType::i32, shape, data) ==
          expected_npy("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", 60, data));
  }
  SUBCASE("u32") {
    const auto data = as_bytes_of(std::vector<uint32_t>{0, 1, 0xffffffffu, 42});
    CHECK(encode_npy(DType::u32, shape, data) ==
          expected_npy("{'descr': '<u4', 'fortran_order': False, 'shape': (4,), }", 60, data));
  }
  SUBCASE("i64") {
    const auto data = as_bytes_of(std::vector<int64_t>{-1, INT64_MAX, INT64_MIN, 5});
    CHECK(encode_npy(DType::i64, shape, data) ==
          expected_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", 60, data));
  }
}

TEST_CASE("npy bf16 is widened exactly to f32") {
  // 1.0, -3.140625, the smallest subnormal, and a quiet NaN: widening only appends 16 zero bits.
  const auto data = as_bytes_of(std::vector<uint16_t>{0x3f80, 0xc049, 0x0001, 0x7fc1});
  const uint64_t shape[] = {4};
  const auto want_data =
      as_bytes_of(std::vector<uint32_t>{0x3f800000u, 0xc0490000u, 0x00010000u, 0x7fc10000u});
  CHECK(encode_npy(DType::bf16, shape, data) ==
        expected_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 60, want_data));
  CHECK(amk::npy_stored_dtype(DType::bf16) == DType::f32);
  CHECK(amk::npy_stored_dtype(DType::f16) == DType::f16);
}

TEST_CASE("npy header grows to the next multiple of 64") {
  // Rank 8 with wide dims: the dict is 140 bytes, so the header fills 192 bytes, not 128.
  const uint64_t wide[] = {1000000000, 1000000000, 1000000000, 1000000000,
                           1000000000, 1000000000, 1000000000, 0};
  const auto npy = encode_npy(DType::u8, wide, std::span<const std::byte>());
  REQUIRE(npy.size() == 192);
  const std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000, "
                           "1000000000, 1000000000, 1000000000, 1000000000, 1000000000, "
                           "1000000000, 0), }";
  CHECK(npy == expected_npy(dict, 41, {}, 182));
  // A dict of 117 bytes fills 128 exactly: no padding, not a whole extra block of 64.
  const uint64_t exact[] = {100000000000, 100000000000, 100000000000, 100000000000, 100, 0};
  CHECK(encode_npy(DType::u8, exact, std::span<const std::byte>()) ==
        expected_npy("{'descr': '|u1', 'fortran_order': False, 'shape': (100000000000, "
                     "100000000000, 100000000000, 100000000000, 100, 0), }",
                     0, {}));
  // A shape of 10^12 bytes with one byte of data is refused before anything is allocated.
  const uint64_t huge[] = {1, 1, 1, 1, 1, 1, 1, 1000000000000};
  CHECK_THROWS_AS((void)encode_npy(DType::u8, huge, bytes({1})), amk::Error);
}

TEST_CASE("npy refuses data of the wrong size") {
  const uint64_t shape[] = {3};
  try {
    (void)encode_npy(DType::f32, shape, bytes({0, 0, 0, 0}));
    FAIL("expected an error");
  } catch (const amk::Error& e) {
    CHECK(e.code() == "npy.size");
    CHECK(e.kind() == amk::ErrorKind::internal);
  }
  const uint64_t overflow[] = {uint64_t{1} << 40, uint64_t{1} << 40};
  try {
    (void)encode_npy(DType::f32, overflow, bytes({}));
    FAIL("expected an error");
  } catch (const amk::Error& e) {
    CHECK(e.code() == "npy.shape");
  }
}

TEST_CASE("npy loads in numpy with the same values") {
  if (!amk_test::python_has("numpy")) {
    MESSAGE("skipped: /usr/bin/python3 with numpy not available");
    return;
  }
  amk_test::ScratchDir dir("npy");
  struct Case {
    const char* file;
    DType dtype;
    std::vector<uint64_t> shape;
    std::vector<std::byte> data;
    const char* expect;  // "descr shape values" as printed by the script below
  };
  const std::vector<Case> cases = {
      {"f32.npy",
       DType::f32,
       {2, 2},
       as_bytes_of(std::vector<float>{1.5f, -2.0f, 0.25f, 8.0f}),
       "<f4 (2, 2) [1.5, -2.0, 0.25, 8.0]"},
      {"f16.npy",
       DType::f16,
       {3},
       as_bytes_of(std::vector<uint16_t>{0x3c00, 0xc000, 0x3800}),
       "<f2 (3,) [1.0, -2.0, 0.5]"},
      {"bf16.npy",
       DType::bf16,
       {2},
       as_bytes_of(std::vector<uint16_t>{0x3f80, 0xc049}),
       "<f4 (2,) [1.0, -3.140625]"},
      {"i32.npy", DType::i32, {}, as_bytes_of(std::vector<int32_t>{-7}), "<i4 () [-7]"},
      {"u32.npy",
       DType::u32,
       {1, 2},
       as_bytes_of(std::vector<uint32_t>{4000000000u, 3}),
       "<u4 (1, 2) [4000000000, 3]"},
      {"i64.npy",
       DType::i64,
       {2, 1, 1},
       as_bytes_of(std::vector<int64_t>{-9007199254740993, 2}),
       "<i8 (2, 1, 1) [-9007199254740993, 2]"},
      {"u8.npy", DType::u8, {3}, bytes({0, 128, 255}), "|u1 (3,) [0, 128, 255]"},
  };
  const auto script = dir.path() / "load.py";
  amk_test::fs::remove(script);
  {
    std::ofstream s(script);
    s << "import sys, numpy as np\n"
         "for f in sys.argv[1:]:\n"
         "    a = np.load(f, allow_pickle=False)\n"
         "    print(a.dtype.str, a.shape, a.ravel().tolist())\n";
  }
  std::vector<std::string> files;
  for (const auto& c : cases) {
    amk::write_file_atomic(dir.path() / c.file, encode_npy(c.dtype, c.shape, c.data));
    files.push_back((dir.path() / c.file).string());
  }
  const auto [status, out] = amk_test::run_python(script, files);
  REQUIRE(status == 0);
  std::string want;
  for (const auto& c : cases) want += std::string(c.expect) + "\n";
  CHECK(out == want);
}
