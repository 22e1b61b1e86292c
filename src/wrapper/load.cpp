// The JSON encoding of wrapper programs (schemas/wrapper.md): a strict reader. Every rejection is
// an amk::Error with a stable code and the JSON pointer of the offending value. Tensor arguments,
// TMA specs and package-array inits use the VM program's syntax, so they are read by the VM
// program reader itself (io's parse_json_program on a small program holding just them) and its
// errors are moved to where the values sit in the wrapper file: one reader, one set of rules. The
// .amkb decoder's META section is read here too (detail::parse_wrapper_meta), so that both
// encodings take the same checks.
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "io/load.hpp"
#include "wrapper/amkb.hpp"
#include "wrapper/wrapper.hpp"

namespace amk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr std::string_view kPackageNames[kPackageArrays] = {
    "instructions",         "queue_offsets",        "queue_lengths",        "slots", "comms",
    "barrier_init_offsets", "barrier_init_lengths", "barrier_init_indices", "args",  "tensor_args",
    "input_slots",          "task_coords",          "global_staging",       "flags"};

[[noreturn]] void fail(std::string code, std::string where, std::string message) {
  throw_program_error(std::move(code), where.empty() ? "/" : std::move(where), std::move(message));
}

std::string child(const std::string& at, std::string_view key) {
  std::string out = at;
  out += '/';
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}
std::string child(const std::string& at, size_t i) { return at + "/" + std::to_string(i); }

std::string describe(const json& j) {
  std::string s = j.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 44) + "...";
  return j.is_string() ? "string " + s : s;
}

std::string in_quotes(std::string_view s) {
  std::string out = "\"";
  out += s.size() > 64 ? std::string(s.substr(0, 60)) + "..." : std::string(s);
  out += '"';
  return out;
}

// ---- strict parsing: duplicate keys and nesting are refused while the text is read ----

struct Frame {
  bool object = false;
  std::vector<std::string> keys;
  std::string key;   // object: the member being read
  size_t index = 0;  // array: the element being read
};

std::string container_pointer(const std::vector<Frame>& stack) {
  std::string out;
  for (size_t d = 0; d + 1 < stack.size(); ++d)
    out = stack[d].object ? child(out, stack[d].key) : child(out, stack[d].index);
  return out;
}

json parse_strict(std::string_view text) {
  if (text.size() > kMaxFileBytes)
    throw_io_error("io.too_large", "",
                   "the program text is " + std::to_string(text.size()) + " bytes, more than the " +
                       std::to_string(kMaxFileBytes) + " a program may have");
  std::vector<Frame> stack;
  const auto done = [&] {
    if (!stack.empty() && !stack.back().object) ++stack.back().index;
  };
  const json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (stack.size() >= kMaxJsonDepth)
          fail("json.depth", container_pointer(stack),
               "arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        stack.push_back(Frame{ev == json::parse_event_t::object_start, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        Frame& f = stack.back();
        std::string k = parsed.get<std::string>();
        if (std::find(f.keys.begin(), f.keys.end(), k) != f.keys.end())
          fail("json.duplicate_key", child(container_pointer(stack), k),
               "key " + in_quotes(k) + " appears twice in the same object");
        f.keys.push_back(k);
        f.key = std::move(k);
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        stack.pop_back();
        done();
        break;
      case json::parse_event_t::value: done(); break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::parse_error& e) {
    std::string message = e.what();
    if (const auto close = message.find("] ");
        !message.empty() && message[0] == '[' && close != std::string::npos)
      message.erase(0, close + 2);
    fail("json.syntax", "byte " + std::to_string(e.byte), message);
  } catch (const json::exception& e) {
    fail("json.syntax", "", e.what());
  }
}

// ---- typed access ----

void expect_object(const json& j, const std::string& at) {
  if (!j.is_object()) fail("json.type", at, "expected an object, found " + describe(j));
}
void expect_array(const json& j, const std::string& at) {
  if (!j.is_array()) fail("json.type", at, "expected an array, found " + describe(j));
}

// Refuses keys outside `allowed`; keys starting with '_' are comments, as in VM programs.
void check_keys(const json& obj, const std::string& at,
                std::initializer_list<std::string_view> allowed) {
  expect_object(obj, at);
  for (const auto& [k, v] : obj.items()) {
    if (!k.empty() && k[0] == '_') continue;
    if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    fail("json.unknown_key", child(at, k),
         "unknown key " + in_quotes(k) + "; expected one of: " + list);
  }
}

