#include "verify/ranks.hpp"

#include <map>
#include <utility>

#include "core/error.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

bool is(const Instruction& in, OpId op) { return in.op == static_cast<uint16_t>(op); }
bool is_p2p(const Instruction& in) { return is(in, OpId::send) || is(in, OpId::recv); }
bool is_comm(const Instruction& in) { return is(in, OpId::all_reduce) || is_p2p(in); }

std::string at(uint32_t i) { return "/instructions/" + std::to_string(i); }

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw_program_error("verify.ranks", where, message);
}

// The matched (send, recv) pairs, in instruction order per (from, to) rank pair.
std::vector<std::pair<uint32_t, uint32_t>> match_p2p(const Program& p) {
  // (from, to) -> the sends from `from` to `to`, and the recvs on `to` from `from`
  std::map<std::pair<uint32_t, uint32_t>, std::pair<std::vector<uint32_t>, std::vector<uint32_t>>>
      lanes;
  for (uint32_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    if (!is_p2p(in)) continue;
    const uint32_t self = in.ranks.at(0), peer = in.params.at(0);
    if (is(in, OpId::send))
      lanes[{self, peer}].first.push_back(i);
    else
      lanes[{peer, self}].second.push_back(i);
  }
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (const auto& [key, lane] : lanes) {
    const auto& [sends, recvs] = lane;
    const std::string route =
        "rank " + std::to_string(key.first) + " to rank " + std::to_string(key.second);
    for (size_t k = 0; k < std::max(sends.size(), recvs.size()); ++k) {
      if (k >= recvs.size())
        fail(at(sends[k]), "send number " + std::to_string(k + 1) + " from " + route +
                               " has no matching recv (" + std::to_string(recvs.size()) +
                               " recvs there)");
      if (k >= sends.size())
        fail(at(recvs[k]), "recv number " + std::to_string(k + 1) + " from " + route +
                               " has no matching send (" + std::to_string(sends.size()) +
                               " sends there)");
      const Operand& x = p.instructions[sends[k]].operands[0];
      const Operand& y = p.instructions[recvs[k]].operands[0];
      if (x.extent != y.extent || p.buffers[x.buffer].dtype != p.buffers[y.buffer].dtype)
        fail(at(recvs[k]), "recv of " + std::to_string(y.extent) + " " +
                               std::string(dtype_name(p.buffers[y.buffer].dtype)) +
                               " elements meets a send (instruction " + std::to_string(sends[k]) +
                               ") of " + std::to_string(x.extent) + " " +
                               std::string(dtype_name(p.buffers[x.buffer].dtype)));
      pairs.push_back({sends[k], recvs[k]});
    }
  }
  return pairs;
}

// Builds the expansion instruction by instruction.
class Expander {
public:
  explicit Expander(const Program& p) : p_(p), R_(p.launch.ranks) {
    nb_ = static_cast<uint32_t>(p.buffers.size());
    nc_ = static_cast<uint32_t>(p.counters.size());
    Program& e = x_.program;
    e.name = p.name;
    e.description = p.description;
    e.version = p.version;
    e.target = p.target;
    e.launch = p.launch;
    e.launch.ranks = 1;
    if (e.launch.grid != 0) e.launch.grid *= R_;
    e.custom_ops = p.custom_ops;
    e.base_dir = p.base_dir;
    for (uint32_t r = 0; r < R_; ++r)
      for (const Buffer& b : p.buffers) {
        Buffer c = b;
        c.name = rank_buffer_name(b.name, r);
        if (!b.rank_inits.empty()) c.init = b.rank_inits[r];
        c.rank_inits.clear();
        e.buffers.push_back(std::move(c));
      }
    for (uint32_t r = 0; r < R_; ++r)
      for (const Counter& c : p.counters) e.counters.push_back({rank_buffer_name(c.name, r)});
    x_.ranks = R_;
    x_.buffers_per_rank = nb_;
    items_.assign(p.instructions.size(), std::vector<std::vector<uint32_t>>(R_));
  }

