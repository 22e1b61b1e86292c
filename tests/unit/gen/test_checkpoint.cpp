// amk gen llama --from: config.json parsed into a LlamaConfig or refused naming the key, and
// Hugging Face checkpoint folders (one model.safetensors, or shards with an index) written here,
// whose programs run on the CPU backend to the same logits as the program of the same config
// with seeded weights.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu_backend.hpp"
#include "backend/host_data.hpp"
#include "core/error.hpp"
#include "gen/checkpoint.hpp"
#include "gen/llama.hpp"
#include "plan/plan.hpp"
#include "common/files.hpp"

using namespace amk;
namespace fs = std::filesystem;
using json = nlohmann::json;
using amk_test::read_text;
using amk_test::write_text;

namespace {

// The error `f` throws (FAILs when none).
Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error thrown");
  return Error(ErrorKind::internal, "", "", "");
}

// A small Llama config.json: GQA, llama3 rope scaling, none of the presets' shapes.
json small_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_act", "silu"},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 128},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"max_position_embeddings", 64},
          {"rope_scaling",
           {{"rope_type", "llama3"},
            {"factor", 8.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 16}}},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"}};
}

// Writes `names` of the safetensors file `src` (header `h`) into `dst`.
void copy_tensors(const fs::path& src, const gen::SafetensorsHeader& h,
                  const std::vector<std::string>& names, const fs::path& dst) {
  const std::string data = read_text(src);
  std::vector<gen::TensorSpec> specs;
  std::string body;
  for (const auto& n : names) {
    const auto& e = h.tensors.at(n);
    specs.push_back({n, DType::bf16, e.shape, gen::TensorRole::weight});
    body += data.substr(h.data_start + e.begin, e.end - e.begin);
  }
  const auto header = gen::safetensors_header_bytes(specs, {});
  std::ofstream out(dst, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size()));
  out << body;
}

// The weights of a generated program (HF names, in order).
std::vector<std::string> weight_names(const gen::SafetensorsHeader& h) {
  std::vector<std::string> names;
  for (const auto& [n, e] : h.tensors)
    if (n.rfind("amk.", 0) != 0) names.push_back(n);
  return names;
}

// A checkpoint folder with the seeded weights of `o`'s program: model.safetensors, or `shards`
// shard files and model.safetensors.index.json.
void write_checkpoint(const fs::path& dir, const json& config, const gen::LlamaOptions& o,
                      int shards) {
  fs::create_directories(dir);
  write_text(dir / "config.json", config.dump(2));
  Program p = gen::generate_llama(o);
  const fs::path all = dir / "all.safetensors";
  gen::write_llama_safetensors(p, gen::resolve_llama(o), o, all, "all.safetensors", 1);
  const auto h = gen::read_safetensors_header(all);
  const auto names = weight_names(h);
  if (shards == 1) {
    copy_tensors(all, h, names, dir / "model.safetensors");
  } else {
    json map = json::object();
    for (int s = 0; s < shards; ++s) {
      const std::string file = "model-0000" + std::to_string(s + 1) + ".safetensors";
      std::vector<std::string> part;
      for (size_t i = s; i < names.size(); i += shards)
        part.push_back(names[i]), map[names[i]] = file;
      copy_tensors(all, h, part, dir / file);
    }
    write_text(dir / "model.safetensors.index.json", json{{"weight_map", map}}.dump(2));
  }
  fs::remove(all);
}

// The options of the program a checkpoint's config gives (same seed: same KV prefill).
gen::LlamaOptions options_for(const gen::LlamaConfig& cfg) {
  gen::LlamaOptions o;
  o.config = cfg;
  o.seed = 5;
  o.token = 7;
  o.context = 40;
  return o;
}

// Logits of a CPU run of `p` (its safetensors paths relative to `base`).
std::vector<std::byte> cpu_logits(Program p, const fs::path& base) {
  p.base_dir = base.string();
  HostBuffers h = materialize_all(p);
  run_cpu(p, make_plan(p), h);
  for (uint32_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].name == "act.logits") return h.data[i];
  FAIL("no act.logits");
  return {};
}

