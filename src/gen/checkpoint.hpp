// Hugging Face Llama checkpoints (amk gen llama --from DIR): DIR/config.json read into a
// LlamaConfig, and the safetensors headers of the weights (DIR/model.safetensors, or the shards
// DIR/model.safetensors.index.json maps each tensor to) read without their data. Anything the
// generator cannot build (another architecture, biases, another activation or rope type) is
// refused naming the config key, as "DIR/config.json:/key".
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "gen/llama.hpp"

namespace amk::gen {

// config.json text of a Llama-architecture model; `file` locates errors ("FILE:/key"). Throws
// program errors gen.config.json (not a JSON object), gen.config.missing (a required key),
// gen.config.type (a wrong JSON type), gen.config.value (out of range, or shapes that do not
// divide) and gen.config.unsupported (what the generator does not build).
[[nodiscard]] LlamaConfig parse_hf_config(const std::string& text, const std::string& file);

// Reads and parses `file` (io error io.missing / io.read when it cannot be read).
[[nodiscard]] LlamaConfig read_hf_config(const std::filesystem::path& file);

struct HfCheckpoint {
  std::filesystem::path dir;
  // tied_embeddings is also set where the weights hold no lm_head.weight (as transformers ties).
  LlamaConfig cfg;
  std::filesystem::path index;                         // empty: one model.safetensors
  std::map<std::string, std::filesystem::path> files;  // tensor name -> weights file
  std::map<std::filesystem::path, SafetensorsHeader> headers;
};

// config.json and the headers of every weights file. Throws io.missing naming a missing file or
// shard, gen.weights.index for a malformed index.
[[nodiscard]] HfCheckpoint read_hf_checkpoint(const std::filesystem::path& dir);

// The path of a weights file as the program stores it (relative to the program's folder, or
// absolute).
using ProgramPath = std::function<std::string(const std::filesystem::path&)>;

// Points every weight buffer of `program` at its tensor in the checkpoint, after checking every
// one (present, dtype BF16/F16/F32, the buffer's shape) before changing any. The KV caches stay
// as generated. Throws gen.weights.missing / .dtype / .shape located at "FILE: tensor 'NAME'".
void use_hf_checkpoint(Program& program, const HfCheckpoint& ckpt, const ProgramPath& program_path);

}  // namespace amk::gen
