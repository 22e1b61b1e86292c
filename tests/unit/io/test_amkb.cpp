// .amkb round trips and the reader's refusals (schemas/amkb.md). Corruptions patch a valid file
// and, where the point is not the checksum itself, fix the checksums up so that the intended check
// is the one that fires.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"

using namespace amk;

namespace {

using Bytes = std::vector<std::byte>;

constexpr size_t kHeader = 64;
constexpr size_t kEntry = 32;
constexpr uint32_t kMeta = 1, kInstr = 2, kQueues = 3, kData = 4;

uint16_t op(OpId id) { return static_cast<uint16_t>(id); }

Operand whole(uint32_t buffer, uint64_t extent) { return {buffer, 0, extent}; }
Operand none() { return {}; }

template <typename T>
void put_le(std::vector<std::byte>& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(std::byte(uint8_t(uint64_t(v) >> (8 * i))));
}

template <typename T>
std::vector<std::byte> le_bytes(std::initializer_list<T> vals) {
  std::vector<std::byte> out;
  for (T v : vals) {
    if constexpr (std::is_floating_point_v<T>) {
      using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      put_le(out, std::bit_cast<U>(v));
    } else {
      put_le(out, v);
    }
  }
  return out;
}

// A program that uses every op, every init kind, every dtype in inline values, waits, signals,
// explicit queues, TMA specs covering every enum value and two custom ops.
Program rich_program() {
  Program p;
  p.name = "rich";
  p.description = "every feature \xC3\xA9 once\nwith newline";
  p.target = {90, kFeatureCooperative | kFeatureTma, 4096};
  p.launch.mode = LaunchMode::cooperative;
  p.launch.grid = 3;
  p.launch.block = 128;
  p.launch.cluster[0] = 2;
  p.launch.dynamic_smem = 1024;
  p.launch.timeout_ms = 1234;

  auto buf = [&](std::string name, DType t, std::vector<uint64_t> shape) -> Buffer& {
    Buffer b;
    b.name = std::move(name);
    b.dtype = t;
    b.shape = std::move(shape);
    p.buffers.push_back(std::move(b));
    return p.buffers.back();
  };
  buf("x", DType::f32, {16});                 // 0 zeros
  Buffer& c = buf("w", DType::f32, {4, 16});  // 1 constant
  c.init.kind = InitKind::constant;
  c.init.constant = -0.25;
  Buffer& r = buf("r", DType::bf16, {16});  // 2 random uniform
  r.init.kind = InitKind::random;
  r.init.seed = 0xDEADBEEFCAFEull;
  r.init.a = -2.0;
  r.init.b = 3.5;
  Buffer& n = buf("n", DType::f16, {2, 8});  // 3 random normal
  n.init.kind = InitKind::random;
  n.init.distribution = Distribution::normal;
  n.init.seed = 7;
  n.init.a = 0.5;
  n.init.b = 0.0;
  Buffer& v32 = buf("v_f32", DType::f32, {3});  // 4 values f32
  v32.init.kind = InitKind::values;
  v32.init.data = le_bytes<float>({1.5f, -0.0f, 1e-40f});
  Buffer& v16 = buf("v_f16", DType::f16, {2});  // 5 values f16
  v16.init.kind = InitKind::values;
  v16.init.data = le_bytes<uint16_t>({0x3C00, 0xFBFF});
  Buffer& vb = buf("v_bf16", DType::bf16, {1});  // 6 values bf16
  vb.init.kind = InitKind::values;
  vb.init.data = le_bytes<uint16_t>({0x4049});
  Buffer& vi = buf("v_i32", DType::i32, {2});  // 7 values i32
  vi.init.kind = InitKind::values;
  vi.init.data = le_bytes<int32_t>({-1, 2147483647});
  Buffer& vu = buf("v_u32", DType::u32, {1});  // 8 values u32
  vu.init.kind = InitKind::values;
  vu.init.data = le_bytes<uint32_t>({4000000000u});
  Buffer& vl = buf("v_i64", DType::i64, {2});  // 9 values i64
  vl.init.kind = InitKind::values;
  vl.init.data = le_bytes<int64_t>({std::numeric_limits<int64_t>::min(), 1234567890123456789});
  Buffer& v8 = buf("v_u8", DType::u8, {300});  // 10 values u8, longer than one 256-byte block
  v8.init.kind = InitKind::values;
  for (int i = 0; i < 300; ++i) v8.init.data.push_back(std::byte(uint8_t(i * 7)));
  Buffer& np = buf("from_npy", DType::f32, {16});  // 11 npy
  np.init.kind = InitKind::npy;
  np.init.path = "data/x.npy";
  Buffer& raw = buf("from_raw", DType::f32, {4, 16});  // 12 raw
  raw.init.kind = InitKind::raw;
  raw.init.path = "weights.bin";
  raw.init.offset = 1ull << 33;
  Buffer& st = buf("from_st", DType::bf16, {16});  // 13 safetensors
  st.init.kind = InitKind::safetensors;
  st.init.path = "model.safetensors";
  st.init.tensor = "layers.0.mlp.weight";
  buf("y", DType::f32, {16}).output = true;   // 14
  buf("idx", DType::i32, {1}).output = true;  // 15
  buf("scalar", DType::u32, {});              // 16 scalar

  p.counters = {{"c0"}, {"c1"}, {"done"}};

  auto ins = [&](std::string name, uint16_t id, std::vector<Operand> ops,
                 std::vector<uint32_t> params = {}) -> Instruction& {
    Instruction in;
    in.name = std::move(name);
    in.op = id;
    in.operands = std::move(ops);
    in.params = std::move(params);
    p.instructions.push_back(std::move(in));
    return p.instructions.back();
  };
  ins("start", op(OpId::nop), {}).signals = {{0, 1}};
  ins("", op(OpId::copy), {whole(0, 16), whole(14, 16)}).waits = {{0, 1}};
  ins("fill", op(OpId::fill), {{14, 4, 8}}, {f32_bits(2.5f)});
  ins("add", op(OpId::add), {whole(0, 16), whole(14, 16), whole(14, 16)});
  ins("mul", op(OpId::mul), {whole(0, 16), whole(14, 16), whole(14, 16)});
  ins("scale", op(OpId::scale), {whole(0, 16), whole(14, 16)}, {f32_bits(-3.0f)});
  ins("silu", op(OpId::silu_mul), {whole(0, 16), whole(14, 16), whole(14, 16)});
  ins("norm", op(OpId::rmsnorm), {whole(0, 16), whole(0, 16), whole(14, 16)}, {f32_bits(1e-5f)});
  ins("soft", op(OpId::softmax), {whole(0, 16), whole(14, 16)}, {8, f32_bits(0.125f)});
  Instruction& g =
      ins("gemv", op(OpId::gemv), {whole(1, 64), whole(0, 16), {14, 0, 4}, none(), none(), none()},
          {f32_bits(1e-5f), 0, 0});  // eps; head_dim, heads 0: no merge
  g.waits = {{0, 1}, {1, 2}, {2, 0}, {0, 4000000000u}};
  g.signals = {{1, 1}, {2, 3}, {0, 1}, {2, 0xFFFFFFFFu}};
  ins("gemv_res", op(OpId::gemv),
      {whole(1, 64), whole(0, 16), {14, 4, 4}, {14, 8, 4}, none(), none()},
      {f32_bits(1e-5f), 0, 0});
  ins("argmax", op(OpId::argmax), {whole(14, 16), whole(15, 1), none(), none()}, {0});
  ins("embed", op(OpId::embedding), {whole(1, 64), whole(15, 1), whole(14, 16)});
  ins("custom0", kCustomOpBase + 0, {whole(0, 16), whole(14, 16)}, {0xFFFFFFFFu, f32_bits(1.0f)});
  ins("custom1", kCustomOpBase + 1, {});

  p.queues =
      std::vector<std::vector<uint32_t>>{{0, 1, 2, 3, 4}, {}, {14, 13, 12, 11, 10, 9, 8, 7, 6, 5}};

  // Every enum value of every TMA field appears in at least one spec.
  for (int i = 0; i < 4; ++i) {
    TmaSpec t;
    t.name = "tma" + std::to_string(i);
    t.buffer = 1;
    t.offset = uint64_t(i) * 16;
    t.dims = {16, 4};
    t.box = {16, 2};
    if (i % 2 == 0) t.strides = {64};
    if (i == 1) t.element_strides = {1, 2};
    t.swizzle = static_cast<TmaSwizzle>(i);
    t.interleave = static_cast<TmaInterleave>(i % 3);
    t.l2_promotion = static_cast<TmaL2Promotion>(3 - i);
    t.oob_fill = static_cast<TmaOobFill>(i % 2);
    p.tma.push_back(t);
  }
  TmaSpec t5;
  t5.name = "rank5";
  t5.buffer = 0;
  t5.dims = {2, 2, 2, 1, 2};
  t5.box = {1, 2, 256, 1, 1};
  t5.element_strides = {8, 1, 1, 1, 1};
  p.tma.push_back(t5);

  p.custom_ops.push_back({"my_op", "__device__ void my_op() {}", {"in", "out"}, {"n", "alpha"}});
  p.custom_ops.push_back({"bare", "// nothing", {}, {}});
  return p;
}

// The smallest interesting program: one values buffer, one instruction, a queue.
Program small_program() {
  Program p;
  p.name = "s";
  Buffer b;
  b.name = "a";
  b.shape = {2};
  b.init.kind = InitKind::values;
  b.init.data = le_bytes<float>({1.0f, 2.0f});
  p.buffers.push_back(b);
  p.counters = {{"k"}};
  Instruction in;
  in.op = op(OpId::scale);
  in.operands = {whole(0, 2), whole(0, 2)};
  in.params = {f32_bits(2.0f)};
  in.signals = {{0, 1}};
  p.instructions.push_back(in);
  p.queues = std::vector<std::vector<uint32_t>>{{0}};
  return p;
}

constexpr LoadOptions kTrusting{.allow_outside_paths = false, .trust_custom_ops = true};

uint32_t rd32(const Bytes& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint64_t rd64(const Bytes& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
void wr32(Bytes& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void wr64(Bytes& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

uint32_t crc_range(const Bytes& b, size_t at, size_t n) {
  return crc32c(std::span<const std::byte>(b.data() + at, n));
}

// Table entry index of a section kind, or -1.
int entry_of(const Bytes& b, uint32_t kind) {
  uint32_t count = rd32(b, 28);
  for (uint32_t i = 0; i < count; ++i)
    if (rd32(b, kHeader + i * kEntry) == kind) return int(i);
  return -1;
}
uint64_t section_offset(const Bytes& b, uint32_t kind) {
  return rd64(b, kHeader + entry_of(b, kind) * kEntry + 8);
}
uint64_t section_size(const Bytes& b, uint32_t kind) {
  return rd64(b, kHeader + entry_of(b, kind) * kEntry + 16);
}

// Recomputes every checksum (sections, table, header) after a deliberate edit.
void fix_checksums(Bytes& b) {
  uint32_t count = rd32(b, 28);
  for (uint32_t i = 0; i < count; ++i) {
    size_t e = kHeader + i * kEntry;
    uint64_t off = rd64(b, e + 8), size = rd64(b, e + 16);
    if (off <= b.size() && size <= b.size() - off) wr32(b, e + 24, crc_range(b, off, size));
  }
  wr32(b, 52, crc_range(b, kHeader, count * kEntry));
  wr32(b, 60, crc_range(b, 0, 60));
}

// Parses and returns the error code ("" when it parsed).
std::string code_of(const Bytes& b, const LoadOptions& o = kTrusting) {
  try {
    (void)parse_amkb_program(b, o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::program);
    return e.code();
  }
  return "";
}

Error error_of(const Bytes& b, const LoadOptions& o = kTrusting) {
  try {
    (void)parse_amkb_program(b, o);
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an error");
  return Error(ErrorKind::internal, "", "", "");
}

// Writes a program (the writer does not validate) and returns the reader's code.
std::string code_of_program(const Program& p, const LoadOptions& o = kTrusting) {
  return code_of(program_to_amkb(p), o);
}

}  // namespace

// ---- round trips -----------------------------------------------------------------------------

TEST_CASE("rich program round-trips losslessly") {
  const Program p = rich_program();
  const Bytes file = program_to_amkb(p);
  const Program q = parse_amkb_program(file, kTrusting);
  CHECK(q == p);
  CHECK(q.buffers[10].init.data.size() == 300);
  CHECK(q.tma[4].box[2] == 256);
  CHECK(q.instructions[9].operands[3].buffer == AMK_NO_BUFFER);
  // Writing again gives the same bytes: the encoding is canonical.
  CHECK(program_to_amkb(q) == file);
}

TEST_CASE("launch passes, carried waits and operand slot 6 round-trip") {
  Program p = small_program();
  const Bytes one = program_to_amkb(p);
  p.launch.passes = 70000;  // past 16 bits
  p.instructions[0].waits.push_back({0, 1, true});
  const Bytes file = program_to_amkb(p);
  const Program q = parse_amkb_program(file, kTrusting);
  CHECK(q.launch.passes == 70000);
  REQUIRE(!q.instructions[0].waits.empty());
  CHECK(q.instructions[0].waits.back().carried);
  CHECK(q == p);
  // One pass is stored as the zero bytes of files from before the field.
  CHECK(parse_amkb_program(one, kTrusting).launch.passes == 1);
  p.launch.passes = 0;
  std::string code;
  try {
    (void)program_to_amkb(p);
  } catch (const Error& e) {
    code = e.code();
  }
  CHECK(code == "amkb.encode");
}

TEST_CASE("round trip without queues, tma, custom ops or values") {
  Program p = rich_program();
  p.queues.reset();
  p.tma.clear();
  p.custom_ops.clear();
  p.instructions.resize(13);  // drop the custom-op instructions
  for (Buffer& b : p.buffers)
    if (b.init.kind == InitKind::values) {
      b.init.kind = InitKind::zeros;
      b.init.data.clear();
    }
  const Bytes file = program_to_amkb(p);
  CHECK(rd32(file, 28) == 2);  // only META and INSTR
  CHECK(entry_of(file, kQueues) == -1);
  CHECK(entry_of(file, kData) == -1);
  const Program q = parse_amkb_program(file);  // untrusted is fine: no custom ops
  CHECK(q == p);
  CHECK_FALSE(q.queues.has_value());
}

TEST_CASE("empty program and an empty queue round-trip") {
  Program p;
  p.name = "empty";
  CHECK(parse_amkb_program(program_to_amkb(p)) == p);
  p.queues = std::vector<std::vector<uint32_t>>{{}, {}};
  CHECK(parse_amkb_program(program_to_amkb(p)) == p);
}

TEST_CASE("base_dir is not stored") {
  Program p = small_program();
  p.base_dir = "/some/where";
  Program q = parse_amkb_program(program_to_amkb(p));
  CHECK(q.base_dir.empty());
  CHECK(q == p);
}

TEST_CASE("layout: header, ABI instruction table, aligned data") {
  const Program p = rich_program();
  const Bytes f = program_to_amkb(p);
  const uint8_t magic[8] = {'A', 'M', 'K', 'B', '\r', '\n', 0x1A, '\n'};
  CHECK(std::memcmp(f.data(), magic, 8) == 0);
  CHECK(rd32(f, 8) == 1);
  CHECK(rd32(f, 12) == 0x01020304u);
  CHECK(uint8_t(f[12]) == 0x04);  // little endian on disk
  CHECK(rd32(f, 16) == 64);
  CHECK(rd32(f, 20) == AMK_ABI_VERSION);
  CHECK(rd32(f, 24) == 256);
  CHECK(rd32(f, 28) == 4);
  CHECK(rd64(f, 32) == 64);
  CHECK(rd64(f, 40) == f.size());
  CHECK(rd32(f, 60) == crc_range(f, 0, 60));
  // Sections in file order META, INSTR, QUEUES, DATA.
  CHECK(entry_of(f, kMeta) == 0);
  CHECK(entry_of(f, kInstr) == 1);
  CHECK(entry_of(f, kQueues) == 2);
  CHECK(entry_of(f, kData) == 3);

  const uint64_t instr = section_offset(f, kInstr);
  CHECK(instr % 256 == 0);
  CHECK(section_size(f, kInstr) == p.instructions.size() * sizeof(amk_instruction_t));
  // Instruction 9 (gemv) as the device reads it.
  amk_instruction_t a;
  std::memcpy(&a, f.data() + instr + 9 * 256, sizeof a);
  CHECK(a.op == op(OpId::gemv));
  CHECK(a.index == 9);
  CHECK(a.n_operands == 6);
  CHECK(a.n_waits == 4);
  CHECK(a.n_signals == 4);
  CHECK(a.n_params == 3);
  CHECK(a.operands[0].buffer == 1);
  CHECK(a.operands[0].extent == 64);
  CHECK(a.operands[2].extent == 4);
  CHECK(a.operands[3].buffer == AMK_NO_BUFFER);
  CHECK(a.operands[4].buffer == AMK_NO_BUFFER);  // absent optional slots: empty operand
  CHECK(a.operands[4].extent == 0);
  CHECK(a.params[0] == f32_bits(1e-5f));
  CHECK(a.params[1] == 0);  // unused param slots: zero
  CHECK(a.waits[3].value == 4000000000u);
  CHECK(a.signals[3].add == 0xFFFFFFFFu);

  // Queues: counts, offsets, items, ready to upload.
  const uint64_t q = section_offset(f, kQueues);
  CHECK(q % 16 == 0);
  CHECK(rd32(f, q) == 3);
  CHECK(rd32(f, q + 4) == 15);
  CHECK(rd32(f, q + 8) == 0);
  CHECK(rd32(f, q + 12) == 5);
  CHECK(rd32(f, q + 16) == 5);
  CHECK(rd32(f, q + 20) == 15);
  CHECK(rd32(f, q + 24) == 0);        // first item of queue 0
  CHECK(rd32(f, q + 24 + 20) == 14);  // first item of queue 2

  // DATA: each inline-values blob starts on a 256-byte file boundary.
  const uint64_t d = section_offset(f, kData);
  CHECK(d % 256 == 0);
  float first;
  std::memcpy(&first, f.data() + d, 4);
  CHECK(first == 1.5f);
  CHECK(uint8_t(f[d + 256]) == 0x00);  // v_f16 = 0x3C00, low byte first
  CHECK(uint8_t(f[d + 257]) == 0x3C);
  CHECK(uint8_t(f[d + 6 * 256 + 1]) == 7);  // v_u8[1], seventh blob
  CHECK(section_size(f, kData) == 6 * 256 + 300);
}

// ---- corruption: file structure ----------------------------------------------------------------

TEST_CASE("every truncation is amkb.truncated") {
  const Bytes full = program_to_amkb(small_program());
  REQUIRE(code_of(full).empty());
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + n);
    CHECK_MESSAGE(code_of(cut) == "amkb.truncated", "prefix length " << n);
  }
}

TEST_CASE("every header byte flip is refused with its code") {
  const Bytes full = program_to_amkb(small_program());
  for (size_t i = 0; i < kHeader; ++i) {
    Bytes b = full;
    b[i] ^= std::byte{0x40};
    const char* expect = i < 8    ? "amkb.magic"
                         : i < 12 ? "amkb.version"
                         : i < 16 ? "amkb.endian"
                                  : "amkb.checksum";
    CHECK_MESSAGE(code_of(b) == expect, "header byte " << i);
  }
}

TEST_CASE("bad magic: a JSON file") {
  std::string text = R"({"format": "amk.program"})";
  Bytes b(reinterpret_cast<const std::byte*>(text.data()),
          reinterpret_cast<const std::byte*>(text.data()) + text.size());
  Error e = error_of(b);
  CHECK(e.code() == "amkb.magic");
  CHECK(e.where() == "header byte 0");
}

TEST_CASE("wrong format version and wrong ABI version") {
  Bytes b = program_to_amkb(small_program());
  wr32(b, 8, 2);
  fix_checksums(b);
  Error e = error_of(b);
  CHECK(e.code() == "amkb.version");
  CHECK(e.where() == "header byte 8");
  b = program_to_amkb(small_program());
  wr32(b, 20, AMK_ABI_VERSION + 1);
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.version");
}

TEST_CASE("big-endian byte order marker") {
  Bytes b = program_to_amkb(small_program());
  wr32(b, 12, 0x04030201u);
  fix_checksums(b);
  Error e = error_of(b);
  CHECK(e.code() == "amkb.endian");
  CHECK(e.message().find("big endian") != std::string::npos);
}

TEST_CASE("header fields: sizes, section count, reserved, trailing bytes") {
  const Bytes full = program_to_amkb(small_program());
  auto patched = [&](size_t at, uint32_t v) {
    Bytes b = full;
    wr32(b, at, v);
    fix_checksums(b);
    return b;
  };
  CHECK(code_of(patched(16, 128)) == "amkb.header");  // header size
  CHECK(code_of(patched(24, 128)) == "amkb.header");  // instruction size
  CHECK(code_of(patched(28, 0)) == "amkb.header");    // section count
  CHECK(code_of(patched(28, 17)) == "amkb.header");
  CHECK(code_of(patched(32, 96)) == "amkb.header");  // table offset
  CHECK(code_of(patched(48, 1)) == "amkb.header");   // flags
  CHECK(code_of(patched(56, 1)) == "amkb.header");   // reserved
  // The location is the nonzero field's own offset.
  CHECK(error_of(patched(48, 1)).where() == "header byte 48");
  CHECK(error_of(patched(56, 1)).where() == "header byte 56");
  Bytes longer = full;
  longer.push_back(std::byte{0});
  CHECK(code_of(longer) == "amkb.header");
  Bytes huge = full;
  wr64(huge, 40, (uint64_t{1} << 32) + 1);
  fix_checksums(huge);
  CHECK(code_of(huge) == "limit.file");
}

TEST_CASE("checksum mismatches: header, table, section") {
  const Bytes full = program_to_amkb(small_program());
  Bytes b = full;
  wr32(b, 60, rd32(b, 60) ^ 1);
  CHECK(code_of(b) == "amkb.checksum");
  b = full;
  b[kHeader + 24] ^= std::byte{1};  // META's stored crc
  wr32(b, 60, crc_range(b, 0, 60));
  Error e = error_of(b);
  CHECK(e.code() == "amkb.checksum");
  CHECK(e.where() == "section table byte 64");
  b = full;
  const uint64_t instr = section_offset(b, kInstr);
  b[instr + 100] ^= std::byte{0x10};  // payload change, checksums left stale
  e = error_of(b);
  CHECK(e.code() == "amkb.checksum");
  CHECK(e.where() == "section INSTR byte " + std::to_string(instr));
}

TEST_CASE("section past the end of the file and offset overflow") {
  Bytes b = program_to_amkb(small_program());
  const size_t e = kHeader + entry_of(b, kInstr) * kEntry;
  wr64(b, e + 16, b.size());  // INSTR size now runs past the end
  fix_checksums(b);
  Error err = error_of(b);
  CHECK(err.code() == "amkb.section");
  CHECK(err.where() == "section table byte " + std::to_string(e + 8));

  b = program_to_amkb(small_program());
  wr64(b, e + 8, 0xFFFFFFFFFFFFFF00ull);  // offset + size wraps around
  wr64(b, e + 16, 0x200);
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.section");
}

TEST_CASE("overlapping sections") {
  Bytes b = program_to_amkb(small_program());
  const size_t e = kHeader + entry_of(b, kQueues) * kEntry;
  // QUEUES moved onto the INSTR section (aligned, in bounds, but overlapping).
  wr64(b, e + 8, section_offset(b, kInstr) + 16);
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.section.overlap");
  // A section inside the section table itself.
  b = program_to_amkb(small_program());
  wr64(b, kHeader + 8, 64);  // META at the table
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.section.overlap");
}

TEST_CASE("section table entries: kind, duplicate, alignment, reserved, padding, missing") {
  const Bytes full = program_to_amkb(small_program());
  const size_t instr_e = kHeader + entry_of(full, kInstr) * kEntry;
  auto patched = [&](auto edit) {
    Bytes b = full;
    edit(b);
    fix_checksums(b);
    return b;
  };
  CHECK(code_of(patched([&](Bytes& b) { wr32(b, instr_e, 9); })) == "amkb.section");
  CHECK(code_of(patched([&](Bytes& b) { wr32(b, instr_e, kMeta); })) == "amkb.section");
  CHECK(code_of(patched([&](Bytes& b) { wr32(b, instr_e + 4, 1); })) == "amkb.section");
  CHECK(code_of(patched([&](Bytes& b) { wr32(b, instr_e + 28, 1); })) == "amkb.section");
  CHECK(error_of(patched([&](Bytes& b) { wr32(b, instr_e + 4, 1); })).where() ==
        "section table byte " + std::to_string(instr_e + 4));
  CHECK(error_of(patched([&](Bytes& b) { wr32(b, instr_e + 28, 1); })).where() ==
        "section table byte " + std::to_string(instr_e + 28));
  // INSTR at a 16-byte but not 256-byte boundary.
  CHECK(code_of(patched([&](Bytes& b) { wr64(b, instr_e + 8, rd64(b, instr_e + 8) - 16); })) ==
        "amkb.section");
  // A nonzero byte in the padding before INSTR.
  CHECK(code_of(patched([&](Bytes& b) { b[section_offset(b, kInstr) - 1] = std::byte{1}; })) ==
        "amkb.section");
  // INSTR relabelled as DATA (in a file without DATA): the required INSTR is missing.
  Program no_values = small_program();
  no_values.buffers[0].init = {};
  Bytes b = program_to_amkb(no_values);
  REQUIRE(entry_of(b, kData) == -1);
  wr32(b, kHeader + entry_of(b, kInstr) * kEntry, kData);
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.section.missing");
  // INSTR size not a multiple of 256.
  CHECK(code_of(patched([&](Bytes& b) { wr64(b, instr_e + 16, 255); })) == "amkb.section");
}

// ---- corruption: META --------------------------------------------------------------------------

// META of small_program(): name "s" (4+1), description "" (4), version, target (12),
// launch (36), then the buffer count.
constexpr size_t kSmallBufferCount = 5 + 4 + 4 + 12 + 36;

TEST_CASE("META counts that would overflow or exceed limits") {
  const Bytes full = program_to_amkb(small_program());
  const uint64_t meta = section_offset(full, kMeta);
  REQUIRE(rd32(full, meta + kSmallBufferCount) == 1);
  Bytes b = full;
  wr32(b, meta + kSmallBufferCount, 0xFFFFFFFFu);
  fix_checksums(b);
  Error e = error_of(b);
  CHECK(e.code() == "limit.buffers");
  CHECK(e.where() == "section META byte " + std::to_string(meta + kSmallBufferCount));
  b = full;
  wr32(b, meta + kSmallBufferCount, 60000);  // under the limit but more than META could hold
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.meta");
  b = full;
  wr32(b, meta, 0xFFFFFFFFu);  // program name length
  fix_checksums(b);
  CHECK(code_of(b) == "limit.name");
  b = full;
  wr32(b, meta + 5, 0xFFFFFFF0u);  // description length past the section
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.meta");
}

TEST_CASE("META content is checked like the JSON encoding") {
  auto with = [](auto edit) {
    Program p = small_program();
    edit(p);
    return code_of_program(p);
  };
  CHECK(with([](Program& p) { p.buffers[0].name = "bad name"; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.buffers[0].name = std::string(257, 'a'); }) == "limit.name");
  CHECK(with([](Program& p) { p.counters.push_back({"k"}); }) == "amkb.meta");  // duplicate counter
  CHECK(with([](Program& p) {
          p.buffers.push_back(p.buffers[0]);  // duplicate buffer name
        }) == "amkb.meta");
  CHECK(with([](Program& p) {
          p.instructions[0].name = "i";
          p.instructions.push_back(p.instructions[0]);  // duplicate instruction name
          (*p.queues)[0].push_back(1);
        }) == "amkb.meta");
  CHECK(with([](Program& p) { p.name = ""; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.description = "\xC0\xAF"; }) == "amkb.meta");  // overlong UTF-8
  CHECK(with([](Program& p) { p.version = 2; }) == "amkb.version");
  CHECK(with([](Program& p) { p.launch.block = 100; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.launch.grid = kMaxQueues + 1; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.launch.timeout_ms = 0; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.launch.cluster[2] = 0; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.target.features = 8; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.target.min_arch = 9; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.buffers[0].shape = {2, 0}; }) == "amkb.meta");
  CHECK(with([](Program& p) { p.buffers[0].shape.assign(9, 1); }) == "limit.rank");
  CHECK(with([](Program& p) {
          p.buffers[0].init = {};
          p.buffers[0].dtype = DType::u8;
          p.buffers[0].shape = {(uint64_t{1} << 40) + 1};
        }) == "limit.buffer_bytes");
  CHECK(with([](Program& p) {
          p.buffers[0].init = {};
          p.buffers[0].shape = {uint64_t{1} << 38};  // 1 TiB of f32, three times
          p.buffers.push_back(p.buffers[0]);
          p.buffers.push_back(p.buffers[0]);
          p.buffers[1].name = "b1";
          p.buffers[2].name = "b2";
        }) == "limit.total_bytes");
  CHECK(with([](Program& p) {
          p.buffers[0].init = {};
          p.buffers[0].init.kind = InitKind::constant;
          p.buffers[0].init.constant = std::numeric_limits<double>::infinity();
        }) == "amkb.meta");
  CHECK(with([](Program& p) {
          p.buffers[0].init = {};
          p.buffers[0].init.kind = InitKind::random;
          p.buffers[0].init.a = 1.0;
          p.buffers[0].init.b = 1.0;
        }) == "amkb.meta");
  CHECK(with([](Program& p) {
          p.buffers[0].init = {};
          p.buffers[0].init.kind = InitKind::npy;
        }) == "amkb.meta");  // empty path
  CHECK(with([](Program& p) {
          TmaSpec t;
          t.name = "t";
          t.buffer = 5;
          t.dims = {2};
          t.box = {2};
          p.tma.push_back(t);
        }) == "ref.buffer");
  CHECK(with([](Program& p) {
          TmaSpec t;
          t.name = "t";
          t.dims = {2};
          t.box = {257};
          p.tma.push_back(t);
        }) == "amkb.meta");
  CHECK(with([](Program& p) { p.custom_ops.push_back({"copy", "x", {}, {}}); }) == "amkb.meta");
  CHECK(with([](Program& p) { p.custom_ops.push_back({"gemv_t", "x", {}, {}}); }) == "amkb.meta");
  CHECK(with([](Program& p) { p.custom_ops.push_back({"c", "x", {"_a"}, {}}); }) == "amkb.meta");
}

TEST_CASE("custom ops need trust") {
  const Bytes b = program_to_amkb(rich_program());
  Error e = error_of(b, LoadOptions{});
  CHECK(e.code() == "custom.untrusted");
  CHECK(e.where().rfind("section META byte ", 0) == 0);
  CHECK(code_of(b, kTrusting).empty());
}

// ---- corruption: INSTR -------------------------------------------------------------------------

TEST_CASE("instruction references and signatures") {
  auto with = [](auto edit) {
    Program p = small_program();
    edit(p.instructions[0]);
    return code_of_program(p);
  };
  CHECK(with([](Instruction& in) { in.op = 77; }) == "ref.op");
  CHECK(with([](Instruction& in) { in.op = kCustomOpBase; }) == "ref.op");
  CHECK(with([](Instruction& in) { in.operands[1].buffer = 1; }) == "ref.buffer");
  CHECK(with([](Instruction& in) { in.signals[0].counter = 1; }) == "ref.counter");
  CHECK(with([](Instruction& in) { in.waits = {{3, 1}}; }) == "ref.counter");
  CHECK(with([](Instruction& in) { in.operands.pop_back(); }) == "amkb.instruction");
  CHECK(with([](Instruction& in) { in.params.clear(); }) == "amkb.instruction");
  CHECK(with([](Instruction& in) { in.operands[0] = none(); }) == "amkb.instruction");
  CHECK(with([](Instruction& in) { in.params[0] = 0x7FC00000u; }) == "amkb.instruction");  // NaN
  CHECK(with([](Instruction& in) { in.operands[0].offset = ~uint64_t{0}; }) == "amkb.instruction");
  CHECK(with([](Instruction& in) { in.name = "bad name"; }) == "amkb.meta");

  Program p = small_program();
  p.instructions[0].op = 77;
  Bytes b = program_to_amkb(p);
  Error e = error_of(b);
  CHECK(e.where() == "section INSTR byte " + std::to_string(section_offset(b, kInstr)));
}

TEST_CASE("a retired op id is refused as op.retired at the instruction's op field") {
  for (const RetiredOp& retired : retired_ops()) {
    CAPTURE(retired.name);
    Program p = small_program();
    p.instructions[0].name = "first";
    p.instructions.push_back(p.instructions[0]);
    p.instructions[1].name = "second";
    p.instructions[1].op = retired.id;
    (*p.queues)[0].push_back(1);
    const Bytes b = program_to_amkb(p);
    const Error e = error_of(b);
    CHECK(e.code() == "op.retired");
    // op is the first field of the second instruction's 256 bytes.
    CHECK(e.where() == "section INSTR byte " +
                           std::to_string(section_offset(b, kInstr) + AMK_INSTRUCTION_BYTES));
    CHECK(e.message() == "instruction 1: " + retired_op_message(retired));
    CHECK(e.message().find(std::string(retired.name)) != std::string::npos);
  }
}

TEST_CASE("instruction ABI header fields") {
  const Bytes full = program_to_amkb(small_program());
  const uint64_t at = section_offset(full, kInstr);
  auto patched = [&](size_t field, uint8_t v) {
    Bytes b = full;
    b[at + field] = std::byte{v};
    fix_checksums(b);
    return b;
  };
  CHECK(code_of(patched(2, 7)) == "amkb.instruction");            // n_operands > AMK_MAX_OPERANDS
  CHECK(code_of(patched(3, 5)) == "amkb.instruction");            // n_waits > AMK_MAX_WAITS
  CHECK(code_of(patched(6, 1)) == "amkb.instruction");            // flags
  CHECK(code_of(patched(8, 1)) == "amkb.instruction");            // index != position
  CHECK(code_of(patched(12, 1)) == "amkb.instruction");           // reserved0
  CHECK(code_of(patched(250, 1)) == "amkb.instruction");          // operand6 unused
  CHECK(code_of(patched(16 + 2 * 16, 1)) == "amkb.instruction");  // unused operand offset
  CHECK(code_of(patched(16 + 2 * 16 + 12, 0)) == "amkb.instruction");  // unused operand buffer
  CHECK(code_of(patched(176 + 4, 1)) == "amkb.instruction");           // unused param slot
  Error e = error_of(patched(8, 1));
  CHECK(e.where() == "section INSTR byte " + std::to_string(at + 8));
  // Reserved fields: each named at its own offset (an unused operand6 at the field's start).
  for (const auto& [byte, field] :
       {std::pair{6, 6}, {12, 12}, {240, 240}, {250, 240}, {255, 240}}) {
    const int at_byte = byte;  // (CAPTURE's lambda may not capture a structured binding)
    CAPTURE(at_byte);
    CHECK(error_of(patched(byte, 1)).where() == "section INSTR byte " + std::to_string(at + field));
  }
}

// ---- corruption: QUEUES and DATA ---------------------------------------------------------------

TEST_CASE("queue items and shape") {
  auto with = [](auto edit) {
    Program p = small_program();
    edit(p);
    return code_of_program(p);
  };
  CHECK(with([](Program& p) { (*p.queues)[0][0] = 1; }) == "ref.instruction");
  CHECK(with([](Program& p) { (*p.queues)[0] = {0, 0}; }) == "amkb.queue");  // twice
  CHECK(with([](Program& p) { (*p.queues)[0].clear(); }) == "amkb.queue");   // missing
  CHECK(with([](Program& p) { p.queues->clear(); }) == "amkb.queue");        // no queues
  CHECK(with([](Program& p) { p.launch.grid = 2; }) == "amkb.queue");        // one queue for grid 2

  // Offsets that go backwards, and an item count that would overflow the section size.
  const Bytes full = program_to_amkb(small_program());
  const uint64_t q = section_offset(full, kQueues);
  Bytes b = full;
  wr32(b, q + 8 + 4, 0);  // last offset 0 != item count
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.queue");
  b = full;
  wr32(b, q + 4, 0xFFFFFFFFu);
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.queue");
  b = full;
  wr32(b, q, 70000);
  fix_checksums(b);
  CHECK(code_of(b) == "limit.queues");
}

TEST_CASE("inline values") {
  auto with = [](auto edit) {
    Program p = small_program();
    edit(p.buffers[0]);
    return code_of_program(p);
  };
  CHECK(with([](Buffer& b) { b.init.data.resize(4); }) == "amkb.data");  // one value short
  CHECK(with([](Buffer& b) { b.init.data = le_bytes<float>({1.0f, NAN}); }) == "amkb.data");
  CHECK(with([](Buffer& b) {
          b.dtype = DType::f16;
          b.init.data = le_bytes<uint16_t>({0x3C00, 0x7C00});  // +inf
        }) == "amkb.data");
  CHECK(with([](Buffer& b) {
          b.dtype = DType::bf16;
          b.init.data = le_bytes<uint16_t>({0xFF80, 0});  // -inf
        }) == "amkb.data");
  CHECK(with([](Buffer& b) {
          b.dtype = DType::u8;
          b.shape = {uint64_t{1} << 25};
          b.init.data.clear();
        }) == "limit.values");

  // Nonzero padding between two blobs.
  Program p = small_program();
  p.buffers.push_back(p.buffers[0]);
  p.buffers[1].name = "b";
  Bytes b = program_to_amkb(p);
  REQUIRE(code_of(b).empty());
  b[section_offset(b, kData) + 100] = std::byte{1};
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.data");
}

TEST_CASE("the writer refuses what the format cannot hold") {
  Program p = small_program();
  p.instructions[0].operands[0].extent = uint64_t{1} << 32;
  try {
    (void)program_to_amkb(p);
    FAIL("expected amkb.encode");
  } catch (const Error& e) {
    CHECK(e.code() == "amkb.encode");
    CHECK(e.where() == "/instructions/0/operands/0");
  }
  p = small_program();
  p.instructions[0].waits.assign(5, Wait{});
  CHECK_THROWS_AS((void)program_to_amkb(p), Error);
}

TEST_CASE("files from before gemv grew norm/w2/eps still load, with the new slots defaulted") {
  const Program p = rich_program();
  Bytes b = program_to_amkb(p);
  const uint64_t instr = section_offset(b, kInstr);
  // Rewrite instruction 9 (gemv) as the older encoder wrote it: 4 operand slots, no params.
  amk_instruction_t a;
  std::memcpy(&a, b.data() + instr + 9 * 256, sizeof a);
  REQUIRE(a.op == op(OpId::gemv));
  a.n_operands = 4;
  a.n_params = 0;
  for (uint32_t k = 0; k < 3; ++k) a.params[k] = 0;
  std::memcpy(b.data() + instr + 9 * 256, &a, sizeof a);
  fix_checksums(b);
  const Program back = parse_amkb_program(b, kTrusting);
  CHECK(back == p);  // empty norm/w2, eps = its default 1e-5

  // Fewer slots than the op's required ones is still refused.
  a.n_operands = 2;
  std::memcpy(b.data() + instr + 9 * 256, &a, sizeof a);
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.instruction");
}

TEST_CASE(
    "files from before argmax grew value/index_map/base still load, with the new slots defaulted") {
  const Program p = rich_program();
  Bytes b = program_to_amkb(p);
  const uint64_t instr = section_offset(b, kInstr);
  size_t k = 0;
  while (k < p.instructions.size() && p.instructions[k].op != op(OpId::argmax)) ++k;
  REQUIRE(k < p.instructions.size());
  amk_instruction_t a;
  std::memcpy(&a, b.data() + instr + k * 256, sizeof a);
  REQUIRE(a.n_operands == 4);
  a.n_operands = 2;  // x, index: argmax as older encoders wrote it
  a.n_params = 0;
  a.params[0] = 0;
  std::memcpy(b.data() + instr + k * 256, &a, sizeof a);
  fix_checksums(b);
  const Program back = parse_amkb_program(b, kTrusting);
  CHECK(back == p);  // no value, no index_map, base = its default 0
  a.n_operands = 1;  // the index is required
  std::memcpy(b.data() + instr + k * 256, &a, sizeof a);
  fix_checksums(b);
  CHECK(code_of(b) == "amkb.instruction");
}