  RankExpansion run() {
    std::map<uint32_t, uint32_t> recv_of_send, send_of_recv;
    for (const auto& [s, r] : match_p2p(p_)) {
      recv_of_send[s] = r;
      send_of_recv[r] = s;
    }
    std::map<uint32_t, std::pair<uint32_t, uint32_t>> p2p_counters;  // send -> (sent, received)
    for (uint32_t i = 0; i < p_.instructions.size(); ++i) {
      const Instruction& in = p_.instructions[i];
      if (is(in, OpId::all_reduce)) {
        all_reduce(i);
      } else if (is_p2p(in)) {
        const uint32_t s = is(in, OpId::send) ? i : send_of_recv.at(i);
        if (!p2p_counters.count(s)) {
          const std::string base = "amk.send." + std::to_string(s);
          p2p_counters[s] = {counter(base + ".sent"), counter(base + ".received")};
        }
        const auto [sent, received] = p2p_counters[s];
        if (is(in, OpId::send))
          send(i, sent, received);
        else
          recv(i, s, sent, received);
      } else {
        for (uint32_t r = 0; r < R_; ++r)
          if (runs_on(in, r)) items_[i][r].push_back(add(remapped(in, r), i, r));
      }
    }
    if (p_.queues) {
      Program& e = x_.program;
      e.queues.emplace();
      for (uint32_t r = 0; r < R_; ++r)
        for (const std::vector<uint32_t>& q : *p_.queues) {
          std::vector<uint32_t> eq;
          for (uint32_t i : q)
            if (i < items_.size()) eq.insert(eq.end(), items_[i][r].begin(), items_[i][r].end());
          e.queues->push_back(std::move(eq));
        }
    }
    return std::move(x_);
  }

private:
  static bool runs_on(const Instruction& in, uint32_t r) {
    if (in.ranks.empty()) return true;
    for (uint32_t x : in.ranks)
      if (x == r) return true;
    return false;
  }

  uint32_t buffer(uint32_t b, uint32_t r) const { return r * nb_ + b; }
  uint32_t rank_counter(uint32_t c, uint32_t r) const { return r * nc_ + c; }
  uint32_t counter(const std::string& name) {
    x_.program.counters.push_back({name});
    return static_cast<uint32_t>(x_.program.counters.size() - 1);
  }

  Operand operand(const Operand& o, uint32_t r) const {
    Operand c = o;
    if (c.buffer != AMK_NO_BUFFER) c.buffer = buffer(c.buffer, r);
    return c;
  }
  std::vector<Wait> waits(const Instruction& in, uint32_t r) const {
    std::vector<Wait> w = in.waits;
    for (Wait& x : w) x.counter = rank_counter(x.counter, r);
    return w;
  }
  std::vector<Signal> signals(const Instruction& in, uint32_t r) const {
    std::vector<Signal> s = in.signals;
    for (Signal& x : s) x.counter = rank_counter(x.counter, r);
    return s;
  }
  Instruction remapped(const Instruction& in, uint32_t r) const {
    Instruction c = in;
    if (!c.name.empty()) c.name = rank_buffer_name(in.name, r);
    for (Operand& o : c.operands) o = operand(o, r);
    c.waits = waits(in, r);
    c.signals = signals(in, r);
    c.ranks.clear();
    return c;
  }
  uint32_t add(Instruction in, uint32_t i, uint32_t r) {
    x_.program.instructions.push_back(std::move(in));
    x_.origin.push_back({i, r});
    return static_cast<uint32_t>(x_.program.instructions.size() - 1);
  }
  // An instruction of the expansion's own, named after the one it stands for: NAME.rankR.ROLE
  // (#I for an unnamed instruction I).
  Instruction op(uint32_t i, uint32_t r, const std::string& role, OpId id,
                 std::vector<Operand> operands, std::vector<uint32_t> params,
                 std::vector<Wait> waits, std::vector<Signal> signals) const {
    const std::string& name = p_.instructions[i].name;
    Instruction in;
    in.name = rank_buffer_name(name.empty() ? "#" + std::to_string(i) : name, r) + "." + role;
    in.op = static_cast<uint16_t>(id);
    in.operands = std::move(operands);
    in.params = std::move(params);
    in.waits = std::move(waits);
    in.signals = std::move(signals);
    return in;
  }

  // Every rank arrives (its waits held), rank 0 sums x in rank order into its own x and copies
  // the sum to every other rank's x, then every rank is done (its signals). Each step of the sum
  // signals a counter of its own, so that every wait needs all of its counter's signals (the
  // dependency graph's edges).
  void all_reduce(uint32_t i) {
    const Instruction& in = p_.instructions[i];
    const std::string base = "amk.all_reduce." + std::to_string(i);
    const uint32_t arrived = counter(base + ".arrived");
    const Operand x0 = operand(in.operands[0], 0);
    for (uint32_t r = 0; r < R_; ++r)
      items_[i][r].push_back(
          add(op(i, r, "arrive", OpId::nop, {}, {}, waits(in, r), {{arrived, 1}}), i, r));
    Wait after{arrived, R_, false};
    for (uint32_t r = 1; r < R_; ++r) {
      const uint32_t summed = counter(base + ".sum" + std::to_string(r));
      items_[i][0].push_back(
          add(op(i, 0, "sum" + std::to_string(r), OpId::add, {x0, operand(in.operands[0], r), x0},
                 {}, {after}, {{summed, 1}}),
              i, 0));
      after = {summed, 1, false};
    }
    const uint32_t copied = counter(base + ".copied");
    for (uint32_t r = 1; r < R_; ++r)
      items_[i][0].push_back(add(op(i, 0, "copy" + std::to_string(r), OpId::copy,
                                    {x0, operand(in.operands[0], r)}, {}, {after}, {{copied, 1}}),
                                 i, 0));
    for (uint32_t r = 0; r < R_; ++r)
      items_[i][r].push_back(add(
          op(i, r, "done", OpId::nop, {}, {}, {{copied, R_ - 1, false}}, signals(in, r)), i, r));
  }

