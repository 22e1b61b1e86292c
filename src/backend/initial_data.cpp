#include "backend/initial_data.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/init_sources.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/mapped_read.hpp"

namespace amk {
namespace {

// A whole data file mapped read-only. The range a buffer uses was checked against the file's
// size by locate_*; the mapping's own size is checked again, since the file may have changed.
class MappedFile {
public:
  MappedFile(const std::filesystem::path& path, const std::string& where) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw_io_error("io.read", where,
                     "cannot open data file '" + path.string() + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw_io_error("io.read", where, "cannot size data file '" + path.string() + "'");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ != 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        throw_io_error("io.read", where,
                       "cannot map data file '" + path.string() + "': " + std::strerror(e));
      }
      data_ = static_cast<const std::byte*>(p);
      // Read once, front to back, by the upload: ask the kernel to read ahead.
      (void)::madvise(p, size_, MADV_SEQUENTIAL);
      (void)::madvise(p, size_, MADV_WILLNEED);
    }
    ::close(fd);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  }

  [[nodiscard]] std::span<const std::byte> range(const FileRange& r,
                                                 const std::string& where) const {
    if (r.offset > size_ || r.bytes > size_ - r.offset)
      throw_io_error("io.read", where,
                     "data file '" + r.file.string() + "' changed while it was read: bytes [" +
                         std::to_string(r.offset) + ", " + std::to_string(r.offset + r.bytes) +
                         ") are past its end (" + std::to_string(size_) + " bytes)");
    return {data_ + r.offset, r.bytes};
  }

private:
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// Where a file-backed init's bytes are, when they are used as they are.
std::optional<FileRange> locate(const Program& program, uint32_t index,
                                const LoadOptions& options) {
  const Buffer& b = program.buffers[index];
  const BufferInit& init = b.init;
  const std::string where = "/buffers/" + std::to_string(index) + "/init/path";
  const uint64_t elements = checked_buffer_bytes(program, index) / dtype_size(b.dtype);
  if (!init.window_of.empty()) return std::nullopt;  // (a block of the file's tensor: read)
  switch (init.kind) {
    case InitKind::npy:
      return locate_npy(resolve_data_path(program, init.path, where, options), b.dtype, elements,
                        where);
    case InitKind::raw:
      return locate_raw(resolve_data_path(program, init.path, where, options), init.offset, b.dtype,
                        elements, where);
    case InitKind::safetensors:
      return locate_safetensors(resolve_data_path(program, init.path, where, options), init.tensor,
                                b.dtype, elements, where);
    default: return std::nullopt;
  }
}

// Runs task(i) for i in [0, n) on up to `threads` threads. After a failure no new task starts;
// the exception of the lowest failed i is rethrown (the one a sequential loop could reach first).
template <class Task>
void parallel_for(size_t n, unsigned threads, const Task& task) {
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(n)));
  std::atomic<size_t> next{0};
  std::exception_ptr failed;
  size_t failed_at = n;
  std::mutex failed_mutex;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        task(i);
      } catch (...) {
        const std::lock_guard lock(failed_mutex);
        if (i < failed_at) {
          failed = std::current_exception();
          failed_at = i;
        }
        next.store(n);
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
}

unsigned hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

void put_le64(std::byte* out, uint64_t v) {
  for (int k = 0; k < 8; ++k) out[k] = static_cast<std::byte>((v >> (8 * k)) & 0xff);
}

}  // namespace

void throw_data_file_shrank(size_t buffer) {
  throw_io_error("io.read", "/buffers/" + std::to_string(buffer) + "/init/path",
                 "the data file of buffer " + std::to_string(buffer) +
                     " shrank while it was read (its mapped pages are gone); nothing was "
                     "written");
}

std::vector<std::byte> InitialData::expand(size_t i) const {
  const InitialSource& s = sources_.at(i);
  std::vector<std::byte> out = host_bytes(s.size);
  switch (s.kind) {
    case InitialSource::Kind::zeros: break;
    case InitialSource::Kind::fill:
      for (uint64_t at = 0; at + s.element_size <= s.size; at += s.element_size)
        std::memcpy(out.data() + at, s.element.data(), s.element_size);
      break;
    case InitialSource::Kind::bytes:
      if (!copy_mapped(out.data(), s.bytes.data(), s.size)) throw_data_file_shrank(i);
      break;
  }
  return out;
}

InitialData InitialData::view(const HostBuffers& buffers) {
  InitialData d;
  d.sources_.reserve(buffers.data.size());
  for (const std::vector<std::byte>& b : buffers.data) {
    InitialSource s;
    s.kind = InitialSource::Kind::bytes;
    s.size = b.size();
    s.bytes = b;
    d.sources_.push_back(s);
  }
  return d;
}

