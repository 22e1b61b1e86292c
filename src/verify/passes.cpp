// Programs run over several passes in one launch (launch.passes > 1, or any carried wait): the
// loop is proven safe on the program unrolled over two passes. The unrolled program has 2n
// instructions (the pass-1 copies, then the pass-2 copies) and its own copy of every counter
// per pass: a pass-2 copy signals and waits on counter c + n_counters with the same values, its
// carried waits become waits on the pass-1 counter, and the carried waits of pass-1 copies are
// dropped (they hold in the first pass). Each queue is its pass-1 items, then its pass-2 items;
// without queues, each instruction's two copies make a queue of their own (every instruction
// stays in one queue, whatever amk schedules). Then:
//   (a) the deadlock proof on the unrolled program;
//   (b) no running ahead: for every counter c, every in-pass waiter W and every signaler S of c,
//       W's pass-1 copy precedes S's pass-2 copy, and every carried waiter W of c precedes S
//       within a pass (pass-2 copies) (verify.pass.overtake);
//   (c) the hazard check on the unrolled program, where a kv_append at a position operand writes
//       row P0 + a - 1 in pass a and an attention_decode of pass b reads rows below P0 + b - 1;
//   (d) with a feed_token that may end the launch (its eos operand: it records the pass k whose
//       token was eos, and every block ends before pass k + 2), every queue's pass-2 items
//       include one that feed_token's pass-1 copy precedes: then each block has seen the
//       record of pass q - 2 by the end of its pass q - 1, and all of them end before the same
//       pass (verify.stop.unseen). Without queues, every instruction's pass-2 copy must be
//       preceded, whatever queue amk puts it in.
//
// Why two passes suffice. Per-pass counter copies are what the device's one counter, compared
// with value * pass (value * (pass - 1) when carried), amounts to as long as no signal of a later
// pass reaches c before a wait on c has passed: that is (b). The order (b) finds is made of queue
// order and needed signals, and every instruction stays in one queue, so its pass-k copy precedes
// its pass-(k+1) copy: passes p and p + 1 relate as passes 1 and 2 do, (b) holds for every p by
// induction, and a pass-(p+1) signal never lands before a pass-p wait it could satisfy. The same
// shift carries (c) over: a conflict between passes p and p + 1 is ordered when the one between
// passes 1 and 2 is, one between p and p + k through the later instruction's own copies. The
// device needs all of a counter's earlier-pass signals too, so it orders at least what the model
// does; except where a wait asks for part of a pass's signals (value below the pass's total):
// there the surplus of earlier passes counts toward later ones, so the graph of the unrolled
// program takes no order from such a wait. (a) follows from the single-pass proof (pass 1 drains
// alone, then pass 2 with every carried wait met); it also keeps the graph acyclic.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/detail.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

struct Unrolled {
  Program program;  // buffers without their initial data: only names and sizes are read here
  std::vector<std::vector<uint32_t>> queues;  // without queues: {i, n + i} for each i
  uint32_t n = 0;
  uint32_t n_counters = 0;
};

Unrolled unroll(const Program& program) {
  Unrolled u;
  const uint32_t n = static_cast<uint32_t>(program.instructions.size());
  const uint32_t nc = static_cast<uint32_t>(program.counters.size());
  u.n = n;
  u.n_counters = nc;
  Program& p = u.program;
  p.name = program.name;
  p.launch = program.launch;
  p.custom_ops = program.custom_ops;
  p.buffers.reserve(program.buffers.size());
  for (const Buffer& b : program.buffers)
    p.buffers.push_back({b.name, b.dtype, b.shape, {}, false});
  p.counters.resize(2 * uint64_t{nc});
  for (uint32_t c = 0; c < nc; ++c) p.counters[c] = p.counters[nc + c] = program.counters[c];

  p.instructions.resize(2 * uint64_t{n});
  for (uint32_t i = 0; i < n; ++i) {
    const Instruction& ins = program.instructions[i];
    Instruction& first = p.instructions[i];
    Instruction& second = p.instructions[n + i];
    first.name = second.name = ins.name;
    first.op = second.op = ins.op;
    first.operands = second.operands = ins.operands;
    first.params = second.params = ins.params;
    for (const Wait& w : ins.waits) {
      if (w.carried) {
        second.waits.push_back({w.counter, w.value});
      } else {
        first.waits.push_back({w.counter, w.value});
        second.waits.push_back({nc + w.counter, w.value});
      }
    }
    for (const Signal& s : ins.signals) {
      first.signals.push_back(s);
      second.signals.push_back({nc + s.counter, s.add});
    }
  }
  if (program.queues) {
    u.queues.resize(program.queues->size());
    for (size_t q = 0; q < program.queues->size(); ++q) {
      const std::vector<uint32_t>& items = (*program.queues)[q];
      std::vector<uint32_t>& out = u.queues[q];
      out.reserve(2 * items.size());
      out = items;
      for (uint32_t i : items) out.push_back(n + i);
    }
  } else {  // a pool: only each instruction's own order across passes is certain
    u.queues.resize(n);
    for (uint32_t i = 0; i < n; ++i) u.queues[i] = {i, n + i};
  }
  return u;
}

