#include "backend/check_inputs.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "backend/init_sources.hpp"
#include "ops/registry.hpp"
#include "verify/verify.hpp"

namespace amk {

namespace {

// The poison's bytes for dtype t (little endian), and its size; 0 for a dtype never poisoned.
size_t poison_pattern(DType t, std::byte* out) noexcept {
  uint64_t v = 0;
  size_t n = 0;
  switch (t) {
    case DType::f32:
      v = 0x7FA5A5A5u;
      n = 4;
      break;
    case DType::f16:
      v = 0x7DA5u;
      n = 2;
      break;
    case DType::bf16:
      v = 0x7FA5u;
      n = 2;
      break;
    case DType::i32:
    case DType::u32:
      v = 0xA5A5A5A5u;
      n = 4;
      break;
    case DType::i64:
      v = 0xA5A5A5A5A5A5A5A5ull;
      n = 8;
      break;
    default: return 0;  // u8: every byte value is a plausible result
  }
  for (size_t k = 0; k < n; ++k) out[k] = static_cast<std::byte>((v >> (8 * k)) & 0xFFu);
  return n;
}

// Readers whose ancestors are searched, times the graph's size, beyond which a buffer's reads are
// not proven covered (it keeps its zeros): a bound on the work, far above a decode step's.
constexpr uint64_t kMaxCoverageWork = uint64_t{1} << 28;

}  // namespace

uint32_t reseed_random_inits(Program& program, uint64_t reseed) noexcept {
  uint32_t n = 0;
  for (Buffer& b : program.buffers)
    if (b.init.kind == InitKind::random) {
      b.init.seed = random_bits(reseed, b.init.seed);
      ++n;
    }
  return n;
}

std::vector<bool> poisonable_outputs(const Program& program) {
  const size_t nb = program.buffers.size();
  std::vector<bool> ok(nb, false);
  std::byte pattern[8];
  for (size_t b = 0; b < nb; ++b) {
    const Buffer& buf = program.buffers[b];
    ok[b] =
        buf.output && buf.init.kind == InitKind::zeros && poison_pattern(buf.dtype, pattern) != 0;
  }
  struct View {
    uint32_t ins;
    uint64_t begin, end;
  };
  std::vector<std::vector<View>> readers(nb), writers(nb);
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& ins = program.instructions[i];
    const OpSig* sig = find_op(ins.op);
    for (size_t k = 0; k < ins.operands.size(); ++k) {
      const Operand& o = ins.operands[k];
      if (o.buffer >= nb || !ok[o.buffer]) continue;
      const View v{i, o.offset, o.offset + o.extent};
      if (sig == nullptr || k >= sig->operands.size())
        ok[o.buffer] = false;  // a custom op: no declared access
      else if (ins.op == static_cast<uint16_t>(OpId::kv_append) &&
               sig->operands[k].access == Access::write)
        ok[o.buffer] = false;  // writes one position of its cache view and keeps the others
      else if (sig->operands[k].access == Access::write)
        writers[o.buffer].push_back(v);
      else if (sig->operands[k].access == Access::read)
        readers[o.buffer].push_back(v);
      else
        ok[o.buffer] = false;  // read_write: the initial zeros are part of the result
    }
  }
  uint64_t n_readers = 0;
  for (size_t b = 0; b < nb; ++b)
    if (ok[b]) n_readers += readers[b].size();
  if (n_readers == 0) return ok;

  // A read is covered when the writes of the instructions it follows through the counters span
  // its view (queue order is not counted: fewer buffers poisoned, never a wrong one).
  const DependencyGraph g = build_dependency_graph(program, nullptr);
  const uint64_t size = uint64_t{g.n_nodes} + g.preds.size();
  if (size != 0 && n_readers > kMaxCoverageWork / size) {
    for (size_t b = 0; b < nb; ++b)
      if (!readers[b].empty()) ok[b] = false;
    return ok;
  }
  std::vector<uint32_t> seen(g.n_nodes, 0), stack;
  uint32_t walk = 0;  // seen[v] == walk: v is r or precedes it
  for (size_t b = 0; b < nb; ++b) {
    for (const View& r : readers[b]) {
      if (!ok[b]) break;
      // The instructions r follows: a walk back over the predecessors.
      ++walk;
      stack.assign(1, r.ins);
      seen[r.ins] = walk;
      std::vector<std::pair<uint64_t, uint64_t>> spans;
      while (!stack.empty()) {
        const uint32_t v = stack.back();
        stack.pop_back();
        for (uint32_t e = g.pred_offsets[v]; e < g.pred_offsets[v + 1]; ++e) {
          const uint32_t u = g.preds[e];
          if (seen[u] == walk) continue;
          seen[u] = walk;
          stack.push_back(u);
        }
      }
      for (const View& w : writers[b])
        if (w.ins != r.ins && seen[w.ins] == walk) spans.emplace_back(w.begin, w.end);
      std::sort(spans.begin(), spans.end());
      uint64_t reach = r.begin;
      for (const auto& [s, e] : spans) {
        if (s > reach) break;
        reach = std::max(reach, e);
      }
      if (reach < r.end) ok[b] = false;
    }
  }
  return ok;
}

void poison_buffers(const Program& program, const std::vector<bool>& which, HostBuffers& data) {
  std::byte pattern[8];
  for (size_t b = 0; b < program.buffers.size() && b < which.size(); ++b) {
    if (!which[b]) continue;
    const size_t n = poison_pattern(program.buffers[b].dtype, pattern);
    std::vector<std::byte>& bytes = data.data[b];
    for (size_t at = 0; n != 0 && at + n <= bytes.size(); at += n)
      std::memcpy(bytes.data() + at, pattern, n);
  }
}

bool is_poison(DType t, const std::byte* base, uint64_t i) noexcept {
  std::byte pattern[8];
  const size_t n = poison_pattern(t, pattern);
  return n != 0 && std::memcmp(base + i * n, pattern, n) == 0;
}

PoisonDiff compare_poison(DType t, const std::vector<std::byte>& run,
                          const std::vector<std::byte>& ref, uint64_t elements) {
  PoisonDiff d;
  std::byte pattern[8];
  const size_t n = poison_pattern(t, pattern);
  if (n == 0) return d;
  for (uint64_t i = 0; i < elements; ++i) {
    const bool a = std::memcmp(run.data() + i * n, pattern, n) == 0;
    const bool b = std::memcmp(ref.data() + i * n, pattern, n) == 0;
    if (a == b) continue;
    ++(a ? d.unwritten : d.extra);
    d.first = std::min(d.first, i);
  }
  return d;
}

uint64_t clear_poison(const Program& program, const std::vector<bool>& which, HostBuffers& data) {
  uint64_t cleared = 0;
  for (size_t b = 0; b < program.buffers.size() && b < which.size(); ++b) {
    if (!which[b]) continue;
    std::byte pattern[8];
    const size_t n = poison_pattern(program.buffers[b].dtype, pattern);
    std::vector<std::byte>& bytes = data.data[b];
    for (size_t at = 0; n != 0 && at + n <= bytes.size(); at += n)
      if (std::memcmp(bytes.data() + at, pattern, n) == 0) {
        std::memset(bytes.data() + at, 0, n);
        ++cleared;
      }
  }
  return cleared;
}

std::string buffer_names(const Program& program, const std::vector<bool>& which) {
  std::string s;
  for (size_t b = 0; b < program.buffers.size() && b < which.size(); ++b)
    if (which[b]) s += (s.empty() ? "" : ", ") + program.buffers[b].name;
  return s;
}

}  // namespace amk
