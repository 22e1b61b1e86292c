// Program generators for real workloads: a whole Llama decode step (batch 1) as one amk program.
//
// generate_llama() builds the program in memory: a token id, the embedding, every decoder layer
// (rmsnorm -> q/k/v gemv row ranges -> attention_decode per (kv head, chunk of positions), which
// rotates q and, in the chunk holding the new position, takes the new k/v row from the
// projections -> attention_combine per kv head or pair of them -> o_proj gemv + residual ->
// rmsnorm -> gate/up gemv -> silu_mul -> down gemv + residual), the final rmsnorm, the lm_head
// gemv row ranges and argmax; the rotated new key and the value go into their cache rows
// through instructions nothing in the step waits for. --rope-ops puts rope (q, k) and kv_append (k, v) before
// attention as instructions of their own instead, in the HF order (that is the unfused layout,
// --unfused). The fused layout, the default, computes the same step with six dependent phases per
// layer instead of nine: q/k/v gemv with the rmsnorm inside -> attention_decode
// (rotates q and the new key itself, takes the new k/v row from the projections) -> combine ->
// o_proj + residual -> gate/up GLU gemv with the rmsnorm inside -> down + residual; the rotated
// key and the value are appended to the caches by instructions nothing in the step waits for. Weights are named as Hugging Face names them (model.layers.N....); KV
// caches are `amk.kv.layers.N.{k,v}` ([n_kv_heads, context, head_dim], bf16). Weights and
// caches are seeded random by default, or read from a .safetensors file (whose header is
// checked against the preset here, without reading the data); gen/checkpoint.hpp reads the
// config and the weights of a Hugging Face checkpoint folder instead of a preset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "program/program.hpp"