std::string pass_label(const Program& program, uint32_t i, uint32_t n) {
  return detail::instruction_label(program, i % n) + " in pass " + std::to_string(i / n + 1);
}

// (a): the unrolled program drains.
void check_unrolled_drains(const Program& program, const Unrolled& u) {
  const std::vector<StuckHead> stuck = simulate_queues(u.program, u.queues);
  if (stuck.empty()) return;
  const StuckHead& h = stuck.front();
  const std::string where = program.queues
                                ? "/queues/" + std::to_string(h.block) + "/" +
                                      std::to_string(h.position % (*program.queues)[h.block].size())
                                : "/instructions/" + std::to_string(h.instruction % u.n);
  throw_program_error("verify.deadlock", where,
                      "two passes cannot drain: " + pass_label(program, h.instruction, u.n) +
                          " waits for " + detail::counter_label(program, h.counter % u.n_counters) +
                          " forever (" + std::to_string(stuck.size()) + " stuck)");
}

// Waits for part of a pass's signals order nothing across passes (see the top): drop them from
// the unrolled program once it has been proven to drain.
void drop_partial_waits(Program& p) {
  std::vector<uint64_t> total(p.counters.size(), 0);
  for (const Instruction& ins : p.instructions)
    for (const Signal& s : ins.signals) total[s.counter] += s.add;
  for (Instruction& ins : p.instructions)
    std::erase_if(ins.waits, [&](const Wait& w) { return w.value < total[w.counter]; });
}

// (b)'s questions: one per (counter, signaler, kind of waiter).
struct Overtake {
  uint32_t counter;
  uint32_t signaler;
  bool carried;
  size_t query;
};

std::vector<Overtake> ask_overtakes(const Program& program, uint32_t n,
                                    detail::OrderOracle& oracle) {
  const size_t nc = program.counters.size();
  std::vector<std::vector<uint32_t>> in_pass(nc), carried(nc), signalers(nc);
  for (uint32_t i = 0; i < n; ++i) {
    const Instruction& ins = program.instructions[i];
    for (const Wait& w : ins.waits) {
      std::vector<uint32_t>& set = w.carried ? carried[w.counter] : in_pass[w.counter];
      const uint32_t node = w.carried ? n + i : i;  // pass-1 copy, or pass-2 for carried
      if (set.empty() || set.back() != node) set.push_back(node);
    }
    for (const Signal& s : ins.signals)
      if (signalers[s.counter].empty() || signalers[s.counter].back() != i)
        signalers[s.counter].push_back(i);
  }
  std::vector<Overtake> asked;
  for (uint32_t c = 0; c < nc; ++c) {
    for (const bool is_carried : {false, true}) {
      std::vector<uint32_t>& set = is_carried ? carried[c] : in_pass[c];
      if (set.empty() || signalers[c].empty()) continue;
      const uint32_t id = oracle.add_set(std::move(set));
      for (uint32_t s : signalers[c]) asked.push_back({c, s, is_carried, oracle.ask(id, n + s)});
    }
  }
  return asked;
}

[[noreturn]] void report_overtake(const Program& program, uint32_t n, const Overtake& o,
                                  uint32_t missing) {
  const uint32_t w = missing % n;
  const Instruction& ins = program.instructions[w];
  size_t k = 0;
  while (k < ins.waits.size() &&
         !(ins.waits[k].counter == o.counter && ins.waits[k].carried == o.carried))
    ++k;
  const std::string waiter = detail::instruction_label(program, w);
  const std::string signaler = detail::instruction_label(program, o.signaler);
  const std::string counter = detail::counter_label(program, o.counter);
  std::string message =
      o.carried
          ? waiter + " waits on " + counter + " carried (the previous pass's signals), but " +
                signaler + " may signal it in the same pass first: nothing orders the waiter " +
                "before the signaler within a pass, so an early signal counts for the pass before"
          : waiter + " waits on " + counter + " in each pass, but " + signaler +
                " may signal it for the next pass before the waiter has waited: nothing orders " +
                "the waiter's pass p before the signaler's pass p + 1, so a signal of the next " +
                "pass can count for this one (a carried wait of the signaler on a counter the " +
                "waiter signals gives that order)";
  throw_program_error("verify.pass.overtake",
                      "/instructions/" + std::to_string(w) + "/waits/" + std::to_string(k),
                      std::move(message));
}

