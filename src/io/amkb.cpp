// .amkb: the binary encoding of program format v1. The layout and every error code are specified
// in schemas/amkb.md; keep the two in step. The reader is an attack surface (fuzzed): every
// count, size, offset and index is checked with overflow-safe arithmetic before it is used to
// read or allocate, and nothing outside the input span is ever touched.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/numeric.hpp"
#include "io/amkb_bytes.hpp"
#include "io/amkb_frame.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

using namespace amkb_bytes;
using namespace amkb_frame;

// The file is little endian and the instruction table is memcpy'd as is.
static_assert(std::endian::native == std::endian::little, ".amkb I/O assumes a little-endian host");

// "AMKB" then CR LF SUB LF, which catch text-mode line-ending damage.
constexpr std::array<uint8_t, 8> kMagic = {'A', 'M', 'K', 'B', '\r', '\n', 0x1A, '\n'};
constexpr uint32_t kMaxSections = 16;
constexpr uint64_t kDataAlign = 256;  // every inline-values blob starts on this file alignment

// The header's own words: the instruction ABI version and the instruction size.
constexpr size_t kHdrAbiVersion = kHdrOwn20;
constexpr size_t kHdrInstrBytes = kHdrOwn24;

enum AmkbSection : uint32_t { kMeta = 1, kInstr = 2, kQueues = 3, kData = 4 };

constexpr SectionKind kKinds[] = {
    {kMeta, "META", 8, true},
    {kInstr, "INSTR", 256, true},
    {kQueues, "QUEUES", 16, false},
    {kData, "DATA", kDataAlign, false},
};

[[noreturn]] void encode_fail(std::string where, std::string msg) {
  throw Error(ErrorKind::program, "amkb.encode", std::move(where), std::move(msg));
}

uint16_t rd16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

bool valid_utf8(std::string_view s) { return invalid_utf8_at(s) == std::string_view::npos; }

bool name_char_ok(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '/' || c == '-';
}

