#include "gen/llama.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <fstream>
#include <initializer_list>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "ops/registry.hpp"

namespace amk::gen {
namespace {

[[noreturn]] void usage_error(const std::string& code, const std::string& where,
                              const std::string& message) {
  throw Error(ErrorKind::usage, code, where, message);
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
uint64_t round_up(uint64_t a, uint64_t m) { return ceil_div(a, m) * m; }

// Attention chunking of a context of T positions: about `target` instructions, chunks a multiple
// of 8 positions; one a (kv head, chunk), or with one_head (combine_oproj) one a (query head,
// chunk), at most `target` of them. attn_chunks (--attn-chunks) != 0 sets the chunks a head.
struct Chunking {
  uint64_t len = 0, count = 0;  // positions a chunk, chunks a head
};
Chunking attention_chunking(const LlamaConfig& c, uint64_t T, uint64_t target, uint32_t attn_chunks,
                            bool one_head) {
  const uint64_t per_head = attn_chunks != 0 ? attn_chunks
                            : one_head       ? std::max<uint64_t>(1, target / c.heads)
                                             : ceil_div(target, c.kv_heads);
  Chunking k;
  k.len = std::min<uint64_t>(T, std::max<uint64_t>(8, round_up(ceil_div(T, per_head), 8)));
  k.count = ceil_div(T, k.len);
  return k;
}

// Rows per instruction: about `target` instructions over `rows` rows, a multiple of 4.
uint64_t chunk_rows(uint64_t rows, uint64_t target) {
  return std::min<uint64_t>(rows, round_up(ceil_div(rows, std::max<uint64_t>(target, 1)), 4));
}

Operand slice(uint32_t buffer, uint64_t offset, uint64_t extent) {
  return Operand{buffer, offset, extent};
}

// Builds a program instruction by instruction, with operands and params by slot name (encoded
// through the op registry, so the generator follows the registry's signatures).
class Builder {
public:
  explicit Builder(Program& p) : p_(p) {}

  uint32_t buffer(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                  BufferInit init = {}, bool output = false) {
    Buffer b;
    b.name = name;
    b.dtype = dtype;
    b.shape = std::move(shape);
    b.init = std::move(init);
    b.output = output;
    p_.buffers.push_back(std::move(b));
    return static_cast<uint32_t>(p_.buffers.size() - 1);
  }

  Operand whole(uint32_t buffer) const { return Operand{buffer, 0, p_.buffers[buffer].elements()}; }

  uint32_t counter(const std::string& name) {
    p_.counters.push_back(Counter{name});
    return static_cast<uint32_t>(p_.counters.size() - 1);
  }

  uint32_t add(const std::string& name, std::string_view op,
               std::initializer_list<std::pair<std::string_view, Operand>> operands,
               std::initializer_list<std::pair<std::string_view, double>> params,
               std::vector<Wait> waits, std::vector<Signal> signals) {
    const OpSig* sig = find_op(op);
    if (!sig) {
      throw Error(ErrorKind::internal, "gen.op_missing", name,
                  "this amk has no built-in op '" + std::string(op) +
                      "' (the Llama generator needs rope, kv_append, attention_decode and "
                      "attention_combine)");
    }
    Instruction in;
    in.name = name;
    in.op = static_cast<uint16_t>(sig->id);
    for (const auto& slot : sig->operands) {
      Operand o{};
      bool found = false;
      for (const auto& [n, v] : operands)
        if (n == slot.name) {
          o = v;
          found = true;
        }
      if (!found && !slot.optional)
        throw Error(ErrorKind::internal, "gen.operand", name,
                    "op " + std::string(op) + " needs operand " + std::string(slot.name));
      in.operands.push_back(o);
    }
    for (const auto& operand : operands) {
      const auto& n = operand.first;
      const bool known = std::any_of(sig->operands.begin(), sig->operands.end(),
                                     [&](const OperandSig& s) { return s.name == n; });
      if (!known)
        throw Error(ErrorKind::internal, "gen.operand", name,
                    "op " + std::string(op) + " has no operand " + std::string(n));
    }
    for (const auto& ps : sig->params) {
      std::optional<double> value = ps.default_value;
      for (const auto& [n, v] : params)
        if (n == ps.name) value = v;
      if (!value)
        throw Error(ErrorKind::internal, "gen.param", name,
                    "op " + std::string(op) + " needs param " + std::string(ps.name));
      const auto word = encode_param(ps.type, *value);
      if (!word)
        throw Error(ErrorKind::internal, "gen.param", name,
                    "param " + std::string(ps.name) + " out of range");
      in.params.push_back(*word);
    }
    for (const auto& param : params) {
      const auto& n = param.first;
      const bool known = std::any_of(sig->params.begin(), sig->params.end(),
                                     [&](const ParamSig& s) { return s.name == n; });
      if (!known)
        throw Error(ErrorKind::internal, "gen.param", name,
                    "op " + std::string(op) + " has no param " + std::string(n));
    }
    in.waits = std::move(waits);
    in.signals = std::move(signals);
    p_.instructions.push_back(std::move(in));
    return static_cast<uint32_t>(p_.instructions.size() - 1);
  }

  // Queues for a fixed grid: instructions in program order (a topological order), dealt round
  // robin. Every queue is then in topological order, so the program drains whatever the timing
  // (the earliest unfinished instruction is always at the head of its queue).
  std::vector<std::vector<uint32_t>> queues(uint32_t grid) const {
    std::vector<std::vector<uint32_t>> q(grid);
    for (uint32_t i = 0; i < p_.instructions.size(); ++i) q[i % grid].push_back(i);
    return q;
  }

private:
  Program& p_;
};

BufferInit normal_init(uint64_t seed, double mean, double std) {
  BufferInit i;
  i.kind = InitKind::random;
  i.seed = seed;
  i.distribution = Distribution::normal;
  i.a = mean;
  i.b = std;
  return i;
}

BufferInit uniform_init(uint64_t seed, double low, double high) {
  BufferInit i;
  i.kind = InitKind::random;
  i.seed = seed;
  i.distribution = Distribution::uniform;
  i.a = low;
  i.b = high;
  return i;
}

std::string layer_prefix(uint32_t l) { return "model.layers." + std::to_string(l) + "."; }

std::optional<DType> st_dtype(const std::string& s) {
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  if (s == "F32") return DType::f32;
  return std::nullopt;
}

std::string st_name(DType t) {
  switch (t) {
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f32: return "F32";
    case DType::i32: return "I32";
    case DType::u32: return "U32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

uint64_t TensorSpec::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::optional<LlamaConfig> llama_preset(std::string_view name) {
  LlamaConfig c;
  c.preset = std::string(name);
  if (name == "tiny") {
    c.hidden = 128, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 32, c.ffn = 256;
    c.vocab = 512, c.tied_embeddings = false, c.default_context = 16;
    return c;
  }
  if (name == "llama-3.2-1b") {
    c.hidden = 2048, c.layers = 16, c.heads = 32, c.kv_heads = 8, c.head_dim = 64, c.ffn = 8192;
    c.vocab = 128256, c.tied_embeddings = true, c.rope_factor = 32.0;
    return c;
  }
  if (name == "llama-3.1-8b") {
    c.hidden = 4096, c.layers = 32, c.heads = 32, c.kv_heads = 8, c.head_dim = 128, c.ffn = 14336;
    c.vocab = 128256, c.tied_embeddings = false, c.rope_factor = 8.0;
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> llama_preset_names() { return {"tiny", "llama-3.2-1b", "llama-3.1-8b"}; }

std::vector<TensorSpec> llama_tensors(const LlamaConfig& c, uint32_t context, DType kv_dtype) {
  const uint64_t H = c.hidden, Q = uint64_t{c.heads} * c.head_dim,
                 KV = uint64_t{c.kv_heads} * c.head_dim, F = c.ffn;
  std::vector<TensorSpec> t;
  auto add = [&](std::string name, std::vector<uint64_t> shape, TensorRole role) {
    const DType dtype = role == TensorRole::kv_cache ? kv_dtype : DType::bf16;
    t.push_back(TensorSpec{std::move(name), dtype, std::move(shape), role});
  };
  add("model.embed_tokens.weight", {c.vocab, H}, TensorRole::weight);
  for (uint32_t l = 0; l < c.layers; ++l) {
    const std::string p = layer_prefix(l);
    add(p + "input_layernorm.weight", {H}, TensorRole::norm);
    add(p + "self_attn.q_proj.weight", {Q, H}, TensorRole::weight);
    add(p + "self_attn.k_proj.weight", {KV, H}, TensorRole::weight);
    add(p + "self_attn.v_proj.weight", {KV, H}, TensorRole::weight);
    add(p + "self_attn.o_proj.weight", {H, Q}, TensorRole::weight);
    add(p + "post_attention_layernorm.weight", {H}, TensorRole::norm);
    add(p + "mlp.gate_proj.weight", {F, H}, TensorRole::weight);
    add(p + "mlp.up_proj.weight", {F, H}, TensorRole::weight);
    add(p + "mlp.down_proj.weight", {H, F}, TensorRole::weight);
  }
  add("model.norm.weight", {H}, TensorRole::norm);
  if (!c.tied_embeddings) add("lm_head.weight", {c.vocab, H}, TensorRole::weight);
  for (uint32_t l = 0; l < c.layers; ++l) {
    const std::string p = "amk.kv.layers." + std::to_string(l) + ".";
    add(p + "k", {c.kv_heads, context, c.head_dim}, TensorRole::kv_cache);
    add(p + "v", {c.kv_heads, context, c.head_dim}, TensorRole::kv_cache);
  }
  return t;
}

ResolvedLlama resolve_llama(const LlamaOptions& o) {
  auto cfg = o.config ? o.config : llama_preset(o.preset);
  if (!cfg) {
    std::string names;
    for (const auto& n : llama_preset_names()) names += (names.empty() ? "" : ", ") + n;
    usage_error("usage.gen.preset", "--preset",
                "unknown preset '" + o.preset + "' (" + names + ")");
  }
  ResolvedLlama r{*cfg, cfg->default_context};
  if (o.layers) {
    if (*o.layers < 1 || *o.layers > 1024)
      usage_error("usage.gen.layers", "--layers",
                  "layers must be in 1..1024, got " + std::to_string(*o.layers));
    r.cfg.layers = *o.layers;
  }
  if (o.steps > 0 || !o.prompt.empty()) {
    r.prompt = o.prompt.empty() ? std::vector<int64_t>{o.token} : o.prompt;
    r.steps = std::max<uint32_t>(o.steps, 1);
    if (r.prompt.size() > 131072 || r.steps > 131072)
      usage_error("usage.gen.steps", r.steps > 131072 ? "--steps" : "--prompt",
                  "a prompt and steps of at most 131072 tokens each");
    for (size_t i = 0; i < r.prompt.size(); ++i)
      if (r.prompt[i] < 0 || r.prompt[i] >= static_cast<int64_t>(r.cfg.vocab))
        usage_error("usage.gen.prompt", "--prompt",
                    "prompt element " + std::to_string(i) + ": id " + std::to_string(r.prompt[i]) +
                        " is outside the vocabulary 0.." + std::to_string(r.cfg.vocab - 1));
    if (!o.fused)
      usage_error("usage.gen.layout", "--steps",
                  "generation (--steps, --prompt) builds the fused layer; drop --unfused and "
                  "--rope-ops");
    // The last step runs at position prompt + steps - 2; the cache holds every position below.
    const uint64_t need = r.prompt.size() + r.steps - 1;
    r.passes = static_cast<uint32_t>(need);
    r.context = static_cast<uint32_t>(std::max<uint64_t>(need, 1));
    if (o.context && *o.context < need)
      usage_error("usage.gen.context", "--context",
                  "a prompt of " + std::to_string(r.prompt.size()) + " and " +
                      std::to_string(r.steps) + " steps need a cache of " + std::to_string(need) +
                      " positions; --context is " + std::to_string(*o.context));
  }
  if (o.tp < 1 || o.tp > kMaxRanks)
    usage_error("usage.gen.tp", "--tp",
                "tensor-parallel ranks must be in 1.." + std::to_string(kMaxRanks) + ", got " +
                    std::to_string(o.tp));
  for (const auto& [key, n] : {std::pair<const char*, uint32_t>{"num_attention_heads", r.cfg.heads},
                               {"num_key_value_heads", r.cfg.kv_heads},
                               {"intermediate_size", r.cfg.ffn},
                               {"vocab_size", r.cfg.vocab}})
    if (n % o.tp != 0)
      usage_error("usage.gen.tp", "--tp",
                  "--tp " + std::to_string(o.tp) + " splits " + key + " (" + std::to_string(n) +
                      ") over the ranks: it must divide it");
  if (o.kv_dtype != DType::bf16 && o.kv_dtype != DType::f32)
    usage_error("usage.gen.kv_dtype", "--kv-dtype", "the KV caches are bf16 or f32");
  r.kv_dtype = o.kv_dtype;
  if (o.all_logits && r.steps == 0)
    usage_error("usage.gen.steps", "--all-logits", "--all-logits applies to generation (--steps)");
  if (o.eos != -1 && r.steps == 0)
    usage_error("usage.gen.steps", "--eos", "--eos applies to generation (--steps)");
  if (o.eos < -1 || o.eos >= static_cast<int64_t>(r.cfg.vocab))
    usage_error("usage.gen.eos", "--eos",
                "eos id " + std::to_string(o.eos) + " is outside the vocabulary 0.." +
                    std::to_string(r.cfg.vocab - 1) + " (-1: none)");
  if (o.context) {
    if (*o.context < 1 || *o.context > 131072)
      usage_error("usage.gen.context", "--context",
                  "context must be in 1..131072, got " + std::to_string(*o.context));
    r.context = *o.context;
  }
  if (r.cfg.max_position != 0 && r.context > r.cfg.max_position)
    usage_error("usage.gen.context", "--context",
                "context " + std::to_string(r.context) + " exceeds the model's " +
                    std::to_string(r.cfg.max_position) +
                    " positions (config.json max_position_embeddings)");
  if (o.token < 0 || o.token >= static_cast<int64_t>(r.cfg.vocab))
    usage_error("usage.gen.token", "--token",
                "token must be in 0.." + std::to_string(r.cfg.vocab - 1) + ", got " +
                    std::to_string(o.token));
  if (o.fused && o.rope_ops)
    usage_error("usage.gen.layout", "--rope-ops",
                "--rope-ops applies to the unfused layer only; the fused one has RoPE inside "
                "attention");
  if (o.grid > kMaxQueues)
    usage_error("usage.gen.grid", "--grid", "grid must be in 1.." + std::to_string(kMaxQueues));
  const LlamaConfig rank = rank_config(r.cfg, o.tp);  // (the whole config without --tp)
  if (o.combine_heads > rank.kv_heads)
    usage_error("usage.gen.combine_heads", "--combine-heads",
                "combine-heads must be in 0.." + std::to_string(rank.kv_heads) +
                    " (the preset's kv heads" + (o.tp > 1 ? std::string(" a rank") : "") +
                    "; 0: chosen for the grid), got " + std::to_string(o.combine_heads));
  const bool oproj_allowed = o.fused && o.combine_heads == 0;
  if (o.combine_oproj.value_or(false) && !oproj_allowed)
    usage_error("usage.gen.layout", "--combine",
                "--combine oproj applies to the fused layer without --combine-heads (the o_proj "
                "gemvs merge every chunk themselves)");
  if (o.combine_oproj) {
    r.combine_oproj = *o.combine_oproj;
  } else if (oproj_allowed) {
    // auto: where each (query head, chunk) fits the VM's 64 KiB tile (codegen's large tile) and
    // the chunks are at most the split target (the chunking generate_llama uses).
    const uint64_t target = o.grid ? o.grid : kDefaultSplitTarget;
    const uint64_t hd = r.cfg.head_dim;
    const Chunking k = attention_chunking(rank, r.context, target, o.attn_chunks, true);
    r.combine_oproj = hd % 8 == 0 && hd <= 256 && 4 * k.len * hd <= 65536 &&
                      uint64_t{rank.heads} * k.count <= target;
  }
  if (o.mlp_bf16 && !o.fused)
    usage_error("usage.gen.layout", "--mlp-act",
                "--mlp-act bf16 applies to the fused layer only (the unfused one's silu_mul "
                "writes the MLP activation in f32)");
  return r;
}

LlamaConfig rank_config(const LlamaConfig& cfg, uint32_t tp) {
  LlamaConfig c = cfg;
  c.heads /= tp;
  c.kv_heads /= tp;
  c.ffn /= tp;
  return c;
}

const std::vector<uint64_t>& tensor_shape(const Buffer& b) {
  return b.rank_inits.empty() || b.rank_inits[0].window_of.empty() ? b.shape
                                                                   : b.rank_inits[0].window_of;
}

void set_file_init(Buffer& b, const BufferInit& init) {
  for (BufferInit& each : b.rank_inits) {
    BufferInit w = init;
    w.window_of = each.window_of;
    w.window_at = each.window_at;
    each = std::move(w);
  }
  b.init = b.rank_inits.empty() ? init : b.rank_inits[0];
}

Program generate_llama(const LlamaOptions& o) {
  const ResolvedLlama r = resolve_llama(o);
  const LlamaConfig& whole = r.cfg;
  const LlamaConfig c = rank_config(whole, o.tp);  // one rank's heads and MLP columns
  const uint32_t tp = o.tp;
  const uint64_t T = r.context, pos = T - 1;
  const bool generating = r.steps > 0;  // runtime position, several passes, feed_token
  const uint64_t H = c.hidden, hd = c.head_dim, nkv = c.kv_heads, group = c.heads / c.kv_heads;
  const uint64_t Q = uint64_t{c.heads} * hd, KV = nkv * hd, F = c.ffn, V = c.vocab;
  const uint64_t target = o.grid ? o.grid : kDefaultSplitTarget;

  Program p;
  p.name = "llama_decode_" + c.preset;
  p.description =
      std::string("Llama decode step, batch 1 (amk gen llama ") +
      (o.config ? "--from " : "--preset ") + c.preset + "): hidden " + std::to_string(H) + ", " +
      std::to_string(c.layers) + " layers, " + std::to_string(whole.heads) + " heads / " +
      std::to_string(whole.kv_heads) + " kv heads of " + std::to_string(hd) + ", ffn " +
      std::to_string(whole.ffn) + ", vocab " + std::to_string(V) + ", context " +
      std::to_string(T) + " (new token at position " + std::to_string(pos) + ")" +
      (generating ? std::string("; generation: prompt of ") + std::to_string(r.prompt.size()) +
                        " tokens + " + std::to_string(r.steps) + " new, one pass a token"
                  : std::string()) +
      (r.kv_dtype == DType::f32 ? ". bf16 weights, f32 KV caches, f32 activations"
                                : ". bf16 weights and KV caches, f32 activations") +
      (tp > 1 ? "; tensor parallel over " + std::to_string(tp) +
                    " ranks (heads, kv heads and MLP columns split; o_proj and down all-reduced)"
              : std::string()) +
      (o.mlp_bf16 ? std::string(" (the MLP's in bf16)") : std::string()) + "; " +
      (r.combine_oproj
           ? std::string("attention chunks of one query head, merged by the o_proj gemvs; ")
           : std::string()) +
      (o.fused      ? std::string("fused layer.")
       : o.rope_ops ? std::string("unfused layer, rope and kv_append ops.")
                    : std::string("unfused layer, RoPE inside attention."));
  p.launch.grid = o.grid;
  p.launch.passes = r.passes;
  p.launch.ranks = tp;
  Builder b(p);

  // Rank 0 alone, or every other rank (--tp).
  auto rank_list = [tp](bool first) {
    std::vector<uint32_t> ranks;
    for (uint32_t rank = first ? 0 : 1; rank < (first ? 1 : tp); ++rank) ranks.push_back(rank);
    return ranks;
  };

  // ---- weights and caches (seeded random; use_safetensors may repoint them) ----
  // With --tp, a tensor the ranks split is a window of the whole tensor for each rank: the
  // dimension the split shrinks, at rank * its share (the same elements the whole tensor's
  // seeded fill has there).
  const std::vector<TensorSpec> tensors = llama_tensors(c, static_cast<uint32_t>(T), r.kv_dtype);
  const std::vector<TensorSpec> wholes = llama_tensors(whole, static_cast<uint32_t>(T), r.kv_dtype);
  std::map<std::string, uint32_t> buf;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    const uint64_t seed = o.seed * 100003 + i + 1;
    BufferInit init = t.role == TensorRole::norm       ? uniform_init(seed, 0.8, 1.2)
                      : t.role == TensorRole::kv_cache ? normal_init(seed, 0.0, 1.0)
                                                       : normal_init(seed, 0.0, 0.02);
    // (an untied head: each rank's rows of the vocabulary; a tied one is the embedding, whole)
    std::vector<uint64_t> shape = t.shape;
    if (tp > 1 && t.name == "lm_head.weight") shape[0] /= tp;
    const uint32_t id = b.buffer(t.name, t.dtype, shape, init);
    buf[t.name] = id;
    if (shape == wholes[i].shape) continue;
    Buffer& split = p.buffers[id];
    for (uint32_t rank = 0; rank < tp; ++rank) {
      BufferInit w = init;
      w.window_of = wholes[i].shape;
      w.window_at.assign(shape.size(), 0);
      for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] != wholes[i].shape[d]) w.window_at[d] = rank * shape[d];
      split.rank_inits.push_back(std::move(w));
    }
    split.init = split.rank_inits[0];
  }
  const uint32_t embed = buf.at("model.embed_tokens.weight");
  const uint32_t lm_head = c.tied_embeddings ? embed : buf.at("lm_head.weight");

  // 32-bit values as a `values` init.
  auto words = [](const std::vector<int64_t>& v) {
    BufferInit init;
    init.kind = InitKind::values;
    init.data.resize(4 * v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const auto w = static_cast<uint32_t>(v[i]);
      std::memcpy(init.data.data() + 4 * i, &w, 4);
    }
    return init;
  };
  const uint32_t token_buf =
      b.buffer("token", DType::i32, {1}, words({generating ? r.prompt[0] : o.token}));
  // Generation: the position of pass 1 (the ops add pass - 1), the prompt, the generated ids.
  constexpr uint32_t kNoBuffer = 0xFFFFFFFFu;
  const uint32_t pos_buf =
      generating ? b.buffer("position", DType::u32, {1}, words({0})) : kNoBuffer;

  auto act = [&](const std::string& name, uint64_t n, bool output = false,
                 DType dtype = DType::f32) {
    return b.buffer("act." + name, dtype, {n}, {}, output);
  };

  // Row-range gemv over a weight matrix: one instruction per chunk of rows. Optional: a residual
  // added to y, an rmsnorm weight applied to x inside the gemv, a second matrix making it a GLU
  // (y = silu(w x) * (w2 x)). Signals: `signal` (unless kUnused), and with `seg` the counter of
  // every segment of `seg_rows` rows the instruction's rows overlap, `need[s]` counting those
  // instructions (so a consumer of one segment waits for its writers only).
  // combine_hd / combine_heads: x is attention partials the gemv merges (gemv's head_dim / heads).
  struct GemvExtras {
    std::optional<uint32_t> residual, norm, w2;
    uint32_t combine_hd = 0, combine_heads = 0;
  };
  constexpr uint32_t kUnused = 0xFFFFFFFFu;  // a buffer or counter a layout does not use
  struct Segments {
    uint64_t seg_rows = 0;
    std::vector<uint32_t> counters;
    std::vector<uint32_t> need;
  };
  // `only`: the ranks that run the rows (default every rank), from row `first` of y and
  // `w_first` of w.
  auto gemv_rows = [&](const std::string& name, uint32_t w, uint64_t rows, uint64_t K,
                       uint64_t chunk, uint32_t x, uint32_t y, GemvExtras e,
                       std::vector<Wait> waits, uint32_t signal, Segments* seg = nullptr,
                       const std::vector<uint32_t>& only = {}, uint64_t first = 0,
                       uint64_t w_first = 0) {
    uint32_t n = 0;
    for (uint64_t r0 = 0; r0 < rows; r0 += chunk, ++n) {
      const uint64_t nr = std::min(chunk, rows - r0);
      const uint64_t row = first + r0, w_row = w_first + r0;
      const Operand none{};
      std::vector<Signal> signals;
      if (signal != kUnused) signals.push_back({signal, 1});
      if (seg != nullptr) {
        for (uint64_t s = r0 / seg->seg_rows; s <= (r0 + nr - 1) / seg->seg_rows; ++s) {
          signals.push_back({seg->counters[s], 1});
          ++seg->need[s];
        }
      }
      // With --tp the rows' sum over the ranks is all-reduced afterwards: rank 0 adds the
      // residual, the other ranks run the same rows without it (`NAME.part`).
      const bool split = tp > 1 && e.residual;
      for (const bool with_residual : {true, false}) {
        if (!with_residual && !split) break;
        const std::string at = name + "." + std::to_string(n) + (with_residual ? "" : ".part");
        const uint32_t in =
            b.add(at, "gemv",
                  {{"w", slice(w, w_row * K, nr * K)},
                   {"x", b.whole(x)},
                   {"y", slice(y, row, nr)},
                   {"residual", e.residual && with_residual ? slice(*e.residual, row, nr) : none},
                   {"norm", e.norm ? b.whole(*e.norm) : none},
                   {"w2", e.w2 ? slice(*e.w2, w_row * K, nr * K) : none}},
                  {{"eps", c.rms_eps},
                   {"head_dim", static_cast<double>(e.combine_hd)},
                   {"heads", static_cast<double>(e.combine_heads)}},
                  waits, signals);
        if (split) p.instructions[in].ranks = rank_list(with_residual);
        if (!only.empty()) p.instructions[in].ranks = only;
      }
    }
    return n;
  };
  // The all-reduce of a vector the ranks each wrote their part of (after `need` signals of
  // `counter`); returns the counter and count that its readers wait for (no --tp: the writers').
  auto all_reduce = [&](const std::string& name, uint32_t x, uint32_t counter,
                        uint32_t need) -> std::pair<uint32_t, uint32_t> {
    if (tp == 1) return {counter, need};
    const uint32_t summed = b.counter(name + ".sum");
    b.add(name + ".all_reduce", "all_reduce", {{"x", b.whole(x)}}, {}, {{counter, need}},
          {{summed, 1}});
    return {summed, 1};
  };

  // Attention chunking (attention_chunking): (kv head, chunk) or (query head, chunk) instructions.
  const Chunking chunking = attention_chunking(c, T, target, o.attn_chunks, r.combine_oproj);
  const uint64_t chunk_len = chunking.len;
  const uint64_t n_chunks = chunking.count;
  // Floats of one chunk's partials: its query heads' rows of hd + 2 (combine_oproj: one head).
  const uint64_t part = (r.combine_oproj ? 1 : group) * (hd + 2);
  // kv heads per attention_combine: 1 while the blocks no attention chunk runs on can take one
  // combine each; else the fewest that fit them (a divisor of the kv heads, at most 8 query heads
  // a combine: one warp each at 256 threads).
  const uint64_t combine_kv = [&]() -> uint64_t {
    if (o.combine_heads != 0) return o.combine_heads;
    const uint64_t free = target > nkv * n_chunks ? target - nkv * n_chunks : 0;
    if (free >= nkv || free == 0) return 1;
    for (uint64_t d = 2; d <= nkv && d * group <= 8; ++d)
      if (nkv % d == 0 && nkv / d <= free) return d;
    return 1;
  }();

  const uint64_t qkv_chunk = chunk_rows(Q + 2 * KV, target);
  const uint64_t o_chunk = chunk_rows(H, target);
  const uint64_t gu_chunk = chunk_rows(2 * F, target);
  const uint64_t glu_chunk = chunk_rows(F, target);  // fused: each row reads gate and up
  const uint64_t down_chunk = chunk_rows(H, target);
  // silu_mul slices: up to 8, of at least 128 elements.
  const uint64_t silu_slices = std::clamp<uint64_t>(F / 128, 1, 8);
  const uint64_t head_chunk = chunk_rows(V / tp, target);  // (--tp: a rank's share)
  // argmax split: up to 32 slices of at least 128 logits on separate blocks, then one argmax
  // over their maxima (one block's pass over a vocabulary is bound by load latency).
  const uint64_t argmax_slices = std::clamp<uint64_t>(V / 128, 1, 32);

  // ---- embedding ----
  uint32_t x = act("x.0", H);
  uint32_t x_ready = b.counter("x.0");
  uint32_t x_need = 1;
  // Generation: each pass's embedding waits for the previous pass's feed_token (its token), and
  // feed_token for every cache append of its pass (so the next pass, which reads those rows,
  // follows them).
  const uint32_t c_feed = generating ? b.counter("feed_token") : 0;
  const uint32_t c_cache = generating ? b.counter("kv_cache") : 0;
  std::vector<Wait> embed_waits;
  // (with --tp: rank 0's sends of the token, each counting 1, or the receive of it, counting
  // tp - 1)
  if (generating) embed_waits.push_back({c_feed, tp > 1 ? tp - 1 : 1, true});
  b.add("embed", "embedding",
        {{"table", b.whole(embed)}, {"ids", b.whole(token_buf)}, {"y", b.whole(x)}}, {},
        std::move(embed_waits), {{x_ready, 1}});

  for (uint32_t l = 0; l < c.layers; ++l) {
    const std::string L = "L" + std::to_string(l) + ".";
    const std::string wp = layer_prefix(l);
    // Buffers and counters only the unfused layout uses (the fused one never names them).
    auto uact = [&](const std::string& name, uint64_t n) {
      return o.fused ? kUnused : act(name, n);
    };
    auto ucounter = [&](const std::string& name) { return o.fused ? kUnused : b.counter(name); };
    // ... and those only the rope-ops layout uses.
    const bool rope_ops = !o.fused && o.rope_ops;
    auto ract = [&](const std::string& name, uint64_t n) {
      return rope_ops ? act(name, n) : kUnused;
    };
    auto rcounter = [&](const std::string& name) { return rope_ops ? b.counter(name) : kUnused; };
    const uint32_t xn = uact(L + "xn", H), q = act(L + "q", Q), k = act(L + "k", KV),
                   v = act(L + "v", KV), qr = ract(L + "q_rope", Q), kr = ract(L + "k_rope", KV),
                   parts = r.combine_oproj ? b.buffer("act." + L + "attn_partials", DType::f32,
                                                      {n_chunks, uint64_t{c.heads}, hd + 2})
                                           : b.buffer("act." + L + "attn_partials", DType::f32,
                                                      {nkv, n_chunks, part}),
                   attn = r.combine_oproj ? kUnused : act(L + "attn", Q), h = act(L + "h", H),
                   hn = uact(L + "hn", H), gate = uact(L + "gate", F), up = uact(L + "up", F),
                   mlp = act(L + "mlp", F, false, o.mlp_bf16 ? DType::bf16 : DType::f32),
                   x_next = act("x." + std::to_string(l + 1), H);
    const uint32_t kc = buf.at("amk.kv.layers." + std::to_string(l) + ".k");
    const uint32_t vc = buf.at("amk.kv.layers." + std::to_string(l) + ".v");
    // Per kv head: the q/k/v gemvs that wrote head g's rows signal sq/sk/sv.counters[g] (need:
    // how many), the chunks of head g signal parts_g[g], so each chunk waits only for its kv
    // head's rows and each combine only for its kv head's chunks. With rope_ops (whose rope and
    // kv_append steps take whole q and k), or when a gemv chunk would overlap too many heads for
    // its signal slots, every head's entry is the layer's counter and need is the gemv's whole
    // instruction count.
    const bool head_sync = !rope_ops && [&] {
      auto overlap = [](uint64_t chunk, uint64_t seg) { return (chunk + seg - 2) / seg + 1; };
      return overlap(qkv_chunk, group * hd) <= AMK_MAX_SIGNALS &&
             overlap(qkv_chunk, hd) <= AMK_MAX_SIGNALS;
    }();
    // The o_proj gemvs merge the partials (LlamaOptions::combine_oproj): every chunk signals c_attn.
    const bool oproj_merge = r.combine_oproj;
    // ... and the layer-wide ones only layer sync uses.
    auto lcounter = [&](const std::string& name) { return head_sync ? kUnused : b.counter(name); };
    const uint32_t c_xn = ucounter(L + "xn"), c_q = lcounter(L + "q"), c_k = lcounter(L + "k"),
                   c_v = lcounter(L + "v"), c_qr = rcounter(L + "q_rope"),
                   c_kr = rcounter(L + "k_rope"), c_kc = b.counter(L + "k_cache"),
                   c_vc = b.counter(L + "v_cache"),
                   c_parts = oproj_merge ? kUnused : lcounter(L + "attn_partials"),
                   c_attn = b.counter(L + "attn"), c_h = b.counter(L + "h"),
                   c_hn = ucounter(L + "hn"), c_gate = ucounter(L + "gate"),
                   c_up = ucounter(L + "up"), c_mlp = b.counter(L + "mlp"),
                   c_x = b.counter("x." + std::to_string(l + 1));

    Segments sq, sk, sv;
    std::vector<uint32_t> parts_g(nkv, c_parts);
    if (head_sync) {
      sq.seg_rows = group * hd;
      sk.seg_rows = sv.seg_rows = hd;
      for (uint64_t g = 0; g < nkv; ++g) {
        const std::string G = std::to_string(g);
        sq.counters.push_back(b.counter(L + "q.head" + G));
        sk.counters.push_back(b.counter(L + "k.head" + G));
        sv.counters.push_back(b.counter(L + "v.head" + G));
        if (!oproj_merge) parts_g[g] = b.counter(L + "attn_partials.head" + G);
      }
      sq.need.assign(nkv, 0);
      sk.need = sq.need;
      sv.need = sq.need;
    }
    // The q/k/v gemvs: with head sync they signal only the per-head counters (c_q, c_k and c_v
    // are then kUnused).
    auto qkv_gemvs = [&](uint32_t xin, GemvExtras e, std::vector<Wait> waits) {
      Segments* segs[3] = {head_sync ? &sq : nullptr, head_sync ? &sk : nullptr,
                           head_sync ? &sv : nullptr};
      const uint32_t nq = gemv_rows(L + "q_proj", buf.at(wp + "self_attn.q_proj.weight"), Q, H,
                                    qkv_chunk, xin, q, e, waits, c_q, segs[0]);
      const uint32_t nk = gemv_rows(L + "k_proj", buf.at(wp + "self_attn.k_proj.weight"), KV, H,
                                    qkv_chunk, xin, k, e, waits, c_k, segs[1]);
      const uint32_t nv = gemv_rows(L + "v_proj", buf.at(wp + "self_attn.v_proj.weight"), KV, H,
                                    qkv_chunk, xin, v, e, std::move(waits), c_v, segs[2]);
      if (!head_sync) {
        sq.counters.assign(nkv, c_q);
        sk.counters.assign(nkv, c_k);
        sv.counters.assign(nkv, c_v);
        sq.need.assign(nkv, nq);
        sk.need.assign(nkv, nk);
        sv.need.assign(nkv, nv);
      }
      return nq;
    };

    const std::initializer_list<std::pair<std::string_view, double>> rope_params = {
        {"head_dim", static_cast<double>(hd)},
        {"position", static_cast<double>(pos)},
        {"theta", c.rope_theta},
        {"scaling_factor", c.rope_factor},
        {"low_freq_factor", c.rope_low_freq},
        {"high_freq_factor", c.rope_high_freq},
        {"original_max_position", static_cast<double>(c.rope_original_max)}};
    const std::initializer_list<std::pair<std::string_view, double>> append_params = {
        {"head_dim", static_cast<double>(hd)},
        {"position", static_cast<double>(pos)},
        {"max_len", static_cast<double>(T)}};

    // One attention_combine per combine_kv kv heads: merges their chunk partials into attn;
    // returns how many.
    auto add_combines = [&]() -> uint32_t {
      uint32_t n = 0;
      for (uint64_t g = 0; g < nkv; g += combine_kv, ++n) {
        const uint64_t kv = std::min(combine_kv, nkv - g);
        std::vector<Wait> waits;
        for (uint64_t j = 0; j < kv && (head_sync || j == 0); ++j)
          waits.push_back(
              {parts_g[g + j], static_cast<uint32_t>(head_sync ? n_chunks : nkv * n_chunks)});
        b.add(L + "combine." + std::to_string(n), "attention_combine",
              {{"partials", slice(parts, g * n_chunks * part, kv * n_chunks * part)},
               {"out", slice(attn, g * group * hd, kv * group * hd)}},
              {{"head_dim", static_cast<double>(hd)}, {"kv_heads", static_cast<double>(kv)}},
              std::move(waits), {{c_attn, 1}});
      }
      return n;
    };

    // The attention output projection h = W_o attn + x, row-range gemvs after the combines (or,
    // with oproj_merge, merging the partials themselves); returns the instructions that signal c_h.
    auto add_o_proj = [&]() -> uint32_t {
      const uint32_t w_o = buf.at(wp + "self_attn.o_proj.weight");
      if (oproj_merge)  // every chunk signals c_attn; x is the partials, merged in the gemv
        return gemv_rows(
            L + "o_proj", w_o, H, Q, o_chunk, parts, h,
            {.residual = x, .combine_hd = static_cast<uint32_t>(hd), .combine_heads = c.heads},
            {{c_attn, static_cast<uint32_t>(uint64_t{c.heads} * n_chunks)}}, c_h);
      const uint32_t nc = add_combines();
      return gemv_rows(L + "o_proj", w_o, H, Q, o_chunk, attn, h, {.residual = x}, {{c_attn, nc}},
                       c_h);
    };

    // Attention with RoPE inside: every chunk rotates q itself, the chunk holding position pos
    // also takes the new token's k/v row straight from the projections (rotating k); the cache
    // rows at pos are written by instructions nothing in the step waits for. q/k/v come from
    // the gemvs of qkv_gemvs (counters and counts per kv head in sq / sk / sv).
    // Generating, the position is the pass's (the position buffer + pass - 1): every chunk spans
    // its whole rows of the cache, attends those below the position and takes the new row when
    // the position falls in it, so every chunk waits for k and v too.
    auto add_attention_with_rope = [&] {
      for (uint64_t g = 0; g < nkv; ++g) {
        for (uint64_t ci = 0; ci < n_chunks; ++ci) {
          const uint64_t t0 = ci * chunk_len, t1 = std::min(t0 + chunk_len, T);
          const bool last = generating || t1 == T;
          const uint64_t cached = generating ? t1 - t0 : last ? pos - t0 : t1 - t0;
          const uint64_t cache_off = (g * T + t0) * hd;
          std::vector<Wait> waits = {{sq.counters[g], sq.need[g]}};
          if (last) {
            waits.push_back({sk.counters[g], sk.need[g]});
            waits.push_back({sv.counters[g], sv.need[g]});
          }
          const Operand none{};
          // One attention_decode over this chunk of kv head g's rows: q (its group of query heads,
          // or one of them) into `out`.
          auto add_chunk = [&](const std::string& name, const Operand& q_op, const Operand& out_op,
                               std::vector<Wait> w, std::vector<Signal> sg) {
            return b.add(name, "attention_decode",
                         {{"q", q_op},
                          {"k", slice(kc, cache_off, cached * hd)},
                          {"v", slice(vc, cache_off, cached * hd)},
                          {"out", out_op},
                          {"k_new", last ? slice(k, g * hd, hd) : none},
                          {"v_new", last ? slice(v, g * hd, hd) : none},
                          {"position", generating ? b.whole(pos_buf) : none}},
                         {{"head_dim", static_cast<double>(hd)},
                          {"scale", 0.0},
                          {"position", generating ? 0.0 : static_cast<double>(pos)},
                          {"theta", c.rope_theta},
                          {"scaling_factor", c.rope_factor},
                          {"low_freq_factor", c.rope_low_freq},
                          {"high_freq_factor", c.rope_high_freq},
                          {"original_max_position", static_cast<double>(c.rope_original_max)},
                          {"start", generating ? static_cast<double>(t0) : 0.0}},
                         std::move(w), std::move(sg));
          };
          if (oproj_merge) {
            // One instruction per query head j of kv head g, its partials at (ci, head) of the
            // chunk-major buffer the o_proj gemvs merge; all signal c_attn.
            for (uint64_t j = 0; j < group; ++j) {
              const uint64_t head = g * group + j;
              add_chunk(L + "attn." + std::to_string(head) + "." + std::to_string(ci),
                        slice(q, head * hd, hd), slice(parts, (ci * c.heads + head) * part, part),
                        waits, {{c_attn, 1}});
            }
            continue;
          }
          add_chunk(L + "attn." + std::to_string(g) + "." + std::to_string(ci),
                    slice(q, g * group * hd, group * hd),
                    slice(parts, (g * n_chunks + ci) * part, part), std::move(waits),
                    {{parts_g[g], 1}});
        }
      }
      // The cache rows at `pos` for the next step, one instruction per kv head writing only
      // that row (so they provably do not touch what this step's attention reads): rope
      // straight into the k cache, a converting copy into the v cache. Nothing waits for them.
      // Generating: kv_append at the pass's position into the head's rows (rotating k), which
      // the verifier proves disjoint from the rows this pass's attention reads; feed_token
      // waits for them.
      for (uint64_t g = 0; g < nkv && generating; ++g) {
        const std::string G = std::to_string(g);
        const Operand head_k = slice(kc, g * T * hd, T * hd),
                      head_v = slice(vc, g * T * hd, T * hd);
        b.add(L + "k_cache." + G, "kv_append",
              {{"x", slice(k, g * hd, hd)}, {"cache", head_k}, {"position", b.whole(pos_buf)}},
              {{"head_dim", static_cast<double>(hd)},
               {"max_len", static_cast<double>(T)},
               {"theta", c.rope_theta},
               {"scaling_factor", c.rope_factor},
               {"low_freq_factor", c.rope_low_freq},
               {"high_freq_factor", c.rope_high_freq},
               {"original_max_position", static_cast<double>(c.rope_original_max)}},
              {{sk.counters[g], sk.need[g]}}, {{c_cache, 1}});
        b.add(L + "v_cache." + G, "kv_append",
              {{"x", slice(v, g * hd, hd)}, {"cache", head_v}, {"position", b.whole(pos_buf)}},
              {{"head_dim", static_cast<double>(hd)}, {"max_len", static_cast<double>(T)}},
              {{sv.counters[g], sv.need[g]}}, {{c_cache, 1}});
      }
      for (uint64_t g = 0; g < nkv && !generating; ++g) {
        const std::string G = std::to_string(g);
        b.add(L + "k_cache." + G, "rope",
              {{"x", slice(k, g * hd, hd)}, {"y", slice(kc, (g * T + pos) * hd, hd)}}, rope_params,
              {{sk.counters[g], sk.need[g]}}, {{c_kc, 1}});
        b.add(L + "v_cache." + G, "copy",
              {{"x", slice(v, g * hd, hd)}, {"y", slice(vc, (g * T + pos) * hd, hd)}}, {},
              {{sv.counters[g], sv.need[g]}}, {{c_vc, 1}});
      }
    };

    if (o.fused) {
      qkv_gemvs(x, {.norm = buf.at(wp + "input_layernorm.weight")}, {{x_ready, x_need}});
      add_attention_with_rope();
      const auto h_ready = all_reduce(L + "h", h, c_h, add_o_proj());
      const uint32_t ng = gemv_rows(L + "gate_up_proj", buf.at(wp + "mlp.gate_proj.weight"), F, H,
                                    glu_chunk, h, mlp,
                                    {.norm = buf.at(wp + "post_attention_layernorm.weight"),
                                     .w2 = buf.at(wp + "mlp.up_proj.weight")},
                                    {{h_ready.first, h_ready.second}}, c_mlp);
      const uint32_t nd = gemv_rows(L + "down_proj", buf.at(wp + "mlp.down_proj.weight"), H, F,
                                    down_chunk, mlp, x_next, {.residual = h}, {{c_mlp, ng}}, c_x);
      x = x_next;
      std::tie(x_ready, x_need) = all_reduce("x." + std::to_string(l + 1), x_next, c_x, nd);
      continue;
    }

    b.add(L + "input_norm", "rmsnorm",
          {{"x", b.whole(x)},
           {"weight", b.whole(buf.at(wp + "input_layernorm.weight"))},
           {"y", b.whole(xn)}},
          {{"eps", c.rms_eps}}, {{x_ready, x_need}}, {{c_xn, 1}});

    const uint32_t nq = qkv_gemvs(xn, {}, {{c_xn, 1}});
    const uint32_t nk = sk.need[0], nv = sv.need[0];  // layer sync whenever rope_ops

    if (!rope_ops) {
      add_attention_with_rope();
    } else {
      b.add(L + "q_rope", "rope", {{"x", b.whole(q)}, {"y", b.whole(qr)}}, rope_params, {{c_q, nq}},
            {{c_qr, 1}});
      b.add(L + "k_rope", "rope", {{"x", b.whole(k)}, {"y", b.whole(kr)}}, rope_params, {{c_k, nk}},
            {{c_kr, 1}});
      b.add(L + "v_append", "kv_append", {{"x", b.whole(v)}, {"cache", b.whole(vc)}}, append_params,
            {{c_v, nv}}, {{c_vc, 1}});
      b.add(L + "k_append", "kv_append", {{"x", b.whole(kr)}, {"cache", b.whole(kc)}},
            append_params, {{c_kr, 1}}, {{c_kc, 1}});

      for (uint64_t g = 0; g < nkv; ++g) {
        for (uint64_t ci = 0; ci < n_chunks; ++ci) {
          const uint64_t t0 = ci * chunk_len, len = std::min(chunk_len, T - t0);
          const uint64_t cache_off = (g * T + t0) * hd;
          b.add(L + "attn." + std::to_string(g) + "." + std::to_string(ci), "attention_decode",
                {{"q", slice(qr, g * group * hd, group * hd)},
                 {"k", slice(kc, cache_off, len * hd)},
                 {"v", slice(vc, cache_off, len * hd)},
                 {"out", slice(parts, (g * n_chunks + ci) * part, part)}},
                {{"head_dim", static_cast<double>(hd)}, {"scale", 0.0}},
                {{c_qr, 1}, {c_kc, 1}, {c_vc, 1}}, {{c_parts, 1}});
        }
      }
    }
    const auto h_ready = all_reduce(L + "h", h, c_h, add_o_proj());
    b.add(L + "post_norm", "rmsnorm",
          {{"x", b.whole(h)},
           {"weight", b.whole(buf.at(wp + "post_attention_layernorm.weight"))},
           {"y", b.whole(hn)}},
          {{"eps", c.rms_eps}}, {{h_ready.first, h_ready.second}}, {{c_hn, 1}});
    const uint32_t ng = gemv_rows(L + "gate_proj", buf.at(wp + "mlp.gate_proj.weight"), F, H,
                                  gu_chunk, hn, gate, {}, {{c_hn, 1}}, c_gate);
    const uint32_t nu = gemv_rows(L + "up_proj", buf.at(wp + "mlp.up_proj.weight"), F, H, gu_chunk,
                                  hn, up, {}, {{c_hn, 1}}, c_up);
    // silu_mul in slices on several blocks: one block's pass over all F elements is bound by
    // its instruction issue (an exp and a division per element), not by the 2F floats it reads.
    const uint64_t silu_len = ceil_div(F, silu_slices);
    uint32_t mlp_need = 0;
    for (uint64_t r0 = 0; r0 < F; r0 += silu_len, ++mlp_need) {
      const uint64_t nr = std::min(silu_len, F - r0);
      b.add(L + "silu_mul." + std::to_string(mlp_need), "silu_mul",
            {{"gate", slice(gate, r0, nr)}, {"up", slice(up, r0, nr)}, {"y", slice(mlp, r0, nr)}},
            {}, {{c_gate, ng}, {c_up, nu}}, {{c_mlp, 1}});
    }
    const uint32_t nd =
        gemv_rows(L + "down_proj", buf.at(wp + "mlp.down_proj.weight"), H, F, down_chunk, mlp,
                  x_next, {.residual = h}, {{c_mlp, mlp_need}}, c_x);
    x = x_next;
    std::tie(x_ready, x_need) = all_reduce("x." + std::to_string(l + 1), x_next, c_x, nd);
  }

  // ---- head ----
  const uint32_t xf = o.fused ? 0xFFFFFFFFu : act("final_norm", H);
  const uint32_t logits = act("logits", V, /*output=*/true);
  const uint32_t next = b.buffer("next_token", DType::i32, {1}, {}, /*output=*/true);
  const uint32_t c_xf = o.fused ? 0xFFFFFFFFu : b.counter("final_norm");
  const uint32_t c_logits = b.counter("logits");
  // With --tp each rank computes its share of the vocabulary's logits (rows rank * V / tp on of
  // the whole head) and sends it to rank 0, which holds the whole logits and takes the argmax.
  const uint32_t c_next = generating ? b.counter("next_token") : 0;
  if (!o.fused)
    b.add("final_norm", "rmsnorm",
          {{"x", b.whole(x)}, {"weight", b.whole(buf.at("model.norm.weight"))}, {"y", b.whole(xf)}},
          {{"eps", c.rms_eps}}, {{x_ready, x_need}}, {{c_xf, 1}});
  const uint64_t Vr = V / tp;
  uint32_t nl = 0;
  for (uint32_t rank = 0; rank < tp; ++rank) {
    const std::string name = tp > 1 ? "lm_head.rank" + std::to_string(rank) : "lm_head";
    const std::vector<uint32_t> only =
        tp > 1 ? std::vector<uint32_t>{rank} : std::vector<uint32_t>{};
    const uint64_t w_row = c.tied_embeddings ? rank * Vr : 0;  // (untied: the rank's rows)
    nl = o.fused ? gemv_rows(name, lm_head, Vr, H, head_chunk, x, logits,
                             {.norm = buf.at("model.norm.weight")}, {{x_ready, x_need}}, c_logits,
                             nullptr, only, rank * Vr, w_row)
                 : gemv_rows(name, lm_head, Vr, H, head_chunk, xf, logits, {}, {{c_xf, 1}},
                             c_logits, nullptr, only, rank * Vr, w_row);
  }
  for (uint32_t rank = 1; rank < tp; ++rank) {
    // (a generation's next token on this rank waits for the send: c_next)
    const std::string R = std::to_string(rank);
    std::vector<Signal> sent;
    if (generating) sent.push_back({c_next, 1});
    const uint32_t send =
        b.add("logits.to_rank0." + R, "send", {{"x", slice(logits, rank * Vr, Vr)}},
              {{"peer", 0.0}}, {{c_logits, nl}}, std::move(sent));
    p.instructions[send].ranks = {rank};
    const uint32_t recv =
        b.add("logits.from_rank" + R, "recv", {{"y", slice(logits, rank * Vr, Vr)}},
              {{"peer", static_cast<double>(rank)}}, {}, {{c_logits, 1}});
    p.instructions[recv].ranks = {0};
  }
  nl += tp - 1;  // (rank 0: its rows and the others' shares)
  const size_t argmax_from = p.instructions.size();
  std::vector<Signal> next_signals;
  if (generating) next_signals.push_back({c_next, 1});
  if (argmax_slices == 1) {
    b.add("argmax", "argmax", {{"x", b.whole(logits)}, {"index", b.whole(next)}}, {},
          {{c_logits, nl}}, next_signals);
  } else {
    // Slice s writes its first maximum (index in the logits via base = its offset, and value);
    // the final argmax picks the first largest value and writes the index stored beside it.
    const uint64_t len = ceil_div(V, argmax_slices);
    const uint32_t part_v = act("argmax_value", argmax_slices);
    const uint32_t part_i = b.buffer("act.argmax_index", DType::i32, {argmax_slices}, {}, false);
    const uint32_t c_part = b.counter("argmax_slices");
    uint32_t parts = 0;
    for (uint64_t r0 = 0; r0 < V; r0 += len, ++parts) {
      const uint64_t nr = std::min(len, V - r0);
      b.add("argmax." + std::to_string(parts), "argmax",
            {{"x", slice(logits, r0, nr)},
             {"index", slice(part_i, parts, 1)},
             {"value", slice(part_v, parts, 1)}},
            {{"base", static_cast<double>(r0)}}, {{c_logits, nl}}, {{c_part, 1}});
    }
    b.add("argmax", "argmax",
          {{"x", slice(part_v, 0, parts)},
           {"index", b.whole(next)},
           {"index_map", slice(part_i, 0, parts)}},
          {}, {{c_part, parts}}, next_signals);
  }
  for (size_t i = argmax_from; i < p.instructions.size() && tp > 1; ++i)
    p.instructions[i].ranks = {0};

  if (generating) {
    // The next pass's token (the prompt's while it lasts, then this argmax), the generated ids,
    // with all_logits every pass's logits, and the end-of-sequence id that ends the launch
    // (-1: none; an input amk generate --eos sets).
    const uint32_t prompt = b.buffer("prompt", DType::i32, {r.prompt.size()}, words(r.prompt));
    const uint32_t ids = b.buffer("ids", DType::i32, {r.steps}, {}, /*output=*/true);
    const uint32_t eos = b.buffer("eos", DType::i32, {1}, words({o.eos}));
    const Operand none{};
    const uint32_t all =
        o.all_logits ? b.buffer("all_logits", DType::f32, {r.passes, V}, {}, true) : kNoBuffer;
    const uint64_t appends = uint64_t{2} * nkv * c.layers;
    // With --tp rank 0 picks each next token (and stops at the eos) and sends it to the other
    // ranks, whose receive stands where their feed would: after their step's argmax and cache
    // appends, before their next embedding. Every rank then reads rank 0's token, and the end
    // of the launch follows one decision. Rank 0's next embedding waits for its sends.
    const uint32_t c_picked = tp > 1 ? b.counter("token_picked") : c_feed;
    const uint32_t feed =
        b.add("feed_token", "feed_token",
              {{"index", b.whole(next)},
               {"prompt", b.whole(prompt)},
               {"token", b.whole(token_buf)},
               {"ids", b.whole(ids)},
               {"logits", o.all_logits ? b.whole(logits) : none},
               {"all_logits", o.all_logits ? b.whole(all) : none},
               {"eos", b.whole(eos)}},
              {}, {{c_next, 1}, {c_cache, static_cast<uint32_t>(appends)}}, {{c_picked, 1}});
    if (tp > 1) {
      p.instructions[feed].ranks = rank_list(true);
      for (uint32_t rank = 1; rank < tp; ++rank) {
        const std::string R = std::to_string(rank);
        const uint32_t send =
            b.add("token.to_rank" + R, "send", {{"x", b.whole(token_buf)}},
                  {{"peer", static_cast<double>(rank)}}, {{c_picked, 1}}, {{c_feed, 1}});
        p.instructions[send].ranks = {0};
        const uint32_t recv =
            b.add("token.from_rank0." + R, "recv", {{"y", b.whole(token_buf)}}, {{"peer", 0.0}},
                  {{c_next, 1}, {c_cache, static_cast<uint32_t>(appends)}}, {{c_feed, tp - 1}});
        p.instructions[recv].ranks = {rank};
      }
    }
  }

  if (o.grid) p.queues = b.queues(o.grid);
  return p;
}

int64_t generation_vocabulary(const Program& p) {
  const auto is = [](const Instruction& in, OpId op) { return in.op == static_cast<uint16_t>(op); };
  for (const Instruction& feed : p.instructions) {
    if (!is(feed, OpId::feed_token) || feed.operands.size() < 3) continue;
    for (const Instruction& e : p.instructions) {
      if (!is(e, OpId::embedding) || e.operands.size() < 3 ||
          e.operands[1].buffer != feed.operands[2].buffer || e.operands[1].extent == 0)
        continue;
      const uint64_t width = e.operands[2].extent / e.operands[1].extent;  // (the verifier's)
      if (width != 0) return static_cast<int64_t>(e.operands[0].extent / width);
    }
  }
  return std::numeric_limits<int64_t>::max();
}

void check_eos_id(const Program& program, int64_t eos, const std::string& where) {
  const int64_t vocab = generation_vocabulary(program);
  if (eos < -1 || eos >= vocab)
    throw Error(ErrorKind::usage, "usage.generate.eos", where,
                "eos id " + std::to_string(eos) + " is outside the vocabulary 0.." +
                    std::to_string(vocab - 1) + " (-1: none)");
}

std::optional<int64_t> program_eos(const Program& program) {
  for (const Buffer& b : program.buffers) {
    if (b.name != "eos") continue;
    const std::optional<int64_t> v = initial_index_value(b, 0);
    return v && *v >= 0 ? v : std::nullopt;
  }
  return std::nullopt;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& file) {
  const std::string where = file.string();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw_io_error("io.missing", where, "weights file does not exist");
  const uint64_t size = std::filesystem::file_size(file, ec);
  if (ec) throw_io_error("io.read", where, "cannot read the weights file: " + ec.message());
  std::ifstream in(file, std::ios::binary);
  if (!in) throw_io_error("io.read", where, "cannot open the weights file");
  unsigned char len_bytes[8] = {};
  if (size < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8))
    throw_program_error("gen.weights.header", where, "file too short for a safetensors header");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = len << 8 | len_bytes[i];
  if (len > 100'000'000 || len > size - 8)
    throw_program_error("gen.weights.header", where,
                        "header length " + std::to_string(len) + " is too large for the file");
  std::string text(len, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(len)))
    throw_io_error("io.read", where, "cannot read the safetensors header");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw_program_error("gen.weights.header", where, "safetensors header is not a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + len;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") {
      if (e.is_object())
        for (const auto& [k, v] : e.items())
          if (v.is_string()) h.metadata[k] = v.get<std::string>();
      continue;
    }
    const std::string w = where + ": tensor '" + name + "'";
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      throw_program_error("gen.weights.header", w, "malformed safetensors entry");
    SafetensorsEntry se;
    se.dtype = e["dtype"].get<std::string>();
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) throw_program_error("gen.weights.header", w, "bad shape");
      se.shape.push_back(d.get<uint64_t>());
    }
    if (!e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
      throw_program_error("gen.weights.header", w, "bad data_offsets");
    se.begin = e["data_offsets"][0].get<uint64_t>();
    se.end = e["data_offsets"][1].get<uint64_t>();
    if (se.begin > se.end || se.end > size - h.data_start)
      throw_program_error("gen.weights.header", w, "data_offsets run past the end of the file");
    h.tensors[name] = std::move(se);
  }
  return h;
}

