// amk gen llama: generates a whole Llama decode step (batch 1) as one program (src/gen/).
// Weights are seeded random (`random` inits: the file stays small), read from a .safetensors
// file with Hugging Face names (--weights), written to one together with the KV prefill
// (--write-weights) so that other implementations can run the same numbers, or taken with the
// shape from a Hugging Face checkpoint folder (--from). The program is
// verified (hazards included) before it is written atomically as .json or .amkb.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <spdlog/spdlog.h>

#include "cli/common.hpp"
#include "cli/gen_llama.hpp"
#include "core/error.hpp"
#include "gen/checkpoint.hpp"
#include "gen/llama.hpp"
#include "ops/registry.hpp"
#include "report/outputs.hpp"

namespace amk::cli {
namespace {

namespace fs = std::filesystem;

// --prompt's ids: a comma- or space-separated list, or a file holding one (a JSON array of
// integers reads the same). Each id is a non-negative integer; the vocabulary bound is checked
// with the model's shape (usage.gen.prompt).
std::vector<int64_t> parse_prompt(const std::string& arg) {
  std::string text = arg;
  std::string where = "--prompt";
  std::error_code ec;
  if (!arg.empty() && fs::is_regular_file(arg, ec)) {
    where = arg;
    const uint64_t size = fs::file_size(arg, ec);
    if (ec || size > (uint64_t{16} << 20))
      throw Error(ErrorKind::usage, "usage.gen.prompt", where,
                  "a prompt file holds at most 16 MiB of ids");
    std::ifstream in(arg, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    if (!in) throw_io_error("io.read", where, "cannot read the prompt file");
    text = all.str();
  }
  std::vector<int64_t> ids;
  size_t i = 0;
  auto is_sep = [](char ch) {
    return ch == ',' || ch == '[' || ch == ']' || std::isspace(static_cast<unsigned char>(ch));
  };
  while (i < text.size()) {
    if (is_sep(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_sep(text[j])) ++j;
    const std::string tok = text.substr(i, j - i);
    int64_t v = 0;
    const bool digits =
        !tok.empty() && tok.size() <= 18 &&
        std::all_of(tok.begin(), tok.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!digits)
      throw Error(ErrorKind::usage, "usage.gen.prompt", where,
                  "prompt element " + std::to_string(ids.size()) + " is '" + tok +
                      "', not a token id (ids are non-negative integers, separated by commas or "
                      "spaces)" +
                      (where == "--prompt" && tok == arg ? "; nor is it a file of ids" : ""));
    v = std::stoll(tok);
    ids.push_back(v);
    i = j;
  }
  if (ids.empty())
    throw Error(ErrorKind::usage, "usage.gen.prompt", where, "the prompt holds no token ids");
  return ids;
}

// The data path as the program stores it: relative to the output's folder.
std::string program_relative(const fs::path& data, const fs::path& output, bool allow_outside) {
  const fs::path dir = fs::weakly_canonical(fs::absolute(output)).parent_path();
  const fs::path abs = fs::weakly_canonical(fs::absolute(data));
  fs::path rel = abs.lexically_relative(dir);
  if (rel.empty()) rel = abs;
  const std::string text = rel.generic_string();
  if (text.rfind("..", 0) == 0) {
    if (!allow_outside)
      throw Error(ErrorKind::usage, "usage.gen.path", data.string(),
                  "the weights file lies outside the program's folder (" + dir.string() +
                      "); move it there, or pass --allow-outside (then `amk run` needs it too)");
    return abs.generic_string();
  }
  return text;
}

// --from gives the shape and the weights: --preset, --weights and --write-weights would too.
void check_from(const GenLlamaOptions& o) {
  if (o.from.empty()) return;
  const char* other = o.preset_given             ? "--preset"
                      : !o.weights.empty()       ? "--weights"
                      : !o.write_weights.empty() ? "--write-weights"
                                                 : nullptr;
  if (other)
    throw Error(ErrorKind::usage, "usage.gen.from", other,
                std::string("--from and ") + other +
                    " exclude each other (the checkpoint gives the shape and the weights)");
}

}  // namespace

GenOutcome write_llama_program(GenLlamaOptions o) {
  std::string to = o.to;
  if (to.empty()) {
    const std::string ext = fs::path(o.output).extension().string();
    if (ext == ".amkb")
      to = "amkb";
    else if (ext == ".json")
      to = "json";
    else
      throw Error(ErrorKind::usage, "usage.gen.format", o.output,
                  "cannot tell the output encoding from the extension; use .json, .amkb or --to");
  }
  check_from(o);
  if (!o.weights.empty() && !o.write_weights.empty())
    throw Error(ErrorKind::usage, "usage.gen.weights", "--weights",
                "--weights and --write-weights exclude each other");
  if (o.fused && o.unfused)
    throw Error(ErrorKind::usage, "usage.gen.layout", "--unfused",
                "--fused and --unfused exclude each other");
  // The fused layer is the default; --unfused and --rope-ops ask for the unfused one (with
  // --fused, --rope-ops is refused by resolve_llama, naming the flag).
  o.gen.fused = o.fused || !(o.unfused || o.gen.rope_ops);
  o.gen.mlp_bf16 = o.mlp_act == "bf16";
  if (o.combine != "auto") o.gen.combine_oproj = o.combine == "oproj";
  o.gen.layers = o.layers;
  o.gen.context = o.context;
  if (!o.prompt.empty()) o.gen.prompt = parse_prompt(o.prompt);
  o.gen.kv_dtype = o.kv_dtype == "f32" ? DType::f32 : DType::bf16;
  o.gen.eos = o.eos.value_or(-1);
  std::optional<gen::HfCheckpoint> ckpt;
  if (!o.from.empty()) {
    ckpt = gen::read_hf_checkpoint(o.from);
    o.gen.config = ckpt->cfg;
  }
  const gen::ResolvedLlama r = gen::resolve_llama(o.gen);
  Program p = gen::generate_llama(o.gen);

  std::string weights_source = "random";
  if (ckpt) {
    gen::use_hf_checkpoint(p, *ckpt, [&](const fs::path& file) {
      return program_relative(file, o.output, o.allow_outside);
    });
    weights_source = o.from;
  } else if (!o.weights.empty()) {
    const auto header = gen::read_safetensors_header(o.weights);
    gen::use_safetensors(p, header, program_relative(o.weights, o.output, o.allow_outside),
                         r.steps > 0 ? gen::KvFromFile::never : gen::KvFromFile::when_present);
    weights_source = o.weights;
  } else if (!o.write_weights.empty()) {
    const std::string rel = program_relative(o.write_weights, o.output, o.allow_outside);
    gen::write_llama_safetensors(p, r, o.gen, o.write_weights, rel);
    weights_source = o.write_weights;
  }

  VerifySummary vs = verify(p);

  const uint64_t bytes = write_program(p, o.output, to);

  std::map<std::string, uint64_t> by_op;
  for (const auto& in : p.instructions) ++by_op[op_name(p, in.op)];
  uint64_t weight_bytes = 0, kv_bytes = 0, act_bytes = 0;
  for (const auto& b : p.buffers) {
    if (b.name.rfind("amk.kv.", 0) == 0)
      kv_bytes += b.bytes();
    else if (b.name.rfind("model.", 0) == 0 || b.name == "lm_head.weight")
      weight_bytes += b.bytes();
    else
      act_bytes += b.bytes();
  }
  ordered_json j;
  j["status"] = "ok";
  j["output"] = o.output;
  j["encoding"] = to;
  j["bytes"] = bytes;
  j["preset"] = r.cfg.preset;
  if (ckpt) j["from"] = o.from;
  j["layers"] = r.cfg.layers;
  j["context"] = r.context;
  if (r.steps > 0) {
    j["prompt_tokens"] = r.prompt.size();
    j["steps"] = r.steps;
    j["passes"] = r.passes;
  }
  j["weights"] = weights_source;
  j["buffers"] = p.buffers.size();
  j["counters"] = p.counters.size();
  j["instructions"] = p.instructions.size();
  j["instructions_by_op"] = by_op;
  j["weight_bytes"] = weight_bytes;
  j["kv_cache_bytes"] = kv_bytes;
  j["activation_bytes"] = act_bytes;
  j["critical_path"] = vs.critical_path;
  std::ostringstream text;
  text << "wrote " << o.output << " (" << to << ", " << format_bytes(bytes) << "): " << r.cfg.preset
       << ", " << r.cfg.layers << " layers, context " << r.context;
  if (r.steps > 0)
    text << ", generation: " << r.prompt.size() << " prompt tokens + " << r.steps
         << " new in one launch of " << r.passes << " passes";
  text << ", " << p.instructions.size() << " instructions (";
  bool first = true;
  for (const auto& [name, n] : by_op) {
    text << (first ? "" : ", ") << name << " " << n;
    first = false;
  }
  text << "), weights " << format_bytes(weight_bytes) << " (" << weights_source << "), KV cache "
       << format_bytes(kv_bytes) << ", critical path " << vs.critical_path;
  return {std::move(j), text.str()};
}

void add_gen_llama_options(CLI::App* cmd, GenLlamaOptions& o) {
  cmd->add_option("--preset", o.gen.preset, "model shape (excludes --from)")
      ->check(CLI::IsMember(gen::llama_preset_names()))
      ->default_val("tiny");
  cmd->add_option("--layers", o.layers, "number of decoder layers (default: the preset's)");
  cmd->add_option("--context", o.context,
                  "KV length including the new token, which sits at position context-1 "
                  "(default: 16 for tiny, 1024 otherwise)");
  cmd->add_option("--seed", o.gen.seed, "seed of the random weights and KV prefill")
      ->default_val(0);
  cmd->add_option("--token", o.gen.token, "input token id")->default_val(1);
  cmd->add_option("--steps", o.gen.steps,
                  "generate: one launch runs the prompt through the decode step token by token, "
                  "then generates N new tokens (greedy), each step's argmax feeding the next "
                  "step's embedding on the device; outputs `ids` (the new tokens) and `logits` "
                  "(the last step's); the cache starts empty and holds prompt + N - 1 positions "
                  "(fused layer only)")
      ->check(CLI::Range(1u, 131072u));
  cmd->add_option("--prompt", o.prompt,
                  "generate from these token ids: \"1,2,3\", or a file of ids (commas, spaces or "
                  "a JSON array); default: --token; alone, --steps 1");
  cmd->add_flag("--all-logits", o.gen.all_logits,
                "generate: also write every step's logits, [prompt + steps - 1, vocab] "
                "(all_logits)");
  cmd->add_option("--eos", o.eos,
                  "generate: the end-of-sequence id (the program's `eos` input; -1: none): the "
                  "launch ends one step after generating it, and ids past it keep their zeros");
  cmd->add_option("--grid", o.gen.grid,
                  "persistent blocks: sets the launch grid, splits work for it and writes the "
                  "queues (default: grid auto, amk schedules, work split for 132 SMs)")
      ->check(CLI::Range(1u, static_cast<unsigned>(kMaxQueues)));
  cmd->add_flag("--fused", o.fused,
                "fused layer (the default): rmsnorm inside the gemvs, gate/up as one GLU gemv, "
                "RoPE and the new k/v inside attention_decode");
  cmd->add_flag("--unfused", o.unfused,
                "unfused layer: one op per step of the HF layer (rmsnorm, gemvs, silu_mul), "
                "attention rotating q and taking the new k/v row itself");
  cmd->add_flag("--rope-ops", o.gen.rope_ops,
                "unfused layer with RoPE and the cache append as instructions of their own "
                "(rope, kv_append) before attention, in the HF order");
  cmd->add_option("--attn-chunks", o.gen.attn_chunks,
                  "chunks of the KV length per kv head, one attention instruction each "
                  "(default: about 132 attention instructions in all; chunks are a multiple of 8 "
                  "positions, so the count may come out lower)")
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--combine-heads", o.gen.combine_heads,
                  "kv heads merged by one attention_combine (default 0: one each while the "
                  "blocks no attention chunk runs on can take them, else the fewest that fit "
                  "those blocks, so no combine delays an o_proj block)");
  cmd->add_option("--combine", o.combine,
                  "how attention's chunks are merged: auto (the default: oproj where the fused "
                  "layer's chunks of one query head fit the VM's 64 KiB attention tile, as "
                  "Llama-3.2-1B's do, else steps), oproj (fused layer: one attention chunk per "
                  "query head, and the o_proj gemvs merge the partials themselves while staging "
                  "x: no combine steps, one hop fewer a layer) or steps (attention_combine "
                  "instructions that wait "
                  "for their kv head's chunks, see --combine-heads)")
      ->check(CLI::IsMember({"auto", "steps", "oproj"}));
  cmd->add_option("--mlp-act", o.mlp_act,
                  "dtype of the MLP activation (the GLU output the down projection reads): f32 "
                  "(the default) or bf16 (fused layer only)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--kv-dtype", o.kv_dtype,
                  "dtype of the KV caches: bf16 (the default, as the weights) or f32 (the stored "
                  "rows unrounded, twice the bytes)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--tp", o.gen.tp,
                  "tensor-parallel ranks (1..8; default 1): a program with ranks, each holding "
                  "its share of the heads, kv heads and MLP columns (blocks of the whole "
                  "weights) and all-reducing the o_proj and down outputs; runs on the CPU "
                  "backend");
  cmd->add_option("--weights", o.weights,
                  ".safetensors with Hugging Face names (shapes checked against the preset)");
  cmd->add_option("--write-weights", o.write_weights,
                  "write the seeded weights and KV prefill to this .safetensors file and read "
                  "them from it");
  cmd->add_option("--from", o.from,
                  "Hugging Face Llama checkpoint folder: the shape from DIR/config.json (what the "
                  "generator cannot build is refused naming the key), the weights from "
                  "DIR/model.safetensors or the shards of DIR/model.safetensors.index.json, "
                  "checked before anything is written; lm_head is the embedding where "
                  "tie_word_embeddings is true or there is no lm_head.weight; the KV prefill "
                  "stays seeded random; --context at most max_position_embeddings (default "
                  "1024 or less). Excludes --preset, --weights and --write-weights");
  cmd->add_flag("--allow-outside", o.allow_outside,
                "allow a weights file outside the program's folder (stored as an absolute path)");
}

void setup_gen(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* gen_cmd = app.add_subcommand("gen", "generate programs for real workloads");
  gen_cmd->require_subcommand(1);
  auto o = std::make_shared<GenLlamaOptions>();
  auto* cmd =
      gen_cmd->add_subcommand("llama", "a whole Llama decode step (batch 1) as one program");
  add_gen_llama_options(cmd, *o);
  cmd->add_option("-o,--output", o->output, "output program (.json or .amkb)")->required();
  cmd->add_option("--to", o->to, "output encoding")->check(CLI::IsMember({"json", "amkb"}));
  cmd->callback([&g, &action, o, cmd] {
    o->preset_given = cmd->count("--preset") > 0;
    action = [&g, o] {
      const GenOutcome r = write_llama_program(*o);
      emit(g, r.json, r.text);
      return 0;
    };
  });
}

}  // namespace amk::cli
