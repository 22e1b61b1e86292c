// The options and the program writer of `amk gen llama`, shared with `amk generate` (which
// writes the program to a scratch folder and runs it).
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/common.hpp"
#include "gen/llama.hpp"

namespace amk::cli {

struct GenLlamaOptions {
  gen::LlamaOptions gen;
  std::optional<uint32_t> layers;
  std::optional<uint32_t> context;
  std::string weights;
  std::string write_weights;
  std::string from;
  bool preset_given = false;
  std::string output;
  std::string to;
  bool allow_outside = false;
  bool fused = false;             // --fused given
  bool unfused = false;           // --unfused given
  std::string combine = "auto";   // --combine: "auto", "steps" or "oproj"
  std::string mlp_act = "f32";    // --mlp-act: "f32" or "bf16"
  std::string prompt;             // --prompt: ids "1,2,3" or a file of them
  std::string kv_dtype = "bf16";  // --kv-dtype: "bf16" or "f32"
  std::optional<int64_t> eos;     // --eos: the generation's end-of-sequence id
};

// Registers the model, layout and weights options (everything but -o and --to).
void add_gen_llama_options(CLI::App* cmd, GenLlamaOptions& o);

struct GenOutcome {
  ordered_json json;  // what `amk gen llama --json` prints
  std::string text;
};
// Generates the program (reading --from, --weights; writing --write-weights), verifies it and
// writes o.output atomically. Throws amk::Error.
GenOutcome write_llama_program(GenLlamaOptions o);

}  // namespace amk::cli