// The program of checkpoint `dir`, its weight paths relative to `dir`.
Program program_from(const fs::path& dir) {
  const gen::HfCheckpoint ck = gen::read_hf_checkpoint(dir);
  Program p = gen::generate_llama(options_for(ck.cfg));
  gen::use_hf_checkpoint(p, ck,
                         [&](const fs::path& f) { return f.lexically_relative(dir).string(); });
  return p;
}

}  // namespace

TEST_CASE("config.json: the shape, llama3 rope scaling and the defaults") {
  const gen::LlamaConfig c = gen::parse_hf_config(small_config().dump(), "m/config.json");
  CHECK(c.hidden == 64);
  CHECK(c.ffn == 128);
  CHECK(c.layers == 2);
  CHECK(c.heads == 4);
  CHECK(c.kv_heads == 2);
  CHECK(c.head_dim == 16);  // hidden / heads
  CHECK(c.vocab == 128);
  CHECK(c.rms_eps == doctest::Approx(1e-5));
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_factor == 8.0);
  CHECK(c.rope_original_max == 16);
  CHECK_FALSE(c.tied_embeddings);
  CHECK(c.max_position == 64);
  CHECK(c.default_context == 64);

  json j = small_config();
  j.erase("num_key_value_heads");
  j.erase("rope_scaling");
  j.erase("architectures");
  j["head_dim"] = 32;
  j["tie_word_embeddings"] = true;
  const gen::LlamaConfig d = gen::parse_hf_config(j.dump(), "m/config.json");
  CHECK(d.kv_heads == 4);  // = heads
  CHECK(d.head_dim == 32);
  CHECK(d.rope_factor == 0.0);  // plain RoPE
  CHECK(d.tied_embeddings);
  j["rope_scaling"] = {{"rope_type", "default"}};
  CHECK(gen::parse_hf_config(j.dump(), "m/config.json").rope_factor == 0.0);
}

TEST_CASE("config.json: what the generator cannot build is refused naming the key") {
  struct Case {
    std::function<void(json&)> change;
    std::string code, key;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j.erase("hidden_size"); }, "gen.config.missing", "/hidden_size"},
      {[](json& j) { j.erase("vocab_size"); }, "gen.config.missing", "/vocab_size"},
      {[](json& j) { j["hidden_size"] = "64"; }, "gen.config.type", "/hidden_size"},
      {[](json& j) { j["num_hidden_layers"] = 2.5; }, "gen.config.type", "/num_hidden_layers"},
      {[](json& j) { j["tie_word_embeddings"] = "yes"; }, "gen.config.type",
       "/tie_word_embeddings"},
      {[](json& j) { j["rms_norm_eps"] = "1e-5"; }, "gen.config.type", "/rms_norm_eps"},
      {[](json& j) { j["rope_scaling"] = 8; }, "gen.config.type", "/rope_scaling"},
      {[](json& j) { j["intermediate_size"] = 0; }, "gen.config.value", "/intermediate_size"},
      {[](json& j) { j["num_hidden_layers"] = -1; }, "gen.config.value", "/num_hidden_layers"},
      {[](json& j) { j["num_key_value_heads"] = 3; }, "gen.config.value", "/num_key_value_heads"},
      {[](json& j) { j["head_dim"] = 15; }, "gen.config.value", "/head_dim"},
      {[](json& j) { j["architectures"] = {"MistralForCausalLM"}; }, "gen.config.unsupported",
       "/architectures"},
      {[](json& j) { j["model_type"] = "qwen2"; }, "gen.config.unsupported", "/model_type"},
      {[](json& j) { j["attention_bias"] = true; }, "gen.config.unsupported", "/attention_bias"},
      {[](json& j) { j["mlp_bias"] = true; }, "gen.config.unsupported", "/mlp_bias"},
      {[](json& j) { j["hidden_act"] = "gelu"; }, "gen.config.unsupported", "/hidden_act"},
      {[](json& j) { j["torch_dtype"] = "float8_e4m3fn"; }, "gen.config.unsupported",
       "/torch_dtype"},
      {[](json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       },
       "gen.config.unsupported", "/rope_scaling/rope_type"},
      {[](json& j) {
         j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
       },
       "gen.config.unsupported", "/rope_scaling/type"},
      {[](json& j) { j["rope_scaling"].erase("factor"); }, "gen.config.missing",
       "/rope_scaling/factor"},
      {[](json& j) { j["rope_scaling"]["high_freq_factor"] = 0.5; }, "gen.config.value",
       "/rope_scaling/high_freq_factor"},
  };
  for (const Case& c : cases) {
    json j = small_config();
    c.change(j);
    CAPTURE(j.dump());
    const Error e = error_of([&] { (void)gen::parse_hf_config(j.dump(), "m/config.json"); });
    CHECK(e.kind() == ErrorKind::program);
    CHECK(e.exit_code() == ExitCode::invalid_program);
    CHECK(e.code() == c.code);
    CHECK(e.where() == "m/config.json:" + c.key);
  }
  const Error e = error_of([] { (void)gen::parse_hf_config("[1, 2]", "m/config.json"); });
  CHECK(e.code() == "gen.config.json");
  CHECK(e.where() == "m/config.json");
}

