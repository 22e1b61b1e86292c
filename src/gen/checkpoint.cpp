#include "gen/checkpoint.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace amk::gen {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxCount = uint64_t{1} << 24;  // bound of any size in config.json
constexpr uint32_t kMaxLayers = 1024;              // as --layers

std::string describe(const json& v) {
  std::string t = v.dump();
  if (t.size() > 40) t = t.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + t;
}

// Typed access to the keys of config.json, each error located at "FILE:/key" (a JSON pointer).
class ConfigReader {
public:
  ConfigReader(const json& root, std::string file) : root_(root), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& code, const std::string& pointer,
                         const std::string& message) const {
    throw_program_error(code, file_ + ":" + pointer, message);
  }

  // The value at `key` of `obj` (pointer `at`), or nullptr when absent or null.
  static const json* find(const json& obj, const std::string& key) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }

  const json& required(const json& obj, const std::string& at, const std::string& key) const {
    const json* v = find(obj, key);
    if (!v) fail("gen.config.missing", at + "/" + key, "required key '" + key + "' is missing");
    return *v;
  }

  uint32_t count(const json& v, const std::string& ptr, uint64_t max) const {
    if (!v.is_number_integer())
      fail("gen.config.type", ptr, "expected a positive integer, found " + describe(v));
    const uint64_t n = v.is_number_unsigned() ? v.get<uint64_t>() : 0;  // negatives: 0
    if (n < 1 || n > max)
      fail("gen.config.value", ptr,
           "expected an integer in 1.." + std::to_string(max) + ", found " + v.dump());
    return static_cast<uint32_t>(v.get<uint64_t>());
  }
  uint32_t count(const std::string& key, uint64_t max = kMaxCount) const {
    return count(required(root_, "", key), "/" + key, max);
  }
  uint32_t count_or(const std::string& key, uint32_t fallback) const {
    const json* v = find(root_, key);
    return v ? count(*v, "/" + key, kMaxCount) : fallback;
  }

  double positive(const json& v, const std::string& ptr) const {
    if (!v.is_number()) fail("gen.config.type", ptr, "expected a number, found " + describe(v));
    const double d = v.get<double>();
    if (!(d > 0)) fail("gen.config.value", ptr, "expected a positive number, found " + v.dump());
    return d;
  }
  double positive_or(const std::string& key, double fallback) const {
    const json* v = find(root_, key);
    return v ? positive(*v, "/" + key) : fallback;
  }

  std::optional<bool> flag(const std::string& key) const {
    const json* v = find(root_, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean())
      fail("gen.config.type", "/" + key, "expected true or false, found " + describe(*v));
    return v->get<bool>();
  }

  std::optional<std::string> text(const json& obj, const std::string& at,
                                  const std::string& key) const {
    const json* v = find(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_string())
      fail("gen.config.type", at + "/" + key, "expected a string, found " + describe(*v));
    return v->get<std::string>();
  }

  const json& root() const { return root_; }

private:
  const json& root_;
  std::string file_;
};

// architectures and model_type, where given, name Llama.
void check_architecture(const ConfigReader& r) {
  if (const json* a = ConfigReader::find(r.root(), "architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      r.fail("gen.config.type", "/architectures",
             "expected an array of architecture names, found " + describe(*a));
    if (a->size() != 1 || (*a)[0] != "LlamaForCausalLM")
      r.fail("gen.config.unsupported", "/architectures",
             "architectures " + a->dump() + " is not [\"LlamaForCausalLM\"], the one supported");
  }
  const auto type = r.text(r.root(), "", "model_type");
  if (type && *type != "llama")
    r.fail("gen.config.unsupported", "/model_type",
           "model_type '" + *type + "' is not 'llama', the one supported");
}

// The features a Llama config may switch on that the generated step does not have.
void check_features(const ConfigReader& r) {
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (r.flag(key).value_or(false))
      r.fail("gen.config.unsupported", std::string("/") + key,
             std::string(key) + " is true; the generated step has no bias terms");
  const auto act = r.text(r.root(), "", "hidden_act");
  if (act && *act != "silu")
    r.fail("gen.config.unsupported", "/hidden_act",
           "hidden_act '" + *act + "' is not 'silu', the one supported");
  for (const char* key : {"torch_dtype", "dtype"}) {
    const auto dt = r.text(r.root(), "", key);
    if (dt && *dt != "bfloat16" && *dt != "float16" && *dt != "float32")
      r.fail("gen.config.unsupported", std::string("/") + key,
             std::string(key) + " '" + *dt + "' is not bfloat16, float16 or float32");
  }
}