void use_safetensors(Program& program, const SafetensorsHeader& header,
                     const std::string& program_path, KvFromFile kv) {
  for (Buffer& b : program.buffers) {
    const bool is_weight = b.name.rfind("model.", 0) == 0 || b.name == "lm_head.weight";
    const bool is_kv = b.name.rfind("amk.kv.", 0) == 0;
    if (!is_weight && !(is_kv && kv != KvFromFile::never)) continue;
    const auto it = header.tensors.find(b.name);
    // (when_present: a cache the file has for another context stays seeded random too)
    if (is_kv && kv == KvFromFile::when_present &&
        (it == header.tensors.end() || it->second.shape != tensor_shape(b)))
      continue;
    if (it == header.tensors.end()) {
      throw_program_error("gen.weights.missing", b.name,
                          "the weights file has no tensor '" + b.name + "'");
    }
    b.dtype = check_safetensors_tensor(b, it->second, b.name);
    set_file_init(b, safetensors_init(program_path, b.name));
  }
}

DType check_safetensors_tensor(const Buffer& b, const SafetensorsEntry& e,
                               const std::string& where) {
  const auto dt = st_dtype(e.dtype);
  if (!dt)
    throw_program_error("gen.weights.dtype", where,
                        "tensor '" + b.name + "' has dtype " + e.dtype +
                            "; expected BF16 (F16 and F32 are accepted)");
  const std::vector<uint64_t>& shape = tensor_shape(b);
  if (e.shape != shape)
    throw_program_error("gen.weights.shape", where,
                        "tensor '" + b.name + "' has shape " + shape_text(e.shape) +
                            ", the program needs " + shape_text(shape));
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  if (e.end - e.begin != elements * dtype_size(*dt))
    throw_program_error("gen.weights.shape", where,
                        "tensor '" + b.name + "' spans " + std::to_string(e.end - e.begin) +
                            " bytes, its shape needs " +
                            std::to_string(elements * dtype_size(*dt)));
  return *dt;
}