const json* member(const json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const json& required(const json& obj, const std::string& at, std::string_view key) {
  const json* m = member(obj, key);
  if (!m) fail("json.missing", at, "missing required key " + in_quotes(key));
  return *m;
}

std::string get_string(const json& j, const std::string& at) {
  if (!j.is_string()) fail("json.type", at, "expected a string, found " + describe(j));
  return j.get<std::string>();
}

bool get_bool(const json& j, const std::string& at) {
  if (!j.is_boolean()) fail("json.type", at, "expected true or false, found " + describe(j));
  return j.get<bool>();
}

// An unsigned integer in 0..max; integral floats (1e3) are accepted, as in VM programs.
uint64_t get_uint(const json& j, const std::string& at, uint64_t max) {
  const auto range = [&] {
    fail("json.range", at,
         "expected an integer in 0.." + std::to_string(max) + ", found " + describe(j));
  };
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > max) range();
    return v;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0 || static_cast<uint64_t>(v) > max) range();
    return static_cast<uint64_t>(v);
  }
  if (j.is_number_float()) {
    const double d = j.get<double>();
    if (!(d >= 0.0 && d < 18446744073709551616.0) || d != std::floor(d)) range();
    const auto v = static_cast<uint64_t>(d);
    if (v > max) range();
    return v;
  }
  fail("json.type", at, "expected a non-negative integer, found " + describe(j));
}

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

bool is_identifier(std::string_view s) {
  return !s.empty() && s.size() <= kMaxNameLength && is_ident_start(s[0]) &&
         std::all_of(s.begin(), s.end(), is_ident_char);
}

// A define's value: a decimal integer (optionally negative), a 0x hex integer, or an identifier.
bool is_define_value(std::string_view v) {
  if (is_identifier(v)) return true;
  std::string_view d = v;
  if (!d.empty() && d[0] == '-') d.remove_prefix(1);
  if (d.size() > 2 && d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
    return d.size() <= 18 && std::all_of(d.begin() + 2, d.end(), [](char c) {
             return std::isxdigit(static_cast<unsigned char>(c)) != 0;
           });
  return !d.empty() && d.size() <= 20 &&
         std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Names: 1..kMaxNameLength characters of [A-Za-z0-9_.:/-], as for VM programs.
std::string get_name(const json& j, const std::string& at) {
  const std::string s = get_string(j, at);
  const bool ok =
      !s.empty() && s.size() <= kMaxNameLength && std::all_of(s.begin(), s.end(), [](char c) {
        return is_ident_char(c) || c == '.' || c == ':' || c == '/' || c == '-';
      });
  if (!ok)
    fail("name.invalid", at,
         "expected a name of 1.." + std::to_string(kMaxNameLength) +
             " characters of [A-Za-z0-9_.:/-], found " + describe(j));
  return s;
}

// A fingerprint: 1..kMaxFingerprintLength printable ASCII characters.
std::string get_fingerprint(const json& j, const std::string& at) {
  const std::string s = get_string(j, at);
  const bool ok = !s.empty() && s.size() <= kMaxFingerprintLength &&
                  std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 127; });
  if (!ok)
    fail("wrapper.fingerprint", at,
         "expected 1.." + std::to_string(kMaxFingerprintLength) +
             " printable characters without spaces, found " + describe(j));
  return s;
}

// Moves an error of a nested reader to where its value sits in the wrapper file.
template <typename F>
auto relocated(F&& f, const std::function<std::string(const std::string&)>& where) {
  try {
    return f();
  } catch (const Error& e) {
    Error moved(e.kind(), e.code(), where(e.where()), e.message());
    moved.with_detail(e.detail());
    throw moved;
  }
}

// Replaces the leading `from` of a pointer with `to` ("/buffers/0/init" -> "/package/x/init").
std::string swap_prefix(const std::string& where, std::string_view from, const std::string& to) {
  if (where.compare(0, from.size(), from) == 0 &&
      (where.size() == from.size() || where[from.size()] == '/'))
    return to + where.substr(from.size());
  return where;
}

std::string read_text_file(const fs::path& path, uint64_t limit, const std::string& where) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw_io_error("io.missing", where, "no such file: " + path.string());
  if (fs::is_directory(st))
    throw_io_error("io.read", where, path.string() + " is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw_io_error("io.read", where, "cannot open " + path.string() + ": " + std::strerror(errno));
  std::string text;
  std::vector<char> buf(size_t{1} << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (text.size() + got > limit)
      fail("limit.source", where,
           path.string() + " is more than the " + std::to_string(limit) + " bytes allowed");
    text.append(buf.data(), got);
  }
  if (in.bad()) throw_io_error("io.read", where, "reading " + path.string() + " failed");
  return text;
}

// ---- the wrapper program ----

class Reader {
public:
  // `meta`: reading an .amkb's META (source and raw contents come from its other sections).
  Reader(WrapperProgram& w, const LoadOptions& options, detail::WrapperMeta* meta = nullptr)
      : w_(w), options_(options), meta_(meta) {}

