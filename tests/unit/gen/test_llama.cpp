// amk gen llama: the generated decode-step program (structure, counts, byte totals, options,
// safetensors weights) and, where the ops exist, a CPU run of the tiny preset.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

#include "backend/cpu_backend.hpp"
#include "backend/host_data.hpp"
#include "backend/tolerance.hpp"
#include "core/error.hpp"
#include "gen/llama.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"
#include "plan/plan.hpp"
#include "verify/verify.hpp"
#include "common/files.hpp"

using namespace amk;
namespace fs = std::filesystem;

namespace {

std::map<std::string, uint64_t> count_ops(const Program& p) {
  std::map<std::string, uint64_t> m;
  for (const auto& in : p.instructions) ++m[op_name(p, in.op)];
  return m;
}

struct Bytes {
  uint64_t weights = 0, kv = 0;
};
Bytes byte_totals(const Program& p) {
  Bytes b;
  for (const auto& buf : p.buffers) {
    if (buf.name.rfind("amk.kv.", 0) == 0)
      b.kv += buf.bytes();
    else if (buf.name.rfind("model.", 0) == 0 || buf.name == "lm_head.weight")
      b.weights += buf.bytes();
  }
  return b;
}

// Weight bytes from the model's shape (bf16): embedding, per layer 2 norms + q,k,v,o + 3 MLP
// matrices, the final norm, and an untied lm_head.
uint64_t weight_formula(const gen::LlamaConfig& c) {
  const uint64_t H = c.hidden, Q = uint64_t{c.heads} * c.head_dim,
                 KV = uint64_t{c.kv_heads} * c.head_dim, F = c.ffn, V = c.vocab;
  const uint64_t per_layer = 2 * H + Q * H + 2 * KV * H + H * Q + 3 * F * H;
  return 2 * (V * H + c.layers * per_layer + H + (c.tied_embeddings ? 0 : V * H));
}

// Two programs of the same step run on the CPU backend: their buffers, by name.
struct CpuPair {
  HostBuffers a, b;
  const Program &pa, &pb;
  CpuPair(const Program& x, const Program& y)
      : a(materialize_all(x)), b(materialize_all(y)), pa(x), pb(y) {
    run_cpu(pa, make_plan(pa), a);
    run_cpu(pb, make_plan(pb), b);
  }
  static uint32_t find(const Program& prog, const std::string& name) {
    for (uint32_t i = 0; i < prog.buffers.size(); ++i)
      if (prog.buffers[i].name == name) return i;
    FAIL("no buffer " << name);
    return 0u;
  }
  const std::vector<std::byte>& in_a(const std::string& n) const { return a.data[find(pa, n)]; }
  const std::vector<std::byte>& in_b(const std::string& n) const { return b.data[find(pb, n)]; }
  // ||a - b|| / ||b|| of an f32 buffer (REQUIREs equal sizes and a nonzero b).
  double rel_diff(const std::string& n) const {
    const auto& x = in_a(n);
    const auto& y = in_b(n);
    REQUIRE(x.size() == y.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size() / 4; ++i) {
      float u = 0, v = 0;
      std::memcpy(&u, x.data() + 4 * i, 4);
      std::memcpy(&v, y.data() + 4 * i, 4);
      num += (double(u) - v) * (double(u) - v);
      den += double(v) * v;
    }
    REQUIRE(den > 0);
    return std::sqrt(num / den);
  }
};

bool have_llama_ops() {
  return find_op("rope") && find_op("kv_append") && find_op("attention_decode") &&
         find_op("attention_combine");
}

ErrorKind kind_of(const std::function<void()>& f, std::string* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.kind();
  }
  FAIL("no error thrown");
  return ErrorKind::internal;
}

// Each change of `o` gives a layout without meaning beside o's: refused as usage.gen.layout.
void check_layout_refused(const gen::LlamaOptions& o,
                          std::initializer_list<std::function<void(gen::LlamaOptions&)>> changes) {
  for (const auto& change : changes) {
    gen::LlamaOptions b = o;
    change(b);
    std::string code;
    CHECK(kind_of([&] { (void)gen::resolve_llama(b); }, &code) == ErrorKind::usage);
    CHECK(code == "usage.gen.layout");
  }
}

}  // namespace

TEST_CASE("presets") {
  const auto one = gen::llama_preset("llama-3.2-1b");
  REQUIRE(one);
  CHECK(one->hidden == 2048);
  CHECK(one->tied_embeddings);
  CHECK(weight_formula(*one) == 2471628800ull);  // the 2.47 GB of BENCH.md
  const auto eight = gen::llama_preset("llama-3.1-8b");
  REQUIRE(eight);
  CHECK(!eight->tied_embeddings);
  CHECK(eight->rope_factor == 8.0);
  CHECK(weight_formula(*eight) == 16060522496ull);  // 8.03 B parameters
  CHECK(!gen::llama_preset("llama-4"));
}

