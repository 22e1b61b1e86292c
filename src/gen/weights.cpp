// --write-weights: the seeded weights and KV prefill of a generated Llama program, written as
// one .safetensors file (HF names + amk.kv.layers.N.{k,v}).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>
#include <unistd.h>

#include "backend/host_data.hpp"
#include "core/error.hpp"
#include "gen/llama.hpp"

namespace amk::gen {

void write_llama_safetensors(Program& program, const ResolvedLlama& r, const LlamaOptions& options,
                             const std::filesystem::path& file, const std::string& program_path,
                             unsigned threads) {
  std::vector<TensorSpec> tensors = llama_tensors(r.cfg, r.context, r.kv_dtype);
  std::vector<uint32_t> index;
  for (TensorSpec& t : tensors) {
    const auto it = std::find_if(program.buffers.begin(), program.buffers.end(),
                                 [&](const Buffer& b) { return b.name == t.name; });
    if (it == program.buffers.end())
      throw Error(ErrorKind::internal, "gen.weights.buffer", t.name, "no buffer for tensor");
    t.dtype = it->dtype;
    index.push_back(static_cast<uint32_t>(it - program.buffers.begin()));
  }
  // A tensor-parallel program's split weights are windows of the whole tensors: the file holds
  // the whole ones, filled as the program's inits would fill them without the windows.
  Program whole = program;
  for (Buffer& b : whole.buffers) {
    if (b.rank_inits.empty() || b.rank_inits[0].window_of.empty()) continue;
    b.shape = b.rank_inits[0].window_of;
    b.init = b.rank_inits[0];
    b.init.window_of.clear();
    b.init.window_at.clear();
    b.rank_inits.clear();
  }
  const auto header = safetensors_header_bytes(
      tensors, {{"format", "pt"}, {"amk.config", llama_config_json(r, options)}});

  const std::filesystem::path tmp =
      file.string() + ".tmp." + std::to_string(static_cast<long long>(::getpid()));
  struct Cleanup {
    const std::filesystem::path& p;
    bool armed = true;
    ~Cleanup() {
      std::error_code ec;
      if (armed) std::filesystem::remove(p, ec);
    }
  } cleanup{tmp};
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_io_error("io.write", tmp.string(), "cannot create the weights file");
    out.write(reinterpret_cast<const char*>(header.data()),
              static_cast<std::streamsize>(header.size()));
    if (threads == 0) threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    for (size_t first = 0; first < index.size(); first += threads) {
      const size_t last = std::min(index.size(), first + threads);
      std::vector<std::future<std::vector<std::byte>>> jobs;
      for (size_t i = first; i < last; ++i)
        jobs.push_back(std::async(std::launch::async,
                                  [&whole, b = index[i]] { return materialize_buffer(whole, b); }));
      for (auto& j : jobs) {
        const std::vector<std::byte> data = j.get();
        out.write(reinterpret_cast<const char*>(data.data()),
                  static_cast<std::streamsize>(data.size()));
      }
    }
    out.flush();
    if (!out) throw_io_error("io.write", tmp.string(), "cannot write the weights file");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec)
    throw_io_error("io.write", file.string(), "cannot rename the weights file: " + ec.message());
  cleanup.armed = false;

  use_safetensors(program, read_safetensors_header(file), program_path, KvFromFile::required);
}

}  // namespace amk::gen