  void read(const json& root) {
    check_keys(root, "",
               {"format", "version", "name", "description", "wrapper", "launch", "package",
                "tensor_args", "tma", "target", "artifact_fingerprint"});
    const json& format = required(root, "", "format");
    if (get_string(format, "/format") != kWrapperFormat)
      fail("program.format", "/format", "expected \"amk.wrapper\", found " + describe(format));
    const uint64_t v = get_uint(required(root, "", "version"), "/version", kU32Max);
    if (v != kWrapperFormatVersion)
      fail("program.version", "/version",
           "expected format version " + std::to_string(kWrapperFormatVersion) + ", found " +
               std::to_string(v));
    w_.version = static_cast<uint32_t>(v);
    w_.name = get_name(required(root, "", "name"), "/name");
    if (const json* m = member(root, "description"))
      w_.description = get_string(*m, "/description");
    read_wrapper(required(root, "", "wrapper"), "/wrapper");
    read_launch(required(root, "", "launch"), "/launch");
    read_package(required(root, "", "package"), "/package");
    read_tensors(member(root, "tensor_args"), member(root, "tma"));
    read_target(required(root, "", "target"), "/target");
    if (const json* m = member(root, "artifact_fingerprint"))
      w_.artifact_fingerprint = get_fingerprint(*m, "/artifact_fingerprint");
    check_data_paths();
  }

private:
  void read_wrapper(const json& j, const std::string& at) {
    if (meta_)
      check_keys(j, at, {"kernel_name", "source_path", "defines"});
    else
      check_keys(j, at, {"kernel_name", "source", "source_path", "defines"});
    WrapperSource& s = w_.wrapper;
    const std::string kat = child(at, "kernel_name");
    s.kernel_name = get_string(required(j, at, "kernel_name"), kat);
    if (!is_identifier(s.kernel_name))
      fail("wrapper.kernel_name", kat,
           "expected a C identifier (the extern \"C\" entry point), found " +
               in_quotes(s.kernel_name));
    const json* inline_source = meta_ ? nullptr : member(j, "source");
    const bool has_inline = meta_ ? meta_->source != nullptr : inline_source != nullptr;
    const json* path = member(j, "source_path");
    if (has_inline && path)
      fail("wrapper.source", child(at, "source_path"),
           meta_ ? "a SOURCE section and \"source_path\": give the source one way"
                 : "give the source inline (\"source\") or as a file (\"source_path\"), not both");
    if (!has_inline && !path)
      fail("wrapper.source", at,
           meta_ ? "missing the kernel's CUDA source: a SOURCE section or \"source_path\""
                 : "missing the kernel's CUDA source: \"source\" or \"source_path\"");
    if (has_inline) {
      s.source = meta_ ? *meta_->source : get_string(*inline_source, child(at, "source"));
      if (s.source.size() > kMaxWrapperSourceBytes)
        fail("limit.source", child(at, "source"),
             "the source is " + std::to_string(s.source.size()) + " bytes; at most " +
                 std::to_string(kMaxWrapperSourceBytes));
    } else {
      const std::string pat = child(at, "source_path");
      s.source_path = get_string(*path, pat);
      // Source never comes from outside the program's folder, whatever --allow-outside says.
      Program where;
      where.base_dir = w_.base_dir;
      const fs::path file = resolve_data_path(where, s.source_path, pat, LoadOptions{});
      s.source = read_text_file(file, kMaxWrapperSourceBytes, pat);
    }
    if (s.source.empty())
      fail("wrapper.source", has_inline ? child(at, "source") : child(at, "source_path"),
           "the kernel's source is empty");
    if (const json* d = member(j, "defines")) read_defines(*d, child(at, "defines"));
  }

