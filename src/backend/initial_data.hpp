// A program's initial buffer contents as a backend consumes them, without building every byte on
// the host: zeros and constants are a fill (done on the device), file-backed data is a view of the
// memory-mapped file, and only random, inline and converted data are built in host memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/host_data.hpp"
#include "io/load.hpp"
#include "program/program.hpp"

namespace amk {

// One buffer's initial contents.
struct InitialSource {
  enum class Kind : uint8_t {
    zeros,  // every byte 0
    fill,   // `element` (element_size bytes) repeated
    bytes,  // `bytes`, exactly `size` of them
  };
  Kind kind = Kind::zeros;
  uint64_t size = 0;  // the buffer's bytes
  std::array<std::byte, 8> element{};
  uint32_t element_size = 0;
  std::span<const std::byte> bytes;
};

// Every buffer's InitialSource, in buffer order, and what keeps their `bytes` alive (file
// mappings, host vectors). Moves keep the spans valid; it is not copyable.
class InitialData {
public:
  InitialData() = default;
  InitialData(InitialData&&) noexcept = default;
  InitialData& operator=(InitialData&&) noexcept = default;
  InitialData(const InitialData&) = delete;
  InitialData& operator=(const InitialData&) = delete;

  [[nodiscard]] const std::vector<InitialSource>& sources() const noexcept { return sources_; }
  [[nodiscard]] size_t size() const noexcept { return sources_.size(); }
  [[nodiscard]] const InitialSource& operator[](size_t i) const { return sources_.at(i); }
  // Bytes of buffer i, built on the host (zeros and fills expanded).
  [[nodiscard]] std::vector<std::byte> expand(size_t i) const;

  // Views of `buffers` (which must outlive the result).
  [[nodiscard]] static InitialData view(const HostBuffers& buffers);
  // Takes `buffers` over.
  [[nodiscard]] static InitialData own(HostBuffers buffers);

private:
  friend InitialData initial_data(const Program&, const LoadOptions&);
  std::vector<InitialSource> sources_;
  std::vector<std::shared_ptr<const void>> keep_;
};

// The initial contents of every buffer of `program` (materialize_buffer's rules and errors):
// .npy, raw and .safetensors data read as they are are mapped, not read; random, inline values
// and converted .npy data are built on the host after check_host_memory on their bytes alone.
[[nodiscard]] InitialData initial_data(const Program& program, const LoadOptions& options = {});

// Error(io, io.read) at buffer `buffer`'s init path: a memory-mapped data file it reads shrank
// after it was mapped (core/mapped_read.hpp turned the fault into `false`).
[[noreturn]] void throw_data_file_shrank(size_t buffer);

// sha256 (hex) of the initial contents: over, for each buffer in order, its size (8 bytes,
// little endian) then the sha256 digest of each 64 MiB piece of its bytes (the last one shorter;
// none for an empty buffer). Pieces are hashed in parallel; the value does not depend on how.
[[nodiscard]] std::string data_fingerprint(const InitialData& data);
inline constexpr uint64_t kFingerprintPiece = uint64_t{64} << 20;

}  // namespace amk
