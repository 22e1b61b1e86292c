#include "backend/host_data.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backend/init_sources.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"

namespace amk {
namespace {

std::string gib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", static_cast<double>(bytes) / double(uint64_t{1} << 30));
  return s;
}

[[noreturn]] void out_of_host_memory(const Program& program, uint32_t index, uint64_t bytes) {
  throw Error(ErrorKind::device, "host.memory", "/buffers/" + std::to_string(index),
              "out of host memory for buffer '" + program.buffers[index].name + "' (" +
                  std::to_string(bytes) + " bytes, " + gib(bytes) + ")");
}

// The number after `key` and `sep` on a line of a /proc or cgroup stat file
// ("MemAvailable:   123 kB", "file 4096").
std::optional<uint64_t> stat_field(const std::string& text, const std::string& key, char sep) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() <= key.size() || line.compare(0, key.size(), key) != 0 ||
        line[key.size()] != sep)
      continue;
    const char* p = line.c_str() + key.size() + 1;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(p, &end, 10);
    if (end == p) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

std::optional<uint64_t> meminfo_bytes(const std::string& text, const std::string& key) {
  const auto kib = stat_field(text, key, ':');
  return kib ? checked_mul(*kib, 1024) : std::nullopt;
}

// A buffer's bytes; nullopt when its shape overflows (materialize_one names that).
std::optional<uint64_t> buffer_bytes(const Buffer& b) {
  std::optional<uint64_t> n = dtype_size(b.dtype);
  for (uint64_t d : b.shape) n = n ? checked_mul(*n, d) : n;
  return n;
}

std::optional<std::string> read_text(const char* path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::optional<uint64_t> read_number(const char* path) {
  const auto text = read_text(path);
  if (!text || text->empty() || (*text)[0] < '0' || (*text)[0] > '9') return std::nullopt;  // "max"
  return std::strtoull(text->c_str(), nullptr, 10);
}

std::vector<std::byte> materialize_one(const Program& program, uint32_t index,
                                       const LoadOptions& options) {
  const Buffer& buffer = program.buffers[index];
  const BufferInit& init = buffer.init;
  const std::string where = "/buffers/" + std::to_string(index) + "/init";
  const size_t item = dtype_size(buffer.dtype);
  const uint64_t bytes = checked_buffer_bytes(program, index);
  uint64_t elements = bytes / item;
  // A window reads the whole tensor from its file, then keeps the block (random fills the
  // block directly).
  const bool window = !init.window_of.empty() && init.kind != InitKind::random;
  if (window) {
    elements = 1;
    for (uint64_t d : init.window_of) elements *= d;  // (bounded by the loader: init.window)
  }
  auto block = [&](std::vector<std::byte> tensor) {
    return window ? window_gather(init, buffer.shape, tensor, item) : tensor;
  };
  switch (init.kind) {
    case InitKind::zeros: return host_bytes(bytes);
    case InitKind::constant: {
      const std::array<std::byte, 8> one = constant_element(program, index);
      std::vector<std::byte> out = host_bytes(bytes);
      for (uint64_t i = 0; i < elements; ++i) std::memcpy(out.data() + i * item, one.data(), item);
      return out;
    }
    case InitKind::random: return random_fill(init, buffer.dtype, elements, where, buffer.shape);
    case InitKind::values:
      if (init.data.size() != bytes) {
        throw_program_error("init.values.count", where + "/values",
                            std::to_string(init.data.size() / item) + " values for " +
                                std::to_string(elements) + " elements");
      }
      return init.data;
    case InitKind::npy:
      return block(read_npy(resolve_data_path(program, init.path, where + "/path", options),
                            buffer.dtype, elements, where + "/path"));
    case InitKind::raw:
      return read_raw(resolve_data_path(program, init.path, where + "/path", options), init.offset,
                      buffer.dtype, elements, where + "/path");
    case InitKind::safetensors:
      return block(read_safetensors(resolve_data_path(program, init.path, where + "/path", options),
                                    init.tensor, buffer.dtype, elements, where + "/path"));
  }
  throw_program_error("init.kind", where + "/kind", "unknown init kind");
}

}  // namespace

uint64_t checked_buffer_bytes(const Program& program, uint32_t index) {
  const Buffer& buffer = program.buffers.at(index);
  uint64_t elements = 1;
  for (uint64_t d : buffer.shape) {
    const auto e = checked_mul(elements, d);
    if (!e)
      throw_program_error("init.size", "/buffers/" + std::to_string(index) + "/shape",
                          "element count overflows");
    elements = *e;
  }
  const auto bytes = checked_mul(elements, dtype_size(buffer.dtype));
  if (!bytes || *bytes > kMaxBufferBytes) {
    throw_program_error("init.size", "/buffers/" + std::to_string(index) + "/shape",
                        "buffer '" + buffer.name + "' exceeds " + std::to_string(kMaxBufferBytes) +
                            " bytes");
  }
  return *bytes;
}

