// The CUDA layer's host-only parts: driver loading (absent on CI: libcuda.so.1 is missing there),
// error mapping, TMA argument translation, diag text and profile statistics. No GPU needed; on a
// machine with a driver the driver-dependent checks take the other branch.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda/compile.hpp"
#include "cuda/driver.hpp"
#include "cuda/executor.hpp"
#include "cuda/tma.hpp"

using namespace amk;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

Error catch_error(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an amk::Error");
  return Error(ErrorKind::internal, "", "", "");
}

Program tma_program() {
  Program p;
  p.name = "tma";
  Buffer w;
  w.name = "w";
  w.dtype = DType::bf16;
  w.shape = {64, 128};
  p.buffers.push_back(w);
  TmaSpec s;
  s.name = "w_tiles";
  s.buffer = 0;
  s.dims = {128, 64};
  s.box = {64, 16};
  s.swizzle = TmaSwizzle::b128;
  s.l2_promotion = TmaL2Promotion::b256;
  p.tma.push_back(s);
  return p;
}

}  // namespace

TEST_CASE("driver table names are the unversioned symbols cuGetProcAddress wants") {
  std::vector<std::string> names;
#define AMK_NAME(member, symbol) names.push_back(#symbol);
  AMK_DRIVER_FUNCTIONS(AMK_NAME)
#undef AMK_NAME
  CHECK(std::find(names.begin(), names.end(), "cuMemAlloc") != names.end());
  CHECK(std::find(names.begin(), names.end(), "cuEventElapsedTime") != names.end());
  for (const auto& n : names) {
    CAPTURE(n);
    CHECK(n.find("_v") == std::string::npos);
  }
}

TEST_CASE("driver availability is reported, never fatal") {
  std::string why;
  const bool have = cu::driver_available(&why);
  std::string gpu_why;
  const bool gpu = gpu_available(&gpu_why);
  if (!have) {
    MESSAGE("no driver here: " << why);
    CHECK(!why.empty());
    CHECK(!gpu);
    CHECK(gpu_why == why);
    CHECK(cu::driver_if_loaded() == nullptr);
    const Error e = catch_error([] { (void)cu::driver(); });
    CHECK(e.kind() == ErrorKind::device);
    CHECK(e.code() == "device.no_driver");
    CHECK(e.exit_code() == ExitCode::device);
    CHECK(e.message() == why);
    CHECK(catch_error([] { (void)list_devices(); }).code() == "device.no_driver");
    // open fails at its first phase with the same clear error, before compiling anything.
    Program p;
    p.name = "none";
    const Error o = catch_error([&] { (void)GpuExecutable::open(p, InitialData{}, {}); });
    CHECK(o.code() == "device.no_driver");
  } else {
    CHECK(cu::driver_if_loaded() != nullptr);
    CHECK_NOTHROW((void)cu::driver());
  }
}

