// initial_data: zeros and constants stay fills, files read as they are become views of the mapped
// file, the rest is built on the host; every buffer's bytes and the data fingerprint equal
// materialize_all's.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backend/initial_data.hpp"
#include "backend/init_sources.hpp"

#include "helpers.hpp"

using namespace amk;
using namespace amk::test;

using Kind = InitialSource::Kind;

TEST_CASE("initial_data: every init kind, as materialize_all builds it") {
  TempDir dir;
  const EveryInit e = every_init_program(dir);
  const Program& p = e.program;
  const InitialData d = initial_data(p);
  const HostBuffers h = materialize_all(p);
  REQUIRE(d.size() == 8);
  const std::vector<Kind> kinds = {Kind::zeros, Kind::fill,  Kind::bytes, Kind::bytes,
                                   Kind::bytes, Kind::bytes, Kind::bytes, Kind::fill};
  for (size_t i = 0; i < d.size(); ++i) {
    CAPTURE(i);
    CHECK(d[i].kind == kinds[i]);
    CHECK(d[i].size == h.data[i].size());
    CHECK(d.expand(i) == h.data[i]);
  }
  CHECK(d[1].element_size == 2);
  CHECK(d[7].element_size == 4);
  CHECK(data_fingerprint(d) == data_fingerprint(InitialData::view(h)));
  // The npy, raw and safetensors buffers are views of their files, not host copies.
  for (size_t i : {4, 5, 6}) CHECK(d[i].bytes.data() != nullptr);
}

TEST_CASE("initial_data: an f32 .npy read into bf16 is converted on the host") {
  TempDir dir;
  Program p;
  p.base_dir = dir.path().string();
  const std::vector<float> values = nonzero_floats(6, 3);
  std::vector<std::byte> file;
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  append(file, "\x93NUMPY\x01");
  append_value<uint8_t>(file, 0);
  append_value<uint16_t>(file, static_cast<uint16_t>(header.size()));
  append(file, header);
  append(file, values.data(), values.size() * 4);
  write_bytes(dir / "w.npy", file);
  BufferInit n = init_of(InitKind::npy);
  n.path = "w.npy";
  p.buffers = {with_init(make_buffer("w", DType::bf16, {6}), n)};
  CHECK_FALSE(locate_npy(dir / "w.npy", DType::bf16, 6, "/p").has_value());
  const InitialData d = initial_data(p);
  REQUIRE(d.size() == 1);
  CHECK(d[0].kind == Kind::bytes);
  CHECK(d.expand(0) == materialize_buffer(p, 0));
  // Read as f32 it is used as it is: the range is the file's data.
  const auto r = locate_npy(dir / "w.npy", DType::f32, 6, "/p");
  REQUIRE(r.has_value());
  CHECK(r->offset == file.size() - 24);
  CHECK(r->bytes == 24);
}

TEST_CASE("initial_data: errors are materialize_all's, the lowest buffer's first") {
  TempDir dir;
  Program p;
  p.base_dir = dir.path().string();
  BufferInit c = init_of(InitKind::constant);
  c.constant = 300;
  BufferInit missing = init_of(InitKind::safetensors);
  missing.path = "gone.safetensors";
  missing.tensor = "t";
  BufferInit bad_values = init_of(InitKind::values);
  bad_values.data = bytes_of(std::vector<float>{1});
  p.buffers = {make_buffer("z", DType::f32, {4}),
               with_init(make_buffer("v", DType::f32, {2}), bad_values),
               with_init(make_buffer("m", DType::f32, {2}), missing),
               with_init(make_buffer("c", DType::u8, {2}), c)};
  // Files and constants are checked first, in buffer order.
  auto err = caught([&] { (void)initial_data(p); });
  REQUIRE(err);
  CHECK(err->code() == "io.missing");
  CHECK(err->where() == "/buffers/2/init/path");
  p.buffers[2] = make_buffer("m", DType::f32, {2});
  err = caught([&] { (void)initial_data(p); });
  REQUIRE(err);
  CHECK(err->code() == "init.value");
  CHECK(err->where() == "/buffers/3/init/value");
  p.buffers[3].init.constant = 200;
  err = caught([&] { (void)initial_data(p); });
  REQUIRE(err);
  CHECK(err->code() == "init.values.count");
  CHECK(err->where() == "/buffers/1/init/values");
}

TEST_CASE("data_fingerprint: sizes and 64 MiB piece digests, the same for fills and bytes") {
  HostBuffers h;
  h.data = {{std::byte{1}, std::byte{2}, std::byte{3}}, {}};
  // sha256(le64(3) sha256(01 02 03) le64(0)), from Python's hashlib.
  CHECK(data_fingerprint(InitialData::view(h)) ==
        "92844f4606620eebcf40d549daca2b4ea2d8e417bf0e89ed52db3992ff53a443");
  CHECK(data_fingerprint(InitialData::view(HostBuffers{})) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // The same bytes split differently are different data.
  HostBuffers a, b;
  a.data = {{std::byte{1}}, {std::byte{2}, std::byte{3}}};
  b.data = {{std::byte{1}, std::byte{2}}, {std::byte{3}}};
  CHECK(data_fingerprint(InitialData::view(a)) != data_fingerprint(InitialData::view(b)));

  // Buffers past one piece: zeros and a fill hash as their expanded bytes do.
  Program p;
  const uint64_t n = kFingerprintPiece / 4 + 3;  // f32 elements: one piece and 12 bytes
  BufferInit c = init_of(InitKind::constant);
  c.constant = -2.5;
  p.buffers = {make_buffer("z", DType::f32, {n}), with_init(make_buffer("c", DType::f32, {n}), c)};
  const InitialData fills = initial_data(p);
  CHECK(fills[0].kind == Kind::zeros);
  CHECK(fills[1].kind == Kind::fill);
  const InitialData built = InitialData::own(materialize_all(p));
  CHECK(built[1].kind == Kind::bytes);
  CHECK(data_fingerprint(fills) == data_fingerprint(built));
  HostBuffers changed = materialize_all(p);
  changed.data[1][kFingerprintPiece + 5] ^= std::byte{1};  // in the second piece
  CHECK(data_fingerprint(InitialData::view(changed)) != data_fingerprint(fills));
}

TEST_CASE("a mapped data file that shrinks while it is read: io.read, not SIGBUS") {
  TempDir dir;
  Program p;
  p.base_dir = dir.path().string();
  constexpr uint64_t kBytes = uint64_t{4} << 20;  // many pages, all past the new end
  write_bytes(dir.path() / "big.bin", std::vector<std::byte>(kBytes, std::byte{7}));
  BufferInit raw = init_of(InitKind::raw);
  raw.path = "big.bin";
  p.buffers = {make_buffer("z", DType::f32, {4}),
               with_init(make_buffer("r", DType::u8, {kBytes}), raw)};
  const InitialData d = initial_data(p);
  REQUIRE(d[1].kind == Kind::bytes);
  CHECK(d.expand(1)[kBytes - 1] == std::byte{7});
  std::filesystem::resize_file(dir.path() / "big.bin", 0);
  for (const auto& read : {std::function<void()>([&] { (void)d.expand(1); }),
                           std::function<void()>([&] { (void)data_fingerprint(d); })}) {
    const auto err = caught(read);
    REQUIRE(err);
    CHECK(err->code() == "io.read");
    CHECK(err->where() == "/buffers/1/init/path");
  }
  CHECK(d.expand(0).size() == 16);  // the other buffers still read
}