bool finite_bits(DType t, const uint8_t* p) {
  switch (t) {
    case DType::f32: return (rd32(p) & 0x7F800000u) != 0x7F800000u;
    case DType::f16: return (rd16(p) & 0x7C00u) != 0x7C00u;
    case DType::bf16: return (rd16(p) & 0x7F80u) != 0x7F80u;
    default: return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Reading

// A bounds-checked cursor over one section. Every read states what it reads, so a short section
// names the field it ended in.
class Cursor {
public:
  Cursor(const uint8_t* file, const Section& s, std::string code)
      : file_(file), pos_(s.offset), end_(s.offset + s.size), code_(std::move(code)) {
    area_ = std::string("section ") + s.name;
  }

  [[nodiscard]] uint64_t pos() const { return pos_; }
  [[nodiscard]] uint64_t remaining() const { return end_ - pos_; }
  [[nodiscard]] const std::string& area() const { return area_; }

  [[noreturn]] void fail_at(uint64_t at, std::string code, std::string msg) const {
    fail(std::move(code), area_, at, std::move(msg));
  }
  [[noreturn]] void bad(uint64_t at, std::string msg) const { fail_at(at, code_, std::move(msg)); }

  void need(uint64_t n, std::string_view what) const {
    if (remaining() < n)
      bad(pos_, std::string(area_.substr(8)) + " ends inside " + std::string(what));
  }
  const uint8_t* take(uint64_t n, std::string_view what) {
    need(n, what);
    const uint8_t* p = file_ + pos_;
    pos_ += n;
    return p;
  }
  uint8_t u8(std::string_view what) { return *take(1, what); }
  uint32_t u32(std::string_view what) { return rd32(take(4, what)); }
  uint64_t u64(std::string_view what) { return rd64(take(8, what)); }
  double f64(std::string_view what) {
    uint64_t at = pos_;
    double v = std::bit_cast<double>(u64(what));
    // JSON has no NaN or infinity: refuse what the JSON encoding could not carry.
    if (!std::isfinite(v)) bad(at, std::string(what) + " is not a finite number");
    return v;
  }
  void zero(uint64_t n, std::string_view what) {
    uint64_t at = pos_;
    if (!all_zero(take(n, what), n)) bad(at, std::string(what) + " must be zero");
  }

  // u32 length + UTF-8 bytes. The length is checked against the section before allocating.
  std::string str(std::string_view what, uint64_t max_len = UINT64_MAX,
                  std::string_view limit_code = {}) {
    uint64_t at = pos_;
    uint32_t len = u32(what);
    if (len > max_len)
      fail_at(at, std::string(limit_code),
              std::string(what) + " is " + std::to_string(len) + " bytes (limit " +
                  std::to_string(max_len) + ")");
    const uint8_t* p = take(len, what);
    std::string s(reinterpret_cast<const char*>(p), len);
    if (!valid_utf8(s)) bad(at, std::string(what) + " is not valid UTF-8");
    return s;
  }

  // A name: 1..kMaxNameLength characters of [A-Za-z0-9_.:/-]. `key` names are JSON object keys
  // (operand slots, params), where a leading '_' would read as a comment.
  std::string name(std::string_view what, bool key = false, bool allow_empty = false) {
    uint64_t at = pos_;
    std::string s = str(what, kMaxNameLength, "limit.name");
    if (s.empty() && allow_empty) return s;
    if (s.empty()) bad(at, std::string(what) + " is empty");
    for (char c : s)
      if (!name_char_ok(c))
        bad(at, std::string(what) + " '" + s + "' has a character outside [A-Za-z0-9_.:/-]");
    if (key && s[0] == '_') bad(at, std::string(what) + " '" + s + "' may not start with '_'");
    return s;
  }

  // A path or tensor name: non-empty, no NUL.
  std::string text_ref(std::string_view what) {
    uint64_t at = pos_;
    std::string s = str(what);
    if (s.empty()) bad(at, std::string(what) + " is empty");
    if (s.find('\0') != std::string::npos) bad(at, std::string(what) + " contains a NUL byte");
    return s;
  }

  // An element count, refused when over `limit` or when the rest of the section could not hold
  // `count` records of at least `min_record` bytes (so reserve(count) is always bounded).
  uint32_t count(std::string_view what, uint64_t limit, std::string_view limit_code,
                 uint64_t min_record) {
    uint64_t at = pos_;
    uint32_t c = u32(what);
    if (c > limit)
      fail_at(at, std::string(limit_code),
              std::string(what) + " " + std::to_string(c) + " exceeds the limit " +
                  std::to_string(limit));
    auto need_bytes = checked_mul(c, min_record);
    if (!need_bytes || *need_bytes > remaining())
      bad(at, std::string(what) + " " + std::to_string(c) + " cannot fit in the " +
                  std::to_string(remaining()) + " bytes left");
    return c;
  }

private:
  const uint8_t* file_;
  uint64_t pos_;
  uint64_t end_;
  std::string code_;
  std::string area_;
};

struct ValuesRef {
  uint32_t buffer = 0;
  uint64_t offset = 0;  // within DATA
  uint64_t bytes = 0;
};

struct Meta {
  std::vector<std::string> instruction_names;
  std::vector<ValuesRef> values;
  uint64_t data_next = 0;  // DATA offset the next values blob must start at
  uint64_t data_size = 0;  // DATA size the values need (the last blob is not padded)
};

void read_buffers(Cursor& r, Program& p, Meta& meta) {
  uint32_t n = r.count("buffer count", kMaxBuffers, "limit.buffers", 8);
  p.buffers.reserve(n);
  std::set<std::string, std::less<>> names;
  uint64_t total_bytes = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Buffer b;
    uint64_t at = r.pos();
    b.name = r.name("buffer name");
    if (!names.insert(b.name).second) r.bad(at, "duplicate buffer name '" + b.name + "'");
    at = r.pos();
    uint8_t dtype = r.u8("buffer dtype");
    if (dtype >= AMK_DTYPE_COUNT) r.bad(at, "unknown dtype " + std::to_string(dtype));
    b.dtype = static_cast<DType>(dtype);
    at = r.pos();
    uint8_t output = r.u8("buffer output flag");
    if (output > 1) r.bad(at, "output flag must be 0 or 1");
    b.output = output == 1;
    at = r.pos();
    uint8_t rank = r.u8("buffer rank");
    if (rank > kMaxRank)
      r.fail_at(at, "limit.rank",
                "rank " + std::to_string(rank) + " exceeds " + std::to_string(kMaxRank));
    at = r.pos();
    uint8_t kind = r.u8("init kind");
    if (kind > static_cast<uint8_t>(InitKind::safetensors))
      r.bad(at, "unknown init kind " + std::to_string(kind));
    b.init.kind = static_cast<InitKind>(kind);

    uint64_t elements = 1;
    bool too_big = false;
    for (uint8_t d = 0; d < rank; ++d) {
      at = r.pos();
      uint64_t dim = r.u64("buffer shape");
      if (dim == 0) r.bad(at, "buffer '" + b.name + "' has a zero dimension");
      auto e = checked_mul(elements, dim);
      if (!e)
        too_big = true;
      else
        elements = *e;
      b.shape.push_back(dim);
    }
    auto bytes = checked_mul(elements, dtype_size(b.dtype));
    if (too_big || !bytes || *bytes > kMaxBufferBytes)
      r.fail_at(at, "limit.buffer_bytes",
                "buffer '" + b.name + "' exceeds " + std::to_string(kMaxBufferBytes) + " bytes");
    auto total = checked_add(total_bytes, *bytes);
    if (!total || *total > kMaxTotalBytes)
      r.fail_at(at, "limit.total_bytes",
                "buffers exceed " + std::to_string(kMaxTotalBytes) + " bytes in total");
    total_bytes = *total;

    BufferInit& init = b.init;
    switch (init.kind) {
      case InitKind::zeros: break;
      case InitKind::constant:
        at = r.pos();
        init.constant = r.f64("constant value");
        if (!value_fits(b.dtype, init.constant))
          r.bad(at, "constant does not fit " + std::string(dtype_name(b.dtype)));
        break;
      case InitKind::random: {
        init.seed = r.u64("random seed");
        at = r.pos();
        uint8_t dist = r.u8("random distribution");
        if (dist > 1) r.bad(at, "unknown distribution " + std::to_string(dist));
        init.distribution = static_cast<Distribution>(dist);
        r.zero(7, "random reserved bytes");
        init.a = r.f64("random parameter a");
        at = r.pos();
        init.b = r.f64("random parameter b");
        if (init.distribution == Distribution::uniform && !(init.a < init.b))
          r.bad(at, "uniform random needs high > low");
        if (init.distribution == Distribution::normal && !(init.b >= 0.0))
          r.bad(at, "normal random needs std >= 0");
        break;
      }
      case InitKind::values: {
        at = r.pos();
        uint64_t off = r.u64("values offset");
        uint64_t len = r.u64("values size");
        if (elements > kMaxInlineValues)
          r.fail_at(at, "limit.values",
                    "buffer '" + b.name + "' has " + std::to_string(elements) +
                        " inline values (limit " + std::to_string(kMaxInlineValues) + ")");
        if (len != *bytes)
          r.fail_at(at + 8, "amkb.data",
                    "buffer '" + b.name + "' values hold " + std::to_string(len) +
                        " bytes, the buffer has " + std::to_string(*bytes));
        if (off != meta.data_next)
          r.fail_at(at, "amkb.data",
                    "buffer '" + b.name + "' values at DATA offset " + std::to_string(off) +
                        ", expected " + std::to_string(meta.data_next));
        meta.values.push_back({i, off, len});
        // Bounded: len <= 2^24 * 8 per buffer and at most 2^16 buffers.
        meta.data_size = off + len;
        meta.data_next = *checked_align_up(meta.data_size, kDataAlign);
        break;
      }
      case InitKind::npy: init.path = r.text_ref("npy path"); break;
      case InitKind::raw:
        init.path = r.text_ref("raw path");
        init.offset = r.u64("raw offset");
        break;
      case InitKind::safetensors:
        init.path = r.text_ref("safetensors path");
        init.tensor = r.text_ref("safetensors tensor");
        break;
    }
    p.buffers.push_back(std::move(b));
  }
}

void read_tma(Cursor& r, Program& p) {
  uint32_t n = r.count("tma count", kMaxTmaDescriptors, "limit.tma", 24);
  p.tma.reserve(n);
  std::set<std::string, std::less<>> names;
  for (uint32_t i = 0; i < n; ++i) {
    TmaSpec t;
    uint64_t at = r.pos();
    t.name = r.name("tma name");
    if (!names.insert(t.name).second) r.bad(at, "duplicate tma name '" + t.name + "'");
    at = r.pos();
    t.buffer = r.u32("tma buffer");
    if (t.buffer >= p.buffers.size())
      r.fail_at(at, "ref.buffer",
                "tma '" + t.name + "' names buffer " + std::to_string(t.buffer) + " of " +
                    std::to_string(p.buffers.size()));
    t.offset = r.u64("tma offset");
    at = r.pos();
    const uint8_t* h = r.take(8, "tma geometry");
    uint8_t rank = h[0], n_strides = h[1], n_es = h[2];
    if (rank < 1 || rank > 5) r.bad(at, "tma rank " + std::to_string(rank) + " is not 1..5");
    if (n_strides != 0 && n_strides != rank - 1)
      r.bad(at + 1, "tma strides must be empty or rank-1 entries");
    if (n_es != 0 && n_es != rank)
      r.bad(at + 2, "tma element_strides must be empty or rank entries");
    if (h[3] > 3) r.bad(at + 3, "unknown tma swizzle " + std::to_string(h[3]));
    if (h[4] > 2) r.bad(at + 4, "unknown tma interleave " + std::to_string(h[4]));
    if (h[5] > 3) r.bad(at + 5, "unknown tma l2_promotion " + std::to_string(h[5]));
    if (h[6] > 1) r.bad(at + 6, "unknown tma oob_fill " + std::to_string(h[6]));
    if (h[7] != 0) r.bad(at + 7, "tma reserved byte must be zero");
    t.swizzle = static_cast<TmaSwizzle>(h[3]);
    t.interleave = static_cast<TmaInterleave>(h[4]);
    t.l2_promotion = static_cast<TmaL2Promotion>(h[5]);
    t.oob_fill = static_cast<TmaOobFill>(h[6]);
    for (uint8_t k = 0; k < rank; ++k) {
      at = r.pos();
      uint64_t d = r.u64("tma dims");
      if (d == 0 || d > kMaxTmaDim)
        r.bad(at, "tma dimension " + std::to_string(d) + " is not 1..2^32");
      t.dims.push_back(d);
    }
    for (uint8_t k = 0; k < n_strides; ++k) t.strides.push_back(r.u64("tma strides"));
    for (uint8_t k = 0; k < rank; ++k) {
      at = r.pos();
      uint32_t v = r.u32("tma box");
      if (v < 1 || v > 256) r.bad(at, "tma box entry " + std::to_string(v) + " is not 1..256");
      t.box.push_back(v);
    }
    for (uint8_t k = 0; k < n_es; ++k) {
      at = r.pos();
      uint32_t v = r.u32("tma element_strides");
      if (v < 1 || v > 8) r.bad(at, "tma element stride " + std::to_string(v) + " is not 1..8");
      t.element_strides.push_back(v);
    }
    p.tma.push_back(std::move(t));
  }
}

void read_custom_ops(Cursor& r, Program& p, const LoadOptions& options) {
  uint64_t at = r.pos();
  uint32_t n = r.count("custom op count", kMaxCustomOps, "limit.custom_ops", 16);
  if (n > 0 && !options.trust_custom_ops)
    r.fail_at(at, "custom.untrusted",
              "the program has " + std::to_string(n) +
                  " custom op(s); they run only with --trust-custom-ops");
  p.custom_ops.reserve(n);
  std::set<std::string, std::less<>> names;
  for (uint32_t i = 0; i < n; ++i) {
    CustomOp op;
    at = r.pos();
    op.name = r.name("custom op name");
    if (find_op(std::string_view(op.name)))
      r.bad(at, "custom op '" + op.name + "' has the name of a built-in op");
    if (find_retired_op(std::string_view(op.name)))
      r.bad(at, "custom op '" + op.name + "' has the name of a retired built-in op");
    if (!names.insert(op.name).second) r.bad(at, "duplicate custom op '" + op.name + "'");
    at = r.pos();
    op.source = r.str("custom op source", kMaxCustomSourceBytes, "limit.custom_source");
    if (op.source.empty()) r.bad(at, "custom op '" + op.name + "' has no source");
    auto read_keys = [&](std::vector<std::string>& out, uint64_t limit, const char* what) {
      uint64_t cat = r.pos();
      uint32_t c = r.u32(what);
      if (c > limit)
        r.bad(cat,
              std::string(what) + " " + std::to_string(c) + " exceeds " + std::to_string(limit));
      std::set<std::string, std::less<>> seen;
      for (uint32_t k = 0; k < c; ++k) {
        uint64_t kat = r.pos();
        out.push_back(r.name(what, true));
        if (!seen.insert(out.back()).second) r.bad(kat, "duplicate name '" + out.back() + "'");
      }
    };
    read_keys(op.operands, AMK_MAX_OPERANDS, "custom op operand");
    read_keys(op.params, AMK_MAX_PARAMS, "custom op param");
    p.custom_ops.push_back(std::move(op));
  }
}

Meta read_meta(const uint8_t* f, const Section& s, uint64_t n_instructions, Program& p,
               const LoadOptions& options) {
  Cursor r(f, s, "amkb.meta");
  Meta meta;
  p.name = r.name("program name");
  p.description = r.str("description");
  uint64_t at = r.pos();
  p.version = r.u32("program version");
  if (p.version != kFormatVersion)
    r.fail_at(at, "amkb.version",
              "program version " + std::to_string(p.version) + " (expected " +
                  std::to_string(kFormatVersion) + ")");

  at = r.pos();
  p.target.min_arch = r.u32("target min_arch");
  // JSON writes it as "sm_XY" / "sm_XYZ" (no leading zero) or 0.
  if (p.target.min_arch != 0 && (p.target.min_arch < 10 || p.target.min_arch > 999))
    r.bad(at, "target min_arch " + std::to_string(p.target.min_arch) + " is not 0 or 10..999");
  at = r.pos();
  p.target.features = r.u32("target features");
  if (p.target.features & ~uint32_t{kFeatureCooperative | kFeatureCluster | kFeatureTma})
    r.bad(at, "unknown target feature bits");
  p.target.smem_per_block = r.u32("target smem_per_block");

  at = r.pos();
  uint8_t mode = r.u8("launch mode");
  if (mode > 1) r.bad(at, "unknown launch mode " + std::to_string(mode));
  p.launch.mode = static_cast<LaunchMode>(mode);
  {  // passes, 24 bits little-endian; 0 (files from before the field) is one pass
    at = r.pos();
    const uint32_t b0 = r.u8("launch passes"), b1 = r.u8("launch passes"),
                   b2 = r.u8("launch passes");
    const uint32_t passes = b0 | b1 << 8 | b2 << 16;
    p.launch.passes = passes == 0 ? 1 : passes;
  }
  at = r.pos();
  p.launch.grid = r.u32("launch grid");
  if (p.launch.grid > kMaxQueues)
    r.bad(at, "launch grid " + std::to_string(p.launch.grid) + " exceeds " +
                  std::to_string(kMaxQueues) + " blocks");
  at = r.pos();
  p.launch.block = r.u32("launch block");
  if (p.launch.block < 32 || p.launch.block > 1024 || p.launch.block % 32 != 0)
    r.bad(at, "launch block " + std::to_string(p.launch.block) +
                  " is not a multiple of 32 in 32..1024");
  for (uint32_t& c : p.launch.cluster) {
    at = r.pos();
    c = r.u32("launch cluster");
    if (c == 0) r.bad(at, "launch cluster dimensions must be positive");
  }
  p.launch.dynamic_smem = r.u32("launch dynamic_smem");
  at = r.pos();
  p.launch.timeout_ms = r.u64("launch timeout_ms");
  if (p.launch.timeout_ms == 0 || p.launch.timeout_ms > kMaxTimeoutMs)
    r.bad(at, "launch timeout_ms " + std::to_string(p.launch.timeout_ms) + " is not 1.." +
                  std::to_string(kMaxTimeoutMs));

  read_buffers(r, p, meta);

  uint32_t n_counters = r.count("counter count", kMaxCounters, "limit.counters", 5);
  p.counters.reserve(n_counters);
  std::set<std::string, std::less<>> names;
  for (uint32_t i = 0; i < n_counters; ++i) {
    at = r.pos();
    Counter c{r.name("counter name")};
    if (!names.insert(c.name).second) r.bad(at, "duplicate counter name '" + c.name + "'");
    p.counters.push_back(std::move(c));
  }

  at = r.pos();
  uint32_t n_names = r.count("instruction name count", kMaxInstructions, "limit.instructions", 4);
  if (n_names != n_instructions)
    r.bad(at, "instruction name count " + std::to_string(n_names) + " differs from the " +
                  std::to_string(n_instructions) + " instructions in INSTR");
  meta.instruction_names.reserve(n_names);
  names.clear();
  for (uint32_t i = 0; i < n_names; ++i) {
    at = r.pos();
    // Empty = unnamed; otherwise a name, unique.
    meta.instruction_names.push_back(r.name("instruction name", false, true));
    if (!meta.instruction_names.back().empty() &&
        !names.insert(meta.instruction_names.back()).second)
      r.bad(at, "duplicate instruction name '" + meta.instruction_names.back() + "'");
  }

  read_tma(r, p);
  read_custom_ops(r, p, options);
  if (r.remaining() != 0)
    r.bad(r.pos(), std::to_string(r.remaining()) + " unexpected bytes at the end of META");
  return meta;
}

[[noreturn]] void instr_fail(uint64_t base, size_t field, uint64_t i, std::string code,
                             std::string msg) {
  fail(std::move(code), "section INSTR", base + field,
       "instruction " + std::to_string(i) + ": " + std::move(msg));
}

void read_instructions(const uint8_t* f, const Section& s, const std::vector<std::string>& names,
                       Program& p) {
  const uint64_t n = s.size / AMK_INSTRUCTION_BYTES;
  p.instructions.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t base = s.offset + i * AMK_INSTRUCTION_BYTES;
    amk_instruction_t a;
    std::memcpy(&a, f + base, sizeof a);
    auto bad = [&](size_t field, std::string code, std::string msg) {
      instr_fail(base, field, i, std::move(code), std::move(msg));
    };
    if (a.index != i)
      bad(offsetof(amk_instruction_t, index), "amkb.instruction",
          "index field " + std::to_string(a.index) + " differs from its position");
    if (a.flags != 0)
      bad(offsetof(amk_instruction_t, flags), "amkb.instruction", "flags must be zero in a file");
    if (a.reserved0 != 0)
      bad(offsetof(amk_instruction_t, reserved0), "amkb.instruction", "reserved0 must be zero");
    if (a.n_operands <= AMK_INLINE_OPERANDS &&
        !all_zero(reinterpret_cast<const uint8_t*>(&a.operand6), sizeof a.operand6))
      bad(offsetof(amk_instruction_t, operand6), "amkb.instruction",
          "operand slot 6 must be zero when n_operands is below 7");
    if (a.n_operands > AMK_MAX_OPERANDS || a.n_waits > AMK_MAX_WAITS ||
        a.n_signals > AMK_MAX_SIGNALS || a.n_params > AMK_MAX_PARAMS)
      bad(offsetof(amk_instruction_t, n_operands), "amkb.instruction",
          "operand/wait/signal/param count exceeds the ABI capacity");

    // The op and its signature: built-in, or a custom op declared in META.
    const OpSig* sig = find_op(a.op);
    const CustomOp* custom = nullptr;
    if (!sig) {
      if (a.op >= kCustomOpBase && size_t{a.op} - kCustomOpBase < p.custom_ops.size())
        custom = &p.custom_ops[a.op - kCustomOpBase];
      else if (const RetiredOp* retired = find_retired_op(a.op))
        instr_fail(base, offsetof(amk_instruction_t, op), i, "op.retired",
                   retired_op_message(*retired));
      else
        instr_fail(base, offsetof(amk_instruction_t, op), i, "ref.op",
                   "unknown op id " + std::to_string(a.op));
    }
    const size_t slots = sig ? sig->operands.size() : custom->operands.size();
    const size_t n_params = sig ? sig->params.size() : custom->params.size();
    const std::string op_label = sig ? std::string(sig->name) : custom->name;
    // Files written before a built-in op grew trailing optional operands or defaulted params
    // (gemv's norm/w2/eps, attention_decode's k_new/v_new/rope params) hold fewer slots: those
    // load as if the new slots were left out (empty operands, default params).
    size_t min_slots = slots, min_params = n_params;
    if (sig) {
      while (min_slots > 0 && sig->operands[min_slots - 1].optional) --min_slots;
      while (min_params > 0 && sig->params[min_params - 1].default_value) --min_params;
    }
    if (a.n_operands > slots || a.n_operands < min_slots)
      bad(offsetof(amk_instruction_t, n_operands), "amkb.instruction",
          "op " + op_label + " has " + std::to_string(slots) + " operand slots, n_operands is " +
              std::to_string(a.n_operands));
    if (a.n_params > n_params || a.n_params < min_params)
      bad(offsetof(amk_instruction_t, n_params), "amkb.instruction",
          "op " + op_label + " has " + std::to_string(n_params) + " params, n_params is " +
              std::to_string(a.n_params));

    // Unused slots are fixed (as the planner's encode_instruction writes them) so that equal
    // programs have equal bytes: operands {0, 0, AMK_NO_BUFFER}, everything else zero.
    auto unused_zero = [&](const void* arr, size_t used, size_t cap, size_t elem, size_t field,
                           const char* what) {
      const auto* b = static_cast<const uint8_t*>(arr);
      if (!all_zero(b + used * elem, (cap - used) * elem))
        bad(field + used * elem, "amkb.instruction",
            std::string("unused ") + what + " slots must be zero");
    };
    for (size_t k = a.n_operands; k < AMK_INLINE_OPERANDS; ++k) {
      const amk_operand_t& o = a.operands[k];
      if (o.offset != 0 || o.extent != 0 || o.buffer != AMK_NO_BUFFER)
        bad(offsetof(amk_instruction_t, operands) + k * sizeof(amk_operand_t), "amkb.instruction",
            "unused operand slots must be {offset 0, extent 0, AMK_NO_BUFFER}");
    }
    unused_zero(a.waits, a.n_waits, AMK_MAX_WAITS, sizeof(amk_wait_t),
                offsetof(amk_instruction_t, waits), "wait");
    unused_zero(a.signals, a.n_signals, AMK_MAX_SIGNALS, sizeof(amk_signal_t),
                offsetof(amk_instruction_t, signals), "signal");
    unused_zero(a.params, a.n_params, AMK_MAX_PARAMS, sizeof(uint32_t),
                offsetof(amk_instruction_t, params), "param");

    Instruction in;
    in.name = names[i];
    in.op = a.op;
    for (uint8_t k = 0; k < a.n_operands; ++k) {
      const amk_operand_t& o = amk_ins_operand(a, k);
      const size_t field = k < AMK_INLINE_OPERANDS
                               ? offsetof(amk_instruction_t, operands) + k * sizeof(amk_operand_t)
                               : offsetof(amk_instruction_t, operand6);
      if (o.buffer == AMK_NO_BUFFER) {
        if (!sig || !sig->operands[k].optional)
          bad(field + offsetof(amk_operand_t, buffer), "amkb.instruction",
              "required operand slot " + std::to_string(k) + " of op " + op_label + " is empty");
        if (o.offset != 0 || o.extent != 0)
          bad(field, "amkb.instruction", "an empty operand slot must have offset and extent 0");
      } else if (o.buffer >= p.buffers.size()) {
        bad(field + offsetof(amk_operand_t, buffer), "ref.buffer",
            "operand " + std::to_string(k) + " names buffer " + std::to_string(o.buffer) + " of " +
                std::to_string(p.buffers.size()));
      } else if (!checked_add(o.offset, o.extent)) {
        bad(field, "amkb.instruction",
            "operand " + std::to_string(k) + " offset + extent overflows");
      }
      in.operands.push_back({o.buffer, o.offset, o.extent});
    }
    for (uint8_t k = 0; k < a.n_waits; ++k) {
      const Wait w = program_wait(a.waits[k]);
      if (w.counter >= p.counters.size())
        bad(offsetof(amk_instruction_t, waits) + k * sizeof(amk_wait_t), "ref.counter",
            "wait " + std::to_string(k) + " names counter " + std::to_string(w.counter) + " of " +
                std::to_string(p.counters.size()));
      in.waits.push_back(w);
    }
    for (uint8_t k = 0; k < a.n_signals; ++k) {
      if (a.signals[k].counter >= p.counters.size())
        bad(offsetof(amk_instruction_t, signals) + k * sizeof(amk_signal_t), "ref.counter",
            "signal " + std::to_string(k) + " names counter " +
                std::to_string(a.signals[k].counter) + " of " + std::to_string(p.counters.size()));
      in.signals.push_back({a.signals[k].counter, a.signals[k].add});
    }
    for (uint8_t k = 0; k < a.n_params; ++k) {
      // JSON params are numbers: an f32 param that is NaN or infinite has no JSON form.
      if (sig && sig->params[k].type == ParamType::f32 &&
          (a.params[k] & 0x7F800000u) == 0x7F800000u)
        bad(offsetof(amk_instruction_t, params) + k * 4, "amkb.instruction",
            "param " + std::string(sig->params[k].name) + " is not a finite f32");
      in.params.push_back(a.params[k]);
    }
    for (size_t k = a.n_operands; k < slots; ++k) in.operands.push_back(Operand{});
    for (size_t k = a.n_params; k < n_params; ++k) {
      const auto word = encode_param(sig->params[k].type, *sig->params[k].default_value);
      in.params.push_back(word ? *word : 0u);
    }
    p.instructions.push_back(std::move(in));
  }
}

