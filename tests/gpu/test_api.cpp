// The public API (amk/amk.hpp) on a device: set_input uploads only bytes that changed since the
// last upload (and again after a launch for buffers the program writes); a launch and read_output
// match the CPU backend on fresh random inputs, by normalized error with poisoned outputs (so an
// element the GPU never writes fails); buffers bound to cuMemAlloc'd memory are read and written
// there; bad binds change nothing; profile and attributes return sane numbers.
//
// Without a GPU this binary exits 77 (CTest SKIP_RETURN_CODE) before any test case runs.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "amk/amk.hpp"
#include "backend/check_inputs.hpp"
#include "backend/host_data.hpp"
#include "cuda/resources.hpp"
#include "gpu_support.hpp"
#include "io/load.hpp"
#include "session/check.hpp"

using namespace amk;

namespace {

const std::string kSample = AMK_SOURCE_DIR "/samples/elementwise_chain.json";
constexpr size_t kN = 2048, kBytes = kN * sizeof(float);

std::vector<std::byte> random_floats(std::mt19937& rng, float low, float high) {
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(kN);
  for (float& x : v) x = dist(rng);
  std::vector<std::byte> b(kBytes);
  std::memcpy(b.data(), v.data(), kBytes);
  return b;
}

uint32_t index_of(const Program& p, const std::string& name) {
  for (uint32_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].name == name) return i;
  FAIL("no buffer " << name);
  return 0;
}

// Every buffer through read_output, compared with the CPU backend run from `initial` (whose
// outputs start poisoned as the device's did).
void check_against_cpu_backend(const Executable& exe, const Program& program,
                               const HostBuffers& initial, const std::vector<bool>& poisoned) {
  HostBuffers result;
  for (const BufferInfo& b : exe.buffers()) {
    result.data.emplace_back(b.bytes);
    exe.read_output(b.name, result.data.back().data(), b.bytes, b.dtype);
  }
  const auto check = check_against_cpu(program, copy_host_buffers(initial), result, 1, poisoned);
  INFO(check.dump());
  CHECK(check["passed"].get<bool>());
}

}  // namespace