std::array<std::byte, 8> constant_element(const Program& program, uint32_t index) {
  const Buffer& buffer = program.buffers.at(index);
  if (!value_fits(buffer.dtype, buffer.init.constant)) {
    throw_program_error("init.value", "/buffers/" + std::to_string(index) + "/init/value",
                        "constant " + std::to_string(buffer.init.constant) +
                            " does not fit dtype " + std::string(dtype_name(buffer.dtype)));
  }
  std::array<std::byte, 8> one{};
  store_element(one.data(), buffer.dtype, 0, buffer.init.constant);
  return one;
}

std::vector<std::byte> materialize_buffer(const Program& program, uint32_t index,
                                          const LoadOptions& options) {
  if (index >= program.buffers.size()) {
    throw Error(ErrorKind::internal, "init.buffer", "/buffers/" + std::to_string(index),
                "buffer index out of range (" + std::to_string(program.buffers.size()) +
                    " buffers)");
  }
  try {
    return materialize_one(program, index, options);
  } catch (const std::bad_alloc&) {
    out_of_host_memory(program, index, buffer_bytes(program.buffers[index]).value_or(0));
  }
}

std::optional<uint64_t> host_memory_available() {
  std::optional<uint64_t> available;
  if (const auto info = read_text("/proc/meminfo")) {
    available = meminfo_bytes(*info, "MemAvailable");
    if (!available) {  // kernels before 3.14
      const auto free = meminfo_bytes(*info, "MemFree");
      const auto buffers = meminfo_bytes(*info, "Buffers");
      const auto cached = meminfo_bytes(*info, "Cached");
      if (free) available = *free + buffers.value_or(0) + cached.value_or(0);
    }
  }
  // A container's limit: cgroup v2, else v1 (whose "no limit" is a huge number). Its usage
  // counts the page cache, which the kernel reclaims before refusing: that is not taken.
  std::optional<uint64_t> limit = read_number("/sys/fs/cgroup/memory.max");
  std::optional<uint64_t> usage, cache;
  if (limit) {
    usage = read_number("/sys/fs/cgroup/memory.current");
    if (const auto stat = read_text("/sys/fs/cgroup/memory.stat"))
      cache = stat_field(*stat, "file", ' ');
  } else if ((limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"))) {
    usage = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    if (const auto stat = read_text("/sys/fs/cgroup/memory/memory.stat"))
      cache = stat_field(*stat, "total_cache", ' ');
  }
  if (limit) {
    const uint64_t used = usage.value_or(0) - std::min(usage.value_or(0), cache.value_or(0));
    const uint64_t room = *limit > used ? *limit - used : 0;
    available = available ? std::min(*available, room) : room;
  }
  return available;
}

void check_host_memory(const Program& program, std::optional<uint64_t> available,
                       const std::vector<bool>& counted) {
  if (!available || program.buffers.empty()) return;
  uint64_t needed = 0, most = 0;
  uint32_t biggest = 0;
  for (uint32_t i = 0; i < program.buffers.size(); ++i) {
    if (!counted.empty() && (i >= counted.size() || !counted[i])) continue;
    const uint64_t bytes = buffer_bytes(program.buffers[i]).value_or(0);
    needed = checked_add(needed, bytes).value_or(UINT64_MAX);
    if (bytes > most) {
      most = bytes;
      biggest = i;
    }
  }
  if (needed <= *available) return;
  throw Error(ErrorKind::device, "host.memory", "/buffers/" + std::to_string(biggest),
              "the buffers need " + std::to_string(needed) + " bytes (" + gib(needed) +
                  ") of host memory, " + std::to_string(*available) + " (" + gib(*available) +
                  ") are available; the biggest is '" + program.buffers[biggest].name + "' (" +
                  std::to_string(most) + " bytes)");
}

std::vector<std::byte> host_bytes(size_t bytes) {
  std::vector<std::byte> out;
  out.reserve(bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes >= 4 * kHuge) {
    const auto p = reinterpret_cast<uintptr_t>(out.data());
    const uintptr_t begin = (p + kHuge - 1) & ~(kHuge - 1), end = (p + bytes) & ~(kHuge - 1);
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
  out.resize(bytes);
  return out;
}

HostBuffers copy_host_buffers(const HostBuffers& from) {
  HostBuffers out;
  out.data.reserve(from.data.size());
  for (const auto& b : from.data) {
    out.data.push_back(host_bytes(b.size()));
    if (!b.empty()) std::memcpy(out.data.back().data(), b.data(), b.size());
  }
  return out;
}

HostBuffers materialize_all(const Program& program, const LoadOptions& options) {
  check_host_memory(program, host_memory_available());
  HostBuffers out;
  out.data.reserve(program.buffers.size());
  for (uint32_t i = 0; i < program.buffers.size(); ++i) {
    std::vector<std::byte> data = materialize_buffer(program, i, options);
    try {
      out.data.push_back(std::move(data));
    } catch (const std::bad_alloc&) {
      out_of_host_memory(program, i, buffer_bytes(program.buffers[i]).value_or(0));
    }
  }
  return out;
}

}  // namespace amk
