// The GPU runtime end to end: device snapshot, a small program against the CPU reference, the
// persistent executable's reuse and profiling, the co-residency refusal and the watchdog.
//
// Without a GPU this binary exits 77 (CTest SKIP_RETURN_CODE) before doctest's main runs: the
// shared doctest main cannot report "skipped" for a whole binary, and passing silently would make a
// machine without a GPU look like a machine where the GPU works.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <random>
#include <string>
#include <vector>

#include "backend/check_inputs.hpp"
#include "backend/cpu_backend.hpp"
#include "backend/host_data.hpp"
#include "backend/initial_data.hpp"
#include "core/error.hpp"
#include "cuda/codegen.hpp"
#include "cuda/executor.hpp"
#include "cuda/upload.hpp"
#include "gpu_support.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"
#include "plan/plan.hpp"
#include "verify/verify.hpp"

using namespace amk;

namespace {

constexpr uint64_t kN = 4096;

Operand whole(uint32_t buffer) { return Operand{buffer, 0, kN}; }

// y = 0.5 * (a + b): two dependent instructions per chunk, several chunks so that amk's schedule
// spreads them over blocks.
Program small_program() {
  Program p;
  p.name = "gpu_runtime_small";
  p.launch.block = 256;
  p.launch.timeout_ms = 10000;
  auto buffer = [&](const char* name, InitKind kind, uint64_t seed, bool output) {
    amk::test::add_f32_buffer(p, name, kN, kind, seed, output);
  };
  buffer("a", InitKind::random, 1, false);
  buffer("b", InitKind::random, 2, false);
  buffer("t", InitKind::zeros, 0, false);
  buffer("y", InitKind::zeros, 0, true);
  constexpr uint64_t kChunks = 8, kChunk = kN / kChunks;
  for (uint64_t c = 0; c < kChunks; ++c) {
    p.counters.push_back(Counter{"c" + std::to_string(c)});
    Instruction add;
    add.op = static_cast<uint16_t>(OpId::add);
    add.operands = {Operand{0, c * kChunk, kChunk}, Operand{1, c * kChunk, kChunk},
                    Operand{2, c * kChunk, kChunk}};
    add.signals = {Signal{static_cast<uint32_t>(c), 1}};
    p.instructions.push_back(add);
    Instruction scale;
    scale.op = static_cast<uint16_t>(OpId::scale);
    scale.operands = {Operand{2, c * kChunk, kChunk}, Operand{3, c * kChunk, kChunk}};
    scale.params = {f32_bits(0.5f)};
    scale.waits = {Wait{static_cast<uint32_t>(c), 1}};
    p.instructions.push_back(scale);
  }
  return p;
}

std::vector<float> floats(const std::vector<std::byte>& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    worst = std::max(worst, d / std::max(1e-6, std::fabs(double(want[i]))));
  }
  return worst;
}

}  // namespace

TEST_CASE("device snapshot") {
  REQUIRE(amk::test::g_have_gpu);
  const auto devices = list_devices();
  REQUIRE(!devices.empty());
  for (const DeviceInfo& d : devices) {
    CAPTURE(d.name);
    CHECK(!d.name.empty());
    CHECK(d.cc_major >= 7);
    CHECK(d.sm_count > 0);
    CHECK(d.smem_per_block_optin >= d.smem_per_block);
    CHECK(d.smem_per_block >= 48 * 1024);
    CHECK(d.regs_per_sm >= 65536);
    CHECK(d.max_threads_per_block >= 1024);
    CHECK(d.l2_bytes > 0);
    CHECK(d.global_mem_bytes > (uint64_t{1} << 30));
    CHECK(d.driver_version >= 12000);
    CHECK(d.nvrtc_major >= 12);
    CHECK(d.arch().rfind("sm_", 0) == 0);
    CHECK(d.fingerprint().size() == 64);
  }
}