namespace amk::gen {

struct LlamaConfig {
  std::string preset;
  uint32_t hidden = 0;
  uint32_t layers = 0;
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t ffn = 0;
  uint32_t vocab = 0;
  double rope_theta = 500000.0;
  double rope_factor = 32.0;  // llama3 scaling; 0 = plain rope
  double rope_low_freq = 1.0;
  double rope_high_freq = 4.0;
  uint32_t rope_original_max = 8192;
  double rms_eps = 1e-5;
  bool tied_embeddings = false;
  uint32_t default_context = 1024;
  uint32_t max_position = 0;  // positions the model is trained for (0: unbounded); caps context
};

// Preset by name (tiny, llama-3.2-1b, llama-3.1-8b); nullopt if unknown.
[[nodiscard]] std::optional<LlamaConfig> llama_preset(std::string_view name);
[[nodiscard]] std::vector<std::string> llama_preset_names();

// Split target used when no grid is given (the H200's SM count).
inline constexpr uint32_t kDefaultSplitTarget = 132;

struct LlamaOptions {
  std::string preset = "tiny";
  // A config read from a checkpoint (--from), used instead of the preset.
  std::optional<LlamaConfig> config;
  std::optional<uint32_t> layers;   // override the preset's layer count
  std::optional<uint32_t> context;  // KV length incl. the new token (position = context - 1)
  uint64_t seed = 0;
  int64_t token = 1;  // input token id
  uint32_t grid = 0;  // 0: launch grid auto, amk schedules; else grid + queues
  // Fused layer: rmsnorm inside the gemvs that read the normed vector, gate/up as one GLU
  // gemv, RoPE and the new token's k/v inside attention_decode (the cache append runs off the
  // critical path): six dependent phases a layer instead of nine, faster than the unfused
  // layer.
  bool fused = true;
  // Unfused layer only: RoPE and the cache append as instructions of their own (rope on q and
  // k, kv_append of k and v) before attention, in the HF layer's order. By default attention
  // rotates q and takes the new k/v row itself, as in the fused layer: three dependent phases
  // fewer per layer.
  bool rope_ops = false;
  // kv heads merged by one attention_combine (0: chosen for the grid, see generate_llama). With
  // the default split, the attention chunks take 128 of 132 blocks and the o_proj gemvs 128: a
  // combine on a block that also runs an o_proj delays that o_proj (its weights are not requested
  // until the combine is done), and the o_proj phase with it, so the combines are made few enough
  // for the blocks no chunk runs on.
  uint32_t combine_heads = 0;
  // Fused layer: no attention_combine steps. Each attention chunk holds one query head (a kv
  // head's K/V read by each of its query heads' chunks) over about split target / heads chunks
  // of the KV length, and every o_proj gemv merges all the partials itself while it stages x
  // (gemv's head_dim / heads params): one dependent phase and one hop fewer a layer, each o_proj
  // block reading chunks x heads x (head_dim + 2) floats of partials instead of the merged row.
  // nullopt (`--combine auto`): on for the fused layer without --combine-heads where each
  // (query head, chunk) fits the VM's 64 KiB attention tile with at most the split target's
  // worth of chunks (Llama-3.2-1B: 32 heads x 4 chunks of 256 positions of 64); else off
  // (Llama-3.1-8B's 256 positions of 128 would not fit).
  std::optional<bool> combine_oproj;
  // Chunks of the KV length per kv head, one attention_decode instruction each (0: about the
  // split target's worth of instructions over all kv heads, chunks a multiple of 8 positions).
  uint32_t attn_chunks = 0;
  // Fused layer: the GLU output (the down projection's x) stored in bf16 instead of f32, as a
  // bf16 model's MLP activation is. Half the bytes every down block reads of it, one 16-byte x
  // load per weight vector instead of two.
  bool mlp_bf16 = false;
  // Generation (--steps / --prompt): one launch runs the prompt through the decode step token by
  // token, then generates `steps` new tokens, each step's argmax feeding the next step's
  // embedding (feed_token), the position advancing with the pass. The cache starts empty at
  // position 0. Empty prompt: the one token `token`.
  std::vector<int64_t> prompt;
  uint32_t steps = 0;       // new tokens; 0 with an empty prompt: one decode step at context - 1
  bool all_logits = false;  // also every step's logits, [passes, vocab] (buffer all_logits)
  // The end-of-sequence id in the generation's `eos` input (-1: none; amk generate --eos sets
  // it at run time): the launch ends one step after generating it.
  int64_t eos = -1;
  // The KV caches' dtype: bf16 (the default, as the weights) or f32 (no rounding of the stored
  // rows, twice the bytes).
  DType kv_dtype = DType::bf16;
  // Tensor-parallel ranks (--tp): each rank holds heads / tp query heads, kv_heads / tp kv
  // heads and ffn / tp MLP columns (row blocks of q/k/v, gate and up, column blocks of o_proj
  // and down, read as windows of the whole tensors), and all-reduces the o_proj and down
  // outputs; rank 0 alone adds the residuals. The embedding and the norms are replicated; each
  // rank computes vocab / tp rows of the logits and sends them to rank 0, which takes the argmax
  // (and, generating, sends each token to the others).
  uint32_t tp = 1;
};

// One tensor the program reads from weights (or the KV prefill), under its file name.
enum class TensorRole : uint8_t { weight, norm, kv_cache };
struct TensorSpec {
  std::string name;  // HF name, or amk.kv.layers.N.{k,v}
  DType dtype = DType::bf16;
  std::vector<uint64_t> shape;
  TensorRole role = TensorRole::weight;
  [[nodiscard]] uint64_t elements() const;
};

// Every tensor of the model (weights in HF order, then the KV caches), for a resolved config.
[[nodiscard]] std::vector<TensorSpec> llama_tensors(const LlamaConfig& cfg, uint32_t context,
                                                    DType kv_dtype = DType::bf16);

// Config after applying the options (layer override); validates the options (Error kind
// usage, code usage.gen.*).
struct ResolvedLlama {
  LlamaConfig cfg;
  uint32_t context = 0;
  bool combine_oproj = false;  // LlamaOptions::combine_oproj, auto resolved
  // Generation: the prompt (at least one id), the new tokens and the passes of the launch
  // (prompt + steps - 1); steps 0: a single decode step.
  std::vector<int64_t> prompt;
  uint32_t steps = 0;
  uint32_t passes = 1;
  DType kv_dtype = DType::bf16;
};
[[nodiscard]] ResolvedLlama resolve_llama(const LlamaOptions& options);

// One rank's share of a config split over `tp` tensor-parallel ranks (heads, kv heads, ffn).
[[nodiscard]] LlamaConfig rank_config(const LlamaConfig& cfg, uint32_t tp);
// The shape of the tensor a buffer's init reads: its window's tensor where its ranks read
// blocks of one (a tensor-parallel weight), else its own shape.
[[nodiscard]] const std::vector<uint64_t>& tensor_shape(const Buffer& b);
// Points buffer b at a file's tensor: `init` (a file init of the whole tensor) for every rank,
// each rank keeping its window of it.
void set_file_init(Buffer& b, const BufferInit& init);

// The program, with seeded random weights and KV prefill.
[[nodiscard]] Program generate_llama(const LlamaOptions& options);

// The vocabulary of a generation program (any program with feed_token): the rows of the
// embedding table that feed_token's token indexes; INT64_MAX when the program has no such pair.
[[nodiscard]] int64_t generation_vocabulary(const Program& program);
// Throws usage.generate.eos, at `where`, for an eos id outside -1 (none) .. vocabulary - 1.
void check_eos_id(const Program& program, int64_t eos, const std::string& where);
// The end-of-sequence id the program stops at by itself: its `eos` input's stated initial
// value; nullopt without one, or where it is -1.
[[nodiscard]] std::optional<int64_t> program_eos(const Program& program);

// ---- safetensors ----
struct SafetensorsEntry {
  std::string dtype;  // as in the file: BF16, F16, F32, ...
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;
};
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // byte offset of the data section
};
// Reads and parses only the header (Error kind io for a missing/unreadable file, program
// code gen.weights.* for a malformed one).
[[nodiscard]] SafetensorsHeader read_safetensors_header(const std::filesystem::path& file);