  void read_defines(const json& j, const std::string& at) {
    expect_array(j, at);
    if (j.size() > kMaxWrapperDefines)
      fail("limit.defines", at,
           "expected at most " + std::to_string(kMaxWrapperDefines) + " defines, found " +
               std::to_string(j.size()));
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string dat = child(at, i);
      const std::string text = get_string(j[i], dat);
      const size_t eq = text.find('=');
      WrapperDefine d;
      d.name = text.substr(0, eq);
      if (eq != std::string::npos) d.value = text.substr(eq + 1);
      if (!is_identifier(d.name) || (d.value && !is_define_value(*d.value)))
        fail("wrapper.define", dat,
             "expected NAME or NAME=VALUE (NAME a C identifier, VALUE an integer or an "
             "identifier; no include paths or compiler flags), found " +
                 in_quotes(text));
      for (const auto& other : w_.wrapper.defines)
        if (other.name == d.name)
          fail("wrapper.define", dat, "macro " + in_quotes(d.name) + " is defined twice");
      w_.wrapper.defines.push_back(std::move(d));
    }
  }

  void read_launch(const json& j, const std::string& at) {
    check_keys(j, at,
               {"queues", "block_dim", "dynamic_smem_bytes", "cluster_size", "scheduling_policy",
                "timeout_ms"});
    WrapperLaunch& l = w_.launch;
    const std::string qat = child(at, "queues");
    const uint64_t queues = get_uint(required(j, at, "queues"), qat, kU64Max);
    if (queues == 0 || queues > kMaxQueues)
      fail("wrapper.launch.queues", qat,
           "expected 1.." + std::to_string(kMaxQueues) +
               " queues (one persistent block each), found " + std::to_string(queues));
    l.queues = static_cast<uint32_t>(queues);

    const std::string bat = child(at, "block_dim");
    const json& block = required(j, at, "block_dim");
    expect_array(block, bat);
    if (block.empty() || block.size() > 3)
      fail("wrapper.launch.block_dim", bat,
           "expected 1 to 3 dimensions, found " + std::to_string(block.size()));
    uint64_t threads = 1;
    for (size_t i = 0; i < block.size(); ++i) {
      const uint64_t n = get_uint(block[i], child(bat, i), kU32Max);
      if (n == 0)
        fail("wrapper.launch.block_dim", child(bat, i), "expected a positive dimension, found 0");
      if (i == 2 && n > 64)
        fail("wrapper.launch.block_dim", child(bat, i),
             "the z dimension is at most 64 threads, found " + std::to_string(n));
      threads *= std::min<uint64_t>(n, kMaxWrapperBlockThreads + 1);
      l.block_dim.push_back(static_cast<uint32_t>(n));
    }
    if (threads > kMaxWrapperBlockThreads)
      fail("wrapper.launch.block_dim", bat,
           "a block of more than " + std::to_string(kMaxWrapperBlockThreads) +
               " threads (the product of the dimensions)");

    if (const json* m = member(j, "dynamic_smem_bytes"))
      l.dynamic_smem_bytes =
          static_cast<uint32_t>(get_uint(*m, child(at, "dynamic_smem_bytes"), kU32Max));
    if (const json* m = member(j, "cluster_size")) {
      const std::string cat = child(at, "cluster_size");
      const uint64_t c = get_uint(*m, cat, kU64Max);
      if (c == 0 || c > kMaxWrapperClusterSize)
        fail("wrapper.launch.cluster_size", cat,
             "expected 1.." + std::to_string(kMaxWrapperClusterSize) + " blocks, found " +
                 std::to_string(c));
      if (l.queues % c != 0)
        fail("wrapper.launch.cluster_size", cat,
             "the grid of " + std::to_string(l.queues) + " blocks (one per queue) is not a " +
                 "multiple of the cluster size " + std::to_string(c));
      l.cluster_size = static_cast<uint32_t>(c);
    }
    if (const json* m = member(j, "scheduling_policy")) {
      const std::string sat = child(at, "scheduling_policy");
      const std::string s = get_string(*m, sat);
      if (s != "load_balancing")
        fail("wrapper.launch.scheduling_policy", sat,
             "scheduling policy " + in_quotes(s) +
                 " is not supported; amk launches clusters with \"load_balancing\" only");
      l.scheduling_policy = SchedulingPolicy::load_balancing;
    }
    if (const json* m = member(j, "timeout_ms")) {
      const std::string tat = child(at, "timeout_ms");
      const uint64_t t = get_uint(*m, tat, kMaxTimeoutMs);
      if (t == 0)
        fail("wrapper.launch.timeout_ms", tat,
             "expected 1.." + std::to_string(kMaxTimeoutMs) + " milliseconds, found 0");
      l.timeout_ms = t;
    }
  }

  void read_package(const json& j, const std::string& at) {
    expect_object(j, at);
    for (const auto& [k, v] : j.items()) {
      if (!k.empty() && k[0] == '_') continue;
      const auto a = parse_package_array(k);
      if (a == PackageArray::tensor_args)
        fail("wrapper.package.tensor_args", child(at, k),
             "amk writes the tensor_args array itself, one record per entry of /tensor_args; "
             "the package does not give it");
      if (!a) {
        std::string list;
        for (auto name : kPackageNames)
          if (name != "tensor_args") list += (list.empty() ? "" : ", ") + std::string(name);
        fail("json.unknown_key", child(at, k),
             "unknown key " + in_quotes(k) + "; expected one of: " + list);
      }
      read_entry(v, child(at, k), *a);
    }
    for (PackageArray a :
         {PackageArray::instructions, PackageArray::queue_offsets, PackageArray::queue_lengths})
      if (!w_.entry(a).present)
        fail("json.missing", at, "missing required key " + in_quotes(package_array_name(a)));
    // Absent arrays are empty bytes; tensor_args (what amk writes) has its records' size.
    for (size_t i = 0; i < kPackageArrays; ++i) {
      PackageEntry& e = w_.package[i];
      if (e.present) continue;
      e.buffer.name = std::string(kPackageNames[i]);
      e.buffer.dtype = DType::u8;
      const auto a = static_cast<PackageArray>(i);
      e.record_bytes = a == PackageArray::tensor_args ? sizeof(WrapperTensorArgRecord)
                       : a == PackageArray::comms     ? sizeof(WrapperCommRecord)
                                                      : 1;
    }
  }

  void read_entry(const json& j, const std::string& at, PackageArray a) {
    if (meta_)
      check_keys(j, at, {"dtype", "count", "record_bytes", "raw", "init"});
    else
      check_keys(j, at, {"dtype", "count", "record_bytes", "data", "init"});
    PackageEntry& e = w_.package[static_cast<size_t>(a)];
    e.present = true;
    e.buffer.name = std::string(package_array_name(a));
    const std::string dat = child(at, "dtype");
    const json& dtype = required(j, at, "dtype");
    const auto t = parse_dtype(get_string(dtype, dat));
    if (!t)
      fail("wrapper.package.dtype", dat,
           "expected one of f32 f16 bf16 i32 u32 i64 u8, found " + describe(dtype));
    e.buffer.dtype = *t;
    const bool indices = a == PackageArray::queue_offsets || a == PackageArray::queue_lengths ||
                         a == PackageArray::barrier_init_offsets ||
                         a == PackageArray::barrier_init_lengths;
    if (indices && *t != DType::i32 && *t != DType::u32 && *t != DType::i64)
      fail("wrapper.package.dtype", dat,
           std::string(package_array_name(a)) + " holds offsets or lengths: expected i32, u32 " +
               "or i64, found " + describe(dtype));
    const std::string cat = child(at, "count");
    const uint64_t count = get_uint(required(j, at, "count"), cat, kU64Max);
    const auto bytes = checked_mul(count, dtype_size(*t));
    if (!bytes || *bytes > kMaxBufferBytes)
      fail("wrapper.package.size", cat,
           "expected at most " + std::to_string(kMaxBufferBytes) + " bytes per array, found " +
               (bytes ? std::to_string(*bytes) : std::string("more than 2^64")));
    if (count > 0) e.buffer.shape = {count};
    total_ += *bytes;

    e.record_bytes = dtype_size(*t);
    if (a == PackageArray::comms) e.record_bytes = sizeof(WrapperCommRecord);
    if (const json* r = member(j, "record_bytes")) {
      const std::string rat = child(at, "record_bytes");
      const uint64_t rb = get_uint(*r, rat, kU32Max);
      if (rb == 0) fail("wrapper.package.record_bytes", rat, "expected a positive record size");
      if (a == PackageArray::comms && rb != sizeof(WrapperCommRecord))
        fail("wrapper.package.record_bytes", rat,
             "comm records are " + std::to_string(sizeof(WrapperCommRecord)) +
                 " bytes (schemas/wrapper.md), found " + std::to_string(rb));
      e.record_bytes = rb;
    } else if (a == PackageArray::instructions) {
      fail("json.missing", at, "missing required key \"record_bytes\" (one instruction's size)");
    }

    const json* data = member(j, meta_ ? "raw" : "data");
    const json* init = member(j, "init");
    if (data && init)
      fail("wrapper.package.data", child(at, "init"),
           meta_ ? "contents in PACKAGE (\"raw\") and an init: give one"
                 : "give the contents inline (\"data\") or as an init (\"init\"), not both");
    if (data && meta_) {
      // The decoder copies the bytes from PACKAGE once every offset is checked.
      const std::string rat = child(at, "raw");
      const uint64_t offset = get_uint(*data, rat, kU64Max);
      if (count == 0) fail("amkb.package", rat, "an empty array has no contents in PACKAGE");
      meta_->raw[static_cast<size_t>(a)] = offset;
      e.buffer.init.kind = InitKind::values;
    } else if (data) {
      const std::string dpat = child(at, "data");
      auto decoded = base64_decode(get_string(*data, dpat));
      if (!decoded) fail("wrapper.package.base64", dpat, "expected RFC 4648 base64 text");
      if (decoded->size() != *bytes)
        fail("wrapper.package.size", dpat,
             "the data holds " + std::to_string(decoded->size()) + " bytes; " +
                 std::to_string(count) + " x " + std::string(dtype_name(*t)) + " is " +
                 std::to_string(*bytes));
      if (count > 0) {  // an empty array has no contents to keep (and writes none back)
        e.buffer.init.kind = InitKind::values;
        e.buffer.init.data = std::move(*decoded);
      }
    } else if (init && count > 0) {
      // The VM program reader reads the init, for a one-buffer program of this array's shape.
      const json program = {{"format", "amk.program"},
                            {"version", kFormatVersion},
                            {"name", "package"},
                            {"buffers",
                             {{{"name", e.buffer.name},
                               {"dtype", std::string(dtype_name(*t))},
                               {"shape", {count}},
                               {"init", *init}}}},
                            {"instructions", json::array()}};
      const Program p =
          relocated([&] { return parse_json_program(program.dump(), options_); },
                    [&](const std::string& w) {
                      return swap_prefix(swap_prefix(w, "/buffers/0/shape", cat), "/buffers/0", at);
                    });
      e.buffer.init = p.buffers[0].init;
    }
  }

  // Tensor arguments are amk buffers and TMA specs name them: both are read by the VM reader,
  // with "tensor" in a TMA spec standing for the VM's "buffer".
  void read_tensors(const json* tensors, const json* tma) {
    json program = {{"format", "amk.program"},
                    {"version", kFormatVersion},
                    {"name", "tensor_args"},
                    {"buffers", json::array()},
                    {"instructions", json::array()}};
    const auto to_wrapper = [](const std::string& w) {
      std::string out = swap_prefix(w, "/buffers", "/tensor_args");
      // "/tma/3/buffer" -> "/tma/3/tensor"
      const auto b = out.rfind("/buffer");
      if (out.rfind("/tma/", 0) == 0 && b != std::string::npos && b + 7 == out.size())
        out.replace(b, 7, "/tensor");
      return out;
    };
    std::set<std::string> names;
    if (tensors) {
      expect_array(*tensors, "/tensor_args");
      if (tensors->size() > kMaxTensorArgs)
        fail("limit.tensor_args", "/tensor_args",
             "expected at most " + std::to_string(kMaxTensorArgs) + " tensor arguments, found " +
                 std::to_string(tensors->size()));
      program["buffers"] = *tensors;
      // The tensor arguments first, so that their errors come before the TMA specs naming them.
      const Program p =
          relocated([&] { return parse_json_program(program.dump(), options_); }, to_wrapper);
      for (const Buffer& b : p.buffers) names.insert(b.name);
    }
    if (tma) {
      expect_array(*tma, "/tma");
      json specs = json::array();
      for (size_t i = 0; i < tma->size(); ++i) {
        const std::string sat = child("/tma", i);
        const json& s = (*tma)[i];
        check_keys(s, sat,
                   {"name", "tensor", "offset", "dims", "strides", "box", "element_strides",
                    "swizzle", "interleave", "l2_promotion", "oob_fill"});
        const std::string tat = child(sat, "tensor");
        const std::string tensor = get_string(required(s, sat, "tensor"), tat);
        if (!names.count(tensor))
          fail("ref.tensor_arg", tat, "no tensor argument is named " + in_quotes(tensor));
        json vm = s;
        vm.erase("tensor");
        vm["buffer"] = tensor;
        specs.push_back(std::move(vm));
      }
      program["tma"] = std::move(specs);
    }
    const Program p =
        relocated([&] { return parse_json_program(program.dump(), options_); }, to_wrapper);
    w_.tensor_args = p.buffers;
    w_.tma = p.tma;
    for (const Buffer& b : w_.tensor_args) total_ += b.bytes();
    if (total_ > kMaxTotalBytes)
      fail("wrapper.package.size", "/package",
           "the package arrays and tensor arguments need more than the " +
               std::to_string(kMaxTotalBytes) + " bytes allowed in total");
  }

  void read_target(const json& j, const std::string& at) {
    check_keys(j, at,
               {"arch", "sm_count", "max_shared_memory_per_block",
                "max_shared_memory_per_block_optin", "max_shared_memory_per_sm", "cluster_launch",
                "compiler_version", "fingerprint"});
    TargetSnapshot& t = w_.target;
    const std::string aat = child(at, "arch");
    const std::string arch = get_string(required(j, at, "arch"), aat);
    std::string_view digits = arch;
    bool ok = digits.substr(0, 3) == "sm_";
    if (ok) digits.remove_prefix(3);
    if (ok && !digits.empty() && digits.back() == 'a') {
      digits.remove_suffix(1);
      t.arch_specific = true;
    }
    ok = ok && digits.size() >= 2 && digits.size() <= 3 && digits[0] != '0' &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!ok)
      fail("wrapper.target.arch", aat,
           "expected \"sm_XY\" or \"sm_XYa\", found " + in_quotes(arch));
    for (char c : digits) t.arch = t.arch * 10 + static_cast<uint32_t>(c - '0');
    const std::string smat = child(at, "sm_count");
    t.sm_count = static_cast<uint32_t>(get_uint(required(j, at, "sm_count"), smat, kU32Max));
    if (t.sm_count == 0) fail("wrapper.target.sm_count", smat, "expected a positive SM count");
    const auto opt_u32 = [&](std::string_view key) -> uint32_t {
      const json* m = member(j, key);
      return m ? static_cast<uint32_t>(get_uint(*m, child(at, key), kU32Max)) : 0;
    };
    t.max_shared_memory_per_block = opt_u32("max_shared_memory_per_block");
    t.max_shared_memory_per_block_optin =
        static_cast<uint32_t>(get_uint(required(j, at, "max_shared_memory_per_block_optin"),
                                       child(at, "max_shared_memory_per_block_optin"), kU32Max));
    t.max_shared_memory_per_sm = opt_u32("max_shared_memory_per_sm");
    t.cluster_launch = get_bool(required(j, at, "cluster_launch"), child(at, "cluster_launch"));
    const std::string vat = child(at, "compiler_version");
    t.compiler_version = get_string(required(j, at, "compiler_version"), vat);
    if (t.compiler_version.empty() || t.compiler_version.size() > kMaxNameLength)
      fail("wrapper.target.compiler_version", vat,
           "expected 1.." + std::to_string(kMaxNameLength) + " characters");
    t.fingerprint = get_fingerprint(required(j, at, "fingerprint"), child(at, "fingerprint"));
  }

  // Data files named by inits stay inside the program's folder unless --allow-outside.
  void check_data_paths() const {
    Program where;
    where.base_dir = w_.base_dir;
    const auto check = [&](const BufferInit& init, const std::string& at) {
      if (init.kind == InitKind::npy || init.kind == InitKind::raw ||
          init.kind == InitKind::safetensors)
        (void)resolve_data_path(where, init.path, at + "/init/path", options_);
    };
    for (size_t i = 0; i < kPackageArrays; ++i)
      if (w_.package[i].present)
        check(w_.package[i].buffer.init, child("/package", kPackageNames[i]));
    for (size_t i = 0; i < w_.tensor_args.size(); ++i)
      check(w_.tensor_args[i].init, child("/tensor_args", i));
  }

  WrapperProgram& w_;
  const LoadOptions& options_;
  detail::WrapperMeta* meta_ = nullptr;
  uint64_t total_ = 0;
};

