// The public Executable without a GPU: a closed executable refuses every call (api.closed), and
// open refuses with the device error (exit 5) where no GPU is usable: no driver (CI), or a build
// without the CUDA toolkit. On a machine with a GPU (scripts/gpu_check.sh runs this tier there)
// open succeeds instead; tests/gpu/test_api.cpp covers that side.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "amk/amk.hpp"

using namespace amk;

namespace {

const std::string kSample = AMK_SOURCE_DIR "/samples/elementwise_chain.json";

void check_closed(const std::function<void()>& f, const std::string& call) {
  try {
    f();
    FAIL_CHECK("expected api.closed from " << call);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(e.exit_code() == ExitCode::usage);
    CHECK(e.code() == "api.closed");
    CHECK(e.where() == call);
  }
}

void check_every_call_closed(Executable& exe) {
  CHECK_FALSE(exe.is_open());
  std::vector<float> v(2048);
  check_closed([&] { (void)exe.buffers(); }, "buffers");
  check_closed([&] { exe.set_input("a", v.data(), 8192, "f32"); }, "set_input");
  check_closed([&] { exe.bind("a", 0x1000, 8192, "f32"); }, "bind");
  check_closed([&] { exe.launch(); }, "launch");
  check_closed([&] { exe.read_output("out", v.data(), 8192, "f32"); }, "read_output");
  check_closed([&] { (void)exe.profile(); }, "profile");
  check_closed([&] { (void)exe.attributes(); }, "attributes");
  check_closed([&] { (void)exe.stats(); }, "stats");
}

}  // namespace

TEST_CASE("a default-constructed, closed or moved-from executable refuses every call") {
  Executable exe;
  check_every_call_closed(exe);
  exe.close();  // idempotent
  exe.close();
  Executable moved = std::move(exe);
  check_every_call_closed(moved);
  check_every_call_closed(exe);  // NOLINT(bugprone-use-after-move): moved-from is closed
}

TEST_CASE("open refuses with the device error where no GPU is usable") {
  OpenOptions options;
  options.use_cache = false;
  try {
    Executable exe = Executable::open(kSample, options);
    // A machine with a usable GPU: the same call opens it.
    CHECK(exe.is_open());
    CHECK(exe.buffers().size() == 6);
    exe.close();
    check_every_call_closed(exe);
  } catch (const Error& e) {
    CHECK_MESSAGE(e.kind() == ErrorKind::device, e.what());
    CHECK(e.exit_code() == ExitCode::device);
    CHECK(static_cast<int>(e.exit_code()) == 5);
    CHECK_MESSAGE((e.code() == "device.no_driver" || e.code() == "device.unsupported"), e.what());
  }
}

TEST_CASE("open reports the program's own errors before any device error") {
  try {
    (void)Executable::open(AMK_SOURCE_DIR "/samples/no_such_program.json");
    FAIL_CHECK("expected an io error");
  } catch (const Error& e) {
    CHECK_MESSAGE(e.exit_code() == ExitCode::io, e.what());
  }
  OpenOptions options;
  options.vm = "not_a_field=1";
  try {
    (void)Executable::open(kSample, options);
    FAIL_CHECK("expected usage.vm");
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == "usage.vm", e.what());
  }
}
