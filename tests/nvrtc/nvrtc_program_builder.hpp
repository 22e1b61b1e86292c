// The nvrtc tier's program builder and compile helpers: programs made by hand (no loader), one
// queue, each instruction waiting for the one before it, compiled through the chooser like a run
// on an sm_90 device would compile them.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "config/choose.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compile.hpp"
#include "ops/registry.hpp"

namespace amk::test {

class Builder {
public:
  uint32_t buffer(const std::string& name, DType dtype, std::vector<uint64_t> shape) {
    Buffer b;
    b.name = name;
    b.dtype = dtype;
    b.shape = std::move(shape);
    program_.buffers.push_back(b);
    return static_cast<uint32_t>(program_.buffers.size() - 1);
  }

  // Operands as whole buffers (AMK_NO_BUFFER for an absent optional one); each instruction waits
  // for the one before it and signals the chain counter.
  void instruction(OpId op, std::vector<uint32_t> buffers, std::vector<uint32_t> params = {}) {
    instruction(static_cast<uint16_t>(op), std::move(buffers), std::move(params));
  }
  void instruction(uint16_t op, std::vector<uint32_t> buffers, std::vector<uint32_t> params = {}) {
    Instruction in;
    in.op = op;
    for (uint32_t b : buffers) {
      Operand o;
      o.buffer = b;
      o.extent = b == AMK_NO_BUFFER ? 0 : program_.buffers[b].elements();
      in.operands.push_back(o);
    }
    in.params = std::move(params);
    const uint32_t index = static_cast<uint32_t>(program_.instructions.size());
    if (index != 0) in.waits.push_back({0, index});
    in.signals.push_back({0, 1});
    program_.instructions.push_back(std::move(in));
  }

  Program finish(uint32_t block = 256, std::string name = "secret_program_name") {
    program_.counters.push_back(Counter{"chain"});
    program_.name = std::move(name);
    program_.launch.block = block;
    return std::move(program_);
  }

  Program& program() { return program_; }

private:
  Program program_;
};

// The kernel cache the tier shares within a run (a VM two tests compile is compiled once).
inline CompileOptions shared_cache() {
  CompileOptions o;
  o.cache_dir = std::filesystem::path(AMK_BINARY_DIR) / "nvrtc_cache";
  return o;
}

// The config a run on an sm_90 device would choose, and the VM compiled from it.
inline VmChoice choose_for(const Program& p, const ChooseOptions& c = {}) {
  return choose(program_facts(p), caps_for_arch(90), c);
}
inline CompileOutput compile_program(const Program& p, const ChooseOptions& c = {},
                                     const CompileOptions& o = shared_cache(),
                                     bool trust_custom_ops = false) {
  return compile_vm(vm_source(p, choose_for(p, c), trust_custom_ops),
                    static_cast<uint32_t>(p.tma.size()), o);
}

}  // namespace amk::test