TEST_CASE("a small program matches the CPU reference, launch after launch") {
  const Program program = small_program();
  (void)verify(program);
  const Plan plan = make_plan(program, PlanOptions{4});
  // The outputs start poisoned (as under `amk run --check`), so an element the GPU never writes
  // cannot pass for the reference's value.
  const std::vector<bool> poisoned = poisonable_outputs(program);
  REQUIRE(poisoned[3]);  // y (t is no output: it keeps its zeros)
  REQUIRE_FALSE(poisoned[2]);
  HostBuffers initial = materialize_all(program);
  poison_buffers(program, poisoned, initial);

  HostBuffers want = initial;
  (void)run_cpu(program, plan, want);
  auto all_written = [&](const HostBuffers& got) {
    for (size_t b = 0; b < program.buffers.size(); ++b) {
      if (!poisoned[b]) continue;
      const PoisonDiff d = compare_poison(program.buffers[b].dtype, got.data[b], want.data[b],
                                          program.buffers[b].elements());
      CAPTURE(b);
      CHECK(d.unwritten == 0);
      CHECK(d.extra == 0);
    }
  };

  GpuOptions opts;
  GpuExecutable exe = GpuExecutable::open(program, InitialData::view(initial), opts);
  // Setup phases, in order: one way, the plan once after the occupancy.
  const auto& t = exe.setup_timings_ms();
  const char* phases[] = {"context",   "device", "config", "compile",   "module_load",
                          "configure", "plan",   "upload", "tma_encode"};
  REQUIRE(t.size() == std::size(phases));
  for (size_t i = 0; i < t.size(); ++i) CHECK(t[i].first == phases[i]);
  CHECK(exe.compiled().ok);
  CHECK(exe.compiled().arch == exe.device().arch());
  CHECK(exe.kernel().blocks_per_sm >= 1);
  CHECK(exe.kernel().regs_per_thread > 0);
  // grid auto: the executable plans for every co-resident block.
  CHECK(exe.grid() == exe.kernel().blocks_per_sm * exe.device().sm_count);
  CHECK(exe.plan().grid == exe.grid());
  // No gemv: the launch's dynamic shared memory is the program's (none).
  CHECK(exe.dynamic_smem() == program.launch.dynamic_smem);

  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    const LaunchResult r = exe.launch();
    CHECK(r.status == "ok");
    CHECK(r.diag.status == AMK_STATUS_OK);
    const HostBuffers got = exe.download();
    REQUIRE(got.data.size() == want.data.size());
    CHECK(max_rel_error(floats(got.data[3]), floats(want.data[3])) < 1e-6);
    CHECK(max_rel_error(floats(got.data[2]), floats(want.data[2])) < 1e-6);
    all_written(got);
    // The inputs are untouched and a fresh upload starts the next round from scratch.
    CHECK(got.data[0] == initial.data[0]);
    exe.upload(InitialData::view(initial));
    CHECK(exe.download().data[3] == initial.data[3]);
  }

  const ProfileStats k = exe.profile(2, 5, "kernel");
  CHECK(k.samples_ms.size() == 5);
  CHECK(k.min_ms > 0);
  CHECK(k.min_ms <= k.median_ms);
  CHECK(k.median_ms <= k.max_ms);
  const ProfileStats l = exe.profile(1, 3, "launch");
  CHECK(l.samples_ms.size() == 3);
  CHECK(l.scope == "launch");
  CHECK_THROWS_AS(exe.profile(0, 1, "wall"), Error);
  // Flushed before each launch: still every sample, and the program's results are unchanged.
  const ProfileStats c = exe.profile(1, 3, "kernel", uint64_t{64} << 20);
  CHECK(c.samples_ms.size() == 3);
  CHECK(c.min_ms > 0);
  {
    const HostBuffers got = exe.download();
    CHECK(max_rel_error(floats(got.data[3]), floats(want.data[3])) < 1e-6);
  }

  exe.close();
  exe.close();  // idempotent
  CHECK(!exe.is_open());
}

TEST_CASE("the launch's dynamic shared memory is what the VM needs (the TMA gemv's stages; gemv's "
          "ring grown for a staged combine)") {
  REQUIRE(amk::test::g_have_gpu);
  for (const char* name : {"gemv_waits.json", "attention_combine_staged.json"}) {
    CAPTURE(name);
    const Program program =
        load_program_file(std::string(AMK_SOURCE_DIR) + "/tests/gpu/programs/" + name);
    GpuExecutable exe =
        GpuExecutable::open(program, InitialData::own(materialize_all(program)), GpuOptions{});
    // The config's (gemv's ring) at least, and more where the TMA gemv's stages need it.
    const uint32_t ring = exe.vm().dynamic_smem;
    CHECK(ring >= amk_gemv_ring_bytes(exe.vm().config));
    CHECK(exe.dynamic_smem() >= ring);
    CHECK(exe.dynamic_smem() >= program.launch.dynamic_smem);
    CHECK(exe.dynamic_smem() > 0);
  }
}

TEST_CASE("a grid past co-residency is refused before launching") {
  Program program = small_program();
  const HostBuffers initial = materialize_all(program);
  uint32_t max_grid = 0;
  {
    GpuExecutable probe = GpuExecutable::open(program, InitialData::view(initial), {});
    max_grid = probe.kernel().blocks_per_sm * probe.device().sm_count;
  }
  program.launch.grid = max_grid + 1;
  try {
    (void)GpuExecutable::open(program, InitialData::view(initial), {});
    FAIL("expected a co-residency refusal");
  } catch (const Error& e) {
    CHECK(e.code() == "device.coresidency");
    CHECK(e.exit_code() == ExitCode::device);
    CHECK(e.message().find(std::to_string(max_grid + 1)) != std::string::npos);
    CHECK(e.message().find(std::to_string(max_grid)) != std::string::npos);
  }
}