TEST_CASE("bad options are rejected") {
  auto gen_with = [](gen::LlamaOptions o) { return [o] { (void)gen::generate_llama(o); }; };
  std::string code;
  gen::LlamaOptions o;
  o.preset = "gpt2";
  CHECK(kind_of(gen_with(o), &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.preset");
  o = {};
  o.layers = 0;
  CHECK(kind_of(gen_with(o), &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.layers");
  o = {};
  o.context = 0;
  CHECK(kind_of(gen_with(o), &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.context");
  o = {};
  o.token = 512;  // tiny vocab is 512
  CHECK(kind_of(gen_with(o), &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.token");
  o.token = -1;
  CHECK(kind_of(gen_with(o), &code) == ErrorKind::usage);
  o = {};
  o.preset = "llama-3.2-1b";
  o.combine_heads = 9;  // more than the preset's 8 kv heads
  CHECK(kind_of([&] { (void)gen::resolve_llama(o); }, &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.combine_heads");
}

TEST_CASE("byte totals of every preset match the formula") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  for (const std::string preset : {"tiny", "llama-3.2-1b", "llama-3.1-8b"}) {
    CAPTURE(preset);
    gen::LlamaOptions o;
    o.preset = preset;
    o.context = 1024;
    const Program p = gen::generate_llama(o);
    const auto c = *gen::llama_preset(preset);
    const Bytes b = byte_totals(p);
    CHECK(b.weights == weight_formula(c));
    CHECK(b.kv == uint64_t{c.layers} * 2 * c.kv_heads * 1024 * c.head_dim * 2);
  }
}

TEST_CASE("tiny: generates, round-trips through JSON and .amkb, verifies") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  gen::LlamaOptions o;
  o.fused = false;
  const Program p = gen::generate_llama(o);
  const Program back = parse_json_program(program_to_json(p));
  CHECK(back == p);
  CHECK(parse_amkb_program(program_to_amkb(p)) == p);
  const VerifySummary s = verify(back);
  CHECK(s.critical_path > 0);
  CHECK(!p.queues);
  CHECK(p.launch.grid == 0);

  // tiny: H 128, 4 heads / 2 kv heads of 32, ffn 256, vocab 512, context 16, split for 132.
  // qkv rows 256 -> chunks of 4: q 32 + k 16 + v 16; o 128/4 = 32; gate+up 512 -> 4: 64 + 64;
  // down 32; lm_head 512 -> 4: 128. Attention: chunks of 8 positions -> 2 per kv head.
  const auto n = count_ops(p);
  CHECK(n.at("embedding") == 1);
  CHECK(n.at("rmsnorm") == 2 * 2 + 1);
  CHECK(n.at("gemv") == 2 * (64 + 32 + 128 + 32) + 128);
  // RoPE inside attention: per kv head, a rope writing the rotated new k row into its cache row
  // and a copy of the new v row; no kv_append.
  CHECK(n.at("rope") == 2 * 2);
  CHECK(n.at("copy") == 2 * 2);
  CHECK(n.count("kv_append") == 0);
  CHECK(n.at("attention_decode") == 2 * 2 * 2);
  CHECK(n.at("attention_combine") == 2 * 2);
  CHECK(n.at("silu_mul") == 2 * 2);  // ffn 256 in two slices of 128 per layer
  CHECK(n.at("argmax") == 4 + 1);    // vocab 512 in 4 slices of 128, then the pick
  CHECK(n.size() == 9);
  uint32_t rotating = 0;
  for (const auto& in : p.instructions)
    if (op_name(p, in.op) == "attention_decode" && in.params.size() > 3 && in.params[3] != 0)
      ++rotating;
  CHECK(rotating == 2 * 2 * 2);  // every chunk rotates q itself

  // Counters: one per produced tensor per layer, each wait asking for all its producers.
  std::vector<uint64_t> signals(p.counters.size(), 0);
  for (const auto& in : p.instructions)
    for (const auto& sg : in.signals) signals[sg.counter] += sg.add;
  for (const auto& in : p.instructions)
    for (const auto& w : in.waits) CHECK(w.value == signals[w.counter]);
}

TEST_CASE("tiny, fused layer: structure, verifies, same logits as the unfused layer on the CPU") {
  gen::LlamaOptions o;
  o.fused = true;
  o.combine_oproj = false;  // combine steps (auto picks the o_proj merge for tiny: see below)
  o.seed = 3;
  o.context = 17;  // chunks of 8 positions: the third holds only the new token (pos 16)
  const Program p = gen::generate_llama(o);
  CHECK(parse_json_program(program_to_json(p)) == p);
  CHECK(parse_amkb_program(program_to_amkb(p)) == p);
  verify(p);
  const auto n = count_ops(p);
  // tiny: qkv 256 rows -> chunks of 4 (q 32 + k 16 + v 16) with the rmsnorm inside; o 32;
  // gate/up as one GLU gemv over 256 rows -> 4: 64; down 32; lm_head 128 with the final norm.
  CHECK(n.at("gemv") == 2 * (64 + 32 + 64 + 32) + 128);
  CHECK(n.count("rmsnorm") == 0);
  CHECK(n.count("silu_mul") == 0);
  CHECK(n.at("rope") == 2 * 2);  // per kv head: the new k row, rotated into its cache row
  CHECK(n.at("copy") == 2 * 2);  // per kv head: the new v row into its cache row
  CHECK(n.count("kv_append") == 0);
  CHECK(n.at("attention_decode") == 2 * 2 * 3);
  uint32_t with_new = 0;
  for (const auto& in : p.instructions)
    if (op_name(p, in.op) == "attention_decode" && in.operands.size() > 4 &&
        in.operands[4].buffer != AMK_NO_BUFFER)
      ++with_new;
  CHECK(with_new == 2 * 2);  // one chunk per kv head per layer takes the new k/v row

  gen::LlamaOptions u = o;
  u.fused = false;
  const Program q = gen::generate_llama(u);
  const CpuPair run(p, q);
  const double diff = run.rel_diff("act.logits");
  // Not bit-identical: the fused attention takes the new token's k/v in f32 from the
  // projections, the unfused one reads them back from the bf16 cache (one row of 17 rounded
  // to bf16, ~4e-3 relative), which moves the logits by ~1e-4 relative.
  CHECK(diff < 1e-3);
  CHECK(diff > 0);  // the two programs did run different code
  CHECK(run.in_a("next_token") == run.in_b("next_token"));
  // Layer 0's caches get the same new row either way (same inputs, same rounding).
  for (const char* cache : {"amk.kv.layers.0.k", "amk.kv.layers.0.v"}) {
    CAPTURE(cache);
    CHECK(run.in_a(cache) == run.in_b(cache));
  }
}

TEST_CASE("tiny, --rope-ops: rope and kv_append before attention, same step on the CPU") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  gen::LlamaOptions o;
  o.fused = false;
  o.rope_ops = true;
  o.seed = 5;
  const Program p = gen::generate_llama(o);
  CHECK(parse_json_program(program_to_json(p)) == p);
  verify(p);
  const auto n = count_ops(p);
  CHECK(n.at("rope") == 2 * 2);       // q and k per layer
  CHECK(n.at("kv_append") == 2 * 2);  // k and v per layer
  CHECK(n.count("copy") == 0);
  CHECK(n.at("attention_decode") == 2 * 2 * 2);
  CHECK(n.at("rmsnorm") == 2 * 2 + 1);
  for (const auto& in : p.instructions)
    if (op_name(p, in.op) == "attention_decode") CHECK(in.params.at(3) == 0);  // theta 0: no RoPE

  gen::LlamaOptions d = o;
  d.rope_ops = false;
  const Program q = gen::generate_llama(d);
  const CpuPair run(p, q);
  const double diff = run.rel_diff("act.logits");
  // The default layer takes the new k/v in f32 from the projections, --rope-ops reads them
  // back from the bf16 cache: close, not identical.
  CHECK(diff < 1e-3);
  CHECK(diff > 0);
  CHECK(run.in_a("next_token") == run.in_b("next_token"));
  // Layer 0's new cache rows come from the same inputs either way.
  for (const char* cache : {"amk.kv.layers.0.k", "amk.kv.layers.0.v"}) {
    CAPTURE(cache);
    CHECK(run.in_a(cache) == run.in_b(cache));
  }

  gen::LlamaOptions both = o;
  both.fused = true;
  CHECK_THROWS_WITH(gen::generate_llama(both), doctest::Contains("unfused layer only"));
}

TEST_CASE("--mlp-act bf16: the GLU output stored in bf16, the step close to the f32 one on the "
          "CPU, and --check's tolerance for the logits loosened to bf16's") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  gen::LlamaOptions o;
  o.mlp_bf16 = true;
  o.seed = 11;
  const Program p = gen::generate_llama(o);
  CHECK(parse_json_program(program_to_json(p)) == p);
  verify(p);
  const gen::LlamaOptions d = [&] {
    gen::LlamaOptions x = o;
    x.mlp_bf16 = false;
    return x;
  }();
  const Program q = gen::generate_llama(d);
  REQUIRE(p.buffers.size() == q.buffers.size());
  uint32_t changed = 0, mlp = 0;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const bool is_mlp = p.buffers[i].name.find(".mlp") != std::string::npos &&
                        p.buffers[i].name.rfind("act.", 0) == 0;
    mlp += is_mlp;
    if (p.buffers[i].dtype != q.buffers[i].dtype) {
      ++changed;
      CHECK(is_mlp);
      CHECK(p.buffers[i].dtype == DType::bf16);
      CHECK(q.buffers[i].dtype == DType::f32);
    }
  }
  CHECK(mlp == 2);  // one a layer
  CHECK(changed == mlp);
  CHECK(p.instructions == q.instructions);  // the same steps over the same operands

  const CpuPair run(p, q);
  const double diff = run.rel_diff("act.logits");
  CHECK(diff > 0);     // rounded on the way
  CHECK(diff < 1e-2);  // to bf16's precision
  CHECK(run.in_a("next_token") == run.in_b("next_token"));

  const uint32_t logits = CpuPair::find(p, "act.logits");
  CHECK(check_tolerances(p)[logits] == doctest::Approx(1e-2));
  CHECK(check_tolerances(q)[logits] == doctest::Approx(1e-4));

  // Only the fused layer.
  check_layout_refused(o, {[](gen::LlamaOptions& b) { b.fused = false; }});
}

TEST_CASE("llama-3.2-1b at context 1024: instruction counts") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  gen::LlamaOptions o;
  o.fused = false;
  o.preset = "llama-3.2-1b";
  o.context = 1024;
  const Program p = gen::generate_llama(o);
  const auto n = count_ops(p);
  // qkv 3072 rows -> 24: q 86 + k 22 + v 22; o 2048 -> 16: 128; gate+up 16384 -> 128: 64 + 64;
  // down 128; lm_head 128256 -> 972: 132. Attention: 64 positions a chunk, 16 per kv head: 128
  // chunks leave 4 of the 132 blocks, so one combine merges two kv heads.
  CHECK(n.at("gemv") == 16 * (130 + 128 + 128 + 128) + 132);
  CHECK(n.at("attention_decode") == 16 * 8 * 16);
  CHECK(n.at("attention_combine") == 16 * 4);
  CHECK(n.at("rmsnorm") == 33);
  CHECK(n.at("rope") == 16 * 8);      // the new k row into its cache row, per kv head
  CHECK(n.at("copy") == 16 * 8);      // the new v row
  CHECK(n.at("silu_mul") == 16 * 8);  // ffn 8192 in 8 slices per layer
  CHECK(n.at("argmax") == 32 + 1);    // 128256 logits in 32 slices of 4008, then the pick
  CHECK(p.instructions.size() == 10983 - 16 * 4);
  verify(p);
  // The bf16 cache rows this step stores are read by no later step of it (nothing waits for
  // them), so --check keeps f32's tolerance for the logits; the same in the default layout.
  CHECK(check_tolerances(p)[CpuPair::find(p, "act.logits")] == doctest::Approx(1e-4));
  gen::LlamaOptions f;
  f.preset = "llama-3.2-1b";
  f.context = 1024;
  const Program fused = gen::generate_llama(f);
  CHECK(check_tolerances(fused)[CpuPair::find(fused, "act.logits")] == doctest::Approx(1e-4));
}

TEST_CASE("llama-3.2-1b: the combines fit the blocks no attention chunk runs on, so none shares "
          "a block with an o_proj gemv; --combine-heads 1 keeps one a kv head") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  gen::LlamaOptions o;
  o.preset = "llama-3.2-1b";
  o.context = 1024;
  o.layers = 2;
  o.combine_oproj = false;  // combine steps (auto: the o_proj gemvs merge, no combines)
  const Program p = gen::generate_llama(o);
  uint32_t combines = 0;
  for (const auto& in : p.instructions) {
    if (op_name(p, in.op) != "attention_combine") continue;
    ++combines;
    CHECK(in.params[1] == 2);                         // kv_heads
    CHECK(in.waits.size() == 2);                      // each kv head's chunk counter
    CHECK(in.operands[1].extent == 2 * 4 * 64);       // out: 2 kv heads x 4 query heads x 64
    CHECK(in.operands[0].extent == 2 * 16 * 4 * 66);  // partials: 2 x 16 chunks x 4 x (64 + 2)
  }
  CHECK(combines == 2 * 4);
  // The list schedule over 132 blocks: no block runs both a combine and an o_proj of a layer.
  const auto queues = build_queues(p, 132);
  for (const std::string layer : {"L0.", "L1."}) {
    CAPTURE(layer);
    uint32_t shared = 0, combine_blocks = 0;
    for (const auto& q : queues) {
      bool has_combine = false, has_o = false;
      for (uint32_t i : q) {
        const std::string& name = p.instructions[i].name;
        has_combine |= name.rfind(layer + "combine.", 0) == 0;
        has_o |= name.rfind(layer + "o_proj.", 0) == 0;
      }
      combine_blocks += has_combine;
      shared += has_combine && has_o;
    }
    CHECK(combine_blocks == 4);
    CHECK(shared == 0);
  }

  o.combine_heads = 1;
  const Program one = gen::generate_llama(o);
  CHECK(count_ops(one).at("attention_combine") == 2 * 8);
  verify(one);
}

TEST_CASE("tiny: combines over two kv heads give the same step on the CPU as one a kv head") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  gen::LlamaOptions o;
  o.context = 40;
  o.combine_heads = 1;  // (combine steps: auto falls back to them with --combine-heads)
  const Program one = gen::generate_llama(o);
  o.combine_heads = 2;
  const Program two = gen::generate_llama(o);
  REQUIRE(count_ops(two).at("attention_combine") * 2 == count_ops(one).at("attention_combine"));
  verify(two);
  const CpuPair r(two, one);
  CHECK(r.rel_diff("act.logits") == 0.0);
  for (uint32_t l = 0; l < 2; ++l) CHECK(r.rel_diff("act.L" + std::to_string(l) + ".attn") == 0.0);
}

TEST_CASE("--combine oproj: one query head a chunk, no combine step, the o_proj gemvs merge "
          "every chunk; same step on the CPU") {
  gen::LlamaOptions o;
  o.seed = 9;
  o.context = 40;
  o.combine_oproj = true;
  const Program p = gen::generate_llama(o);
  verify(p);
  const std::string json = program_to_json(p);
  CHECK(parse_json_program(json) == p);
  CHECK(parse_amkb_program(program_to_amkb(p)) == p);
  gen::LlamaOptions r = o;
  r.combine_oproj = false;
  const Program q = gen::generate_llama(r);
  // gemv's merge params are left out of the JSON where off (the default layout has none).
  const std::string plain = program_to_json(q);
  CHECK(plain.find("\"heads\":") == std::string::npos);
  CHECK(json.find("\"heads\":") != std::string::npos);
  const gen::ResolvedLlama rl = gen::resolve_llama(o);
  const uint32_t hd = rl.cfg.head_dim, heads = rl.cfg.heads, layers = rl.cfg.layers;
  const auto n = count_ops(p);
  CHECK(n.count("attention_combine") == 0);
  REQUIRE(n.at("attention_decode") % (layers * heads) == 0);
  const uint64_t chunks = n.at("attention_decode") / (layers * heads);
  CHECK(chunks > 1);
  std::vector<std::vector<uint32_t>> signalers(p.counters.size());
  for (uint32_t i = 0; i < p.instructions.size(); ++i)
    for (const auto& sg : p.instructions[i].signals) signalers[sg.counter].push_back(i);
  uint32_t merging = 0;
  for (const Instruction& in : p.instructions) {
    CAPTURE(in.name);
    if (op_name(p, in.op) == "attention_decode") CHECK(in.operands[0].extent == hd);
    if (op_name(p, in.op) != "gemv" || in.params[1] == 0) continue;
    ++merging;
    CHECK(in.name.find("o_proj") != std::string::npos);
    CHECK(in.params[1] == hd);
    CHECK(in.params[2] == heads);
    CHECK(in.operands[1].extent == chunks * heads * (hd + 2));
    // Waits for exactly every attention chunk of its layer.
    REQUIRE(in.waits.size() == 1);
    const auto& who = signalers[in.waits[0].counter];
    CHECK(in.waits[0].value == who.size());
    CHECK(who.size() == chunks * heads);
    for (uint32_t w : who) {
      CHECK(op_name(p, p.instructions[w].op) == "attention_decode");
      CHECK(p.instructions[w].operands[3].buffer == in.operands[1].buffer);
      CHECK(p.instructions[w].name.substr(0, 3) == in.name.substr(0, 3));  // "L0." / "L1."
    }
  }
  uint32_t o_proj_rows = 0;  // the default layout's o_proj row ranges: as many merge
  for (const Instruction& in : q.instructions)
    if (in.name.find("o_proj") != std::string::npos) ++o_proj_rows;
  CHECK(merging == o_proj_rows);
  CHECK(merging > 0);
  const CpuPair cpu(p, q);
  CHECK(cpu.rel_diff("act.logits") < 1e-6);
  for (uint32_t l = 0; l < layers; ++l)
    CHECK(cpu.rel_diff("act.L" + std::to_string(l) + ".h") < 1e-6);
  // Refused where it has no meaning.
  check_layout_refused(o, {[](gen::LlamaOptions& b) { b.fused = false; },
                           [](gen::LlamaOptions& b) { b.combine_heads = 2; }});
}

TEST_CASE("--combine auto (the default): the o_proj merge where a query head's chunk fits the "
          "VM's 64 KiB tile, combine steps elsewhere") {
  gen::LlamaOptions o;
  CHECK(gen::resolve_llama(o).combine_oproj);  // tiny
  o.preset = "llama-3.2-1b";
  o.context = 1024;
  CHECK(gen::resolve_llama(o).combine_oproj);  // 4 chunks of 256 positions of 64: 64 KiB
  o.attn_chunks = 2;                           // 512 positions: 128 KiB
  CHECK_FALSE(gen::resolve_llama(o).combine_oproj);
  o.attn_chunks = 0;
  o.combine_heads = 2;  // a steps option: steps
  CHECK_FALSE(gen::resolve_llama(o).combine_oproj);
  o.combine_heads = 0;
  o.fused = false;
  CHECK_FALSE(gen::resolve_llama(o).combine_oproj);
  gen::LlamaOptions e;
  e.preset = "llama-3.1-8b";
  e.context = 1024;  // 256 positions of 128: 128 KiB
  CHECK_FALSE(gen::resolve_llama(e).combine_oproj);
  e.combine_oproj = true;  // asked for: given (its chunks then take attention's streaming pass)
  CHECK(gen::resolve_llama(e).combine_oproj);
  // The generated default 1B step has no attention_combine step.
  o.fused = true;
  o.layers = 1;
  CHECK(count_ops(gen::generate_llama(o)).count("attention_combine") == 0);
}

TEST_CASE("llama-3.2-1b --combine oproj: 128 attention chunks a layer of one head over 256 "
          "positions; 84 steps on the critical path against 100") {
  gen::LlamaOptions o;
  o.preset = "llama-3.2-1b";
  o.context = 1024;
  o.combine_oproj = true;
  const Program p = gen::generate_llama(o);
  const auto n = count_ops(p);
  CHECK(n.at("attention_decode") == 16 * 128);
  CHECK(n.count("attention_combine") == 0);
  for (const Instruction& in : p.instructions)
    if (op_name(p, in.op) == "attention_decode") {
      CHECK(in.operands[0].extent == 64);
      CHECK(in.operands[1].extent <= 256 * 64);
    }
  CHECK(verify(p).critical_path == 84);
  o.combine_oproj = false;
  CHECK(verify(gen::generate_llama(o)).critical_path == 100);
}

TEST_CASE("tiny with a fixed grid writes queues that verify") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  gen::LlamaOptions o;
  o.grid = 8;
  o.context = 40;
  const Program p = gen::generate_llama(o);
  REQUIRE(p.queues);
  CHECK(p.queues->size() == 8);
  CHECK(p.launch.grid == 8);
  verify(parse_json_program(program_to_json(p)));
}

TEST_CASE("weights from safetensors: header checked against the preset") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  amk_test::ScratchDir dir("gen");
  gen::LlamaOptions o;
  const auto r = gen::resolve_llama(o);
  std::vector<gen::TensorSpec> t = gen::llama_tensors(r.cfg, r.context);
  t.resize(t.size() - 2 * r.cfg.layers);  // weights only: the KV prefill stays random
  auto write = [&](const std::vector<gen::TensorSpec>& tensors, const fs::path& path) {
    const auto header = gen::safetensors_header_bytes(tensors, {});
    uint64_t data = 0;
    for (const auto& s : tensors) data += s.elements() * dtype_size(s.dtype);
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), header.size());
    std::string zeros(data, '\0');
    f.write(zeros.data(), zeros.size());
  };
  write(t, dir.path() / "good.safetensors");
  Program p = gen::generate_llama(o);
  gen::use_safetensors(p, gen::read_safetensors_header(dir.path() / "good.safetensors"),
                       "good.safetensors", gen::KvFromFile::when_present);
  for (const auto& b : p.buffers) {
    if (b.name.rfind("model.", 0) == 0 || b.name == "lm_head.weight") {
      CHECK(b.init.kind == InitKind::safetensors);
      CHECK(b.init.tensor == b.name);
    }
    if (b.name.rfind("amk.kv.", 0) == 0) CHECK(b.init.kind == InitKind::random);
  }
  verify(p);

  std::string code;
  auto bad = t;
  bad[2].shape = {64, 100};  // q_proj of layer 0
  write(bad, dir.path() / "bad_shape.safetensors");
  Program p2 = gen::generate_llama(o);
  CHECK(kind_of(
            [&] {
              gen::use_safetensors(
                  p2, gen::read_safetensors_header(dir.path() / "bad_shape.safetensors"),
                  "bad_shape.safetensors", gen::KvFromFile::when_present);
            },
            &code) == ErrorKind::program);
  CHECK(code == "gen.weights.shape");
  auto missing = t;
  missing.pop_back();  // lm_head.weight (tiny is untied)
  write(missing, dir.path() / "missing.safetensors");
  CHECK(kind_of(
            [&] {
              gen::use_safetensors(p2,
                                   gen::read_safetensors_header(dir.path() / "missing.safetensors"),
                                   "missing.safetensors", gen::KvFromFile::when_present);
            },
            &code) == ErrorKind::program);
  CHECK(code == "gen.weights.missing");
  CHECK(kind_of([&] { (void)gen::read_safetensors_header(dir.path() / "nope.safetensors"); }) ==
        ErrorKind::io);
}