TEST_CASE("set_input, launch, read_output and bind against the CPU backend") {
  REQUIRE(amk::test::g_have_gpu);
  std::random_device seed_source;
  const unsigned seed = seed_source();
  MESSAGE("random inputs from seed " << seed);
  std::mt19937 rng(seed);

  const Program program = load_program_file(kSample);
  const uint32_t a = index_of(program, "a"), b = index_of(program, "b"),
                 out = index_of(program, "out");
  const std::vector<bool> poisoned = poisonable_outputs(program);
  REQUIRE(poisoned[out]);
  HostBuffers initial = materialize_all(program);
  poison_buffers(program, poisoned, initial);

  Executable exe = Executable::open(kSample);
  REQUIRE(exe.buffers().size() == program.buffers.size());

  // Fresh inputs: uploaded once; the same bytes again are skipped.
  initial.data[a] = random_floats(rng, -2, 2);
  initial.data[b] = random_floats(rng, -1, 1);
  exe.set_input("a", initial.data[a].data(), kBytes, "f32");
  exe.set_input("b", initial.data[b].data(), kBytes, "f32");
  exe.set_input("out", initial.data[out].data(), kBytes, "f32");  // the poison
  CHECK(exe.stats().uploads == 3);
  CHECK(exe.stats().uploaded_bytes == 3 * kBytes);
  exe.set_input("a", initial.data[a].data(), kBytes, "f32");
  CHECK(exe.stats().uploads == 3);
  CHECK(exe.stats().skipped_uploads == 1);
  CHECK(exe.stats().uploaded_bytes == 3 * kBytes);

  exe.launch();
  CHECK(exe.stats().launches == 1);
  check_against_cpu_backend(exe, program, initial, poisoned);
  CHECK(exe.stats().downloaded_bytes >= 6 * 4096);

  // After a launch: `a` (only read) is still known, `s` (written by the program) is not.
  exe.set_input("a", initial.data[a].data(), kBytes, "f32");
  CHECK(exe.stats().skipped_uploads == 2);
  const std::vector<std::byte> zeros(kBytes);
  exe.set_input("s", zeros.data(), kBytes, "f32");
  exe.set_input("s", zeros.data(), kBytes, "f32");
  CHECK(exe.stats().uploads == 4);
  exe.set_input("out", initial.data[out].data(), kBytes, "f32");  // poisoned again
  exe.launch();
  exe.set_input("s", zeros.data(), kBytes, "f32");
  CHECK(exe.stats().uploads == 6);
  exe.set_input("out", initial.data[out].data(), kBytes, "f32");
  CHECK(exe.stats().uploads == 7);

  {
    // b and out in memory the caller allocated (in the primary context the executable uses).
    // The caller holds its own retain of that context: the executable's close() releases the
    // executable's, and the caller's memory and stream must outlive it.
    const cu::PrimaryContext caller = cu::PrimaryContext::retain(0);
    cu::Stream stream = cu::Stream::create("the test's stream");
    cu::DeviceMemory b_mem = cu::DeviceMemory::allocate(kBytes, "the caller's b");
    cu::DeviceMemory out_mem = cu::DeviceMemory::allocate(kBytes, "the caller's out");
    initial.data[b] = random_floats(rng, -3, 3);
    b_mem.upload(initial.data[b], 0, stream.get(), "the caller's b");
    out_mem.upload(initial.data[out], 0, stream.get(), "the caller's out");
    stream.synchronize("the caller's uploads");
    exe.bind("b", b_mem.get(), kBytes, "f32");
    exe.bind("out", out_mem.get(), kBytes, "f32");
    CHECK(exe.buffers()[b].bound);
    CHECK(exe.buffers()[out].bound);
    exe.launch();
    check_against_cpu_backend(exe, program, initial, poisoned);
    // The launch wrote the caller's memory, and read_output read it there.
    std::vector<std::byte> direct(kBytes), via_api(kBytes);
    out_mem.download(direct, 0, stream.get(), "the caller's out");
    stream.synchronize("the caller's download");
    exe.read_output("out", via_api.data(), kBytes, "f32");
    CHECK(direct == via_api);
    CHECK(direct != initial.data[out]);

    // set_input into a bound buffer always copies (its owner may have changed it).
    const uint64_t uploads = exe.stats().uploads;
    exe.set_input("b", initial.data[b].data(), kBytes, "f32");
    exe.set_input("b", initial.data[b].data(), kBytes, "f32");
    CHECK(exe.stats().uploads == uploads + 2);

    // Bad binds are refused and change nothing.
    cu::DeviceMemory small = cu::DeviceMemory::allocate(kBytes / 2, "a small allocation");
    const auto refused = [&](uint64_t pointer, const char* code) {
      try {
        exe.bind("out", pointer, kBytes, "f32");
        FAIL_CHECK("expected " << code);
      } catch (const Error& e) {
        CHECK_MESSAGE(e.code() == code, e.what());
        CHECK(e.exit_code() == ExitCode::usage);
      }
    };
    refused(out_mem.get() + 4, "api.bind.alignment");
    refused(small.get(), "api.bind.range");  // half the bytes out needs
    alignas(16) static float host[kN];
    try {
      exe.bind("out", reinterpret_cast<uint64_t>(host), kBytes, "f32");
      FAIL_CHECK("expected a refusal of host memory");
    } catch (const Error& e) {
      CHECK_MESSAGE(e.code().rfind("api.bind.", 0) == 0, e.what());
    }
    exe.set_input("out", initial.data[out].data(), kBytes, "f32");
    exe.launch();
    check_against_cpu_backend(exe, program, initial, poisoned);
    out_mem.download(direct, 0, stream.get(), "the caller's out");
    stream.synchronize("the caller's download");
    exe.read_output("out", via_api.data(), kBytes, "f32");
    CHECK(direct == via_api);
    exe.close();  // before the caller frees the memory it runs on
  }
  CHECK_FALSE(exe.is_open());
}

TEST_CASE("profile and attributes") {
  REQUIRE(amk::test::g_have_gpu);
  Executable exe = Executable::open(kSample);
  ProfileOptions options;
  options.warmup = 2;
  options.iterations = 10;
  for (const char* scope : {"kernel", "launch"}) {
    CAPTURE(scope);
    options.scope = scope;
    const ProfileResult r = exe.profile(options);
    REQUIRE(r.samples_ms.size() == 10);
    CHECK(r.min_ms > 0);
    CHECK(r.min_ms <= r.median_ms);
    CHECK(r.median_ms <= r.max_ms);
    CHECK(r.max_ms < 1000);  // a 2048-element chain
    CHECK(r.mean_ms >= r.min_ms);
  }
  options.scope = "everything";
  try {
    (void)exe.profile(options);
    FAIL_CHECK("expected profile.scope");
  } catch (const Error& e) {
    CHECK(e.code() == "profile.scope");
  }

  const KernelAttributes k = exe.attributes();
  CHECK(!k.kernel.empty());
  CHECK(k.arch.rfind("sm_", 0) == 0);
  CHECK(!k.device.empty());
  CHECK(k.registers_per_thread > 0);
  CHECK(k.block == 128);  // the program's launch block
  CHECK(k.grid == 2);     // and grid
  CHECK(k.blocks_per_sm >= 1);
  CHECK(k.sms > 0);
  CHECK(k.max_coresident_grid == uint64_t{k.blocks_per_sm} * k.sms);
  CHECK(k.max_coresident_grid >= k.grid);
  CHECK(k.max_threads_per_block >= k.block);
}