void read_queues(const uint8_t* f, const Section& s, Program& p) {
  Cursor r(f, s, "amkb.queue");
  uint64_t at = r.pos();
  uint32_t n_queues = r.u32("queue count");
  uint32_t n_items = r.u32("queue item count");
  if (n_queues > kMaxQueues)
    r.fail_at(at, "limit.queues",
              "queue count " + std::to_string(n_queues) + " exceeds " + std::to_string(kMaxQueues));
  if (n_queues == 0) r.bad(at, "queue count must be positive");
  if (p.launch.grid != 0 && p.launch.grid != n_queues)
    r.bad(at,
          std::to_string(n_queues) + " queues but launch.grid is " + std::to_string(p.launch.grid));
  // n_queues <= 2^16 and n_items < 2^32: no overflow in 64 bits.
  const uint64_t expect = 8 + 4 * (uint64_t{n_queues} + 1) + 4 * uint64_t{n_items};
  if (s.size != expect)
    r.bad(at + 4, "section holds " + std::to_string(s.size) + " bytes, the counts need " +
                      std::to_string(expect));
  if (n_items != p.instructions.size())
    r.bad(at + 4, std::to_string(n_items) + " queue items for " +
                      std::to_string(p.instructions.size()) +
                      " instructions (each must appear exactly once)");
  const uint64_t offsets_at = s.offset + 8;
  const uint64_t items_at = offsets_at + 4 * (uint64_t{n_queues} + 1);
  if (rd32(f + offsets_at) != 0) r.bad(offsets_at, "the first queue offset must be 0");
  if (rd32(f + items_at - 4) != n_items)
    r.bad(items_at - 4, "the last queue offset must equal the item count");
  std::vector<uint8_t> seen(p.instructions.size(), 0);
  std::vector<std::vector<uint32_t>> queues;
  queues.reserve(n_queues);
  for (uint32_t q = 0; q < n_queues; ++q) {
    uint32_t b = rd32(f + offsets_at + 4 * uint64_t{q});
    uint32_t e = rd32(f + offsets_at + 4 * (uint64_t{q} + 1));
    if (e < b || e > n_items)
      r.bad(offsets_at + 4 * (uint64_t{q} + 1),
            "queue offsets must be non-decreasing and <= " + std::to_string(n_items));
    std::vector<uint32_t> items;
    items.reserve(e - b);
    for (uint32_t k = b; k < e; ++k) {
      const uint64_t item_at = items_at + 4 * uint64_t{k};
      uint32_t v = rd32(f + item_at);
      if (v >= p.instructions.size())
        r.fail_at(item_at, "ref.instruction",
                  "queue " + std::to_string(q) + " names instruction " + std::to_string(v) +
                      " of " + std::to_string(p.instructions.size()));
      if (seen[v])
        r.bad(item_at, "instruction " + std::to_string(v) + " appears twice in the queues");
      seen[v] = 1;
      items.push_back(v);
    }
    queues.push_back(std::move(items));
  }
  p.queues = std::move(queues);
}