// rope_scaling: absent, null, rope_type "default" (plain RoPE) or "llama3" with its four keys.
void read_rope_scaling(const ConfigReader& r, LlamaConfig& c) {
  c.rope_factor = 0;
  const json* s = ConfigReader::find(r.root(), "rope_scaling");
  if (!s) return;
  if (!s->is_object())
    r.fail("gen.config.type", "/rope_scaling", "expected an object or null, found " + describe(*s));
  const char* type_key = s->contains("rope_type") ? "rope_type" : "type";
  const std::string at = std::string("/rope_scaling/") + type_key;
  const auto type = r.text(*s, "/rope_scaling", type_key);
  if (!type) r.fail("gen.config.missing", at, "rope_scaling has no rope_type");
  if (*type == "default") return;
  if (*type != "llama3")
    r.fail("gen.config.unsupported", at,
           "rope type '" + *type + "' is not supported (default or llama3)");
  auto num = [&](const char* key) {
    return r.positive(r.required(*s, "/rope_scaling", key), std::string("/rope_scaling/") + key);
  };
  c.rope_factor = num("factor");
  c.rope_low_freq = num("low_freq_factor");
  c.rope_high_freq = num("high_freq_factor");
  c.rope_original_max = r.count(r.required(*s, "/rope_scaling", "original_max_position_embeddings"),
                                "/rope_scaling/original_max_position_embeddings", kMaxCount);
  if (c.rope_high_freq <= c.rope_low_freq)
    r.fail("gen.config.value", "/rope_scaling/high_freq_factor",
           "high_freq_factor must exceed low_freq_factor");
}

// The shape keys, and the divisibility the attention layout needs.
void read_shape(const ConfigReader& r, LlamaConfig& c) {
  c.hidden = r.count("hidden_size");
  c.ffn = r.count("intermediate_size");
  c.layers = r.count("num_hidden_layers", kMaxLayers);
  c.heads = r.count("num_attention_heads");
  c.kv_heads = r.count_or("num_key_value_heads", c.heads);
  c.vocab = r.count("vocab_size");
  if (c.heads % c.kv_heads != 0)
    r.fail("gen.config.value", "/num_key_value_heads",
           "num_key_value_heads " + std::to_string(c.kv_heads) +
               " does not divide num_attention_heads " + std::to_string(c.heads));
  if (!ConfigReader::find(r.root(), "head_dim") && c.hidden % c.heads != 0)
    r.fail("gen.config.value", "/num_attention_heads",
           "num_attention_heads " + std::to_string(c.heads) + " does not divide hidden_size " +
               std::to_string(c.hidden) + " (and there is no head_dim)");
  c.head_dim = r.count_or("head_dim", c.hidden / c.heads);
  if (c.head_dim % 2 != 0)
    r.fail("gen.config.value", "/head_dim",
           "head_dim " + std::to_string(c.head_dim) + " is odd; RoPE rotates pairs");
}

std::string read_text(const fs::path& file, const std::string& what) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw_io_error("io.missing", file.string(), what + " does not exist");
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in) throw_io_error("io.read", file.string(), "cannot read the " + what);
  return s.str();
}

// A name usable in a program name: the directory's, with other characters as '_'.
std::string model_name(const fs::path& dir) {
  std::string n = fs::weakly_canonical(fs::absolute(dir)).filename().string();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-') ch = '_';
  return n.empty() ? "hf" : n.substr(0, 64);
}

