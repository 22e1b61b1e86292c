// The tolerances `amk run --check` compares a GPU run's outputs with the CPU backend's by.
#pragma once

#include <vector>

#include "program/program.hpp"

namespace amk {

// Normalized-error tolerance per dtype (integers must match exactly: 0).
[[nodiscard]] double check_tolerance(DType t) noexcept;

// The tolerance --check applies to each buffer (indexed like program.buffers; used for the
// outputs): its own dtype's, or a coarser float dtype's where an instruction that writes it
// follows, through the counters it waits on (transitively, over the signals a wait cannot do
// without: the verifier's dependency graph; queue order not counted), an instruction that stored
// a float buffer of that dtype. A value rounded to bf16 on the way (say a
// bf16 MLP activation, `amk gen llama --mlp-act bf16`) can round to neighbouring bf16 values on the
// CPU and on the GPU, whose f32 sums differ in their last bits, and the layers after it carry
// that difference into outputs stored in f32.
[[nodiscard]] std::vector<double> check_tolerances(const Program& program);

}  // namespace amk
