// The program model: what a program file (JSON or .amkb) says, after loading and before
// verification. Names are resolved to indices by the loader; everything here is plain data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amk_abi.h"

namespace amk {

inline constexpr uint32_t kFormatVersion = 1;  // program format version (JSON and .amkb)

// ---- limits (a file asking for more is refused before anything is allocated) ----
inline constexpr uint64_t kMaxBuffers = 1u << 16;
inline constexpr uint64_t kMaxCounters = 1u << 20;
inline constexpr uint64_t kMaxInstructions = 1u << 22;
// Queues, one per persistent block: also the bound on launch.grid. Every block of a persistent
// grid must be co-resident (SMs x blocks per SM: 132 x 32 = 4224 on an H100), so 65536 leaves
// room for any device while keeping what is planned per block small.
inline constexpr uint64_t kMaxQueues = 1u << 16;
inline constexpr uint64_t kMaxRank = 8;
// Ranks of a program (launch.ranks): one GPU each.
inline constexpr uint32_t kMaxRanks = 8;
inline constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 40;  // 1 TiB
inline constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 41;
inline constexpr uint64_t kMaxInlineValues = uint64_t{1} << 24;
inline constexpr uint64_t kMaxNameLength = 256;
inline constexpr uint64_t kMaxTmaDescriptors = 64;
inline constexpr uint64_t kMaxCustomOps = 64;
inline constexpr uint64_t kMaxCustomSourceBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxFileBytes = uint64_t{1} << 32;  // program file itself
// Nested arrays/objects in program JSON (the root is level 1). Programs use about 6; each level
// costs the reader memory, so a deeply nested file is refused while it is parsed.
inline constexpr uint64_t kMaxJsonDepth = 64;
// Passes over the queues in one launch (launch.passes): 24 bits in the .amkb header.
inline constexpr uint32_t kMaxPasses = (1u << 24) - 1;
inline constexpr uint64_t kMaxTimeoutMs =
    UINT32_MAX;  // ~49 days; timeout_ms * 1e6 ns stays in range
inline constexpr uint64_t kMaxTmaDim = uint64_t{1}
                                       << 32;  // cuTensorMapEncodeTiled's globalDim limit

// ---- element types ----
enum class DType : uint8_t {
  f32 = AMK_DTYPE_F32,
  f16 = AMK_DTYPE_F16,
  bf16 = AMK_DTYPE_BF16,
  i32 = AMK_DTYPE_I32,
  u32 = AMK_DTYPE_U32,
  i64 = AMK_DTYPE_I64,
  u8 = AMK_DTYPE_U8,
};
[[nodiscard]] size_t dtype_size(DType t) noexcept;
[[nodiscard]] std::string_view dtype_name(DType t) noexcept;
[[nodiscard]] std::optional<DType> parse_dtype(std::string_view name) noexcept;
[[nodiscard]] bool dtype_is_float(DType t) noexcept;

// ---- buffers ----
enum class InitKind : uint8_t {
  zeros = 0,        // all bits zero
  constant = 1,     // every element = constant
  random = 2,       // seeded: uniform in [low, high) or normal(mean, std)
  values = 3,       // inline values, stored as the buffer's dtype bytes in `data`
  npy = 4,          // a .npy file (dtype and element count must match)
  raw = 5,          // raw little-endian bytes of the buffer's dtype at `offset` in a file
  safetensors = 6,  // tensor `tensor` of a .safetensors file
};
[[nodiscard]] std::string_view init_kind_name(InitKind k) noexcept;

enum class Distribution : uint8_t { uniform = 0, normal = 1 };

struct BufferInit {
  InitKind kind = InitKind::zeros;
  double constant = 0.0;
  uint64_t seed = 0;
  Distribution distribution = Distribution::uniform;
  double a = -1.0;              // uniform: low;  normal: mean
  double b = 1.0;               // uniform: high; normal: std
  std::vector<std::byte> data;  // values: elements in the buffer's dtype, little endian
  std::string path;             // npy / raw / safetensors: as written in the program
  uint64_t offset = 0;          // raw: byte offset in the file
  std::string tensor;           // safetensors: tensor name
  // random / npy / safetensors: the buffer is the block at offsets `window_at` of a tensor of
  // shape `window_of` (one entry a dimension of the buffer); both empty: the whole tensor.
  std::vector<uint64_t> window_of, window_at;