BufferInit safetensors_init(const std::string& program_path, const std::string& name) {
  BufferInit init;
  init.kind = InitKind::safetensors;
  init.path = program_path;
  init.tensor = name;
  return init;
}

std::string llama_config_json(const ResolvedLlama& r, const LlamaOptions& o) {
  const LlamaConfig& c = r.cfg;
  nlohmann::ordered_json j;
  j["preset"] = c.preset;
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.ffn;
  j["vocab_size"] = c.vocab;
  j["rms_norm_eps"] = c.rms_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = {{"rope_type", c.rope_factor > 0 ? "llama3" : "default"},
                       {"factor", c.rope_factor},
                       {"low_freq_factor", c.rope_low_freq},
                       {"high_freq_factor", c.rope_high_freq},
                       {"original_max_position_embeddings", c.rope_original_max}};
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["context"] = r.context;
  j["position"] = r.context - 1;
  j["token"] = o.token;
  j["seed"] = o.seed;
  return j.dump();
}

std::vector<std::byte> safetensors_header_bytes(
    const std::vector<TensorSpec>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = m;
  }
  uint64_t off = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = t.elements() * dtype_size(t.dtype);
    j[t.name] = {
        {"dtype", st_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + text.size());
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((len >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

}  // namespace amk::gen
