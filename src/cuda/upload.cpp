#include "cuda/upload.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/mapped_read.hpp"
#include "core/phase_log.hpp"
#include "cuda/driver.hpp"

namespace amk::cu {
namespace {

struct Chunk {
  uint64_t dst;
  std::span<const std::byte> src;
  size_t buffer;
};

template <class T>
T element_as(const InitialSource& s) {
  T v;
  std::memcpy(&v, s.element.data(), sizeof v);
  return v;
}

// A fill on the device: cuMemsetD8/D16/D32 by element size; an 8-byte element whose halves
// differ is copied from a staging buffer of repeated elements.
void fill(const InitialSource& s, uint64_t dst, CUstream stream, const std::string& what) {
  const DriverApi& d = driver();
  if (s.size == 0) return;
  if (s.kind == InitialSource::Kind::zeros) {
    check(d.memset_d8_async(dst, 0, s.size, stream), "cuMemsetD8Async", what);
    return;
  }
  const uint32_t lo = element_as<uint32_t>(s);
  uint32_t hi = lo;
  if (s.element_size == 8) std::memcpy(&hi, s.element.data() + 4, 4);
  if (s.element_size == 1) {
    check(d.memset_d8_async(dst, static_cast<unsigned char>(lo), s.size, stream), "cuMemsetD8Async",
          what);
  } else if (s.element_size == 2) {
    check(d.memset_d16_async(dst, element_as<uint16_t>(s), s.size / 2, stream), "cuMemsetD16Async",
          what);
  } else if (s.element_size == 4 || (s.element_size == 8 && lo == hi)) {
    check(d.memset_d32_async(dst, lo, s.size / 4, stream), "cuMemsetD32Async", what);
  } else {
    const size_t n = std::min<uint64_t>(s.size, size_t{1} << 20);
    const HostMappedMemory pattern = HostMappedMemory::allocate_staging(n, "a fill pattern");
    auto* p = static_cast<std::byte*>(pattern.host());
    for (size_t at = 0; at + s.element_size <= n; at += s.element_size)
      std::memcpy(p + at, s.element.data(), s.element_size);
    for (uint64_t at = 0; at < s.size; at += n)
      copy_to_device(dst + at, {p, std::min<uint64_t>(n, s.size - at)}, stream, what);
    check(d.stream_synchronize(stream), "cuStreamSynchronize", what);  // before `pattern` goes
  }
}

}  // namespace

void upload_initial(const InitialData& data, std::span<const uint64_t> addresses,
                    const PrimaryContext& context, CUstream stream,
                    const std::function<std::string(size_t)>& what) {
  if (addresses.size() != data.size())
    throw Error(ErrorKind::internal, "internal.upload_buffers", "",
                "initial contents for " + std::to_string(data.size()) + " buffers, " +
                    std::to_string(addresses.size()) + " addresses");
  uint64_t total = 0, staged = 0;
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < data.size(); ++i) {
    const InitialSource& s = data[i];
    total += s.size;
    if (s.kind != InitialSource::Kind::bytes) continue;
    staged += s.size;
    for (uint64_t at = 0; at < s.size; at += kStagingBytes)
      chunks.push_back({addresses[i] + at,
                        s.bytes.subspan(at, std::min<uint64_t>(kStagingBytes, s.size - at)), i});
  }
  ByteProgress progress("upload", total);
  std::mutex progress_mutex;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i].kind == InitialSource::Kind::bytes) continue;
    fill(data[i], addresses[i], stream, what(i));
    progress.add(data[i].size);
  }

  // One copying thread per 64 MiB staged, up to 8 (the calling thread is one of them).
  const unsigned threads = static_cast<unsigned>(
      std::clamp<uint64_t>((staged + (uint64_t{64} << 20) - 1) >> 26, 1,
                           std::min(8u, std::max(1u, std::thread::hardware_concurrency()))));
  const size_t slot_bytes = std::min<uint64_t>(kStagingBytes, std::max<uint64_t>(staged, 1));
  std::atomic<size_t> next{0};
  std::exception_ptr failed;
  size_t failed_at = SIZE_MAX;
  std::mutex failed_mutex;
  auto work = [&](bool own_thread) {
    size_t k = SIZE_MAX;
    try {
      if (own_thread) context.make_current();
      const Stream copies = Stream::create("an upload stream");
      HostMappedMemory slot[2];
      Event landed[2];
      for (size_t n = 0; (k = next.fetch_add(1)) < chunks.size(); ++n) {
        const Chunk& c = chunks[k];
        const size_t b = n % 2;
        if (!slot[b].host()) {
          slot[b] = HostMappedMemory::allocate_staging(slot_bytes, "an upload staging buffer");
          landed[b] = Event::create("an upload event");
        } else {
          landed[b].synchronize(what(c.buffer));  // the copy that used this buffer has landed
        }
        if (!copy_mapped(slot[b].host(), c.src.data(), c.src.size()))
          throw_data_file_shrank(c.buffer);
        copy_to_device(c.dst, {static_cast<const std::byte*>(slot[b].host()), c.src.size()},
                       copies.get(), what(c.buffer));
        landed[b].record(copies.get(), what(c.buffer));
        const std::lock_guard lock(progress_mutex);
        progress.add(c.src.size());
      }
      k = SIZE_MAX;
      copies.synchronize("the buffer upload");
    } catch (...) {
      const std::lock_guard lock(failed_mutex);
      if (!failed || k < failed_at) {
        failed = std::current_exception();
        failed_at = k;
      }
      next.store(chunks.size());
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, true);
  work(false);
  for (std::thread& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
  check(driver().stream_synchronize(stream), "cuStreamSynchronize", "the buffer fills");
}

}  // namespace amk::cu
