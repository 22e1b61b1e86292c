// Lowering to the device ABI: instruction table, queues, buffer table.
#include "plan/plan.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

[[noreturn]] void capacity_error(uint32_t index, const std::string& what, size_t have,
                                 size_t room) {
  throw_program_error("plan.capacity", "/instructions/" + std::to_string(index) + "/" + what,
                      std::to_string(have) + " " + what + ", the ABI holds " +
                          std::to_string(room));
}

// Waits that queue order already guarantees, and the signals nobody waits for then, are left out
// of the device's copy of the instructions (the program itself keeps them). A wait (c, v) of an
// instruction holds when it is reached if the instructions before it in its own queue add at
// least v to c: per pass they add that much again, and the wait asks for v * pass. The block's
// barrier before a data op already makes the earlier op's stores visible, so such a wait only
// costs a round trip to L2 (and its signal a release fence) for nothing.
// Keeps the entries of items[0, n) that `keep` accepts, in order, zeroes the rest; returns the
// count kept.
template <typename T, typename Keep>
uint8_t compact(T* items, uint8_t n, Keep keep) {
  uint8_t kept = 0;
  for (uint8_t i = 0; i < n; ++i)
    if (keep(items[i])) items[kept++] = items[i];
  for (uint8_t i = kept; i < n; ++i) items[i] = {0, 0};
  return kept;
}

void elide_ordered_syncs(const std::vector<std::vector<uint32_t>>& queues, Plan& plan) {
  std::vector<uint64_t> added(plan.n_counters, 0);
  std::vector<uint32_t> touched;
  for (const auto& q : queues) {
    for (uint32_t c : touched) added[c] = 0;
    touched.clear();
    for (uint32_t item : q) {
      amk_instruction_t& ins = plan.instructions[item];
      ins.n_waits = compact(ins.waits, ins.n_waits, [&](const amk_wait_t& wait) {
        const bool implied = wait.counter < plan.n_counters && added[wait.counter] >= wait.value;
        plan.elided_waits += implied ? 1 : 0;
        return !implied;
      });
      for (uint8_t g = 0; g < ins.n_signals; ++g) {
        const amk_signal_t sig = ins.signals[g];
        if (sig.counter >= plan.n_counters) continue;
        if (added[sig.counter] == 0) touched.push_back(sig.counter);
        added[sig.counter] += sig.add;
      }
    }
  }
  std::vector<uint8_t> waited(plan.n_counters, 0);
  for (const amk_instruction_t& ins : plan.instructions)
    for (uint8_t w = 0; w < ins.n_waits; ++w)
      if (const uint32_t c = ins.waits[w].counter & ~AMK_WAIT_CARRIED; c < plan.n_counters)
        waited[c] = 1;
  for (amk_instruction_t& ins : plan.instructions)
    ins.n_signals = compact(ins.signals, ins.n_signals, [&](const amk_signal_t& sig) {
      const bool dead = sig.counter < plan.n_counters && !waited[sig.counter];
      plan.elided_signals += dead ? 1 : 0;
      return !dead;
    });
}

}  // namespace

