// The API's checks and bookkeeping that need no device (api/host.hpp): the program Executable::open
// loads and its options, buffer lookup, size / dtype / pointer checks, the written buffers, and
// the fingerprints that let set_input skip an unchanged upload.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "api/host.hpp"
#include "common/program_builder.hpp"

using namespace amk;
using namespace amk::detail;

namespace {

const std::string kChain = AMK_SOURCE_DIR "/samples/elementwise_chain.json";

// The usage error `f` throws, checked for its code and place.
void check_usage(const std::function<void()>& f, const std::string& code,
                 const std::string& where) {
  const auto e = test::error_of(f);
  REQUIRE(e);
  CHECK_MESSAGE(e->kind() == ErrorKind::usage, e->what());
  CHECK(e->exit_code() == ExitCode::usage);
  CHECK_MESSAGE(e->code() == code, e->what());
  CHECK_MESSAGE(e->where() == where, e->what());
}

std::vector<std::byte> bytes_of(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("load_for_open loads and verifies the program; bad options are refused first") {
  OpenOptions o;
  const OpenedProgram opened = load_for_open(kChain, o);
  CHECK(opened.program.name == "elementwise_chain");
  CHECK(opened.vm.empty());

  o.vm = "gemv_ring_stages=3";
  CHECK(load_for_open(kChain, o).vm.size() == 1);
  o.vm = "no_such_field=1";
  check_usage([&] { (void)load_for_open("/nonexistent.json", o); }, "usage.vm", "vm");
  o.vm.clear();
  o.timeout_ms = 0;
  check_usage([&] { (void)load_for_open("/nonexistent.json", o); }, "api.timeout", "timeout_ms");
  o.timeout_ms = kMaxTimeoutMs + 1;
  check_usage([&] { (void)load_for_open(kChain, o); }, "api.timeout", "timeout_ms");
  o.timeout_ms = 1000;
  const auto missing = test::error_of([&] { (void)load_for_open("/nonexistent.json", o); });
  REQUIRE(missing);
  CHECK(missing->exit_code() == ExitCode::io);
}

TEST_CASE("the book describes every buffer: dtype, shape, bytes, output, written") {
  const BufferBook book(load_for_open(kChain, {}).program);
  const std::vector<BufferInfo>& b = book.infos();
  REQUIRE(b.size() == 6);
  CHECK(b[0].name == "a");
  CHECK(b[0].dtype == "f32");
  CHECK(b[0].shape == std::vector<uint64_t>{2048});
  CHECK(b[0].bytes == 8192);
  CHECK(b[4].dtype == "f16");
  CHECK(b[4].bytes == 4096);
  for (const BufferInfo& i : b) {
    CHECK(i.output == (i.name == "out"));
    CHECK(i.written == (i.name != "a" && i.name != "b"));  // s, p, q, out are computed
    CHECK_FALSE(i.bound);
  }
  CHECK(book.find("q", "set_input") == 4);
}

TEST_CASE("unknown buffer, wrong size or dtype, null host pointer: usage errors naming the call") {
  const BufferBook book(load_for_open(kChain, {}).program);
  const auto unknown = test::error_of([&] { (void)book.find("nope", "read_output"); });
  REQUIRE(unknown);
  CHECK(unknown->code() == "api.buffer");
  CHECK(unknown->where() == "nope");
  CHECK(std::string(unknown->what()).find("read_output") != std::string::npos);
  CHECK(std::string(unknown->what()).find("a, b, s, p, q, out") != std::string::npos);

  CHECK_NOTHROW(book.check(0, 8192, "f32", "set_input"));
  check_usage([&] { book.check(0, 8188, "f32", "set_input"); }, "api.size", "a");
  check_usage([&] { book.check(0, 8192, "f16", "set_input"); }, "api.dtype", "a");
  check_usage([&] { book.check(4, 8192, "f32", "bind"); }, "api.dtype", "q");  // dtype first
  check_usage([&] { check_host_pointer(nullptr, "a", "set_input"); }, "api.data", "a");
}

TEST_CASE("bind pointers: null and off the 16-byte boundary are refused") {
  const BufferBook book(load_for_open(kChain, {}).program);
  check_usage([&] { book.check_bind(5, 0); }, "api.bind.pointer", "out");
  check_usage([&] { book.check_bind(5, 0x7f0000001008); }, "api.bind.alignment", "out");
  check_usage([&] { book.check_bind(5, 0x7f0000001001); }, "api.bind.alignment", "out");
  CHECK_NOTHROW(book.check_bind(5, 0x7f0000001010));
}

TEST_CASE("set_input's fingerprints: an upload is skipped only for the bytes last uploaded") {
  BufferBook book(load_for_open(kChain, {}).program);
  std::vector<float> a(2048, 1.0f);
  auto first = book.needs_upload(0, bytes_of(a));  // nothing known yet: upload
  REQUIRE(first);
  book.uploaded(0, *first);
  CHECK_FALSE(book.needs_upload(0, bytes_of(a)));  // the same bytes: skip
  a[2047] = 2.0f;
  const auto changed = book.needs_upload(0, bytes_of(a));
  REQUIRE(changed);
  CHECK(*changed != *first);
  book.uploaded(0, *changed);

  // s is written by the program: after a launch its device contents are unknown.
  std::vector<float> s(2048, 3.0f);
  book.uploaded(2, *book.needs_upload(2, bytes_of(s)));
  CHECK_FALSE(book.needs_upload(2, bytes_of(s)));
  book.launched();
  CHECK(book.needs_upload(2, bytes_of(s)));
  CHECK_FALSE(book.needs_upload(0, bytes_of(a)));  // a is only read: still known

  // A bound buffer's owner may change it at any time: every set_input uploads.
  book.bound(0);
  CHECK(book.infos()[0].bound);
  book.uploaded(0, 42);
  CHECK(book.needs_upload(0, bytes_of(a)));
}

TEST_CASE("written buffers: write and read_write slots of built-in ops, every custom op operand") {
  test::Builder b;
  const uint32_t x = b.buffer("x", DType::f32, 16), y = b.buffer("y", DType::f32, 16),
                 z = b.buffer("z", DType::f32, 16), w = b.buffer("w", DType::f32, 16);
  b.add("add", {b.whole(x), b.whole(x), b.whole(y)});  // a, b read; y written
  CHECK(written_buffers(b.p) == std::vector<bool>{false, true, false, false});
  Instruction custom;
  custom.op = kCustomOpBase;
  custom.operands = {b.whole(z), b.whole(w)};
  b.p.instructions.push_back(custom);
  CHECK(written_buffers(b.p) == std::vector<bool>{false, true, true, true});
}