void read_data(const uint8_t* f, const Section& s, const Meta& meta, Program& p) {
  const std::string area = "section DATA";
  if (meta.values.empty())
    fail("amkb.data", area, s.offset, "DATA is present but no buffer has inline values");
  if (s.size != meta.data_size)
    fail("amkb.data", area, s.offset,
         "DATA holds " + std::to_string(s.size) + " bytes, the values need " +
             std::to_string(meta.data_size));
  uint64_t cursor = 0;
  for (const ValuesRef& v : meta.values) {
    if (!all_zero(f + s.offset + cursor, v.offset - cursor))
      fail("amkb.data", area, s.offset + cursor, "nonzero padding between values");
    Buffer& b = p.buffers[v.buffer];
    const uint8_t* src = f + s.offset + v.offset;
    const size_t es = dtype_size(b.dtype);
    for (uint64_t k = 0; k < v.bytes; k += es)
      if (!finite_bits(b.dtype, src + k))
        fail("amkb.data", area, s.offset + v.offset + k,
             "buffer '" + b.name + "' value " + std::to_string(k / es) +
                 " is NaN or infinite (JSON cannot carry it)");
    b.init.data.resize(v.bytes);
    std::memcpy(b.init.data.data(), src, v.bytes);
    cursor = v.offset + v.bytes;
  }
  if (!all_zero(f + s.offset + cursor, s.size - cursor))
    fail("amkb.data", area, s.offset + cursor, "nonzero padding after the last values");
}