// Stops at the top-level "format" value: is it "amk.wrapper"?
class FormatSniffer {
public:
  bool wrapper = false;

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(json::number_integer_t) { return scalar(); }
  bool number_unsigned(json::number_unsigned_t) { return scalar(); }
  bool number_float(json::number_float_t, const std::string&) { return scalar(); }
  bool string(std::string& s) {
    if (at_format_) {
      wrapper = s == kWrapperFormat;
      return false;
    }
    return true;
  }
  bool binary(json::binary_t&) { return scalar(); }
  bool start_object(size_t) { return open(); }
  bool start_array(size_t) { return open(); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    at_format_ = depth_ == 1 && k == "format";
    return true;
  }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

private:
  bool scalar() { return !at_format_; }
  bool open() {
    if (at_format_) return false;
    return ++depth_ <= kMaxJsonDepth;
  }
  bool close() {
    --depth_;
    return true;
  }
  size_t depth_ = 0;
  bool at_format_ = false;
};

}  // namespace

std::string_view package_array_name(PackageArray a) noexcept {
  return kPackageNames[static_cast<size_t>(a)];
}

std::optional<PackageArray> parse_package_array(std::string_view name) noexcept {
  for (size_t i = 0; i < kPackageArrays; ++i)
    if (kPackageNames[i] == name) return static_cast<PackageArray>(i);
  return std::nullopt;
}

