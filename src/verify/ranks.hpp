// Programs with ranks (launch.ranks > 1): the rules of their rank fields and comm ops, and their
// expansion into one program of a single rank that holds every rank's buffers, counters and
// instructions, the comm ops turned into copies, adds and nops ordered by counters of their own.
// The verifier proves the expansion (deadlock and hazard freedom across ranks are then the
// single-rank proofs) and the CPU backend runs it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "program/program.hpp"

namespace amk {

// What an instruction of the expansion stands for: instruction `instruction` of the program on
// rank `rank`.
struct RankOrigin {
  uint32_t instruction = 0;
  uint32_t rank = 0;
};

struct RankExpansion {
  Program program;                 // launch.ranks 1
  std::vector<RankOrigin> origin;  // one an instruction of `program`
  uint32_t ranks = 1;
  uint32_t buffers_per_rank = 0;  // buffer b of rank r is r * buffers_per_rank + b
};

// Buffer `name` of rank `rank` in the expansion (its outputs are written under these names).
[[nodiscard]] std::string rank_buffer_name(const std::string& name, uint32_t rank);

// The rank rules (Error kind program, code verify.ranks, at the field): a program of one rank has
// no comm ops and no instruction ranks but [0]; with ranks, no TMA specs; all_reduce runs on every
// rank; send and recv run on one rank each, with a peer that is another rank, at most 3 waits and
// 3 signals (the expansion adds one of each); the k-th send from rank a to rank b meets the k-th
// recv on b from a (in instruction order), of the same extent and dtype.
void check_ranks(const Program& program);

// The expansion of a program that passed check_ranks (a program of one rank: a copy of it).
[[nodiscard]] RankExpansion expand_ranks(const Program& program);

// An error about an instruction of the expansion (verifier or CPU backend, at
// /instructions/N...), told at the program's instruction and its rank; others unchanged.
[[nodiscard]] Error rank_error(const Error& e, std::span<const RankOrigin> origin);

// device.ranks for a program with ranks on the GPU backend (nothing for one rank): the GPU path
// across devices is not built yet.
void refuse_ranks_on_gpu(uint32_t ranks);

}  // namespace amk
