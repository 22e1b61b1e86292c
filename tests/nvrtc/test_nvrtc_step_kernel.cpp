// The one-instruction-per-launch entry point (amk_step, kernels/amk_vm.cuh's amk_step_main) that
// `amk bench` compares the VM against: compiled in only on request, next to amk_vm in the same
// cubin, with and without the tensor-map parameter. No GPU needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "cuda/codegen.hpp"
#include "cuda/compile.hpp"
#include "nvrtc_program_builder.hpp"
#include "ops/registry.hpp"

using namespace amk;
using namespace amk::test;

namespace {

Program elementwise_program() {
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, {1024});
  const uint32_t y = b.buffer("y", DType::f32, {1024});
  b.instruction(OpId::fill, {x}, {f32_bits(2.0f)});
  b.instruction(OpId::add, {x, x, y});
  b.instruction(OpId::scale, {y, y}, {f32_bits(0.5f)});
  return b.finish(128, "step_kernel_test");
}

// A bf16 gemv whose weights a TMA spec covers: the kernels then take the tensor-map table.
Program tma_gemv_program() {
  Builder b;
  const uint32_t k = 1024, rows = 256;
  const uint32_t w = b.buffer("w", DType::bf16, {rows, k});
  const uint32_t x = b.buffer("x", DType::f32, {k});
  const uint32_t y = b.buffer("y", DType::f32, {rows});
  b.instruction(OpId::gemv, {w, x, y, AMK_NO_BUFFER});
  TmaSpec spec;
  spec.name = "w_tiles";
  spec.buffer = w;
  spec.dims = {k, rows};
  spec.box = {128, 32};
  b.program().tma.push_back(spec);
  return b.finish(256, "step_kernel_test");
}

ChooseOptions step(bool on) {
  ChooseOptions c;
  c.step_kernel = on;
  return c;
}

template <class T>
T read_le(const std::vector<std::byte>& bytes, size_t at) {
  T v{};
  REQUIRE(at + sizeof(T) <= bytes.size());
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

// Names of the global function symbols in an ELF64 cubin's symbol table.
std::set<std::string> global_functions(const std::vector<std::byte>& elf) {
  constexpr uint32_t kShtSymtab = 2;
  constexpr uint8_t kSttFunc = 2, kStbGlobal = 1;
  REQUIRE(elf.size() > 64);
  REQUIRE(static_cast<unsigned char>(elf[4]) == 2);  // ELFCLASS64
  const auto shoff = read_le<uint64_t>(elf, 0x28);
  const auto shentsize = read_le<uint16_t>(elf, 0x3A);
  const auto shnum = read_le<uint16_t>(elf, 0x3C);
  REQUIRE(shentsize == 64);
  std::set<std::string> names;
  for (uint32_t s = 0; s < shnum; ++s) {
    const size_t sh = shoff + size_t{s} * shentsize;
    if (read_le<uint32_t>(elf, sh + 4) != kShtSymtab) continue;
    const auto off = read_le<uint64_t>(elf, sh + 24);
    const auto size = read_le<uint64_t>(elf, sh + 32);
    const auto link = read_le<uint32_t>(elf, sh + 40);
    const size_t strsh = shoff + size_t{link} * shentsize;
    const auto stroff = read_le<uint64_t>(elf, strsh + 24);
    const auto strsize = read_le<uint64_t>(elf, strsh + 32);
    for (uint64_t at = off; at + 24 <= off + size; at += 24) {
      const auto name = read_le<uint32_t>(elf, at);
      const auto info = read_le<uint8_t>(elf, at + 4);
      if ((info & 0xF) != kSttFunc || (info >> 4) != kStbGlobal || name >= strsize) continue;
      const char* p = reinterpret_cast<const char*>(elf.data() + stroff + name);
      names.insert(std::string(p, strnlen(p, strsize - name)));
    }
  }
  return names;
}

// The ptxas "Function properties" line of one entry point and the two after it (stack and
// spills, registers).
std::string properties(const std::string& log, const std::string& kernel) {
  size_t at = log.find("Function properties for " + kernel + "\n");
  if (at == std::string::npos) return {};
  const size_t begin = at;
  for (int lines = 0; lines < 3 && at != std::string::npos; ++lines) {
    at = log.find('\n', at);
    if (at != std::string::npos) ++at;
  }
  return log.substr(begin, at == std::string::npos ? std::string::npos : at - begin);
}

}  // namespace

TEST_CASE("the step kernel is in the source only when asked for, and changes the key") {
  const Program b = elementwise_program();
  const std::string plain = vm_source(b, choose_for(b, step(false)), false);
  const std::string with = vm_source(b, choose_for(b, step(true)), false);
  CHECK(plain.find("amk_step") == std::string::npos);
  CHECK(plain.find("c.step_kernel = false;") != std::string::npos);
  CHECK(with.find("c.step_kernel = true;") != std::string::npos);
  const size_t vm = with.find("amk_vm(const __grid_constant__ amk_device_program_t prog) {");
  const size_t st = with.find(
      "amk_step(const __grid_constant__ amk_device_program_t prog, uint32_t instruction) {");
  REQUIRE(vm != std::string::npos);
  REQUIRE(st != std::string::npos);
  CHECK(vm < st);
  CHECK(with.find("amk_step_main(prog, instruction, nullptr);") != std::string::npos);
}

TEST_CASE("both entry points compile for sm_90a into one cubin, with and without TMA") {
  for (const bool tma : {false, true}) {
    CAPTURE(tma);
    const Program b = tma ? tma_gemv_program() : elementwise_program();
    const CompileOutput with = compile_program(b, step(true));
    CHECK(with.ok);
    CHECK(with.kernel_name == "amk_vm");
    CHECK(with.tma_count == (tma ? 1u : 0u));
    const std::set<std::string> names = global_functions(with.cubin);
    CHECK(names.count("amk_vm") == 1);
    CHECK(names.count(kStepKernelName) == 1);
    const std::string step_props = properties(with.log, kStepKernelName);
    REQUIRE(!step_props.empty());
    CHECK(step_props.find("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") !=
          std::string::npos);
    std::printf("[nvrtc] step kernel (tma=%d): cubin %zu bytes, %.0f ms\n  %s", tma ? 1 : 0,
                with.cubin.size(), with.compile_ms, step_props.c_str());

    const CompileOutput without = compile_program(b, step(false));
    CHECK(without.ok);
    const std::set<std::string> plain = global_functions(without.cubin);
    CHECK(plain.count("amk_vm") == 1);
    CHECK(plain.count(kStepKernelName) == 0);
    CHECK(without.source_fingerprint != with.source_fingerprint);
  }
}