TEST_CASE("checkpoint folders, one file and sharded: the same logits on the CPU as the config's "
          "seeded program") {
  amk_test::ScratchDir dir("ckpt");
  const gen::LlamaConfig cfg = gen::parse_hf_config(small_config().dump(), "config.json");
  const gen::LlamaOptions o = options_for(cfg);
  const std::vector<std::byte> want = cpu_logits(gen::generate_llama(o), dir.path());
  for (const int shards : {1, 3}) {
    CAPTURE(shards);
    const fs::path ck = dir.path() / ("ck" + std::to_string(shards));
    write_checkpoint(ck, small_config(), o, shards);
    const gen::HfCheckpoint h = gen::read_hf_checkpoint(ck);
    CHECK(h.index.empty() == (shards == 1));
    CHECK(h.headers.size() == static_cast<size_t>(shards));
    CHECK_FALSE(h.cfg.tied_embeddings);
    const Program p = program_from(ck);
    for (const Buffer& b : p.buffers)
      if (b.name.rfind("model.", 0) == 0 || b.name == "lm_head.weight")
        CHECK(b.init.kind == InitKind::safetensors);
    CHECK(cpu_logits(p, ck) == want);
  }
}

TEST_CASE("tied embeddings: tie_word_embeddings true, or no lm_head.weight in the checkpoint") {
  amk_test::ScratchDir dir("ckpt");
  json config = small_config();
  config["tie_word_embeddings"] = true;
  const gen::LlamaConfig cfg = gen::parse_hf_config(config.dump(), "config.json");
  const gen::LlamaOptions o = options_for(cfg);
  const std::vector<std::byte> want = cpu_logits(gen::generate_llama(o), dir.path());
  write_checkpoint(dir.path() / "tied", config, o, 2);
  CHECK(cpu_logits(program_from(dir.path() / "tied"), dir.path() / "tied") == want);
  // The same weights with tie_word_embeddings false: tied all the same (no lm_head.weight).
  write_text(dir.path() / "tied" / "config.json", small_config().dump());
  const gen::HfCheckpoint h = gen::read_hf_checkpoint(dir.path() / "tied");
  CHECK(h.cfg.tied_embeddings);
  CHECK(cpu_logits(program_from(dir.path() / "tied"), dir.path() / "tied") == want);
}