std::array<uint32_t, 3> WrapperLaunch::block3() const noexcept {
  std::array<uint32_t, 3> b = {1, 1, 1};
  for (size_t i = 0; i < block_dim.size() && i < 3; ++i) b[i] = block_dim[i];
  return b;
}

uint64_t PackageEntry::count() const noexcept { return buffer.shape.empty() ? 0 : buffer.shape[0]; }
uint64_t PackageEntry::bytes() const noexcept { return count() * dtype_size(buffer.dtype); }

bool is_wrapper_json(std::string_view text) {
  FormatSniffer sniffer;
  try {
    (void)json::sax_parse(text.begin(), text.end(), &sniffer);
  } catch (const json::exception&) {
    return false;
  }
  return sniffer.wrapper;
}

bool is_wrapper_file(const fs::path& path) {
  // Only a regular file is sniffed: a directory or a missing file is the loader's to report, and
  // reading a pipe here would take the bytes the loader needs.
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::array<char, 4> head{};
  in.read(head.data(), head.size());
  if (in.gcount() == 4 && is_wrapper_amkb({head.data(), head.size()})) return true;
  in.clear();
  in.seekg(0);
  FormatSniffer sniffer;
  try {
    (void)json::sax_parse(in, &sniffer);
  } catch (const std::exception&) {  // (malformed JSON, or the read failed: not a wrapper here)
    return false;
  }
  return sniffer.wrapper;
}

