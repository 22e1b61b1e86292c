// Data-file init sources on hand-built files: .npy (v1/v2/v3), raw byte ranges, safetensors;
// each rejection asserted by its exact code.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/init_sources.hpp"
#include "core/numeric.hpp"

#include "helpers.hpp"

using namespace amk;
using namespace amk::test;

namespace {

// A .npy file as numpy writes it: preamble, header dict padded with spaces to a multiple of 64
// (including the newline), data.
std::vector<std::byte> npy(const std::string& dict, const std::vector<std::byte>& data,
                           int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<std::byte> out;
  append(out, "\x93NUMPY");
  append_value<uint8_t>(out, static_cast<uint8_t>(major));
  append_value<uint8_t>(out, 0);
  if (major == 1)
    append_value<uint16_t>(out, static_cast<uint16_t>(header.size()));
  else
    append_value<uint32_t>(out, static_cast<uint32_t>(header.size()));
  append(out, header);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string dict(const std::string& descr, const std::string& shape,
                 const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

std::vector<std::byte> safetensors(const std::string& header_json,
                                   const std::vector<std::byte>& data) {
  std::vector<std::byte> out;
  append_value<uint64_t>(out, header_json.size());
  append(out, header_json);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

}  // namespace

TEST_CASE("npy: f32 v1, 2-d shape") {
  TempDir dir;
  const std::vector<float> v = nonzero_floats(6, 1);
  write_bytes(dir / "a.npy", npy(dict("<f4", "(2, 3)"), bytes_of(v)));
  CHECK(values_of<float>(read_npy(dir / "a.npy", DType::f32, 6, "/buffers/0/init/path")) == v);
}

TEST_CASE("npy: versions 2 and 3, double quotes, scalar and 1-d shapes") {
  TempDir dir;
  const std::vector<int64_t> v = {-5, 1LL << 40, 7};
  write_bytes(dir / "v2.npy", npy(dict("<i8", "(3,)"), bytes_of(v), 2));
  CHECK(values_of<int64_t>(read_npy(dir / "v2.npy", DType::i64, 3, "/p")) == v);
  write_bytes(dir / "v3.npy", npy("{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (3,)}",
                                  bytes_of(v), 3));
  CHECK(values_of<int64_t>(read_npy(dir / "v3.npy", DType::i64, 3, "/p")) == v);
  const std::vector<uint32_t> s = {42};
  write_bytes(dir / "s.npy", npy(dict("<u4", "()"), bytes_of(s)));
  CHECK(values_of<uint32_t>(read_npy(dir / "s.npy", DType::u32, 1, "/p")) == s);
}

TEST_CASE("npy: every dtype's descr") {
  TempDir dir;
  const std::vector<uint8_t> u8 = {1, 2, 255};
  write_bytes(dir / "u8.npy", npy(dict("|u1", "(3,)"), bytes_of(u8)));
  CHECK(values_of<uint8_t>(read_npy(dir / "u8.npy", DType::u8, 3, "/p")) == u8);
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x7bff};
  write_bytes(dir / "f16.npy", npy(dict("<f2", "(3,)"), bytes_of(f16)));
  CHECK(values_of<uint16_t>(read_npy(dir / "f16.npy", DType::f16, 3, "/p")) == f16);
  const std::vector<int32_t> i32 = {-1, 2, -3};
  write_bytes(dir / "i32.npy", npy(dict("<i4", "(3,)"), bytes_of(i32)));
  CHECK(values_of<int32_t>(read_npy(dir / "i32.npy", DType::i32, 3, "/p")) == i32);
}

TEST_CASE("npy: bf16 from raw <u2 bits and from <f4 with nearest-even rounding") {
  TempDir dir;
  const std::vector<uint16_t> bits = {0x3f80, 0x4049, 0xc000};
  write_bytes(dir / "bits.npy", npy(dict("<u2", "(3,)"), bytes_of(bits)));
  CHECK(values_of<uint16_t>(read_npy(dir / "bits.npy", DType::bf16, 3, "/p")) == bits);
  const std::vector<float> f = {1.0f + 0x1.0p-8f, 1.0f + 3 * 0x1.0p-8f, 3.14159f, -2.0f};
  write_bytes(dir / "f.npy", npy(dict("<f4", "(4,)"), bytes_of(f)));
  CHECK(values_of<uint16_t>(read_npy(dir / "f.npy", DType::bf16, 4, "/p")) ==
        std::vector<uint16_t>{0x3f80, 0x3f82, 0x4049, 0xc000});
}

TEST_CASE("npy: rejections carry exact codes") {
  TempDir dir;
  const auto f4 = bytes_of(std::vector<float>{1, 2, 3, 4});
  auto code = [&](const std::vector<std::byte>& file, DType t = DType::f32, uint64_t n = 4) {
    write_bytes(dir / "x.npy", file);
    return error_code([&] { (void)read_npy(dir / "x.npy", t, n, "/buffers/1/init/path"); });
  };
  CHECK(code(npy(dict("<f4", "(4,)"), f4)) == "<none>");
  auto bad_magic = npy(dict("<f4", "(4,)"), f4);
  bad_magic[1] = std::byte{'X'};
  CHECK(code(bad_magic) == "init.npy.magic");
  CHECK(code({std::byte{0x93}, std::byte{'N'}}) == "init.npy.magic");
  auto v4 = npy(dict("<f4", "(4,)"), f4);
  v4[6] = std::byte{4};
  CHECK(code(v4) == "init.npy.version");
  CHECK(code(npy(dict("<f4", "(4,)", "True"), f4)) == "init.npy.fortran");
  CHECK(code(npy(dict(">f4", "(4,)"), f4)) == "init.npy.endian");
  CHECK(code(npy(dict("|O", "(4,)"), f4)) == "init.npy.dtype");
  CHECK(code(npy(dict("<f8", "(2,)"), f4)) == "init.npy.dtype");
  CHECK(code(npy(dict("<i4", "(4,)"), f4)) == "init.npy.dtype");
  CHECK(code(npy(dict("<f4", "(4,)"), f4), DType::f16) == "init.npy.dtype");
  CHECK(code(npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,)}", f4)) ==
        "init.npy.dtype");
  CHECK(code(npy(dict("<f4", "(2, 3)"), f4)) == "init.npy.shape");
  CHECK(code(npy(dict("<f4", "(99999999999, 99999999999)"), f4)) == "init.npy.shape");
  CHECK(code(npy(dict("<f4", "(99999999999999999999999,)"), f4)) == "init.npy.header");
  CHECK(code(npy(dict("<f4", "(5,)"), f4), DType::f32, 5) == "init.npy.size");  // truncated data
  auto extra = f4;
  extra.push_back(std::byte{0});
  CHECK(code(npy(dict("<f4", "(4,)"), extra)) == "init.npy.size");
  CHECK(code(npy("{'descr': '<f4', 'shape': (4,)}", f4)) == "init.npy.header");  // key missing
  CHECK(code(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", f4)) ==
        "init.npy.header");
  CHECK(code(npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", f4)) ==
        "init.npy.header");
  CHECK(code(npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,)}", f4)) ==
        "init.npy.header");
  CHECK(code(npy("{'descr': '<f4', 'fortran_order': False, 'shape': [4]}", f4)) ==
        "init.npy.header");
  CHECK(code(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} trailing", f4)) ==
        "init.npy.header");
  CHECK(code(npy("not a dict", f4)) == "init.npy.header");
  // A header length past the end of the file.
  auto long_header = npy(dict("<f4", "(4,)"), {});
  long_header[8] = std::byte{0xff};
  long_header[9] = std::byte{0xff};
  CHECK(code(long_header) == "init.npy.header");
  // A v2 header length above the limit, checked before allocating.
  auto huge = npy(dict("<f4", "(4,)"), f4, 2);
  huge[8] = huge[9] = huge[10] = huge[11] = std::byte{0xff};
  CHECK(code(huge) == "init.npy.header");
}

TEST_CASE("npy: errors name the buffer pointer and the file") {
  TempDir dir;
  write_bytes(dir / "x.npy", npy(dict(">f4", "(1,)"), bytes_of(std::vector<float>{1})));
  const auto e =
      caught([&] { (void)read_npy(dir / "x.npy", DType::f32, 1, "/buffers/3/init/path"); });
  REQUIRE(e);
  CHECK(e->kind() == ErrorKind::program);
  CHECK(e->where() == "/buffers/3/init/path");
  CHECK(e->message().find("x.npy") != std::string::npos);
  const auto missing =
      caught([&] { (void)read_npy(dir / "nope.npy", DType::f32, 1, "/buffers/3/init/path"); });
  REQUIRE(missing);
  CHECK(missing->code() == "io.missing");
  CHECK(missing->kind() == ErrorKind::io);
  CHECK(missing->where() == "/buffers/3/init/path");
  CHECK(missing->message().find("nope.npy") != std::string::npos);
  CHECK(error_code([&] { (void)read_npy(dir.path(), DType::f32, 1, "/p"); }) == "io.read");
}

TEST_CASE("raw: reads the byte range at the offset") {
  TempDir dir;
  std::vector<std::byte> file;
  append(file, "HEADER--");
  const std::vector<uint16_t> v = {1, 2, 3, 0xffff};
  append(file, v.data(), 8);
  append(file, "tail");
  write_bytes(dir / "r.bin", file);
  CHECK(values_of<uint16_t>(read_raw(dir / "r.bin", 8, DType::bf16, 4, "/p")) == v);
  CHECK(values_of<uint16_t>(read_raw(dir / "r.bin", 10, DType::f16, 3, "/p")) ==
        std::vector<uint16_t>{2, 3, 0xffff});
  // Exactly to the end is fine; one element more is not.
  CHECK(read_raw(dir / "r.bin", 0, DType::u8, file.size(), "/p").size() == file.size());
  CHECK(error_code([&] { (void)read_raw(dir / "r.bin", 1, DType::u8, file.size(), "/p"); }) ==
        "init.raw.range");
  CHECK(error_code([&] { (void)read_raw(dir / "r.bin", 16, DType::f32, 2, "/p"); }) ==
        "init.raw.range");
  CHECK(error_code([&] { (void)read_raw(dir / "r.bin", UINT64_MAX - 2, DType::f32, 1, "/p"); }) ==
        "init.raw.range");
  CHECK(error_code([&] { (void)read_raw(dir / "r.bin", 0, DType::i64, UINT64_MAX / 4, "/p"); }) ==
        "init.raw.range");
  CHECK(error_code([&] { (void)read_raw(dir / "none.bin", 0, DType::u8, 1, "/p"); }) ==
        "io.missing");
}

TEST_CASE("safetensors: reads a tensor of a hand-built file") {
  TempDir dir;
  const std::vector<float> a = nonzero_floats(6, 3);
  const std::vector<uint16_t> b = {0x3f80, 0x4000};
  std::vector<std::byte> data = bytes_of(a);
  append(data, b.data(), 4);
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]}}   )";  // padded, as writers do
  write_bytes(dir / "m.safetensors", safetensors(header, data));
  CHECK(values_of<float>(read_safetensors(dir / "m.safetensors", "a", DType::f32, 6, "/p")) == a);
  CHECK(values_of<uint16_t>(read_safetensors(dir / "m.safetensors", "b", DType::bf16, 2, "/p")) ==
        b);
}

