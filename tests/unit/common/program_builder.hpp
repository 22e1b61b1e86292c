// Helpers shared by the verifier, planner and config tests: build Programs directly in C++ and
// capture the amk::Error a call throws.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ops/registry.hpp"
#include "program/program.hpp"

namespace amk::test {

inline Operand slice(uint32_t buffer, uint64_t offset, uint64_t extent) {
  return Operand{buffer, offset, extent};
}
inline Operand none() { return Operand{}; }

struct Builder {
  Program p;

  Builder() { p.name = "test"; }

  uint32_t buffer(const std::string& name, DType dtype, uint64_t elements) {
    Buffer b;
    b.name = name;
    b.dtype = dtype;
    b.shape = {elements};
    p.buffers.push_back(b);
    return static_cast<uint32_t>(p.buffers.size() - 1);
  }
  Operand whole(uint32_t buffer) const { return slice(buffer, 0, p.buffers[buffer].elements()); }

  uint32_t counter(const std::string& name) {
    p.counters.push_back({name});
    return static_cast<uint32_t>(p.counters.size() - 1);
  }

  // Adds an instruction of built-in op `op` (by name); params default from the signature.
  uint32_t add(const std::string& op, std::vector<Operand> operands, std::vector<Wait> waits = {},
               std::vector<Signal> signals = {}, const std::string& name = "") {
    const OpSig* sig = find_op(op);
    REQUIRE(sig != nullptr);
    Instruction ins;
    ins.name = name;
    ins.op = static_cast<uint16_t>(sig->id);
    ins.operands = std::move(operands);
    for (const ParamSig& ps : sig->params)
      ins.params.push_back(*encode_param(ps.type, ps.default_value.value_or(1.0)));
    ins.waits = std::move(waits);
    ins.signals = std::move(signals);
    p.instructions.push_back(std::move(ins));
    return static_cast<uint32_t>(p.instructions.size() - 1);
  }

  Instruction& last() { return p.instructions.back(); }
};

// Runs f and returns the amk::Error it throws (nullopt, and a failed check, if none).
inline std::optional<Error> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL_CHECK("expected an amk::Error");
  return std::nullopt;
}

}  // namespace amk::test

// Checks that `expr` throws amk::Error with exactly this code and location.
#define CHECK_ERROR(expr, code_, where_)                                                           \
  do {                                                                                             \
    auto err_ = ::amk::test::error_of([&] { (void)(expr); });                                      \
    if (err_) {                                                                                    \
      CHECK_MESSAGE(err_->code() == (code_), err_->what());                                        \
      CHECK_MESSAGE(err_->where() == (where_), err_->what());                                      \
      CHECK(err_->kind() == ::amk::ErrorKind::program);                                            \
    }                                                                                              \
  } while (0)