amk_instruction_t encode_instruction(const Instruction& in, uint32_t index) {
  if (in.operands.size() > AMK_MAX_OPERANDS)
    capacity_error(index, "operands", in.operands.size(), AMK_MAX_OPERANDS);
  if (in.waits.size() > AMK_MAX_WAITS)
    capacity_error(index, "waits", in.waits.size(), AMK_MAX_WAITS);
  if (in.signals.size() > AMK_MAX_SIGNALS)
    capacity_error(index, "signals", in.signals.size(), AMK_MAX_SIGNALS);
  if (in.params.size() > AMK_MAX_PARAMS)
    capacity_error(index, "params", in.params.size(), AMK_MAX_PARAMS);

  // Zero everything first: reserved fields and padding must be zero in files and uploads.
  amk_instruction_t out;
  std::memset(&out, 0, sizeof(out));
  out.op = in.op;
  const size_t n_operands = stored_operand_count(in);
  out.n_operands = static_cast<uint8_t>(n_operands);
  out.n_waits = static_cast<uint8_t>(in.waits.size());
  out.n_signals = static_cast<uint8_t>(in.signals.size());
  out.n_params = static_cast<uint8_t>(in.params.size());
  out.index = index;
  for (uint32_t s = 0; s < AMK_INLINE_OPERANDS; ++s) out.operands[s].buffer = AMK_NO_BUFFER;
  for (size_t s = 0; s < n_operands; ++s) {
    const Operand& o = in.operands[s];
    if (o.buffer == AMK_NO_BUFFER) continue;  // optional slot left out: stays {0, 0, none}
    if (o.extent > UINT32_MAX)
      throw_program_error("plan.capacity",
                          "/instructions/" + std::to_string(index) + "/operands/" +
                              std::to_string(s) + "/extent",
                          "extent " + std::to_string(o.extent) + " exceeds 32 bits");
    amk_operand_t& d = amk_ins_operand(out, static_cast<uint32_t>(s));
    d.offset = o.offset;
    d.extent = static_cast<uint32_t>(o.extent);
    d.buffer = o.buffer;
  }
  for (size_t w = 0; w < in.waits.size(); ++w) out.waits[w] = abi_wait(in.waits[w]);
  for (size_t g = 0; g < in.signals.size(); ++g)
    out.signals[g] = {in.signals[g].counter, in.signals[g].add};
  for (size_t p = 0; p < in.params.size(); ++p) out.params[p] = in.params[p];
  return out;
}

Instruction decode_instruction(const amk_instruction_t& in) {
  const std::string where = "/instructions/" + std::to_string(in.index);
  if (in.n_operands > AMK_MAX_OPERANDS || in.n_waits > AMK_MAX_WAITS ||
      in.n_signals > AMK_MAX_SIGNALS || in.n_params > AMK_MAX_PARAMS)
    throw_program_error(
        "plan.capacity", where,
        "instruction counts exceed the ABI (operands " + std::to_string(in.n_operands) +
            ", waits " + std::to_string(in.n_waits) + ", signals " + std::to_string(in.n_signals) +
            ", params " + std::to_string(in.n_params) + ")");
  Instruction out;
  out.op = in.op;
  out.operands.reserve(in.n_operands);
  for (uint32_t s = 0; s < in.n_operands; ++s) {
    const amk_operand_t& o = amk_ins_operand(in, s);
    Operand op;
    op.buffer = o.buffer;
    if (o.buffer != AMK_NO_BUFFER) {
      op.offset = o.offset;
      op.extent = o.extent;
    }
    out.operands.push_back(op);
  }
  for (uint32_t w = 0; w < in.n_waits; ++w) out.waits.push_back(program_wait(in.waits[w]));
  for (uint32_t g = 0; g < in.n_signals; ++g)
    out.signals.push_back({in.signals[g].counter, in.signals[g].add});
  out.params.assign(in.params, in.params + in.n_params);
  return out;
}

Plan make_plan(const Program& program, const PlanOptions& options) {
  Plan plan;
  const uint64_t cluster = program.launch.mode == LaunchMode::cluster
                               ? uint64_t{program.launch.cluster[0]} * program.launch.cluster[1] *
                                     program.launch.cluster[2]
                               : 1;
  std::vector<std::vector<uint32_t>> built;
  const std::vector<std::vector<uint32_t>>* queues = nullptr;
  if (program.queues) {
    queues = &*program.queues;
    if (program.launch.grid != 0 && queues->size() != program.launch.grid)
      throw_program_error("verify.queue.count", "/queues",
                          std::to_string(queues->size()) + " queues but launch.grid is " +
                              std::to_string(program.launch.grid));
    plan.grid = static_cast<uint32_t>(queues->size());
  } else {
    uint64_t grid = program.launch.grid;
    if (grid == 0) {
      // Auto grid: the caller's hint, rounded down to whole clusters in cluster mode.
      grid = options.grid_hint;
      if (cluster > 1) grid -= grid % cluster;
      if (grid == 0)
        throw_program_error("plan.grid", "/launch/grid",
                            "grid hint " + std::to_string(options.grid_hint) +
                                " leaves no whole cluster of " + std::to_string(cluster) +
                                " blocks");
    }
    plan.grid = static_cast<uint32_t>(grid);
    built = build_queues(program, plan.grid);
    check_queues(program, built);  // the schedule must pass the same proof as a user's queues
    queues = &built;
    plan.queues_built = true;
  }

  const size_t n = program.instructions.size();
  plan.instructions.reserve(n);
  for (uint32_t i = 0; i < n; ++i)
    plan.instructions.push_back(encode_instruction(program.instructions[i], i));

  plan.queue_offsets.reserve(queues->size() + 1);
  plan.queue_offsets.push_back(0);
  plan.queue_items.reserve(n);
  for (const auto& q : *queues) {
    plan.queue_items.insert(plan.queue_items.end(), q.begin(), q.end());
    plan.queue_offsets.push_back(static_cast<uint32_t>(plan.queue_items.size()));
  }

  plan.buffers.reserve(program.buffers.size());
  for (const Buffer& b : program.buffers) {
    amk_buffer_t e;
    std::memset(&e, 0, sizeof(e));
    e.address = 0;  // placed by the executor
    e.elements = b.elements();
    e.bytes = b.bytes();
    e.dtype = static_cast<uint32_t>(b.dtype);
    e.flags = b.output ? AMK_BUFFER_OUTPUT : 0u;
    plan.buffers.push_back(e);
  }
  plan.n_counters = static_cast<uint32_t>(program.counters.size());
  plan.block = program.launch.block;
  if (options.elide_ordered_syncs) elide_ordered_syncs(*queues, plan);
  for (const Instruction& ins : program.instructions) plan.ops_used.push_back(ins.op);
  std::sort(plan.ops_used.begin(), plan.ops_used.end());
  plan.ops_used.erase(std::unique(plan.ops_used.begin(), plan.ops_used.end()), plan.ops_used.end());
  mark_const_weights(program, plan);
  return plan;
}

