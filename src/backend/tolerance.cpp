#include "backend/tolerance.hpp"

#include <algorithm>

#include "ops/registry.hpp"
#include "verify/verify.hpp"

namespace amk {

double check_tolerance(DType t) noexcept {
  switch (t) {
    case DType::f32: return 1e-4;
    case DType::f16: return 2e-3;
    case DType::bf16: return 1e-2;
    default: return 0.0;
  }
}

std::vector<double> check_tolerances(const Program& program) {
  const size_t nb = program.buffers.size();
  auto float_tol = [&](uint32_t b) {
    return b < nb && dtype_is_float(program.buffers[b].dtype)
               ? check_tolerance(program.buffers[b].dtype)
               : 0.0;
  };
  // Whether operand slot k of an instruction may be written (a custom op declares no access:
  // every slot may, as for the hazard check).
  auto writes = [](const Instruction& ins, size_t k) {
    const OpSig* sig = find_op(ins.op);
    return sig == nullptr || (k < sig->operands.size() && sig->operands[k].access != Access::read);
  };
  // Per instruction: the loosest tolerance of the float buffers it stores.
  const size_t n = program.instructions.size();
  std::vector<double> stores(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Instruction& ins = program.instructions[i];
    for (size_t k = 0; k < ins.operands.size(); ++k)
      if (writes(ins, k)) stores[i] = std::max(stores[i], float_tol(ins.operands[k].buffer));
  }
  // Carried along the counter dependencies: `before[v]`, the loosest store of anything v waits
  // for; an instruction passes on max(before, its own stores), a join node `before`.
  const DependencyGraph g = build_dependency_graph(program, nullptr);
  std::vector<double> before(g.n_nodes, 0.0), after(g.n_nodes, 0.0);
  for (uint32_t v : g.topo) {
    for (uint32_t e = g.pred_offsets[v]; e < g.pred_offsets[v + 1]; ++e)
      before[v] = std::max(before[v], after[g.preds[e]]);
    after[v] = v < g.n_instructions ? std::max(before[v], stores[v]) : before[v];
  }
  std::vector<double> tol(nb, 0.0);
  for (size_t b = 0; b < nb; ++b) tol[b] = check_tolerance(program.buffers[b].dtype);
  for (size_t i = 0; i < n; ++i) {
    const Instruction& ins = program.instructions[i];
    for (size_t k = 0; k < ins.operands.size(); ++k) {
      const uint32_t b = ins.operands[k].buffer;
      if (writes(ins, k) && b < nb && dtype_is_float(program.buffers[b].dtype))
        tol[b] = std::max(tol[b], before[i]);
    }
  }
  return tol;
}

}  // namespace amk
