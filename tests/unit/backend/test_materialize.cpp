// materialize_buffer / materialize_all: every init kind through a program, paths resolved
// against the program's folder, errors located at the buffer's init.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/host_data.hpp"
#include "backend/init_sources.hpp"

#include "helpers.hpp"

using namespace amk;
using namespace amk::test;

TEST_CASE("every init kind") {
  TempDir dir;
  const EveryInit e = every_init_program(dir);
  const Program& p = e.program;
  const BufferInit& random = p.buffers[2].init;
  const std::vector<float>& npy_values = e.npy_values;
  const HostBuffers h = materialize_all(p);
  REQUIRE(h.data.size() == 8);
  CHECK(h.data[0] == std::vector<std::byte>(12));
  CHECK(values_of<uint16_t>(h.data[1]) == std::vector<uint16_t>(4, 0x3e00));  // 1.5 in f16
  CHECK(h.data[2] == random_fill(random, DType::bf16, 100, "/x"));
  CHECK(values_of<int32_t>(h.data[3]) == std::vector<int32_t>{4, -5, 6});
  CHECK(values_of<float>(h.data[4]) == npy_values);
  CHECK(values_of<uint8_t>(h.data[5]) == std::vector<uint8_t>{7, 6, 5, 4});
  CHECK(values_of<int64_t>(h.data[6]) == std::vector<int64_t>{-3, 1LL << 50});
  CHECK(values_of<uint32_t>(h.data[7]) == std::vector<uint32_t>{7});
  CHECK(materialize_buffer(p, 4) == h.data[4]);
}

TEST_CASE("windows: a block of the whole tensor, filled at random or read from a file") {
  TempDir dir;
  EveryInit e = every_init_program(dir);
  Program& p = e.program;
  // Random: blocks of a [6, 8] normal fill hold what the whole fill has there.
  BufferInit whole = init_of(InitKind::random);
  whole.seed = 11;
  whole.distribution = Distribution::normal;
  whole.a = 0.5;
  whole.b = 2.0;
  const uint32_t first = static_cast<uint32_t>(p.buffers.size());
  p.buffers.push_back(with_init(make_buffer("whole", DType::f32, {6, 8}), whole));
  const std::vector<std::pair<uint64_t, uint64_t>> at = {{0, 0}, {2, 3}, {4, 3}};
  for (const auto& [r, c] : at) {
    BufferInit w = whole;
    w.window_of = {6, 8};
    w.window_at = {r, c};
    p.buffers.push_back(with_init(make_buffer("block", DType::f32, {2, 5}), w));
  }
  // A file: the npy tensor is f32 [2, 2]; its second row, and its second column.
  BufferInit row = p.buffers[4].init, column = row;
  row.window_of = column.window_of = {2, 2};
  row.window_at = {1, 0};
  column.window_at = {0, 1};
  p.buffers.push_back(with_init(make_buffer("row", DType::f32, {1, 2}), row));
  p.buffers.push_back(with_init(make_buffer("column", DType::f32, {2, 1}), column));

  const HostBuffers h = materialize_all(p);
  const std::vector<float> all = values_of<float>(h.data[first]);
  for (size_t k = 0; k < at.size(); ++k) {
    const std::vector<float> block = values_of<float>(h.data[first + 1 + k]);
    REQUIRE(block.size() == 10);
    for (uint64_t i = 0; i < 2; ++i)
      for (uint64_t j = 0; j < 5; ++j)
        CHECK(block[i * 5 + j] == all[(at[k].first + i) * 8 + at[k].second + j]);
  }
  const std::vector<float>& v = e.npy_values;
  CHECK(values_of<float>(h.data[first + 4]) == std::vector<float>{v[2], v[3]});
  CHECK(values_of<float>(h.data[first + 5]) == std::vector<float>{v[1], v[3]});
  // A tensor of another size than the window's: the file's error, at the buffer's init.
  p.buffers[first + 4].init.window_of = {4, 2};
  CHECK(error_code([&] { (void)materialize_buffer(p, first + 4); }).rfind("init.npy", 0) == 0);
}

TEST_CASE("constants that do not fit the dtype are refused") {
  Program p;
  BufferInit c = init_of(InitKind::constant);
  c.constant = 1.5;
  p.buffers = {with_init(make_buffer("i", DType::i32, {2}), c)};
  const auto e = caught([&] { (void)materialize_buffer(p, 0); });
  REQUIRE(e);
  CHECK(e->code() == "init.value");
  CHECK(e->where() == "/buffers/0/init/value");
  p.buffers[0].dtype = DType::u8;
  p.buffers[0].init.constant = 256;
  CHECK(error_code([&] { (void)materialize_buffer(p, 0); }) == "init.value");
  p.buffers[0].init.constant = 255;
  CHECK(values_of<uint8_t>(materialize_buffer(p, 0)) == std::vector<uint8_t>{255, 255});
  p.buffers[0].dtype = DType::f16;
  p.buffers[0].init.constant = 70000;
  CHECK(error_code([&] { (void)materialize_buffer(p, 0); }) == "init.value");
}