// weight_map of model.safetensors.index.json: tensor name -> shard file beside the index.
std::map<std::string, fs::path> read_index(const fs::path& index) {
  const json j = json::parse(read_text(index, "safetensors index"), nullptr, false);
  const std::string where = index.string();
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object())
    throw_program_error("gen.weights.index", where + ":/weight_map",
                        "expected a JSON object with a weight_map object");
  std::map<std::string, fs::path> files;
  for (const auto& [name, v] : j["weight_map"].items()) {
    const std::string at = where + ":/weight_map/" + name;
    if (!v.is_string()) throw_program_error("gen.weights.index", at, "expected a shard file name");
    const fs::path shard(v.get<std::string>());
    if (shard.empty() || shard.is_absolute() || shard.filename() != shard)
      throw_program_error("gen.weights.index", at,
                          "shard '" + shard.string() + "' is not a file name in the folder");
    files[name] = index.parent_path() / shard;
  }
  return files;
}

std::string tensor_at(const fs::path& file, const std::string& name) {
  return file.string() + ": tensor '" + name + "'";
}

bool is_weight(const Buffer& b) {
  return b.name.rfind("model.", 0) == 0 || b.name == "lm_head.weight";
}

}  // namespace

LlamaConfig parse_hf_config(const std::string& text, const std::string& file) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw_program_error("gen.config.json", file, "config.json is not a JSON object");
  const ConfigReader r(j, file);
  check_architecture(r);
  check_features(r);
  LlamaConfig c;
  read_shape(r, c);
  c.rms_eps = r.positive_or("rms_norm_eps", 1e-6);  // transformers' LlamaConfig defaults
  c.rope_theta = r.positive_or("rope_theta", 10000.0);
  read_rope_scaling(r, c);
  c.tied_embeddings = r.flag("tie_word_embeddings").value_or(false);
  c.max_position = r.count_or("max_position_embeddings", 2048);
  c.default_context = std::min<uint32_t>(1024, c.max_position);
  return c;
}

LlamaConfig read_hf_config(const fs::path& file) {
  return parse_hf_config(read_text(file, "config.json"), file.string());
}

HfCheckpoint read_hf_checkpoint(const fs::path& dir) {
  HfCheckpoint ck;
  ck.dir = dir;
  ck.cfg = read_hf_config(dir / "config.json");
  ck.cfg.preset = model_name(dir);
  const fs::path single = dir / "model.safetensors";
  std::error_code ec;
  if (fs::exists(single, ec)) {
    ck.headers[single] = read_safetensors_header(single);
    for (const auto& [name, e] : ck.headers[single].tensors) ck.files[name] = single;
  } else {
    ck.index = dir / "model.safetensors.index.json";
    if (!fs::exists(ck.index, ec))
      throw_io_error("io.missing", dir.string(),
                     "the checkpoint has no model.safetensors or model.safetensors.index.json");
    ck.files = read_index(ck.index);
    for (const auto& [name, shard] : ck.files) {
      if (ck.headers.count(shard)) continue;
      if (!fs::exists(shard, ec))
        throw_io_error("io.missing", shard.string(),
                       "shard of " + ck.index.filename().string() + " (for tensor '" + name +
                           "') does not exist");
      ck.headers[shard] = read_safetensors_header(shard);
    }
  }
  if (!ck.files.count("lm_head.weight")) ck.cfg.tied_embeddings = true;
  return ck;
}

void use_hf_checkpoint(Program& program, const HfCheckpoint& ck, const ProgramPath& program_path) {
  std::vector<std::pair<DType, BufferInit>> inits(program.buffers.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const Buffer& b = program.buffers[i];
    if (!is_weight(b)) continue;
    const auto f = ck.files.find(b.name);
    if (f == ck.files.end()) {
      const fs::path& where = ck.index.empty() ? ck.headers.begin()->first : ck.index;
      throw_program_error("gen.weights.missing", tensor_at(where, b.name),
                          "the checkpoint has no tensor '" + b.name + "'");
    }
    const SafetensorsHeader& h = ck.headers.at(f->second);
    const auto e = h.tensors.find(b.name);
    if (e == h.tensors.end())
      throw_program_error("gen.weights.missing", tensor_at(f->second, b.name),
                          "the shard has no tensor '" + b.name + "' that the index maps to it");
    inits[i] = {check_safetensors_tensor(b, e->second, tensor_at(f->second, b.name)),
                safetensors_init(program_path(f->second), b.name)};
  }
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    if (!is_weight(program.buffers[i])) continue;
    program.buffers[i].dtype = inits[i].first;
    set_file_init(program.buffers[i], inits[i].second);
  }
}

}  // namespace amk::gen