// ---------------------------------------------------------------------------------------------
// Writing

class Out {
public:
  std::vector<std::byte> bytes;
  void u8(uint8_t v) { bytes.push_back(std::byte{v}); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  void str(std::string_view s, const std::string& where) {
    if (s.size() > UINT32_MAX) encode_fail(where, "string longer than 4 GiB");
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void count(size_t n, const std::string& where) {
    if (n > UINT32_MAX) encode_fail(where, "more than 2^32 entries");
    u32(static_cast<uint32_t>(n));
  }
  void pad_to(size_t align) {
    while (bytes.size() % align != 0) bytes.push_back(std::byte{0});
  }
};

uint8_t small_count(size_t n, size_t cap, const std::string& where, const char* what) {
  if (n > cap)
    encode_fail(where, std::string(what) + ": " + std::to_string(n) + " > " + std::to_string(cap));
  return static_cast<uint8_t>(n);
}

amk_instruction_t to_abi(const Instruction& in, uint32_t index) {
  const std::string where = "/instructions/" + std::to_string(index);
  amk_instruction_t a;
  std::memset(&a, 0, sizeof a);  // unused slots and reserved fields are zero in the file
  for (amk_operand_t& o : a.operands) o.buffer = AMK_NO_BUFFER;  // empty slot, as the planner
  a.op = in.op;
  a.index = index;
  const size_t n_operands = stored_operand_count(in);
  a.n_operands = small_count(n_operands, AMK_MAX_OPERANDS, where + "/operands", "operands");
  a.n_waits = small_count(in.waits.size(), AMK_MAX_WAITS, where + "/waits", "waits");
  a.n_signals = small_count(in.signals.size(), AMK_MAX_SIGNALS, where + "/signals", "signals");
  a.n_params = small_count(in.params.size(), AMK_MAX_PARAMS, where + "/params", "params");
  for (size_t k = 0; k < n_operands; ++k) {
    const Operand& o = in.operands[k];
    if (o.extent > UINT32_MAX)
      encode_fail(where + "/operands/" + std::to_string(k),
                  "extent " + std::to_string(o.extent) + " does not fit the ABI's 32-bit extent");
    amk_operand_t& d = amk_ins_operand(a, static_cast<uint32_t>(k));
    d.offset = o.offset;
    d.extent = static_cast<uint32_t>(o.extent);
    d.buffer = o.buffer;
  }
  for (size_t k = 0; k < in.waits.size(); ++k) a.waits[k] = abi_wait(in.waits[k]);
  for (size_t k = 0; k < in.signals.size(); ++k)
    a.signals[k] = {in.signals[k].counter, in.signals[k].add};
  for (size_t k = 0; k < in.params.size(); ++k) a.params[k] = in.params[k];
  return a;
}

std::vector<std::byte> write_meta(const Program& p, uint64_t& data_end) {
  Out o;
  o.str(p.name, "/name");
  o.str(p.description, "/description");
  o.u32(p.version);
  o.u32(p.target.min_arch);
  o.u32(p.target.features);
  o.u32(p.target.smem_per_block);
  o.u8(static_cast<uint8_t>(p.launch.mode));
  if (p.launch.ranks != 1)
    encode_fail("/launch/ranks", "a program with ranks is written as JSON only (.amkb has no "
                                 "ranks, per-rank inits or instruction ranks yet)");
  if (p.launch.passes == 0 || p.launch.passes > kMaxPasses)
    encode_fail("/launch/passes", "passes " + std::to_string(p.launch.passes) + " is not 1.." +
                                      std::to_string(kMaxPasses));
  {  // one pass is written as 0, the bytes of files from before the field
    const uint32_t passes = p.launch.passes == 1 ? 0 : p.launch.passes;
    o.u8(passes & 0xFF), o.u8((passes >> 8) & 0xFF), o.u8((passes >> 16) & 0xFF);
  }
  o.u32(p.launch.grid);
  o.u32(p.launch.block);
  for (uint32_t c : p.launch.cluster) o.u32(c);
  o.u32(p.launch.dynamic_smem);
  o.u64(p.launch.timeout_ms);

  o.count(p.buffers.size(), "/buffers");
  data_end = 0;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    const std::string where = "/buffers/" + std::to_string(i);
    if (!b.init.window_of.empty())
      encode_fail(where + "/init/window", "an init window is written as JSON only (.amkb has no "
                                          "init windows yet)");
    o.str(b.name, where + "/name");
    o.u8(static_cast<uint8_t>(b.dtype));
    o.u8(b.output ? 1 : 0);
    o.u8(small_count(b.shape.size(), 255, where + "/shape", "rank"));
    o.u8(static_cast<uint8_t>(b.init.kind));
    for (uint64_t d : b.shape) o.u64(d);
    const BufferInit& init = b.init;
    // Only the fields the init kind uses are stored (the others keep their defaults).
    switch (init.kind) {
      case InitKind::zeros: break;
      case InitKind::constant: o.f64(init.constant); break;
      case InitKind::random:
        o.u64(init.seed);
        o.u8(static_cast<uint8_t>(init.distribution));
        for (int k = 0; k < 7; ++k) o.u8(0);
        o.f64(init.a);
        o.f64(init.b);
        break;
      case InitKind::values: {
        o.u64(data_end);
        o.u64(init.data.size());
        auto end = checked_add(data_end, init.data.size());
        if (!end || !checked_align_up(*end, kDataAlign))
          encode_fail(where + "/init", "inline values too large");
        data_end = *checked_align_up(*end, kDataAlign);
        break;
      }
      case InitKind::npy: o.str(init.path, where + "/init/path"); break;
      case InitKind::raw:
        o.str(init.path, where + "/init/path");
        o.u64(init.offset);
        break;
      case InitKind::safetensors:
        o.str(init.path, where + "/init/path");
        o.str(init.tensor, where + "/init/tensor");
        break;
    }
  }

  o.count(p.counters.size(), "/counters");
  for (size_t i = 0; i < p.counters.size(); ++i)
    o.str(p.counters[i].name, "/counters/" + std::to_string(i));

  o.count(p.instructions.size(), "/instructions");
  for (size_t i = 0; i < p.instructions.size(); ++i)
    o.str(p.instructions[i].name, "/instructions/" + std::to_string(i) + "/name");

  o.count(p.tma.size(), "/tma");
  for (size_t i = 0; i < p.tma.size(); ++i) {
    const TmaSpec& t = p.tma[i];
    const std::string where = "/tma/" + std::to_string(i);
    o.str(t.name, where + "/name");
    o.u32(t.buffer);
    o.u64(t.offset);
    o.u8(small_count(t.dims.size(), 255, where + "/dims", "rank"));
    o.u8(small_count(t.strides.size(), 255, where + "/strides", "strides"));
    o.u8(small_count(t.element_strides.size(), 255, where + "/element_strides", "element_strides"));
    o.u8(static_cast<uint8_t>(t.swizzle));
    o.u8(static_cast<uint8_t>(t.interleave));
    o.u8(static_cast<uint8_t>(t.l2_promotion));
    o.u8(static_cast<uint8_t>(t.oob_fill));
    o.u8(0);
    for (uint64_t d : t.dims) o.u64(d);
    for (uint64_t s : t.strides) o.u64(s);
    // The box has one entry per dim in the format; a mismatch could not be read back.
    if (t.box.size() != t.dims.size()) encode_fail(where + "/box", "box needs one entry per dim");
    for (uint32_t v : t.box) o.u32(v);
    for (uint32_t v : t.element_strides) o.u32(v);
  }

  o.count(p.custom_ops.size(), "/custom_ops");
  for (size_t i = 0; i < p.custom_ops.size(); ++i) {
    const CustomOp& c = p.custom_ops[i];
    const std::string where = "/custom_ops/" + std::to_string(i);
    o.str(c.name, where + "/name");
    o.str(c.source, where + "/source");
    o.count(c.operands.size(), where + "/operands");
    for (const auto& s : c.operands) o.str(s, where + "/operands");
    o.count(c.params.size(), where + "/params");
    for (const auto& s : c.params) o.str(s, where + "/params");
  }
  return std::move(o.bytes);
}

}  // namespace