TEST_CASE("file errors are located at the buffer's init path") {
  TempDir dir;
  Program p;
  p.base_dir = dir.path().string();
  BufferInit n = init_of(InitKind::npy);
  n.path = "missing.npy";
  p.buffers = {make_buffer("a", DType::f32, {1}), with_init(make_buffer("b", DType::f32, {1}), n)};
  const auto e = caught([&] { (void)materialize_all(p); });
  REQUIRE(e);
  CHECK(e->code() == "io.missing");
  CHECK(e->kind() == ErrorKind::io);
  CHECK(e->where() == "/buffers/1/init/path");
  CHECK(e->message().find("missing.npy") != std::string::npos);

  BufferInit r = init_of(InitKind::raw);
  r.path = "short.bin";
  write_bytes(dir / "short.bin", bytes_of(std::vector<float>{1}));
  p.buffers[1] = with_init(make_buffer("b", DType::f32, {2}), r);
  const auto short_error = caught([&] { (void)materialize_buffer(p, 1); });
  REQUIRE(short_error);
  CHECK(short_error->code() == "init.raw.range");
  CHECK(short_error->where() == "/buffers/1/init/path");

  BufferInit v = init_of(InitKind::values);
  v.data = bytes_of(std::vector<float>{1});
  p.buffers[1] = with_init(make_buffer("b", DType::f32, {2}), v);
  CHECK(error_code([&] { (void)materialize_buffer(p, 1); }) == "init.values.count");
}

TEST_CASE("host_bytes is zeroed at every size (huge-page hint from 8 MiB); "
          "copy_host_buffers copies") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, (size_t{8} << 20) - 1, size_t{8} << 20,
                   (size_t{9} << 20) + 3}) {
    CAPTURE(n);
    const std::vector<std::byte> v = host_bytes(n);
    REQUIRE(v.size() == n);
    size_t nonzero = 0;
    for (std::byte b : v) nonzero += b != std::byte{0};
    CHECK(nonzero == 0);
  }
  HostBuffers from;
  from.data.push_back({});
  from.data.push_back(host_bytes(size_t{9} << 20));
  for (size_t i = 0; i < from.data[1].size(); ++i)
    from.data[1][i] = static_cast<std::byte>(i * 131 + 7);
  const HostBuffers copy = copy_host_buffers(from);
  REQUIRE(copy.data.size() == 2);
  CHECK(copy.data[0].empty());
  CHECK(copy.data[1] == from.data[1]);
  CHECK(copy.data[1].data() != from.data[1].data());
}

TEST_CASE("check_host_memory refuses buffers past the available memory, naming the biggest") {
  Program p;
  p.buffers = {make_buffer("a", DType::f32, {256}), make_buffer("big", DType::f32, {1024}),
               make_buffer("c", DType::u8, {1024})};  // 1024 + 4096 + 1024 bytes
  CHECK_NOTHROW(check_host_memory(p, 6144));
  CHECK_NOTHROW(check_host_memory(p, std::nullopt));  // unknown: nothing refused
  const auto e = caught([&] { check_host_memory(p, 6143); });
  REQUIRE(e);
  CHECK(e->code() == "host.memory");
  CHECK(e->kind() == ErrorKind::device);
  CHECK(e->exit_code() == ExitCode::device);
  CHECK(e->where() == "/buffers/1");
  CHECK(e->message().find("need 6144 bytes") != std::string::npos);
  CHECK(e->message().find("6143 (0.0 GiB) are available") != std::string::npos);
  CHECK(e->message().find("the biggest is 'big' (4096 bytes)") != std::string::npos);
}

TEST_CASE("materialize_all refuses a program larger than the host before allocating") {
  const std::optional<uint64_t> available = host_memory_available();
#if defined(__linux__)
  REQUIRE(available.has_value());  // /proc/meminfo
  CHECK(*available > 0);
#endif
  // Two 1 TiB buffers (the most a program may ask for): more than this host has.
  Program p;
  p.buffers = {make_buffer("w0", DType::u8, {uint64_t{1} << 40}),
               make_buffer("w1", DType::u8, {uint64_t{1} << 40})};
  if (!available || *available >= (uint64_t{2} << 40)) return;
  const auto e = caught([&] { (void)materialize_all(p); });
  REQUIRE(e);
  CHECK(e->code() == "host.memory");
  CHECK(e->where() == "/buffers/0");
}

// (AddressSanitizer aborts on an allocation it cannot serve instead of throwing.)
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AMK_TEST_ASAN 1
#endif
#endif
#if !defined(__SANITIZE_ADDRESS__) && !defined(AMK_TEST_ASAN)
TEST_CASE("running out of memory while materializing is host.memory at the buffer") {
  // 1 TiB of zeros: a heuristic-overcommit Linux (mode 0) with less RAM + swap than that refuses
  // the allocation at once (std::bad_alloc) instead of letting it touch pages. Elsewhere skip.
  const auto meminfo = [] {
    std::ifstream f("/proc/meminfo");
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  }();
  const auto kib = [&](const std::string& key) -> uint64_t {
    const size_t at = meminfo.find(key + ":");
    return at == std::string::npos
               ? UINT64_MAX
               : std::strtoull(meminfo.c_str() + at + key.size() + 1, nullptr, 10);
  };
  std::ifstream mode_file("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  mode_file >> mode;
  const uint64_t ram_swap_kib = kib("MemTotal") + kib("SwapTotal");
  if (mode != 0 || ram_swap_kib >= (uint64_t{1} << 30)) return;
  Program p;
  p.buffers = {make_buffer("small", DType::u8, {8}),
               make_buffer("huge", DType::u8, {uint64_t{1} << 40})};
  const auto e = caught([&] { (void)materialize_buffer(p, 1); });
  REQUIRE(e);
  CHECK(e->code() == "host.memory");
  CHECK(e->kind() == ErrorKind::device);
  CHECK(e->where() == "/buffers/1");
  CHECK(e->message().find("'huge' (1099511627776 bytes") != std::string::npos);
}
#endif