bool is_plain_nop(const Instruction& ins) {
  return ins.op == static_cast<uint16_t>(OpId::nop) && ins.waits.empty() && ins.signals.empty();
}

// (d)'s questions: (feed_token, the queue's last item with work in pass 2) for each queue, or
// (feed_token, each instruction's pass-2 copy) without queues.
struct StopSeen {
  uint32_t target;  // an instruction's pass-2 copy
  uint32_t queue;   // kNoIndex without queues
  size_t query;
};

std::vector<StopSeen> ask_stop_seen(const Program& program, const Unrolled& u,
                                    detail::OrderOracle& oracle) {
  std::vector<StopSeen> asked;
  const std::optional<uint32_t> f = stopping_feed_token(program);
  if (!f) return asked;
  if (program.queues) {
    for (uint32_t q = 0; q < program.queues->size(); ++q) {
      const std::vector<uint32_t>& items = (*program.queues)[q];
      auto last = std::find_if(items.rbegin(), items.rend(),
                               [&](uint32_t i) { return !is_plain_nop(program.instructions[i]); });
      if (last == items.rend()) continue;  // (a block of plain nops does nothing)
      asked.push_back({u.n + *last, q, oracle.ask_pair(*f, u.n + *last)});
    }
  } else {
    for (uint32_t i = 0; i < u.n; ++i)
      if (!is_plain_nop(program.instructions[i]))
        asked.push_back({u.n + i, detail::kNoIndex, oracle.ask_pair(*f, u.n + i)});
  }
  return asked;
}

[[noreturn]] void report_stop_unseen(const Program& program, uint32_t n, const StopSeen& s) {
  const uint32_t f = *stopping_feed_token(program);
  const std::string feed = detail::instruction_label(program, f);
  if (s.queue != detail::kNoIndex)
    throw_program_error(
        "verify.stop.unseen", "/queues/" + std::to_string(s.queue),
        "queue " + std::to_string(s.queue) + " never waits, in a pass, on what " + feed +
            " did the pass before: its block could not see that the previous token was the "
            "eos id and would run on after the others end (make one of its instructions wait, "
            "directly or through others, on a counter " +
            feed + " signals)");
  throw_program_error(
      "verify.stop.unseen", "/instructions/" + std::to_string(s.target % n),
      detail::instruction_label(program, s.target % n) + " does not wait, in a pass, on what " +
          feed + " did the pass before: the block that runs it could not see that the " +
          "previous token was the eos id (give the program queues whose every block waits on " +
          "it, or make this instruction wait on it)");
}

}  // namespace

std::optional<uint32_t> stopping_feed_token(const Program& program) {
  std::optional<uint32_t> found;
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    if (ins.op != static_cast<uint16_t>(OpId::feed_token) || ins.operands.size() <= 6 ||
        ins.operands[6].buffer == AMK_NO_BUFFER)
      continue;
    if (found)
      throw_program_error("verify.stop.many", "/instructions/" + std::to_string(i) + "/operands/6",
                          detail::instruction_label(program, i) + " and " +
                              detail::instruction_label(program, *found) +
                              " both have an eos operand: one feed_token may end a launch");
    found = i;
  }
  return found;
}

bool runs_several_passes(const Program& program) {
  if (program.launch.passes > 1) return true;
  for (const Instruction& ins : program.instructions)
    for (const Wait& w : ins.waits)
      if (w.carried) return true;
  return false;
}

uint64_t check_pass_loop(const Program& program, const VerifyOptions& options) {
  Unrolled u = unroll(program);
  check_unrolled_drains(program, u);
  drop_partial_waits(u.program);
  const DependencyGraph graph = build_dependency_graph(u.program, &u.queues);
  detail::OrderOracle oracle(graph);
  const std::vector<Overtake> overtakes = ask_overtakes(program, u.n, oracle);
  const std::vector<StopSeen> stops = ask_stop_seen(program, u, oracle);
  std::optional<detail::HazardPairs> hazards;
  if (options.check_hazards) hazards.emplace(u.program, graph, oracle, u.n);
  oracle.resolve(true);
  for (const Overtake& o : overtakes)
    if (const uint32_t m = oracle.missing(o.query); m != detail::kNoIndex)
      report_overtake(program, u.n, o, m);
  for (const StopSeen& s : stops)
    if (oracle.missing(s.query) != detail::kNoIndex) report_stop_unseen(program, u.n, s);
  if (!hazards) return 0;
  hazards->throw_first();
  return hazards->pairs();
}

}  // namespace amk