TEST_CASE("sticky errors are launch faults, others driver errors named by the "
          "driver") {
  CHECK(cu::is_sticky(CUDA_ERROR_ILLEGAL_ADDRESS));
  CHECK(cu::is_sticky(CUDA_ERROR_LAUNCH_FAILED));
  CHECK(cu::is_sticky(CUDA_ERROR_ILLEGAL_INSTRUCTION));
  CHECK(cu::is_sticky(CUDA_ERROR_MISALIGNED_ADDRESS));
  CHECK(cu::is_sticky(CUDA_ERROR_HARDWARE_STACK_ERROR));
  CHECK(!cu::is_sticky(CUDA_ERROR_OUT_OF_MEMORY));
  CHECK(!cu::is_sticky(CUDA_ERROR_NO_BINARY_FOR_GPU));
  CHECK(!cu::is_sticky(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE));

  const Error fault = catch_error(
      [] { cu::check(CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize", "kernel amk_vm"); });
  CHECK(fault.kind() == ErrorKind::launch);
  CHECK(fault.code() == "launch.fault");
  CHECK(fault.exit_code() == ExitCode::launch);
  CHECK(contains(fault.message(), "cuStreamSynchronize for kernel amk_vm failed: "));

  const Error load = catch_error([] {
    cu::check(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData",
              [] { return std::string("kernel amk_vm, arch sm_90a"); });
  });
  CHECK(load.kind() == ErrorKind::driver);
  CHECK(load.where() == "kernel amk_vm, arch sm_90a");
  CHECK(contains(load.message(), "cuModuleLoadData for kernel amk_vm, arch sm_90a failed: "));
  if (cu::driver_available()) {
    CHECK(load.code() == "driver.CUDA_ERROR_NO_BINARY_FOR_GPU");
    CHECK(contains(load.message(), "CUDA_ERROR_NO_BINARY_FOR_GPU ("));
  } else {
    // Without the driver there is no cuGetErrorName: the number stands in.
    CHECK(load.code() == "driver.CUresult_209");
    CHECK(contains(load.message(), "CUresult 209"));
  }
  CHECK_NOTHROW(cu::check(CUDA_SUCCESS, "cuInit"));
  bool built = false;
  cu::check(CUDA_SUCCESS, "cuInit", [&] {
    built = true;
    return std::string("x");
  });
  CHECK(!built);  // `what` is built only on failure
}

TEST_CASE("the driver's launch timeout is a timeout (exit 8), not a launch fault (exit 7)") {
  CHECK(cu::error_kind(CUDA_ERROR_LAUNCH_TIMEOUT) == ErrorKind::timeout);
  CHECK(cu::error_kind(CUDA_ERROR_ILLEGAL_ADDRESS) == ErrorKind::launch);
  CHECK(cu::error_kind(CUDA_ERROR_OUT_OF_MEMORY) == ErrorKind::driver);
  CHECK(exit_code_for(cu::error_kind(CUDA_ERROR_LAUNCH_TIMEOUT)) == ExitCode::timeout);
  const Error e = catch_error(
      [] { cu::check(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch (cuStreamQuery)", "kernel amk_vm"); });
  CHECK(e.kind() == ErrorKind::timeout);
  CHECK(e.code() == "launch.driver_timeout");
  CHECK(e.exit_code() == ExitCode::timeout);
  CHECK(e.where() == "kernel amk_vm");
  CHECK(contains(e.message(), "the CUDA context is no longer usable"));
}

TEST_CASE("tma arguments: translation and derived strides") {
  const Program p = tma_program();
  const cu::TmaArguments a = cu::tma_arguments(p, 0, 0x7f0000000000ull);
  CHECK(a.dtype == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  CHECK(a.rank == 2);
  CHECK(a.address == 0x7f0000000000ull);
  CHECK(a.dims == std::vector<cuuint64_t>{128, 64});
  CHECK(a.strides == std::vector<cuuint64_t>{256});  // 128 bf16 per row
  CHECK(a.box == std::vector<cuuint32_t>{64, 16});
  CHECK(a.element_strides == std::vector<cuuint32_t>{1, 1});
  CHECK(a.swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
  CHECK(a.l2_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  CHECK(a.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE);
  CHECK(a.oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  const std::string d = cu::describe(a);
  for (const char* part : {"dtype BFLOAT16", "rank 2", "address 0x7f0000000000", "dims [128, 64]",
                           "strides [256]", "box [64, 16]", "element strides [1, 1]",
                           "interleave 0", "swizzle 3", "l2 promotion 3", "oob fill 0"}) {
    CAPTURE(part);
    CHECK(contains(d, part));
  }

  Program off = tma_program();
  off.tma[0].offset = 128;  // one row in: 256 bytes
  off.tma[0].dims = {128, 63};
  CHECK(cu::tma_arguments(off, 0, 0x1000).address == 0x1100);
}

TEST_CASE("tma arguments: host validation before the driver") {
  const Error align = catch_error([] { (void)cu::tma_arguments(tma_program(), 0, 0x1008); });
  CHECK(align.code() == "tma.address");
  CHECK(align.where() == "/tma/0");
  CHECK(contains(align.message(), "0x1008"));

  Program bad = tma_program();
  bad.tma[0].box = {64, 300};
  const Error box = catch_error([&] { (void)cu::tma_arguments(bad, 0, 0x1000); });
  CHECK(box.kind() == ErrorKind::program);
  CHECK(box.where() == "/tma/0/box/1");

  Program big = tma_program();
  big.tma[0].dims = {128, 65};  // one row past the buffer
  big.tma[0].box = {64, 16};
  const Error bounds = catch_error([&] { (void)cu::tma_arguments(big, 0, 0x1000); });
  CHECK(bounds.code() == "verify.tma.bounds");
}

TEST_CASE("diag status names and text") {
  CHECK(launch_status_name(AMK_STATUS_OK) == "ok");
  CHECK(launch_status_name(AMK_STATUS_TIMEOUT) == "timeout");
  CHECK(launch_status_name(AMK_STATUS_ABORTED) == "timeout");
  CHECK(launch_status_name(AMK_STATUS_BAD_OPERAND) == "bad_operand");
  CHECK(catch_error([] { (void)launch_status_name(77); }).code() == "launch.diag");
  amk_diag_t d{};
  d.status = AMK_STATUS_TIMEOUT;
  d.block = 3;
  d.queue_pos = 7;
  d.instruction = 42;
  d.op = 9;
  d.counter = 5;
  d.have = 1;
  d.need = 2;
  d.elapsed_ns = 1000;
  // A wait inside a block names the TMA tile.
  CHECK(block_wait_text(5) == "its TMA tile 5");
  const std::string t = describe_diag(d);
  for (const char* part : {"status timeout", "block 3", "queue position 7", "instruction 42",
                           "op 9", "counter 5", "have 1", "need 2", "waited 1000 ns"}) {
    CAPTURE(part);
    CHECK(contains(t, part));
  }
}

TEST_CASE("profile statistics") {
  const ProfileStats s = summarize_samples({4.0, 1.0, 3.0, 2.0});
  CHECK(s.samples_ms == std::vector<double>{4.0, 1.0, 3.0, 2.0});  // launch order kept
  CHECK(s.min_ms == 1.0);
  CHECK(s.max_ms == 4.0);
  CHECK(s.median_ms == doctest::Approx(2.5));
  CHECK(s.mean_ms == doctest::Approx(2.5));
  CHECK(s.stddev_ms == doctest::Approx(1.2909944));
  CHECK(s.rel_spread == doctest::Approx(1.2909944 / 2.5));
  const ProfileStats odd = summarize_samples({5.0, 1.0, 2.0});
  CHECK(odd.median_ms == 2.0);
  const ProfileStats one = summarize_samples({2.0});
  CHECK(one.stddev_ms == 0.0);
  CHECK(one.median_ms == 2.0);
  CHECK(summarize_samples({}).samples_ms.empty());
}