InitialData InitialData::own(HostBuffers buffers) {
  auto held = std::make_shared<HostBuffers>(std::move(buffers));
  InitialData d = view(*held);
  d.keep_.push_back(std::move(held));
  return d;
}

InitialData initial_data(const Program& program, const LoadOptions& options) {
  const size_t n = program.buffers.size();
  InitialData d;
  d.sources_.resize(n);
  std::vector<bool> built(n, false);
  std::map<std::filesystem::path, std::shared_ptr<const MappedFile>> mapped;
  for (uint32_t i = 0; i < n; ++i) {
    const Buffer& b = program.buffers[i];
    InitialSource& s = d.sources_[i];
    s.size = checked_buffer_bytes(program, i);
    switch (b.init.kind) {
      case InitKind::zeros: s.kind = InitialSource::Kind::zeros; continue;
      case InitKind::constant:
        s.kind = InitialSource::Kind::fill;
        s.element = constant_element(program, i);
        s.element_size = static_cast<uint32_t>(dtype_size(b.dtype));
        continue;
      default: break;
    }
    const std::optional<FileRange> r = locate(program, i, options);
    if (!r) {
      built[i] = true;
      continue;
    }
    const std::string where = "/buffers/" + std::to_string(i) + "/init/path";
    std::shared_ptr<const MappedFile>& file = mapped[r->file];
    if (!file) {
      file = std::make_shared<const MappedFile>(r->file, where);
      d.keep_.push_back(file);
    }
    s.kind = InitialSource::Kind::bytes;
    s.bytes = file->range(*r, where);
  }

  // The rest on the host: several buffers at once (random_fill also splits a large one).
  check_host_memory(program, host_memory_available(), built);
  std::vector<uint32_t> todo;
  for (uint32_t i = 0; i < n; ++i)
    if (built[i]) todo.push_back(i);
  auto held = std::make_shared<HostBuffers>();
  held->data.resize(n);
  parallel_for(todo.size(), std::min(hardware_threads(), 8u), [&](size_t k) {
    const uint32_t i = todo[k];
    held->data[i] = materialize_buffer(program, i, options);
    InitialSource& s = d.sources_[i];
    s.kind = InitialSource::Kind::bytes;
    s.bytes = held->data[i];
  });
  d.keep_.push_back(std::move(held));
  return d;
}

std::string data_fingerprint(const InitialData& data) {
  struct Piece {
    size_t buffer;
    uint64_t offset, bytes;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < data.size(); ++i)
    for (uint64_t at = 0; at < data[i].size; at += kFingerprintPiece)
      pieces.push_back({i, at, std::min(kFingerprintPiece, data[i].size - at)});
  std::vector<std::array<uint8_t, 32>> digests(pieces.size());
  parallel_for(pieces.size(), hardware_threads(), [&](size_t k) {
    const Piece& p = pieces[k];
    const InitialSource& s = data[p.buffer];
    Sha256 h;
    if (s.kind == InitialSource::Kind::bytes) {
      struct Update {
        Sha256* h;
        std::span<const std::byte> bytes;
      } u{&h, s.bytes.subspan(p.offset, p.bytes)};
      if (!run_guarded(
              [](void* c) { static_cast<Update*>(c)->h->update(static_cast<Update*>(c)->bytes); },
              &u))
        throw_data_file_shrank(p.buffer);
    } else {
      // A zero or fill piece, hashed from a block of the pattern (fill pieces start on an element
      // boundary: the piece size is a multiple of every element size).
      std::vector<std::byte> block(std::min<uint64_t>(p.bytes, uint64_t{1} << 20));
      if (s.kind == InitialSource::Kind::fill)
        for (size_t at = 0; at + s.element_size <= block.size(); at += s.element_size)
          std::memcpy(block.data() + at, s.element.data(), s.element_size);
      for (uint64_t done = 0; done < p.bytes;) {
        const uint64_t m = std::min<uint64_t>(block.size(), p.bytes - done);
        h.update(std::span<const std::byte>(block.data(), m));
        done += m;
      }
    }
    digests[k] = h.finish();
  });
  Sha256 h;
  size_t k = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    std::byte size_le[8];
    put_le64(size_le, data[i].size);
    h.update(std::span<const std::byte>(size_le, 8));
    for (; k < pieces.size() && pieces[k].buffer == i; ++k)
      h.update(std::as_bytes(std::span(digests[k])));
  }
  return h.finish_hex();
}

}  // namespace amk