  bool operator==(const BufferInit&) const = default;
};

struct Buffer {
  std::string name;
  DType dtype = DType::f32;
  std::vector<uint64_t> shape;  // row-major; empty shape = scalar (1 element)
  BufferInit init;
  bool output = false;
  // A program with ranks: each rank's initial contents (launch.ranks entries), or empty when
  // every rank starts from `init`.
  std::vector<BufferInit> rank_inits;

  [[nodiscard]] uint64_t elements() const noexcept;  // product of shape (checked at load)
  [[nodiscard]] uint64_t bytes() const noexcept;
  bool operator==(const Buffer&) const = default;
};

// The initial value of element `offset` of a u32 or i32 buffer, where the program states it
// (zeros, constant, inline values); nullopt for random or file contents.
[[nodiscard]] std::optional<int64_t> initial_index_value(const Buffer& buffer, uint64_t offset);

struct Counter {
  std::string name;
  bool operator==(const Counter&) const = default;
};

// ---- instructions ----
struct Operand {
  uint32_t buffer = AMK_NO_BUFFER;  // AMK_NO_BUFFER: an optional operand left out
  uint64_t offset = 0;              // elements
  uint64_t extent = 0;              // elements
  bool operator==(const Operand&) const = default;
};

// counter >= value * pass; carried: on the previous pass's signals, counter >= value * (pass - 1)
// (a loop-carried dependency of a program run over several passes; holds in the first pass).
struct Wait {
  uint32_t counter = 0;
  uint32_t value = 0;
  bool carried = false;
  bool operator==(const Wait&) const = default;
};

struct Signal {
  uint32_t counter = 0;
  uint32_t add = 1;
  bool operator==(const Signal&) const = default;
};

struct Instruction {
  std::string name;               // optional label, unique when present
  uint16_t op = 0;                // op id (ops/registry.hpp)
  std::vector<Operand> operands;  // in signature order, one per operand slot of the op
  std::vector<uint32_t> params;   // raw 32-bit words in signature order (f32 bits or integers)
  std::vector<Wait> waits;
  std::vector<Signal> signals;
  std::vector<uint32_t> ranks;  // a program with ranks: the ranks that run it (empty: every rank)
  bool operator==(const Instruction&) const = default;
};

// ---- the device ABI's form of an instruction's slots (planner and .amkb encoder alike) ----
// Operand slots stored: an empty slot 6 is left out, so a program without it keeps the bytes it
// had before the slot existed (operand6 all zero).
[[nodiscard]] inline size_t stored_operand_count(const Instruction& in) {
  const size_t n = in.operands.size();
  return n > AMK_INLINE_OPERANDS && in.operands[AMK_INLINE_OPERANDS].buffer == AMK_NO_BUFFER
             ? AMK_INLINE_OPERANDS
             : n;
}
// A wait as the ABI stores it (carried: AMK_WAIT_CARRIED in the counter word), and back.
[[nodiscard]] inline amk_wait_t abi_wait(const Wait& w) {
  return {w.counter | (w.carried ? AMK_WAIT_CARRIED : 0u), w.value};
}
[[nodiscard]] inline Wait program_wait(const amk_wait_t& w) {
  return {w.counter & ~AMK_WAIT_CARRIED, w.value, (w.counter & AMK_WAIT_CARRIED) != 0};
}

// ---- launch and target ----
enum class LaunchMode : uint8_t { cooperative = 0, cluster = 1 };

struct Launch {
  LaunchMode mode = LaunchMode::cooperative;
  uint32_t grid = 0;     // 0 = auto
  uint32_t block = 256;  // threads per block
  uint32_t cluster[3] = {1, 1, 1};
  uint32_t dynamic_smem = 0;    // bytes
  uint64_t timeout_ms = 10000;  // watchdog deadline
  uint32_t passes = 1;          // passes over the queues in one launch (a generation's steps)
  uint32_t ranks = 1;           // GPUs the program spans, each running its share of it
  bool operator==(const Launch& o) const {
    return mode == o.mode && grid == o.grid && block == o.block && cluster[0] == o.cluster[0] &&
           cluster[1] == o.cluster[1] && cluster[2] == o.cluster[2] &&
           dynamic_smem == o.dynamic_smem && timeout_ms == o.timeout_ms && passes == o.passes &&
           ranks == o.ranks;
  }
};

// Device features a program may require.
enum Feature : uint32_t {
  kFeatureCooperative = 1u << 0,
  kFeatureCluster = 1u << 1,
  kFeatureTma = 1u << 2,
};
[[nodiscard]] std::optional<uint32_t> parse_feature(std::string_view name) noexcept;
[[nodiscard]] std::vector<std::string> feature_names(uint32_t features);

struct Target {
  uint32_t min_arch = 0;        // e.g. 90 for sm_90; 0 = any
  uint32_t features = 0;        // Feature bits
  uint32_t smem_per_block = 0;  // bytes of shared memory per block the program needs; 0 = none
  bool operator==(const Target&) const = default;
};

// ---- TMA descriptor specs (cuTensorMapEncodeTiled arguments, in amk's words) ----
enum class TmaSwizzle : uint8_t { none = 0, b32 = 1, b64 = 2, b128 = 3 };
enum class TmaInterleave : uint8_t { none = 0, b16 = 1, b32 = 2 };
enum class TmaL2Promotion : uint8_t { none = 0, b64 = 1, b128 = 2, b256 = 3 };
enum class TmaOobFill : uint8_t { zeros = 0, nan = 1 };

struct TmaSpec {
  std::string name;
  uint32_t buffer = 0;
  uint64_t offset = 0;            // element offset of the tensor's base in the buffer
  std::vector<uint64_t> dims;     // innermost first (cuTensorMap order), rank 1..5
  std::vector<uint64_t> strides;  // bytes, rank-1 entries (dims 1..rank-1); derived if empty
  std::vector<uint32_t> box;      // elements per dim, each 1..256
  std::vector<uint32_t> element_strides;  // each 1..8; all 1 if empty
  TmaSwizzle swizzle = TmaSwizzle::none;
  TmaInterleave interleave = TmaInterleave::none;
  TmaL2Promotion l2_promotion = TmaL2Promotion::none;
  TmaOobFill oob_fill = TmaOobFill::zeros;
  bool operator==(const TmaSpec&) const = default;
};

// ---- custom ops (compiled only with the trust flag) ----
struct CustomOp {
  std::string name;                   // op name used by instructions
  std::string source;                 // CUDA device function source
  std::vector<std::string> operands;  // operand slot names
  std::vector<std::string> params;    // param names (32-bit words)
  bool operator==(const CustomOp&) const = default;
};

struct Program {
  std::string name;
  std::string description;  // free text, preserved by convert
  uint32_t version = kFormatVersion;
  Target target;
  Launch launch;
  std::vector<Buffer> buffers;
  std::vector<Counter> counters;
  std::vector<Instruction> instructions;
  std::optional<std::vector<std::vector<uint32_t>>> queues;  // none: amk schedules
  std::vector<TmaSpec> tma;
  std::vector<CustomOp> custom_ops;
  std::string base_dir;  // folder the program was loaded from (file paths resolve here)

  bool operator==(const Program& o) const {
    return name == o.name && description == o.description && version == o.version &&
           target == o.target && launch == o.launch && buffers == o.buffers &&
           counters == o.counters && instructions == o.instructions && queues == o.queues &&
           tma == o.tma && custom_ops == o.custom_ops;
  }
};

// f32 bits <-> param words.
[[nodiscard]] uint32_t f32_bits(float v) noexcept;
[[nodiscard]] float bits_f32(uint32_t w) noexcept;

}  // namespace amk