  // The sender arrives (its waits held) and is done once the receiver's copy is.
  void send(uint32_t i, uint32_t sent, uint32_t received) {
    const Instruction& in = p_.instructions[i];
    const uint32_t r = in.ranks[0];
    items_[i][r].push_back(
        add(op(i, r, "arrive", OpId::nop, {}, {}, waits(in, r), {{sent, 1}}), i, r));
    items_[i][r].push_back(
        add(op(i, r, "done", OpId::nop, {}, {}, {{received, 1, false}}, signals(in, r)), i, r));
  }

  // The receiver copies the sender's x into its y once its own waits hold and the sender arrived.
  void recv(uint32_t i, uint32_t s, uint32_t sent, uint32_t received) {
    const Instruction& in = p_.instructions[i];
    const Instruction& from = p_.instructions[s];
    const uint32_t r = in.ranks[0];
    std::vector<Wait> w = waits(in, r);
    w.push_back({sent, 1, false});
    std::vector<Signal> g = signals(in, r);
    g.push_back({received, 1});
    items_[i][r].push_back(
        add(op(i, r, "copy", OpId::copy,
               {operand(from.operands[0], from.ranks[0]), operand(in.operands[0], r)}, {},
               std::move(w), std::move(g)),
            i, r));
  }

  const Program& p_;
  const uint32_t R_;
  uint32_t nb_ = 0, nc_ = 0;
  RankExpansion x_;
  std::vector<std::vector<std::vector<uint32_t>>> items_;  // [instruction][rank] -> expanded
};

}  // namespace

std::string rank_buffer_name(const std::string& name, uint32_t rank) {
  return name + ".rank" + std::to_string(rank);
}

void check_ranks(const Program& p) {
  const uint32_t R = p.launch.ranks;
  if (R > 1 && !p.tma.empty()) fail("/tma", "a program with ranks has no TMA specs");
  for (uint32_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    for (uint32_t r : in.ranks)
      if (r >= R)
        fail(at(i) + "/ranks",
             "rank " + std::to_string(r) + " of a program with launch.ranks " + std::to_string(R));
    if (!is_comm(in)) continue;
    const std::string name(find_op(in.op)->name);
    if (R < 2) fail(at(i) + "/op", name + " needs a program with launch.ranks >= 2");
    if (in.waits.size() > AMK_MAX_WAITS - 1 || in.signals.size() > AMK_MAX_SIGNALS - 1)
      fail(at(i), name + " takes at most " + std::to_string(AMK_MAX_WAITS - 1) + " waits and " +
                      std::to_string(AMK_MAX_SIGNALS - 1) + " signals (one of each is its own)");
    if (is(in, OpId::all_reduce)) {
      if (!in.ranks.empty() && in.ranks.size() != R)
        fail(at(i) + "/ranks", "all_reduce runs on every rank");
      continue;
    }
    if (in.ranks.size() != 1)
      fail(at(i) + "/ranks", name + " runs on one rank: give \"ranks\": [r]");
    if (in.params.at(0) >= R || in.params[0] == in.ranks[0])
      fail(at(i) + "/params/peer", "peer " + std::to_string(in.params[0]) +
                                       " must be another rank of the " + std::to_string(R));
  }
  if (R > 1) (void)match_p2p(p);
}

Error rank_error(const Error& e, std::span<const RankOrigin> origin) {
  const std::string prefix = "/instructions/";
  if (e.where().rfind(prefix, 0) != 0) return e;
  size_t end = prefix.size();
  uint64_t n = 0;
  while (end < e.where().size() && e.where()[end] >= '0' && e.where()[end] <= '9' && n < (1u << 30))
    n = n * 10 + static_cast<uint64_t>(e.where()[end++] - '0');
  if (end == prefix.size() || n >= origin.size()) return e;
  const RankOrigin o = origin[n];
  return Error(e.kind(), e.code(), prefix + std::to_string(o.instruction) + e.where().substr(end),
               e.message() + " (on rank " + std::to_string(o.rank) + ")")
      .with_detail(e.detail());
}

void refuse_ranks_on_gpu(uint32_t ranks) {
  if (ranks > 1)
    throw Error(ErrorKind::device, "device.ranks", "/launch/ranks",
                "a program with " + std::to_string(ranks) +
                    " ranks runs on the CPU backend (--backend cpu); its GPU path across devices "
                    "is not built yet");
}

RankExpansion expand_ranks(const Program& p) {
  if (p.launch.ranks <= 1) {
    RankExpansion x;
    x.program = p;
    x.buffers_per_rank = static_cast<uint32_t>(p.buffers.size());
    for (uint32_t i = 0; i < p.instructions.size(); ++i) x.origin.push_back({i, 0});
    return x;
  }
  return Expander(p).run();
}

}  // namespace amk