Program parse_amkb_program(std::span<const std::byte> bytes, const LoadOptions& options) {
  const auto* f = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint64_t n = bytes.size();
  if (n > kMaxFileBytes)
    fail("limit.file", "header", 0,
         "file is " + std::to_string(n) + " bytes (limit " + std::to_string(kMaxFileBytes) + ")");
  // Magic first (over what exists), so that a short non-amkb file says so.
  if (n > 0 && std::memcmp(f, kMagic.data(), std::min<uint64_t>(n, kMagic.size())) != 0)
    fail("amkb.magic", "header", 0, "not an .amkb file (bad magic bytes)");
  check_header_start(f, n, ".amkb");
  if (uint32_t abi = rd32(f + kHdrAbiVersion); abi != AMK_ABI_VERSION)
    fail("amkb.version", "header", kHdrAbiVersion,
         "instruction ABI version " + std::to_string(abi) + " (this amk uses " +
             std::to_string(AMK_ABI_VERSION) + ")");
  if (rd32(f + kHdrInstrBytes) != AMK_INSTRUCTION_BYTES)
    fail("amkb.header", "header", kHdrInstrBytes, "instruction size must be 256");
  const uint32_t count = rd32(f + kHdrSectionCount);
  if (count < 1 || count > kMaxSections)
    fail("amkb.header", "header", kHdrSectionCount,
         "section count " + std::to_string(count) + " is not 1..16");
  check_header_end(f, n, count);
  std::array<Section, 5> sec{};
  read_section_table(f, n, count, kKinds, sec);

  const Section& instr = sec[kInstr];
  if (instr.size % AMK_INSTRUCTION_BYTES != 0)
    fail("amkb.section", "section INSTR", instr.offset,
         "size " + std::to_string(instr.size) + " is not a multiple of 256");
  const uint64_t n_instructions = instr.size / AMK_INSTRUCTION_BYTES;
  if (n_instructions > kMaxInstructions)
    fail("limit.instructions", "section INSTR", instr.offset,
         std::to_string(n_instructions) + " instructions (limit " +
             std::to_string(kMaxInstructions) + ")");

  Program p;
  Meta meta = read_meta(f, sec[kMeta], n_instructions, p, options);
  read_instructions(f, instr, meta.instruction_names, p);
  if (sec[kQueues].present) read_queues(f, sec[kQueues], p);
  if (sec[kData].present)
    read_data(f, sec[kData], meta, p);
  else if (!meta.values.empty())
    fail("amkb.section.missing", "section table", kHeaderBytes,
         "buffers have inline values but the DATA section is missing");
  return p;
}