TEST_CASE("safetensors: tensors whose data offsets overlap are refused, naming both") {
  TempDir dir;
  const std::vector<std::byte> data(3072);
  auto read = [&](const std::string& header, const std::string& tensor) {
    write_bytes(dir / "o.safetensors", safetensors(header, data));
    (void)read_safetensors(dir / "o.safetensors", tensor, DType::f32, 512, "/buffers/0/init/path");
  };
  const std::string overlap =
      R"({"a": {"dtype": "F32", "shape": [512], "data_offsets": [0, 2048]},)"
      R"( "b": {"dtype": "F32", "shape": [512], "data_offsets": [1024, 3072]}})";
  for (const char* tensor : {"a", "b"}) {  // whichever is read, the file is refused
    const auto e = caught([&] { read(overlap, tensor); });
    REQUIRE(e);
    CHECK(e->code() == "init.safetensors.overlap");
    CHECK(e->where() == "/buffers/0/init/path");
    CHECK(e->message().find("o.safetensors") != std::string::npos);
    CHECK(e->message().find("'a' [0, 2048) and 'b' [1024, 3072)") != std::string::npos);
  }
  // A third tensor inside the first one's range, listed last, is caught too.
  const auto inside = caught([&] {
    read(R"({"a": {"dtype": "F32", "shape": [512], "data_offsets": [0, 2048]},)"
         R"( "c": {"dtype": "F32", "shape": [2], "data_offsets": [2048, 2056]},)"
         R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
         "a");
  });
  REQUIRE(inside);
  CHECK(inside->message().find("'a' [0, 2048) and 'b' [8, 16)") != std::string::npos);
  // Adjacent ranges and empty tensors share no bytes.
  CHECK_NOTHROW(read(R"({"a": {"dtype": "F32", "shape": [512], "data_offsets": [0, 2048]},)"
                     R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [1024, 1024]},)"
                     R"( "b": {"dtype": "F32", "shape": [256], "data_offsets": [2048, 3072]}})",
                     "a"));
}