void check_passes(const Program& program, const Plan& plan, uint32_t passes) {
  auto counter_label = [&](uint32_t c) {
    return c < program.counters.size() && !program.counters[c].name.empty()
               ? "counter '" + program.counters[c].name + "'"
               : "counter " + std::to_string(c);
  };
  const std::string figures = " x " + std::to_string(passes) + " passes = ";
  std::vector<uint64_t> per_pass(plan.n_counters, 0);
  for (const amk_instruction_t& ins : plan.instructions)
    for (uint8_t g = 0; g < ins.n_signals && g < AMK_MAX_SIGNALS; ++g)
      if (ins.signals[g].counter < plan.n_counters)
        per_pass[ins.signals[g].counter] += ins.signals[g].add;
  for (uint32_t c = 0; c < plan.n_counters; ++c) {
    const auto reached = checked_mul(per_pass[c], passes);
    if (reached && *reached <= kMaxCounterValue) continue;
    throw_program_error("plan.counter.overflow", "/counters/" + std::to_string(c),
                        counter_label(c) + " gains " + std::to_string(per_pass[c]) + " per pass" +
                            figures + (reached ? std::to_string(*reached) : "over 2^64") +
                            ", past the device's 32-bit counters (at most " +
                            std::to_string(kMaxCounterValue) + ")");
  }
  for (const amk_instruction_t& ins : plan.instructions) {
    for (uint8_t w = 0; w < ins.n_waits && w < AMK_MAX_WAITS; ++w) {
      const uint64_t need = uint64_t{ins.waits[w].value} * passes;
      if (need <= kMaxCounterValue) continue;
      throw_program_error(
          "plan.counter.overflow",
          "/instructions/" + std::to_string(ins.index) + "/waits/" + std::to_string(w) + "/value",
          "a wait for " + counter_label(ins.waits[w].counter & ~AMK_WAIT_CARRIED) +
              " >= " + std::to_string(ins.waits[w].value) + figures + std::to_string(need) +
              ", past the device's 32-bit counters (at most " + std::to_string(kMaxCounterValue) +
              ")");
    }
  }
  for (uint32_t q = 0; q < plan.n_queues(); ++q) {
    const uint64_t len = plan.queue_offsets[q + 1] - plan.queue_offsets[q];
    const uint64_t steps = len * passes;
    if (steps <= UINT32_MAX) continue;
    throw_program_error("plan.queue.overflow", "/queues/" + std::to_string(q),
                        "queue " + std::to_string(q) + " of " + std::to_string(len) +
                            " instructions" + figures + std::to_string(steps) +
                            " steps; the device counts them in 32 bits (at most " +
                            std::to_string(UINT32_MAX) + ")");
  }
}

}  // namespace amk