std::vector<std::byte> program_to_amkb(const Program& program) {
  const Program& p = program;
  if (p.instructions.size() > UINT32_MAX) encode_fail("/instructions", "too many instructions");

  uint64_t data_end = 0;
  std::vector<std::byte> meta = write_meta(p, data_end);

  Out instr;
  instr.bytes.reserve(p.instructions.size() * AMK_INSTRUCTION_BYTES);
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    amk_instruction_t a = to_abi(p.instructions[i], static_cast<uint32_t>(i));
    instr.raw(&a, sizeof a);
  }

  Out queues;
  if (p.queues) {
    uint64_t total = 0;
    for (const auto& q : *p.queues) total += q.size();
    queues.count(p.queues->size(), "/queues");
    queues.count(total, "/queues");
    uint32_t off = 0;
    queues.u32(0);
    for (const auto& q : *p.queues) {
      off += static_cast<uint32_t>(q.size());
      queues.u32(off);
    }
    for (const auto& q : *p.queues)
      for (uint32_t v : q) queues.u32(v);
  }

  Out data;
  for (const Buffer& b : p.buffers) {
    if (b.init.kind != InitKind::values) continue;
    data.pad_to(kDataAlign);
    data.raw(b.init.data.data(), b.init.data.size());
  }
  // The last blob is not padded: DATA ends where the values end (data_end rounds up past it).
  const bool has_values = std::any_of(p.buffers.begin(), p.buffers.end(), [](const Buffer& b) {
    return b.init.kind == InitKind::values;
  });

  std::vector<Part> parts = {{kMeta, meta}, {kInstr, instr.bytes}};
  if (p.queues) parts.push_back({kQueues, queues.bytes});
  if (has_values) parts.push_back({kData, data.bytes});
  return write_frame(kMagic, AMK_ABI_VERSION, AMK_INSTRUCTION_BYTES, parts, kKinds);
}

}  // namespace amk
