// Arrival groups: the instructions that name the same counter in a counter param (`arrive` of
// attention_combine). Each member adds 1 to the counter when it runs; the one whose add
// completes a round of `arrivals` does the op's work, the others write nothing. So the group
// acts as one virtual instruction that starts after any member has (every member's earlier
// work is before its own add, and the last add comes after all of them) and whose effects are
// visible only to what follows every member (which one is last is not known).
//
// The rules that make that safe: the counter is the group's alone (no wait or signal names it,
// no other param), its members are identical (same op, operands and params, so whichever merges
// does the same thing) and `arrivals` is their number, so each pass completes exactly one round.
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ops/registry.hpp"
#include "verify/verify.hpp"

namespace amk {
namespace {

std::string where_param(uint32_t index, std::string_view param) {
  return "/instructions/" + std::to_string(index) + "/params/" + std::string(param);
}

std::string label(const Program &program, uint32_t index) {
  const Instruction &ins = program.instructions[index];
  std::string s = "instruction " + std::to_string(index);
  if (!ins.name.empty())
    s += " '" + ins.name + "'";
  return s + " (" + op_name(program, ins.op) + ")";
}

} // namespace

ArrivalGroups arrival_groups(const Program &program) {
  ArrivalGroups g;
  g.group_of.assign(program.instructions.size(), ArrivalGroups::kNoGroup);
  std::map<uint32_t, uint32_t> by_counter;
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &ins = program.instructions[i];
    const OpSig *sig = find_op(ins.op);
    if (sig == nullptr)
      continue;
    for (size_t k = 0; k < sig->params.size() && k < ins.params.size(); ++k) {
      if (sig->params[k].type != ParamType::counter || ins.params[k] == kNoCounter)
        continue;
      const auto [it, added] =
          by_counter.emplace(ins.params[k], static_cast<uint32_t>(g.members.size()));
      if (added) {
        g.members.emplace_back();
        g.counter.push_back(ins.params[k]);
        g.param.push_back(static_cast<uint32_t>(k));
      }
      g.members[it->second].push_back(i);
      g.group_of[i] = it->second;
    }
  }
  return g;
}

void check_arrival_groups(const Program &program) {
  const ArrivalGroups g = arrival_groups(program);
  if (g.members.empty())
    return;
  std::vector<uint32_t> group_of_counter(program.counters.size(), ArrivalGroups::kNoGroup);
  for (uint32_t a = 0; a < g.members.size(); ++a)
    if (g.counter[a] < program.counters.size())
      group_of_counter[g.counter[a]] = a;
  // The counter is the group's alone.
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &ins = program.instructions[i];
    auto refuse = [&](const std::string &where, uint32_t c, std::string_view how) {
      throw_program_error("verify.arrive.counter", where,
                          label(program, i) + " " + std::string(how) + " counter '" +
                              program.counters[c].name +
                              "', the arrive counter of an arrival group (" +
                              label(program, g.members[group_of_counter[c]][0]) +
                              "); an arrive counter may be named by nothing else");
    };
    for (size_t w = 0; w < ins.waits.size(); ++w)
      if (ins.waits[w].counter < program.counters.size() &&
          group_of_counter[ins.waits[w].counter] != ArrivalGroups::kNoGroup)
        refuse("/instructions/" + std::to_string(i) + "/waits/" + std::to_string(w),
               ins.waits[w].counter, "waits on");
    for (size_t s = 0; s < ins.signals.size(); ++s)
      if (ins.signals[s].counter < program.counters.size() &&
          group_of_counter[ins.signals[s].counter] != ArrivalGroups::kNoGroup)
        refuse("/instructions/" + std::to_string(i) + "/signals/" + std::to_string(s),
               ins.signals[s].counter, "signals");
  }
  for (uint32_t a = 0; a < g.members.size(); ++a) {
    const std::vector<uint32_t> &m = g.members[a];
    const Instruction &first = program.instructions[m[0]];
    const OpSig *sig = find_op(first.op);
    const std::string counter = "'" + program.counters[g.counter[a]].name + "'";
    for (uint32_t i : m) {
      const Instruction &ins = program.instructions[i];
      if (ins.op != first.op || ins.operands != first.operands || ins.params != first.params)
        throw_program_error("verify.arrive.members", "/instructions/" + std::to_string(i),
                            label(program, i) + " and " + label(program, m[0]) +
                                " share the arrive counter " + counter +
                                " but differ in op, operands or params; the members of an "
                                "arrival group must be identical (any of them may be the one "
                                "that does the work)");
    }
    // The count: the param after the counter (attention_combine: arrive, arrivals).
    const uint32_t k = g.param[a] + 1;
    const uint32_t arrivals = k < first.params.size() ? first.params[k] : 0;
    if (arrivals != m.size())
      throw_program_error("verify.arrive.count",
                          where_param(m[0], k < sig->params.size() ? sig->params[k].name : "?"),
                          label(program, m[0]) + ": arrivals = " + std::to_string(arrivals) +
                              " but " + std::to_string(m.size()) +
                              " instructions name the arrive counter " + counter +
                              "; they must be equal, so each pass completes exactly one round");
  }
}

} // namespace amk