// Checks one tensor of a safetensors file against buffer `b` (dtype BF16, F16 or F32; the
// buffer's shape and byte size) and returns its dtype. Throws gen.weights.dtype / .shape at
// `where`.
[[nodiscard]] DType check_safetensors_tensor(const Buffer& b, const SafetensorsEntry& e,
                                             const std::string& where);

// A buffer init reading tensor `name` of the safetensors file `program_path`.
[[nodiscard]] BufferInit safetensors_init(const std::string& program_path, const std::string& name);

// Points the program's weight buffers (and the KV caches, as `kv` says) at tensors of `file`,
// after checking names, dtypes and shapes against the program. `program_path` is the path as
// the program will store it (relative to the program's folder). Tied presets use the embedding
// for lm_head. Throws program error gen.weights.* naming the tensor.
enum class KvFromFile : uint8_t {
  required,      // every cache from the file
  when_present,  // the caches the file has at the program's shape; the others seeded random
  never,         // a generation's caches start empty: the file's prefill is not read
};
void use_safetensors(Program& program, const SafetensorsHeader& header,
                     const std::string& program_path, KvFromFile kv);

// Metadata the generator stores in a written weights file (`amk.config`: JSON text with the
// config, context, token and position), for the numpy check and the PyTorch baseline.
[[nodiscard]] std::string llama_config_json(const ResolvedLlama& r, const LlamaOptions& options);

// Safetensors header for the given tensors (in order, contiguous), with metadata; returns the
// full header block (8-byte length + JSON padded to 8 bytes) and fills the data offsets.
[[nodiscard]] std::vector<std::byte> safetensors_header_bytes(
    const std::vector<TensorSpec>& tensors, const std::map<std::string, std::string>& metadata);

// --write-weights: materializes every weight and KV cache buffer of `program` (seeded random)
// and writes them, in llama_tensors order, into `file` (streamed to a temporary file beside it,
// then renamed), with `amk.config` metadata; then points the program at the file
// (`program_path`: the file as the program names it). `threads`: buffers materialized at once.
void write_llama_safetensors(Program& program, const ResolvedLlama& r, const LlamaOptions& options,
                             const std::filesystem::path& file, const std::string& program_path,
                             unsigned threads = 0);

}  // namespace amk::gen