TEST_CASE("tiny: --write-weights, then a CPU run from the file matches the random program") {
  if (!have_llama_ops()) {
    MESSAGE("rope / kv_append / attention ops not in the registry yet: skipped");
    return;
  }
  amk_test::ScratchDir dir("gen");
  gen::LlamaOptions o;
  o.seed = 7;
  const auto r = gen::resolve_llama(o);
  const Program random = gen::generate_llama(o);
  Program p = random;
  gen::write_llama_safetensors(p, r, o, dir.path() / "w.safetensors", "w.safetensors", 2);
  const auto header = gen::read_safetensors_header(dir.path() / "w.safetensors");
  CHECK(header.tensors.size() == gen::llama_tensors(r.cfg, r.context).size());
  CHECK(header.metadata.count("amk.config") == 1);
  p.base_dir = dir.path().string();
  verify(p);
  // Same numbers from the file as from the seeded inits.
  for (uint32_t i = 0; i < p.buffers.size(); ++i) {
    if (p.buffers[i].init.kind != InitKind::safetensors) continue;
    CAPTURE(p.buffers[i].name);
    CHECK(materialize_buffer(p, i) == materialize_buffer(random, i));
  }

  HostBuffers a = materialize_all(p), b = materialize_all(random);
  run_cpu(p, make_plan(p), a);
  run_cpu(random, make_plan(random), b);
  uint32_t next = 0, logits = 0;
  for (uint32_t i = 0; i < p.buffers.size(); ++i) {
    if (p.buffers[i].name == "next_token") next = i;
    if (p.buffers[i].name == "act.logits") logits = i;
  }
  CHECK(a.data[logits] == b.data[logits]);
  int32_t tok = -1;
  std::memcpy(&tok, a.data[next].data(), 4);
  CHECK(tok >= 0);
  CHECK(tok < 512);
  float l0 = 0;
  std::memcpy(&l0, a.data[logits].data(), 4);
  CHECK(std::isfinite(l0));
}