TEST_CASE("checkpoint refusals: missing or misshapen tensors, a missing shard, a bad index") {
  amk_test::ScratchDir dir("ckpt");
  const gen::LlamaConfig cfg = gen::parse_hf_config(small_config().dump(), "config.json");
  const gen::LlamaOptions o = options_for(cfg);
  const fs::path one = dir.path() / "one", sh = dir.path() / "sh";
  write_checkpoint(one, small_config(), o, 1);
  write_checkpoint(sh, small_config(), o, 2);
  const std::string q = "model.layers.1.self_attn.q_proj.weight";

  SUBCASE("a tensor missing from model.safetensors") {
    const auto h = gen::read_safetensors_header(one / "model.safetensors");
    auto names = weight_names(h);
    std::erase(names, q);
    copy_tensors(one / "model.safetensors", h, names, one / "m.safetensors");
    fs::rename(one / "m.safetensors", one / "model.safetensors");
    const Error e = error_of([&] { (void)program_from(one); });
    CHECK(e.code() == "gen.weights.missing");
    CHECK(e.where() == (one / "model.safetensors").string() + ": tensor '" + q + "'");
    CHECK(e.exit_code() == ExitCode::invalid_program);
  }
  SUBCASE("a misshapen tensor: config.json says another shape") {
    json config = small_config();
    config["intermediate_size"] = 96;
    write_text(one / "config.json", config.dump());
    const Error e = error_of([&] { (void)program_from(one); });
    CHECK(e.code() == "gen.weights.shape");
    CHECK(e.where() ==
          (one / "model.safetensors").string() + ": tensor 'model.layers.0.mlp.gate_proj.weight'");
  }
  SUBCASE("a tensor the index does not map") {
    json index = json::parse(read_text(sh / "model.safetensors.index.json"));
    index["weight_map"].erase(q);
    write_text(sh / "model.safetensors.index.json", index.dump());
    const Error e = error_of([&] { (void)program_from(sh); });
    CHECK(e.code() == "gen.weights.missing");
    CHECK(e.where() == (sh / "model.safetensors.index.json").string() + ": tensor '" + q + "'");
  }
  SUBCASE("the index maps a tensor to a shard without it") {
    json index = json::parse(read_text(sh / "model.safetensors.index.json"));
    const std::string other = index["weight_map"][q] == "model-00001.safetensors"
                                  ? "model-00002.safetensors"
                                  : "model-00001.safetensors";
    index["weight_map"][q] = other;
    write_text(sh / "model.safetensors.index.json", index.dump());
    const Error e = error_of([&] { (void)program_from(sh); });
    CHECK(e.code() == "gen.weights.missing");
    CHECK(e.where() == (sh / other).string() + ": tensor '" + q + "'");
  }
  SUBCASE("a shard file missing") {
    fs::remove(sh / "model-00002.safetensors");
    const Error e = error_of([&] { (void)gen::read_hf_checkpoint(sh); });
    CHECK(e.code() == "io.missing");
    CHECK(e.exit_code() == ExitCode::io);
    CHECK(e.where() == (sh / "model-00002.safetensors").string());
  }
  SUBCASE("a shard outside the folder, a weight_map that is not an object") {
    write_text(sh / "model.safetensors.index.json",
               json{{"weight_map", {{q, "../x.safetensors"}}}}.dump());
    Error e = error_of([&] { (void)gen::read_hf_checkpoint(sh); });
    CHECK(e.code() == "gen.weights.index");
    CHECK(e.where() == (sh / "model.safetensors.index.json").string() + ":/weight_map/" + q);
    write_text(sh / "model.safetensors.index.json", json{{"weight_map", 3}}.dump());
    e = error_of([&] { (void)gen::read_hf_checkpoint(sh); });
    CHECK(e.code() == "gen.weights.index");
  }
  SUBCASE("no weights, no config.json") {
    fs::remove(sh / "model.safetensors.index.json");
    Error e = error_of([&] { (void)gen::read_hf_checkpoint(sh); });
    CHECK(e.code() == "io.missing");
    CHECK(e.where() == sh.string());
    fs::remove(sh / "config.json");
    e = error_of([&] { (void)gen::read_hf_checkpoint(sh); });
    CHECK(e.code() == "io.missing");
    CHECK(e.where() == (sh / "config.json").string());
  }
}

TEST_CASE("--context is bounded by max_position_embeddings") {
  gen::LlamaOptions o = options_for(gen::parse_hf_config(small_config().dump(), "config.json"));
  o.context = 64;
  CHECK(gen::resolve_llama(o).context == 64);
  o.context = 65;
  const Error e = error_of([&] { (void)gen::resolve_llama(o); });
  CHECK(e.code() == "usage.gen.context");
  CHECK(e.kind() == ErrorKind::usage);
  o.context.reset();
  CHECK(gen::resolve_llama(o).context == 64);  // min(1024, max_position_embeddings)
}
