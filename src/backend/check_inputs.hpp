// What `amk run --check` does to a run's initial data so that a wrong GPU result cannot pass:
// fresh seeds for the random inits (--reseed), and outputs poisoned before the run, so that an
// element the GPU never writes cannot pass for a correct zero.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/host_data.hpp"
#include "program/program.hpp"

namespace amk {

// --reseed S: every random init's seed becomes random_bits(S, seed) (schemas/init.md), so the
// run draws other values from the same distributions. Returns how many buffers changed.
uint32_t reseed_random_inits(Program& program, uint64_t reseed) noexcept;

// The outputs --check poisons (indexed like program.buffers): zeros-initialized output buffers
// of a 2-byte or wider dtype that only built-in ops name, in `write` slots, or in `read` slots
// whose view the writes ordered before the reader (through the counters, transitively) cover.
// Their initial zeros then cannot reach anything the program computes: the poison changes only
// what is left where nothing writes, which both backends leave alike. A buffer named by a
// read_write slot, by kv_append (which keeps the cache rows it does not write), or by a custom
// op keeps its zeros.
[[nodiscard]] std::vector<bool> poisonable_outputs(const Program& program);

// The poison: a signaling NaN no arithmetic produces for floats (f32 0x7FA5A5A5, f16 0x7DA5,
// bf16 0x7FA5), 0xA5 in every byte for integers.
void poison_buffers(const Program& program, const std::vector<bool>& which, HostBuffers& data);
[[nodiscard]] bool is_poison(DType t, const std::byte* base, uint64_t i) noexcept;

// Elements of one poisoned output where the run and the reference disagree on being written:
// `unwritten` still hold the poison after the run but not in the reference (an element the run
// never wrote), `extra` the other way round. `first`: the lowest such element.
struct PoisonDiff {
  uint64_t unwritten = 0;
  uint64_t extra = 0;
  uint64_t first = UINT64_MAX;
};
[[nodiscard]] PoisonDiff compare_poison(DType t, const std::vector<std::byte>& run,
                                        const std::vector<std::byte>& ref, uint64_t elements);

// Zeroes the elements of the poisoned buffers that still hold the poison: what a zeros-initialized
// run leaves there. Returns how many.
uint64_t clear_poison(const Program& program, const std::vector<bool>& which, HostBuffers& data);

// "a, b" of the buffers marked in `which` ("" for none).
[[nodiscard]] std::string buffer_names(const Program& program, const std::vector<bool>& which);

}  // namespace amk