TEST_CASE("fused layer, attention synced per kv head: each wait names exactly the writers of "
          "what it reads") {
  for (const char* preset : {"tiny", "llama-3.2-1b"}) {
    CAPTURE(preset);
    gen::LlamaOptions o;
    o.preset = preset;
    o.seed = 5;
    o.layers = 1;
    if (std::string(preset) == "tiny") o.context = 17;
    // Combine steps: with --combine oproj (the default where it fits) a chunk of one query head
    // waits for its kv head's q segment, a superset of its head's writers.
    o.combine_oproj = false;
    const Program p = gen::generate_llama(o);
    verify(p);

    // Writers of each element range, per counter: the instructions that signal it.
    std::vector<std::vector<uint32_t>> signalers(p.counters.size());
    for (uint32_t i = 0; i < p.instructions.size(); ++i)
      for (const auto& sg : p.instructions[i].signals) signalers[sg.counter].push_back(i);
    auto overlaps = [](const Operand& a, const Operand& b) {
      return a.buffer == b.buffer && a.offset < b.offset + b.extent &&
             b.offset < a.offset + a.extent;
    };
    // The instructions of op `op` whose operand `slot` overlaps `r`.
    auto writers_of = [&](const Operand& r, const char* op, uint32_t slot) {
      std::vector<uint32_t> w;
      for (uint32_t i = 0; i < p.instructions.size(); ++i) {
        const Instruction& in = p.instructions[i];
        if (op_name(p, in.op) == op && in.operands.size() > slot && overlaps(in.operands[slot], r))
          w.push_back(i);
      }
      return w;
    };
    // Each operand read through a wait: the wait's counter is signalled by exactly the writers
    // of that operand, and its value is their count.
    auto check_wait = [&](const Instruction& in, const Wait& w, const Operand& read, const char* op,
                          uint32_t slot) {
      CAPTURE(in.name);
      const auto want = writers_of(read, op, slot);
      CHECK_FALSE(want.empty());
      CHECK(signalers[w.counter] == want);
      CHECK(w.value == want.size());
    };
    uint32_t chunks = 0, combines = 0;
    for (const auto& in : p.instructions) {
      const std::string name = op_name(p, in.op);
      if (name == "attention_decode") {
        ++chunks;
        const bool has_new = in.operands[4].buffer != AMK_NO_BUFFER;
        REQUIRE(in.waits.size() == (has_new ? 3u : 1u));
        check_wait(in, in.waits[0], in.operands[0], "gemv", 2);  // q
        if (has_new) {
          check_wait(in, in.waits[1], in.operands[4], "gemv", 2);  // k_new
          check_wait(in, in.waits[2], in.operands[5], "gemv", 2);  // v_new
        }
      } else if (name == "attention_combine") {
        ++combines;
        const uint32_t kv = in.params[1];  // one wait a kv head, for its part of the partials
        REQUIRE(kv >= 1);
        REQUIRE(in.waits.size() == kv);
        for (uint32_t j = 0; j < kv; ++j) {
          Operand part = in.operands[0];
          part.extent /= kv;
          part.offset += j * part.extent;
          check_wait(in, in.waits[j], part, "attention_decode", 3);
        }
      }
    }
    CHECK(chunks > combines);
    CHECK(combines > 1);
  }
}