TEST_CASE("the watchdog stops a wait that can never hold and the context stays "
          "usable") {
  Program program;
  program.name = "gpu_runtime_stuck";
  program.launch.block = 128;
  program.launch.timeout_ms = 200;
  program.counters = {Counter{"never"}};
  Instruction stuck;
  stuck.op = static_cast<uint16_t>(OpId::nop);
  stuck.waits = {Wait{0, 1}};
  program.instructions = {stuck};
  program.queues = std::vector<std::vector<uint32_t>>{{0}};  // user queues: no deadlock proof
  GpuExecutable exe = GpuExecutable::open(program, InitialData{}, {});
  const LaunchResult r = exe.launch();
  CHECK(r.status == "timeout");
  CHECK(r.diag.status == AMK_STATUS_TIMEOUT);
  CHECK(r.diag.block == 0);
  CHECK(r.diag.instruction == 0);
  CHECK(r.diag.counter == 0);
  CHECK(r.diag.have == 0);
  CHECK(r.diag.need == 1);
  CHECK(r.diag.elapsed_ns > 0);
  CHECK(r.host_ms >= 150);
  CHECK(r.host_ms < 5000);
  // A second launch resets the diag and times out the same way: the context survived.
  const LaunchResult again = exe.launch();
  CHECK(again.status == "timeout");
}

TEST_CASE("initial_data reaches the device byte for byte: fills, staged chunks, mapped files") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("amk_gpu_upload_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  // A .safetensors file with two u8 tensors, the first past one staging buffer.
  const uint64_t big = cu::kStagingBytes + 4099, small = 77;
  const std::string header = R"({"big": {"dtype": "U8", "shape": [)" + std::to_string(big) +
                             R"(], "data_offsets": [0, )" + std::to_string(big) +
                             R"(]}, "small": {"dtype": "U8", "shape": [77], "data_offsets": [)" +
                             std::to_string(big) + ", " + std::to_string(big + small) + "]}}";
  {
    std::ofstream f(dir / "w.safetensors", std::ios::binary);
    const uint64_t len = header.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << header;
    for (uint64_t i = 0; i < big + small; ++i) f.put(static_cast<char>((i * 131 + 17) % 251));
  }
  Program program;
  program.name = "gpu_upload_kinds";
  program.base_dir = dir.string();
  program.launch.block = 128;
  const uint64_t seed = std::random_device{}();  // fresh random bytes each run
  MESSAGE("random init seed " << seed);
  auto add = [&](const char* name, DType dtype, uint64_t n, InitKind kind, double value = 0) {
    Buffer b;
    b.name = name;
    b.dtype = dtype;
    b.shape = {n};
    b.init.kind = kind;
    b.init.constant = value;
    b.init.seed = seed;
    b.init.a = -1;
    b.init.b = 1;
    program.buffers.push_back(b);
  };
  add("zeros", DType::u8, 1000003, InitKind::zeros);
  add("c_u8", DType::u8, 33, InitKind::constant, 7);
  add("c_f16", DType::f16, 1001, InitKind::constant, -1.5);
  add("c_u32", DType::u32, 1001, InitKind::constant, 123456789);
  add("c_i64", DType::i64, 1001, InitKind::constant, -3);      // halves differ
  add("c_i64_same", DType::i64, 1001, InitKind::constant, 0);  // halves equal
  add("random", DType::bf16, (cu::kStagingBytes * 5) / 2 + 9, InitKind::random);
  add("big", DType::u8, big, InitKind::safetensors);
  program.buffers.back().init.path = "w.safetensors";
  program.buffers.back().init.tensor = "big";
  add("small", DType::u8, small, InitKind::safetensors);
  program.buffers.back().init.path = "w.safetensors";
  program.buffers.back().init.tensor = "small";
  Instruction nop;
  nop.op = static_cast<uint16_t>(OpId::nop);
  program.instructions = {nop};
  (void)verify(program);

  const InitialData data = initial_data(program);
  CHECK(data[0].kind == InitialSource::Kind::zeros);
  CHECK(data[4].kind == InitialSource::Kind::fill);
  CHECK(data[7].kind == InitialSource::Kind::bytes);
  const HostBuffers want = materialize_all(program);
  GpuExecutable exe = GpuExecutable::open(program, data, {});
  // The device's bytes are poisoned and uploaded again: the second upload writes every byte.
  HostBuffers poison = want;
  for (auto& b : poison.data) std::fill(b.begin(), b.end(), std::byte{0xA5});
  exe.upload(InitialData::view(poison));
  CHECK(exe.download().data[0][17] == std::byte{0xA5});
  exe.upload(data);
  const HostBuffers got = exe.download();
  for (size_t i = 0; i < want.data.size(); ++i) {
    CAPTURE(program.buffers[i].name);
    CHECK(got.data[i] == want.data[i]);
  }
  std::filesystem::remove_all(dir);
}