TEST_CASE("safetensors: rejections carry exact codes") {
  TempDir dir;
  const auto data = bytes_of(std::vector<int32_t>{1, 2, 3, 4});
  auto code = [&](const std::vector<std::byte>& file, const std::string& tensor = "t",
                  DType t = DType::i32, uint64_t n = 4) {
    write_bytes(dir / "x.safetensors", file);
    return error_code([&] { (void)read_safetensors(dir / "x.safetensors", tensor, t, n, "/p"); });
  };
  const std::string good = R"({"t": {"dtype": "I32", "shape": [4], "data_offsets": [0, 16]}})";
  CHECK(code(safetensors(good, data)) == "<none>");
  CHECK(code({std::byte{1}, std::byte{2}}) == "init.safetensors.header");
  // Header length larger than the file, and larger than the 100 MB limit.
  std::vector<std::byte> past;
  append_value<uint64_t>(past, 1000);
  append(past, good);
  CHECK(code(past) == "init.safetensors.header");
  std::vector<std::byte> huge;
  append_value<uint64_t>(huge, 200'000'000);
  append(huge, good);
  CHECK(code(huge) == "init.safetensors.header");
  std::vector<std::byte> max;
  append_value<uint64_t>(max, UINT64_MAX);
  CHECK(code(max) == "init.safetensors.header");
  CHECK(code(safetensors("{not json", data)) == "init.safetensors.header");
  // Nesting: kMaxSafetensorsDepth levels are read; one more is refused, however deep it goes.
  auto nested = [&](int levels) {
    std::string meta(static_cast<size_t>(levels - 2), '[');
    meta += std::string(static_cast<size_t>(levels - 2), ']');
    return R"({"__metadata__": {"x": )" + meta +
           R"(}, "t": {"dtype": "I32", "shape": [4], "data_offsets": [0, 16]}})";
  };
  CHECK(code(safetensors(nested(amk::kMaxSafetensorsDepth), data)) == "<none>");
  CHECK(code(safetensors(nested(amk::kMaxSafetensorsDepth + 1), data)) ==
        "init.safetensors.header");
  CHECK(code(safetensors(nested(100000), data)) == "init.safetensors.header");
  CHECK(code(safetensors("[1, 2]", data)) == "init.safetensors.header");
  CHECK(code(safetensors(good, data), "u") == "init.safetensors.tensor");
  CHECK(code(safetensors(good, data), "__metadata__") == "init.safetensors.tensor");
  CHECK(code(safetensors(R"({"t": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})",
                         data)) == "init.safetensors.dtype");
  CHECK(code(safetensors(good, data), "t", DType::u32) == "init.safetensors.dtype");
  CHECK(code(safetensors(R"({"t": {"dtype": "I32", "shape": [2, 3], "data_offsets": [0, 16]}})",
                         data)) == "init.safetensors.shape");
  CHECK(code(safetensors(R"({"t": {"dtype": "I32", "shape": [-4], "data_offsets": [0, 16]}})",
                         data)) == "init.safetensors.shape");
  CHECK(code(safetensors(R"({"t": {"dtype": "I32", "shape": [4], "data_offsets": [0, 12]}})",
                         data)) == "init.safetensors.offsets");
  CHECK(code(safetensors(R"({"t": {"dtype": "I32", "shape": [4], "data_offsets": [16, 0]}})",
                         data)) == "init.safetensors.offsets");
  CHECK(code(safetensors(R"({"t": {"dtype": "I32", "shape": [4], "data_offsets": [8, 24]}})",
                         data)) == "init.safetensors.offsets");
  CHECK(
      code(safetensors(
          R"({"t": {"dtype": "I32", "shape": [4], "data_offsets": [18446744073709551600, 18446744073709551615]}})",
          data)) == "init.safetensors.offsets");
  CHECK(code(safetensors(R"({"t": {"dtype": "I32", "shape": [4]}})", data)) ==
        "init.safetensors.entry");
  CHECK(code(safetensors(R"({"t": [1, 2]})", data)) == "init.safetensors.entry");
  const auto e = caught([&] {
    write_bytes(dir / "y.safetensors", safetensors(good, data));
    (void)read_safetensors(dir / "y.safetensors", "w", DType::i32, 4, "/buffers/4/init/path");
  });
  REQUIRE(e);
  CHECK(e->where() == "/buffers/4/init/path");
  CHECK(e->message().find("y.safetensors") != std::string::npos);
  CHECK(e->message().find("tensors: t") != std::string::npos);
}