TEST_CASE("const-weights flag: every attention chunk of the generated decode step") {
  gen::LlamaOptions o;
  o.preset = "tiny";
  const Program p = gen::generate_llama(o);
  const Plan plan = make_plan(p);
  uint32_t chunks = 0, flagged = 0;
  for (uint32_t i = 0; i < p.instructions.size(); ++i) {
    if (p.instructions[i].op != static_cast<uint16_t>(OpId::attention_decode)) continue;
    ++chunks;
    if ((plan.instructions[i].flags & AMK_INS_CONST_WEIGHTS) != 0) ++flagged;
  }
  CHECK(chunks > 0);
  CHECK(flagged == chunks);  // the appends write the new position, which no chunk's view holds
}

TEST_CASE("generation: one launch of prompt + steps - 1 passes at the runtime position") {
  gen::LlamaOptions o;
  o.prompt = {3, 5, 7};
  o.steps = 4;
  o.all_logits = true;
  const gen::ResolvedLlama r = gen::resolve_llama(o);
  CHECK(r.passes == 6);
  CHECK(r.context == 6);
  const Program p = gen::generate_llama(o);
  CHECK(p.launch.passes == 6);
  verify(p);  // the two-pass proof included
  const auto n = count_ops(p);
  CHECK(n.at("feed_token") == 1);
  CHECK(n.at("kv_append") == 2 * 2 * 2);  // k (rotated) and v of 2 kv heads, 2 layers
  CHECK(n.count("rope") == 0);
  CHECK(n.count("copy") == 0);
  const auto find_buffer = [&](const std::string& name) -> const Buffer& {
    for (const Buffer& b : p.buffers)
      if (b.name == name) return b;
    FAIL("no buffer " << name);
    return p.buffers.front();
  };
  CHECK(find_buffer("ids").output);
  CHECK(find_buffer("ids").elements() == 4);
  CHECK(find_buffer("all_logits").elements() == 6 * 512);
  CHECK(find_buffer("prompt").elements() == 3);
  // Every attention chunk and cache append reads the position operand; the embedding waits on
  // the previous pass's feed_token.
  uint32_t positioned = 0, carried = 0;
  for (const Instruction& in : p.instructions) {
    const std::string op = op_name(p, in.op);
    if (op == "attention_decode") positioned += in.operands[6].buffer != AMK_NO_BUFFER;
    if (op == "kv_append") positioned += in.operands[2].buffer != AMK_NO_BUFFER;
    for (const Wait& w : in.waits) carried += w.carried;
    if (op == "embedding") CHECK(in.waits.size() == 1);
  }
  CHECK(positioned == n.at("attention_decode") + n.at("kv_append"));
  CHECK(carried == 1);
  // A longer context keeps the passes; a shorter one than the positions need is refused.
  o.context = 9;
  CHECK(gen::resolve_llama(o).context == 9);
  CHECK(gen::resolve_llama(o).passes == 6);
  std::string code;
  o.context = 5;
  CHECK(kind_of([&] { (void)gen::resolve_llama(o); }, &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.context");
  o = {};
  o.prompt = {1, 512};
  CHECK(kind_of([&] { (void)gen::resolve_llama(o); }, &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.prompt");
  o = {};
  o.steps = 2;
  o.fused = false;
  CHECK(kind_of([&] { (void)gen::resolve_llama(o); }, &code) == ErrorKind::usage);
  CHECK(code == "usage.gen.layout");
}