WrapperProgram parse_json_wrapper(std::string_view text, const fs::path& base_dir,
                                  const LoadOptions& options) {
  const json root = parse_strict(text);
  WrapperProgram w;
  w.base_dir = base_dir.string();
  Reader(w, options).read(root);
  return w;
}

WrapperProgram load_wrapper_file(const fs::path& path, const LoadOptions& options) {
  const std::string text = read_text_file(path, kMaxFileBytes, path.string());
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) abs = path;
  const fs::path dir = abs.lexically_normal().parent_path();
  // The encoding comes from the first bytes, never the extension; a VM program's .amkb ("AMKB")
  // goes to the wrapper decoder too, which names it.
  if (text.size() >= 4 && (is_wrapper_amkb(text) || text.compare(0, 4, "AMKB") == 0))
    return parse_amkb_wrapper(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()),
        dir, options);
  return parse_json_wrapper(text, dir, options);
}

namespace detail {

WrapperProgram parse_wrapper_meta(std::string_view text, const fs::path& base_dir,
                                  const LoadOptions& options, WrapperMeta& meta) {
  const json root = parse_strict(text);
  WrapperProgram w;
  w.base_dir = base_dir.string();
  Reader(w, options, &meta).read(root);
  return w;
}

}  // namespace detail

std::string wrapper_to_json(const WrapperProgram& w) {
  // Tensor arguments, TMA specs and inits are written by the VM program writer, as they are read.
  Program p;
  p.name = "wrapper";
  p.buffers = w.tensor_args;
  p.tma = w.tma;
  for (const PackageEntry& e : w.package)
    if (e.present && e.count() > 0 && e.buffer.init.kind != InitKind::values)
      p.buffers.push_back(e.buffer);
  const auto vm = nlohmann::ordered_json::parse(program_to_json(p));

  nlohmann::ordered_json j;
  j["format"] = kWrapperFormat;
  j["version"] = w.version;
  j["name"] = w.name;
  if (!w.description.empty()) j["description"] = w.description;
  nlohmann::ordered_json src;
  src["kernel_name"] = w.wrapper.kernel_name;
  if (w.wrapper.source_path.empty())
    src["source"] = w.wrapper.source;
  else
    src["source_path"] = w.wrapper.source_path;
  if (!w.wrapper.defines.empty()) {
    src["defines"] = nlohmann::ordered_json::array();
    for (const auto& d : w.wrapper.defines)
      src["defines"].push_back(d.value ? d.name + "=" + *d.value : d.name);
  }
  j["wrapper"] = std::move(src);
  nlohmann::ordered_json l;
  l["queues"] = w.launch.queues;
  l["block_dim"] = w.launch.block_dim;
  l["dynamic_smem_bytes"] = w.launch.dynamic_smem_bytes;
  l["cluster_size"] = w.launch.cluster_size;
  l["scheduling_policy"] = "load_balancing";
  l["timeout_ms"] = w.launch.timeout_ms;
  j["launch"] = std::move(l);
  nlohmann::ordered_json pkg = nlohmann::ordered_json::object();
  size_t vm_index = w.tensor_args.size();
  for (size_t i = 0; i < kPackageArrays; ++i) {
    const PackageEntry& e = w.package[i];
    if (!e.present) continue;
    nlohmann::ordered_json a;
    a["dtype"] = std::string(dtype_name(e.buffer.dtype));
    a["count"] = e.count();
    if (e.record_bytes != dtype_size(e.buffer.dtype) &&
        static_cast<PackageArray>(i) != PackageArray::comms)
      a["record_bytes"] = e.record_bytes;
    else if (static_cast<PackageArray>(i) == PackageArray::instructions)
      a["record_bytes"] = e.record_bytes;
    if (e.count() > 0) {
      if (e.buffer.init.kind == InitKind::values)
        a["data"] = base64_encode(e.buffer.init.data);
      else if (const auto& b = vm["buffers"][vm_index++]; b.contains("init"))
        a["init"] = b["init"];
    }
    pkg[std::string(kPackageNames[i])] = std::move(a);
  }
  j["package"] = std::move(pkg);
  if (!w.tensor_args.empty()) {
    j["tensor_args"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < w.tensor_args.size(); ++i) j["tensor_args"].push_back(vm["buffers"][i]);
  }
  if (!w.tma.empty()) {
    j["tma"] = nlohmann::ordered_json::array();
    for (const auto& spec : vm["tma"]) {
      nlohmann::ordered_json s;
      for (const auto& [k, v] : spec.items()) s[k == "buffer" ? "tensor" : k] = v;
      j["tma"].push_back(std::move(s));
    }
  }
  nlohmann::ordered_json t;
  t["arch"] = "sm_" + std::to_string(w.target.arch) + (w.target.arch_specific ? "a" : "");
  t["sm_count"] = w.target.sm_count;
  if (w.target.max_shared_memory_per_block != 0)
    t["max_shared_memory_per_block"] = w.target.max_shared_memory_per_block;
  t["max_shared_memory_per_block_optin"] = w.target.max_shared_memory_per_block_optin;
  if (w.target.max_shared_memory_per_sm != 0)
    t["max_shared_memory_per_sm"] = w.target.max_shared_memory_per_sm;
  t["cluster_launch"] = w.target.cluster_launch;
  t["compiler_version"] = w.target.compiler_version;
  t["fingerprint"] = w.target.fingerprint;
  j["target"] = std::move(t);
  if (!w.artifact_fingerprint.empty()) j["artifact_fingerprint"] = w.artifact_fingerprint;
  return j.dump(2);
}

}  // namespace amk
