// The nvrtc tier's program builder: a program and its plan made by hand (no loader, no
// planner), one queue, each instruction waiting for the one before it.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cuda/codegen.hpp"
#include "ops/registry.hpp"

namespace amk::test {

// A program built by hand (no loader, no planner), with a plan that runs it on one queue.
struct Built {
  Program program;
  Plan plan;
};

class Builder {
 public:
  uint32_t buffer(const std::string& name, DType dtype, std::vector<uint64_t> shape) {
    Buffer b;
    b.name = name;
    b.dtype = dtype;
    b.shape = std::move(shape);
    built_.program.buffers.push_back(b);
    amk_buffer_t ab{};
    ab.elements = b.elements();
    ab.bytes = b.bytes();
    ab.dtype = static_cast<uint32_t>(dtype);
    built_.plan.buffers.push_back(ab);
    return static_cast<uint32_t>(built_.program.buffers.size() - 1);
  }

  // Operands as whole buffers (AMK_NO_BUFFER for an absent optional one).
  void instruction(OpId op, std::vector<uint32_t> buffers, std::vector<uint32_t> params = {}) {
    instruction(static_cast<uint16_t>(op), std::move(buffers), std::move(params));
  }
  void instruction(uint16_t op, std::vector<uint32_t> buffers, std::vector<uint32_t> params = {}) {
    amk_instruction_t ins{};
    ins.op = op;
    ins.index = static_cast<uint32_t>(built_.plan.instructions.size());
    ins.n_operands = static_cast<uint8_t>(buffers.size());
    for (size_t k = 0; k < buffers.size(); ++k) {
      ins.operands[k].buffer = buffers[k];
      ins.operands[k].offset = 0;
      ins.operands[k].extent =
          buffers[k] == AMK_NO_BUFFER
              ? 0
              : static_cast<uint32_t>(built_.program.buffers[buffers[k]].elements());
    }
    ins.n_params = static_cast<uint8_t>(params.size());
    for (size_t k = 0; k < params.size(); ++k) ins.params[k] = params[k];
    if (!built_.plan.instructions.empty()) {  // a chain: each waits for the previous one
      ins.n_waits = 1;
      ins.waits[0] = {0, ins.index};
    }
    ins.n_signals = 1;
    ins.signals[0] = {0, 1};
    built_.plan.instructions.push_back(ins);
    Instruction in;
    in.op = op;
    built_.program.instructions.push_back(in);
  }

  Built finish(uint32_t block = 256, std::string name = "secret_program_name") {
    Plan& plan = built_.plan;
    built_.program.counters.push_back(Counter{"chain"});
    plan.n_counters = 1;
    plan.grid = 1;
    plan.block = block;
    plan.queue_offsets = {0, static_cast<uint32_t>(plan.instructions.size())};
    for (uint32_t i = 0; i < plan.instructions.size(); ++i) plan.queue_items.push_back(i);
    for (const amk_instruction_t& ins : plan.instructions) plan.ops_used.push_back(ins.op);
    std::sort(plan.ops_used.begin(), plan.ops_used.end());
    plan.ops_used.erase(std::unique(plan.ops_used.begin(), plan.ops_used.end()),
                        plan.ops_used.end());
    built_.program.name = std::move(name);
    built_.program.launch.block = block;
    return std::move(built_);
  }

  Program& program() { return built_.program; }

 private:
  Built built_;
};

}  // namespace amk::test
