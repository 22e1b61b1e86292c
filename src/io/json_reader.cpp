// The JSON encoding of program format v1 (schemas/README.md is the contract): a strict reader.
// Every rejection names a stable code and the exact JSON pointer of the offending value; every
// count is checked against the limits in program.hpp before anything is allocated for it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/numeric.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

using json = nlohmann::json;

constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kMaxTmaRank = 5;

// ---- JSON pointers, built only when an error is thrown ----

void append_pointer_token(std::string& out, std::string_view token) {
  out += '/';
  for (char c : token) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
}

// A location in the document: a chain of stack-allocated segments, so walking 100k
// instructions costs no string building.
struct Loc {
  const Loc* parent = nullptr;
  std::string_view key;
  size_t index = 0;
  bool is_index = false;

  [[nodiscard]] Loc operator/(std::string_view k) const { return Loc{this, k, 0, false}; }
  [[nodiscard]] Loc operator/(size_t i) const { return Loc{this, {}, i, true}; }

  [[nodiscard]] std::string str() const {
    std::vector<const Loc*> chain;
    for (const Loc* l = this; l && l->parent; l = l->parent) chain.push_back(l);
    // The root itself is written "/" (strictly, "" in RFC 6901), so that a location is never
    // empty and reads unambiguously in messages and tables.
    if (chain.empty()) return "/";
    std::string out;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if ((*it)->is_index)
        out += '/' + std::to_string((*it)->index);
      else
        append_pointer_token(out, (*it)->key);
    }
    return out;
  }
};

[[noreturn]] void fail(std::string_view code, const Loc& loc, std::string message) {
  throw_program_error(std::string(code), loc.str(), std::move(message));
}

std::string in_quotes(std::string_view s) {
  std::string out = "\"";
  out += s.size() > 64 ? std::string(s.substr(0, 60)) + "..." : std::string(s);
  out += '"';
  return out;
}

template <typename Range>
std::string join(const Range& items) {
  std::string out;
  for (const auto& it : items) {
    if (!out.empty()) out += ", ";
    out += std::string_view(it);
  }
  return out.empty() ? "(none)" : out;
}

// ---- a compact document tree ----
//
// nlohmann's lexer feeds a flat tree built for this reader: nodes in one array with each
// container's children contiguous, strings in one character pool. Compared with nlohmann's DOM
// (a std::map and an allocation per value) this halves the load time of large programs, and
// it lets the builder refuse duplicate keys, which nlohmann would silently collapse.

enum class Kind : uint8_t {
  null,
  boolean,
  integer,
  unsigned_integer,
  floating,
  string,
  array,
  object
};

struct Node {
  Kind kind = Kind::null;
  bool boolean = false;
  uint32_t first = 0;    // array/object: index of the first child; string: offset in the pool
  uint32_t count = 0;    // array/object: number of children; string: length
  uint32_t key_off = 0;  // a member of an object: its key in the pool
  uint32_t key_len = 0;
  union {
    int64_t i;
    uint64_t u;
    double d;
  } num{};
};

struct Doc {
  std::vector<Node> nodes;
  std::string chars;
  Node root;
};

// A cheap handle on one node of a Doc.
class Value {
public:
  Value(const Doc* doc, const Node* node) : doc_(doc), node_(node) {}

  [[nodiscard]] Kind kind() const { return node_->kind; }
  [[nodiscard]] bool is_object() const { return kind() == Kind::object; }
  [[nodiscard]] bool is_array() const { return kind() == Kind::array; }
  [[nodiscard]] bool is_string() const { return kind() == Kind::string; }
  [[nodiscard]] bool is_boolean() const { return kind() == Kind::boolean; }
  [[nodiscard]] bool is_null() const { return kind() == Kind::null; }
  [[nodiscard]] bool is_number() const {
    return kind() == Kind::integer || kind() == Kind::unsigned_integer || kind() == Kind::floating;
  }

  [[nodiscard]] size_t size() const { return is_array() || is_object() ? node_->count : 0; }
  [[nodiscard]] bool empty() const { return size() == 0; }
  [[nodiscard]] Value operator[](size_t i) const {
    return Value(doc_, &doc_->nodes[node_->first + i]);
  }
  // The key of this node when it is an object member.
  [[nodiscard]] std::string_view key() const {
    return std::string_view(doc_->chars).substr(node_->key_off, node_->key_len);
  }
  [[nodiscard]] std::string_view str() const {
    return std::string_view(doc_->chars).substr(node_->first, node_->count);
  }
  [[nodiscard]] bool boolean() const { return node_->boolean; }
  [[nodiscard]] int64_t i64() const { return node_->num.i; }
  [[nodiscard]] uint64_t u64() const { return node_->num.u; }
  [[nodiscard]] double number() const {
    switch (kind()) {
      case Kind::integer: return static_cast<double>(node_->num.i);
      case Kind::unsigned_integer: return static_cast<double>(node_->num.u);
      default: return node_->num.d;
    }
  }
  // Members are few (a dozen keys at most in valid programs): a linear scan beats hashing.
  [[nodiscard]] std::optional<Value> find(std::string_view k) const {
    for (size_t i = 0; i < size(); ++i) {
      Value m = (*this)[i];
      if (m.key() == k) return m;
    }
    return std::nullopt;
  }

private:
  const Doc* doc_;
  const Node* node_;
};

// A short, one-line rendering of a value for messages.
std::string describe(const Value& j) {
  switch (j.kind()) {
    case Kind::object: return "an object";
    case Kind::array: return "an array";
    case Kind::null: return "null";
    case Kind::boolean: return j.boolean() ? "true" : "false";
    case Kind::integer: return std::to_string(j.i64());
    case Kind::unsigned_integer: return std::to_string(j.u64());
    case Kind::floating: return json(j.number()).dump();
    case Kind::string: {
      std::string s =
          json(std::string(j.str())).dump(-1, ' ', true, json::error_handler_t::replace);
      if (s.size() > 48) s = s.substr(0, 44) + "...\"";
      return "string " + s;
    }
  }
  return "?";
}

class DocBuilder {
public:
  explicit DocBuilder(Doc& doc) : doc_(doc) {}

  std::string code, where, message;

  bool null() { return add(make(Kind::null)); }
  bool boolean(bool v) {
    Node n = make(Kind::boolean);
    n.boolean = v;
    return add(n);
  }
  bool number_integer(json::number_integer_t v) {
    Node n = make(Kind::integer);
    n.num.i = v;
    return add(n);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    Node n = make(Kind::unsigned_integer);
    n.num.u = v;
    return add(n);
  }
  bool number_float(json::number_float_t v, const std::string&) {
    Node n = make(Kind::floating);
    n.num.d = v;
    return add(n);
  }
  bool string(std::string& v) {
    Node n = make(Kind::string);
    n.first = static_cast<uint32_t>(doc_.chars.size());
    n.count = static_cast<uint32_t>(v.size());
    doc_.chars += v;
    return add(n);
  }
  bool binary(json::binary_t&) { return add(make(Kind::null)); }  // not produced by JSON text

  bool start_object(size_t) { return open(Kind::object); }
  bool start_array(size_t) { return open(Kind::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    key_off_ = static_cast<uint32_t>(doc_.chars.size());
    key_len_ = static_cast<uint32_t>(k.size());
    doc_.chars += k;
    return true;
  }

  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    size_t byte = position;
    code = "json.syntax";
    if (const auto* pe = dynamic_cast<const json::parse_error*>(&ex))
      byte = pe->byte;
    else
      code = "json.range";  // a number too large for a double
    where = "byte " + std::to_string(byte);
    message = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix: the code says it.
    if (const auto close = message.find("] ");
        !message.empty() && message[0] == '[' && close != std::string::npos)
      message.erase(0, close + 2);
    return false;
  }

private:
  // A new node; a member of an object takes the key just read.
  Node make(Kind kind) const {
    Node n;
    n.kind = kind;
    if (!open_.empty() && open_.back().kind == Kind::object) {
      n.key_off = key_off_;
      n.key_len = key_len_;
    }
    return n;
  }
  bool add(const Node& n) {
    if (open_.empty())
      doc_.root = n;
    else
      pending_[open_.size() - 1].push_back(n);
    return true;
  }
  bool open(Kind kind) {
    if (open_.size() >= kMaxJsonDepth) {
      code = "json.depth";  // parse_json_program finds the byte (the parser does not say)
      message = "arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) + " levels";
      return false;
    }
    open_.push_back(make(kind));
    if (pending_.size() < open_.size()) pending_.emplace_back();
    pending_[open_.size() - 1].clear();
    return true;
  }
  // Moves the finished container's children, contiguous, into the node array.
  bool close() {
    Node c = open_.back();
    std::vector<Node>& kids = pending_[open_.size() - 1];
    if (c.kind == Kind::object && !check_unique_keys(kids)) return false;
    if (doc_.nodes.size() + kids.size() > std::numeric_limits<uint32_t>::max()) {
      code = "json.range";
      message = "the document has too many values";
      return false;
    }
    c.first = static_cast<uint32_t>(doc_.nodes.size());
    c.count = static_cast<uint32_t>(kids.size());
    doc_.nodes.insert(doc_.nodes.end(), kids.begin(), kids.end());
    kids.clear();
    open_.pop_back();
    return add(c);
  }

  std::string_view key_of(const Node& n) const {
    return std::string_view(doc_.chars).substr(n.key_off, n.key_len);
  }

  bool check_unique_keys(const std::vector<Node>& kids) {
    const Node* dup = nullptr;
    if (kids.size() <= 16) {
      for (size_t i = 1; i < kids.size() && !dup; ++i)
        for (size_t j = 0; j < i && !dup; ++j)
          if (key_of(kids[i]) == key_of(kids[j])) dup = &kids[i];
    } else {
      std::vector<std::string_view> keys;
      keys.reserve(kids.size());
      for (const Node& k : kids) keys.push_back(key_of(k));
      std::sort(keys.begin(), keys.end());
      for (size_t i = 1; i < keys.size() && !dup; ++i)
        if (keys[i] == keys[i - 1])
          for (const Node& k : kids)
            if (key_of(k) == keys[i]) dup = &k;
    }
    if (!dup) return true;
    code = "json.duplicate_key";
    where = pointer();
    append_pointer_token(where, key_of(*dup));
    message = "key \"" + std::string(key_of(*dup)) + "\" appears twice in the same object";
    return false;
  }

  // Pointer of the innermost open container.
  std::string pointer() const {
    std::string out;
    for (size_t d = 1; d < open_.size(); ++d) {
      if (open_[d - 1].kind == Kind::array)
        out += '/' + std::to_string(pending_[d - 1].size());
      else
        append_pointer_token(out, key_of(open_[d]));
    }
    return out;
  }

  Doc& doc_;
  std::vector<Node> open_;                  // containers being read, outermost first
  std::vector<std::vector<Node>> pending_;  // their children so far (storage reused)
  uint32_t key_off_ = 0, key_len_ = 0;
};

// ---- typed access ----

bool is_comment_key(std::string_view k) { return !k.empty() && k[0] == '_'; }

void expect_object(const Value& j, const Loc& loc) {
  if (!j.is_object()) fail("json.type", loc, "expected an object, found " + describe(j));
}

void expect_array(const Value& j, const Loc& loc) {
  if (!j.is_array()) fail("json.type", loc, "expected an array, found " + describe(j));
}

// Refuses keys outside `allowed` (comments excepted).
void check_keys(const Value& obj, const Loc& loc, std::initializer_list<std::string_view> allowed) {
  expect_object(obj, loc);
  for (size_t i = 0; i < obj.size(); ++i) {
    const std::string_view k = obj[i].key();
    if (is_comment_key(k)) continue;
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      fail("json.unknown_key", loc / std::string_view(k),
           "unknown key " + in_quotes(k) + "; expected one of: " + join(allowed));
  }
}

std::optional<Value> member(const Value& obj, std::string_view key) { return obj.find(key); }

Value required(const Value& obj, const Loc& loc, std::string_view key) {
  auto m = member(obj, key);
  if (!m) fail("json.missing", loc, "missing required key " + in_quotes(key));
  return *m;
}

std::string_view get_string(const Value& j, const Loc& loc) {
  if (!j.is_string()) fail("json.type", loc, "expected a string, found " + describe(j));
  return j.str();
}

bool get_bool(const Value& j, const Loc& loc) {
  if (!j.is_boolean()) fail("json.type", loc, "expected true or false, found " + describe(j));
  return j.boolean();
}

double get_number(const Value& j, const Loc& loc) {
  if (!j.is_number()) fail("json.type", loc, "expected a number, found " + describe(j));
  return j.number();
}

// An unsigned integer in 0..max. Integral floats (1e3) are accepted; negative, fractional and
// too-large numbers are refused whichever of nlohmann's three number types holds them.
uint64_t get_uint(const Value& j, const Loc& loc, uint64_t max) {
  auto range = [&]() {
    fail("json.range", loc,
         "expected an integer in 0.." + std::to_string(max) + ", found " + describe(j));
  };
  switch (j.kind()) {
    case Kind::unsigned_integer: {
      const uint64_t v = j.u64();
      if (v > max) range();
      return v;
    }
    case Kind::integer: {
      const int64_t v = j.i64();
      if (v < 0 || static_cast<uint64_t>(v) > max) range();
      return static_cast<uint64_t>(v);
    }
    case Kind::floating: {
      const double d = j.number();
      if (!(d >= 0.0 && d < 18446744073709551616.0) || d != std::floor(d)) range();
      const auto v = static_cast<uint64_t>(d);
      if (v > max) range();
      return v;
    }
    default: fail("json.type", loc, "expected a non-negative integer, found " + describe(j));
  }
}

uint64_t opt_uint(const Value& obj, const Loc& loc, std::string_view key, uint64_t max,
                  uint64_t fallback) {
  auto m = member(obj, key);
  return m ? get_uint(*m, loc / key, max) : fallback;
}

double opt_number(const Value& obj, const Loc& loc, std::string_view key, double fallback) {
  auto m = member(obj, key);
  return m ? get_number(*m, loc / key) : fallback;
}

// Names: 1..kMaxNameLength characters of [A-Za-z0-9_.:/-].
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '/' || c == '-';
}

std::string_view get_name(const Value& j, const Loc& loc) {
  const std::string_view s = get_string(j, loc);
  if (s.empty() || s.size() > kMaxNameLength)
    fail("name.invalid", loc,
         "expected a name of 1.." + std::to_string(kMaxNameLength) + " characters, found " +
             std::to_string(s.size()) + " characters");
  for (char c : s)
    if (!name_char(c))
      fail("name.invalid", loc,
           "expected a name of [A-Za-z0-9_.:/-] characters, found " + describe(j));
  return s;
}

// Slot and param names are JSON keys of instructions, where '_' starts a comment.
std::string_view get_key_name(const Value& j, const Loc& loc) {
  const std::string_view s = get_name(j, loc);
  if (s[0] == '_')
    fail("name.invalid", loc,
         "slot and param names may not start with '_' (such keys are comments), found " +
             describe(j));
  return s;
}

void check_count(const Value& arr, const Loc& loc, uint64_t limit, std::string_view code,
                 std::string_view what) {
  if (arr.size() > limit)
    fail(code, loc,
         "expected at most " + std::to_string(limit) + " " + std::string(what) + ", found " +
             std::to_string(arr.size()));
}

using NameMap = std::unordered_map<std::string_view, uint32_t>;

// Names are keyed by views into the parsed document, which outlives the maps.
void add_name(NameMap& map, std::string_view name, uint32_t index, const Loc& loc,
              std::string_view what) {
  auto [it, inserted] = map.emplace(name, index);
  if (!inserted)
    fail("name.duplicate", loc,
         std::string(what) + " name " + in_quotes(name) + " is already used by " +
             std::string(what) + " " + std::to_string(it->second));
}

// ---- the program ----

class Reader {
public:
  Reader(Program& p, const LoadOptions& options) : p_(p), options_(options) {}

  void read(const Value& root) {
    const Loc loc;
    // A wrapper program (schemas/wrapper.md) is another kind: say so before its keys are refused.
    if (root.is_object())
      if (auto f = member(root, "format"); f && f->is_string() && f->str() == "amk.wrapper")
        fail("wrapper.unsupported", loc / "format",
             "a wrapper program (format \"amk.wrapper\") where only a VM program is taken: "
             "wrappers go to validate, inspect, convert, compile, run and profile --events");
    check_keys(root, loc,
               {"format", "version", "name", "description", "target", "launch", "buffers",
                "counters", "instructions", "queues", "tma", "custom_ops"});
    const Value& format = required(root, loc, "format");
    if (get_string(format, loc / "format") != "amk.program")
      fail("program.format", loc / "format", "expected \"amk.program\", found " + describe(format));
    const Value& version = required(root, loc, "version");
    const uint64_t v = get_uint(version, loc / "version", kU32Max);
    if (v != kFormatVersion)
      fail("program.version", loc / "version",
           "expected format version " + std::to_string(kFormatVersion) + ", found " +
               std::to_string(v));
    p_.version = static_cast<uint32_t>(v);
    p_.name = get_name(required(root, loc, "name"), loc / "name");
    if (auto m = member(root, "description")) p_.description = get_string(*m, loc / "description");
    if (auto m = member(root, "target")) read_target(*m, loc / "target");
    if (auto m = member(root, "launch")) read_launch(*m, loc / "launch");
    read_buffers(required(root, loc, "buffers"), loc / "buffers");
    if (auto m = member(root, "counters")) read_counters(*m, loc / "counters");
    if (auto m = member(root, "custom_ops")) read_custom_ops(*m, loc / "custom_ops");
    read_instructions(required(root, loc, "instructions"), loc / "instructions");
    if (auto m = member(root, "queues")) read_queues(*m, loc / "queues");
    if (auto m = member(root, "tma")) read_tma(*m, loc / "tma");
  }

private:
  // ---- target and launch ----

  void read_target(const Value& j, const Loc& loc) {
    check_keys(j, loc, {"min_arch", "features", "smem_per_block"});
    if (auto m = member(j, "min_arch")) p_.target.min_arch = read_arch(*m, loc / "min_arch");
    if (auto m = member(j, "features")) {
      const Loc floc = loc / "features";
      expect_array(*m, floc);
      for (size_t i = 0; i < m->size(); ++i) {
        const std::string_view s = get_string((*m)[i], floc / i);
        const auto bit = parse_feature(s);
        if (!bit)
          fail("target.features", floc / i,
               "expected one of cooperative, cluster, tma, found " + in_quotes(s));
        if (p_.target.features & *bit)
          fail("target.features", floc / i, "feature " + in_quotes(s) + " is listed twice");
        p_.target.features |= *bit;
      }
    }
    p_.target.smem_per_block =
        static_cast<uint32_t>(opt_uint(j, loc, "smem_per_block", kU32Max, 0));
  }

  // "sm_90" or "sm_90a" -> 90; the integer 0 means any architecture.
  static uint32_t read_arch(const Value& j, const Loc& loc) {
    if (j.is_number()) {
      if (get_uint(j, loc, kU32Max) != 0)
        fail("target.min_arch", loc, "expected \"sm_XY\", \"sm_XYa\" or 0, found " + describe(j));
      return 0;
    }
    const std::string_view s = get_string(j, loc);
    std::string_view digits = s;
    bool ok = digits.substr(0, 3) == "sm_";
    if (ok) digits.remove_prefix(3);
    if (ok && !digits.empty() && digits.back() == 'a') digits.remove_suffix(1);
    ok = ok && digits.size() >= 2 && digits.size() <= 3 && digits[0] != '0' &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!ok)
      fail("target.min_arch", loc, "expected \"sm_XY\", \"sm_XYa\" or 0, found " + describe(j));
    uint32_t v = 0;
    for (char c : digits) v = v * 10 + static_cast<uint32_t>(c - '0');
    return v;
  }

  void read_launch(const Value& j, const Loc& loc) {
    check_keys(
        j, loc,
        {"mode", "grid", "block", "cluster", "dynamic_smem", "timeout_ms", "passes", "ranks"});
    Launch& l = p_.launch;
    if (auto m = member(j, "mode")) {
      const std::string_view s = get_string(*m, loc / "mode");
      if (s == "cooperative")
        l.mode = LaunchMode::cooperative;
      else if (s == "cluster")
        l.mode = LaunchMode::cluster;
      else
        fail("launch.mode", loc / "mode",
             "expected \"cooperative\" or \"cluster\", found " + describe(*m));
    }
    if (auto m = member(j, "grid")) {
      if (m->is_string()) {
        if (m->str() != "auto")
          fail("launch.grid", loc / "grid",
               "expected a positive integer or \"auto\", found " + describe(*m));
        l.grid = 0;
      } else {
        const uint64_t grid = get_uint(*m, loc / "grid", kU64Max);
        if (grid == 0)
          fail("launch.grid", loc / "grid", "expected a positive integer or \"auto\", found 0");
        if (grid > kMaxQueues)
          fail("launch.grid", loc / "grid",
               "grid of " + std::to_string(grid) + " blocks; at most " +
                   std::to_string(kMaxQueues) +
                   " (a persistent grid must be co-resident: SMs x blocks per SM)");
        l.grid = static_cast<uint32_t>(grid);
      }
    }
    if (auto m = member(j, "block")) {
      const uint64_t b = get_uint(*m, loc / "block", kU32Max);
      if (b < 32 || b > 1024 || b % 32 != 0)
        fail("launch.block", loc / "block",
             "expected a multiple of 32 in 32..1024 threads, found " + std::to_string(b));
      l.block = static_cast<uint32_t>(b);
    }
    if (auto m = member(j, "cluster")) {
      const Loc cloc = loc / "cluster";
      expect_array(*m, cloc);
      if (m->empty() || m->size() > 3)
        fail("launch.cluster", cloc,
             "expected 1 to 3 cluster dimensions, found " + std::to_string(m->size()));
      for (size_t i = 0; i < 3; ++i) {
        if (i >= m->size()) {
          l.cluster[i] = 1;
          continue;
        }
        const uint64_t c = get_uint((*m)[i], cloc / i, kU32Max);
        if (c == 0)
          fail("launch.cluster", cloc / i, "expected a positive cluster dimension, found 0");
        l.cluster[i] = static_cast<uint32_t>(c);
      }
    }
    l.dynamic_smem = static_cast<uint32_t>(opt_uint(j, loc, "dynamic_smem", kU32Max, 0));
    // An optional count in 1..max (0 is launch.KEY; past max, json.range).
    auto positive = [&](const char* key, uint64_t max, const char* unit, uint64_t fallback) {
      const auto m = member(j, key);
      if (!m) return fallback;
      const uint64_t n = get_uint(*m, loc / key, max);
      if (n == 0)
        fail(std::string("launch.") + key, loc / key,
             "expected 1.." + std::to_string(max) + " " + unit + ", found 0");
      return n;
    };
    l.timeout_ms = positive("timeout_ms", kMaxTimeoutMs, "milliseconds", l.timeout_ms);
    l.passes = static_cast<uint32_t>(positive("passes", kMaxPasses, "passes", l.passes));
    l.ranks = static_cast<uint32_t>(positive("ranks", kMaxRanks, "ranks", l.ranks));
  }

  // ---- buffers ----

  void read_buffers(const Value& j, const Loc& loc) {
    expect_array(j, loc);
    check_count(j, loc, kMaxBuffers, "limit.buffers", "buffers");
    p_.buffers.resize(j.size());
    buffer_names_.reserve(j.size());
    uint64_t total = 0;
    for (size_t i = 0; i < j.size(); ++i) {
      const Loc bloc = loc / i;
      read_buffer(j[i], bloc, p_.buffers[i], static_cast<uint32_t>(i));
      const auto sum = checked_add(total, p_.buffers[i].bytes());
      if (!sum || *sum > kMaxTotalBytes)
        fail("buffer.size", bloc,
             "buffers up to this one need more than the " + std::to_string(kMaxTotalBytes) +
                 " bytes allowed in total");
      total = *sum;
    }
  }

  void read_buffer(const Value& j, const Loc& loc, Buffer& b, uint32_t index) {
    check_keys(j, loc, {"name", "dtype", "shape", "init", "output"});
    const std::string_view name = get_name(required(j, loc, "name"), loc / "name");
    add_name(buffer_names_, name, index, loc / "name", "buffer");
    b.name = name;
    const Value& dtype = required(j, loc, "dtype");
    const auto t = parse_dtype(get_string(dtype, loc / "dtype"));
    if (!t)
      fail("buffer.dtype", loc / "dtype",
           "expected one of f32 f16 bf16 i32 u32 i64 u8, found " + describe(dtype));
    b.dtype = *t;
    const Loc sloc = loc / "shape";
    const Value& shape = required(j, loc, "shape");
    expect_array(shape, sloc);
    if (shape.size() > kMaxRank)
      fail("buffer.shape", sloc,
           "expected at most " + std::to_string(kMaxRank) + " dimensions, found " +
               std::to_string(shape.size()));
    uint64_t elements = 1;
    b.shape.resize(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      const uint64_t n = get_uint(shape[d], sloc / d, kU64Max);
      if (n == 0) fail("buffer.shape", sloc / d, "expected a positive dimension, found 0");
      b.shape[d] = n;
      const auto e = checked_mul(elements, n);
      if (!e) fail("buffer.size", sloc, "the element count overflows 64 bits");
      elements = *e;
    }
    const auto bytes = checked_mul(elements, dtype_size(b.dtype));
    if (!bytes || *bytes > kMaxBufferBytes)
      fail("buffer.size", sloc,
           "expected at most " + std::to_string(kMaxBufferBytes) + " bytes per buffer, found " +
               (bytes ? std::to_string(*bytes) : std::string("more than 2^64")));
    if (auto m = member(j, "init")) {
      if (m->is_array()) {  // one init a rank
        const uint32_t ranks = p_.launch.ranks;
        if (ranks < 2 || m->size() != ranks)
          fail("buffer.init", loc / "init",
               "a list of inits gives one a rank: expected " + std::to_string(ranks) +
                   (ranks < 2 ? " (launch.ranks is 1: one init object)" : "") + ", found " +
                   std::to_string(m->size()));
        for (size_t r = 0; r < m->size(); ++r) {
          Buffer each = b;
          read_init((*m)[r], loc / "init" / r, each, elements);
          b.rank_inits.push_back(std::move(each.init));
        }
        b.init = b.rank_inits[0];
      } else {
        read_init(*m, loc / "init", b, elements);
      }
    }
    if (auto m = member(j, "output")) b.output = get_bool(*m, loc / "output");
  }

  static void read_init(const Value& j, const Loc& loc, Buffer& b, uint64_t elements) {
    expect_object(j, loc);
    const Value& kind_j = required(j, loc, "kind");
    const std::string_view kind = get_string(kind_j, loc / "kind");
    BufferInit& init = b.init;
    if (kind == "zeros") {
      check_keys(j, loc, {"kind"});
      init.kind = InitKind::zeros;
    } else if (kind == "constant") {
      check_keys(j, loc, {"kind", "value"});
      init.kind = InitKind::constant;
      const Value& value = required(j, loc, "value");
      init.constant = get_number(value, loc / "value");
      if (!value_fits(b.dtype, init.constant))
        fail("init.constant", loc / "value",
             "expected a value that fits " + std::string(dtype_name(b.dtype)) + ", found " +
                 describe(value));
    } else if (kind == "random") {
      init.kind = InitKind::random;
      std::string_view dist = "uniform";
      if (auto m = member(j, "distribution")) dist = get_string(*m, loc / "distribution");
      if (dist == "uniform") {
        check_keys(j, loc, {"kind", "seed", "distribution", "low", "high", "window"});
        init.distribution = Distribution::uniform;
        init.a = opt_number(j, loc, "low", -1.0);
        init.b = opt_number(j, loc, "high", 1.0);
        if (!(init.a < init.b))
          fail("init.random", loc / "high",
               "expected high > low, found low " + json(init.a).dump() + " and high " +
                   json(init.b).dump());
      } else if (dist == "normal") {
        check_keys(j, loc, {"kind", "seed", "distribution", "mean", "std", "window"});
        init.distribution = Distribution::normal;
        init.a = opt_number(j, loc, "mean", 0.0);
        init.b = opt_number(j, loc, "std", 1.0);
        if (!(init.b >= 0.0))
          fail("init.random", loc / "std", "expected std >= 0, found " + json(init.b).dump());
      } else {
        fail("init.random", loc / "distribution",
             "expected \"uniform\" or \"normal\", found " + in_quotes(dist));
      }
      init.seed = opt_uint(j, loc, "seed", kU64Max, 0);
    } else if (kind == "values") {
      check_keys(j, loc, {"kind", "values"});
      init.kind = InitKind::values;
      read_values(required(j, loc, "values"), loc / "values", b, elements);
    } else if (kind == "npy") {
      check_keys(j, loc, {"kind", "path", "window"});
      init.kind = InitKind::npy;
      init.path = read_path(j, loc);
    } else if (kind == "raw") {
      check_keys(j, loc, {"kind", "path", "offset"});
      init.kind = InitKind::raw;
      init.path = read_path(j, loc);
      init.offset = opt_uint(j, loc, "offset", kU64Max, 0);
    } else if (kind == "safetensors") {
      check_keys(j, loc, {"kind", "path", "tensor", "window"});
      init.kind = InitKind::safetensors;
      init.path = read_path(j, loc);
      init.tensor = get_string(required(j, loc, "tensor"), loc / "tensor");
      if (init.tensor.empty())
        fail("init.tensor", loc / "tensor", "expected a tensor name, found \"\"");
    } else {
      fail("init.kind", loc / "kind",
           "expected one of zeros constant random values npy raw safetensors, found " +
               describe(kind_j));
    }
    if (auto m = member(j, "window")) read_window(*m, loc / "window", b);
  }

  // {"of": [tensor shape], "at": [offsets]}: the buffer is the block of its shape at `at`.
  static void read_window(const Value& j, const Loc& loc, Buffer& b) {
    expect_object(j, loc);
    check_keys(j, loc, {"of", "at"});
    const size_t dims = b.shape.size();
    auto dims_of = [&](const char* key, std::vector<uint64_t>& out) {
      const Value& a = required(j, loc, key);
      expect_array(a, loc / key);
      if (a.size() != dims)
        fail("init.window", loc / key,
             "expected " + std::to_string(dims) +
                 " entries (one a dimension of the buffer's shape), found " +
                 std::to_string(a.size()));
      for (size_t d = 0; d < a.size(); ++d) out.push_back(get_uint(a[d], loc / key / d, kU64Max));
    };
    BufferInit& init = b.init;
    dims_of("of", init.window_of);
    dims_of("at", init.window_at);
    uint64_t elements = 1;
    for (size_t d = 0; d < dims; ++d) {
      const uint64_t of = init.window_of[d], at = init.window_at[d];
      if (of == 0) fail("init.window", loc / "of" / d, "expected a positive dimension, found 0");
      if (at > of || b.shape[d] > of - at)
        fail("init.window", loc / "at" / d,
             "the block [" + std::to_string(at) + ", " + std::to_string(at) + " + " +
                 std::to_string(b.shape[d]) + ") of dimension " + std::to_string(d) +
                 " is past the tensor's " + std::to_string(of));
      const auto e = checked_mul(elements, of);
      if (!e) fail("init.window", loc / "of", "the tensor's element count overflows 64 bits");
      elements = *e;
    }
    const auto bytes = checked_mul(elements, dtype_size(b.dtype));
    if (!bytes || *bytes > kMaxBufferBytes)
      fail("init.window", loc / "of",
           "expected a tensor of at most " + std::to_string(kMaxBufferBytes) + " bytes");
  }

  static std::string read_path(const Value& j, const Loc& loc) {
    const std::string_view s = get_string(required(j, loc, "path"), loc / "path");
    if (s.empty()) fail("init.path", loc / "path", "expected a file path, found \"\"");
    if (s.find('\0') != std::string::npos)
      fail("init.path", loc / "path", "expected a file path, found one with a NUL character");
    return std::string(s);
  }

  // Inline values, stored as the buffer's dtype. Integer JSON tokens are range-checked exactly
  // (i64 values beyond 2^53 survive); everything else goes through value_fits/store_element.
  static void read_values(const Value& j, const Loc& loc, Buffer& b, uint64_t elements) {
    expect_array(j, loc);
    check_count(j, loc, kMaxInlineValues, "limit.values", "inline values");
    if (j.size() != elements)
      fail("init.values", loc,
           "expected " + std::to_string(elements) + " values (one per element), found " +
               std::to_string(j.size()));
    const size_t esize = dtype_size(b.dtype);
    std::vector<std::byte>& data = b.init.data;
    data.assign(j.size() * esize, std::byte{0});
    for (size_t i = 0; i < j.size(); ++i) {
      const Value& v = j[i];
      if (!v.is_number()) fail("json.type", loc / i, "expected a number, found " + describe(v));
      std::byte* slot = data.data() + i * esize;
      if (b.dtype == DType::i64 && !(v.kind() == Kind::floating)) {
        int64_t x = 0;
        if ((v.kind() == Kind::unsigned_integer)) {
          const uint64_t u = v.u64();
          if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            fail("init.values", loc / i, "expected a value that fits i64, found " + describe(v));
          x = static_cast<int64_t>(u);
        } else {
          x = v.i64();
        }
        std::memcpy(slot, &x, sizeof x);
        continue;
      }
      const double d = v.number();
      if (!value_fits(b.dtype, d))
        fail("init.values", loc / i,
             "expected a value that fits " + std::string(dtype_name(b.dtype)) + ", found " +
                 describe(v));
      store_element(data.data(), b.dtype, i, d);
    }
  }

  // ---- counters ----

  void read_counters(const Value& j, const Loc& loc) {
    expect_array(j, loc);
    check_count(j, loc, kMaxCounters, "limit.counters", "counters");
    p_.counters.resize(j.size());
    counter_names_.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string_view name = get_name(j[i], loc / i);
      add_name(counter_names_, name, static_cast<uint32_t>(i), loc / i, "counter");
      p_.counters[i].name = name;
    }
  }

  // ---- custom ops ----

  void read_custom_ops(const Value& j, const Loc& loc) {
    expect_array(j, loc);
    if (!j.empty() && !options_.trust_custom_ops)
      fail("custom.untrusted", loc,
           "the program defines " + std::to_string(j.size()) +
               " custom op(s), whose source would be compiled; refused without "
               "--trust-custom-ops");
    check_count(j, loc, kMaxCustomOps, "limit.custom_ops", "custom ops");
    p_.custom_ops.resize(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
      const Loc cloc = loc / i;
      const Value& c = j[i];
      CustomOp& op = p_.custom_ops[i];
      check_keys(c, cloc, {"name", "source", "operands", "params"});
      const std::string_view name = get_name(required(c, cloc, "name"), cloc / "name");
      if (find_op(name))
        fail("custom.name", cloc / "name",
             "custom op name " + in_quotes(name) + " is the name of a built-in op");
      if (find_retired_op(name))
        fail("custom.name", cloc / "name",
             "custom op name " + in_quotes(name) + " is the name of a retired built-in op");
      add_name(custom_names_, name, static_cast<uint32_t>(i), cloc / "name", "custom op");
      op.name = name;
      const Loc sloc = cloc / "source";
      op.source = get_string(required(c, cloc, "source"), sloc);
      if (op.source.size() > kMaxCustomSourceBytes)
        fail("limit.custom_source", sloc,
             "expected at most " + std::to_string(kMaxCustomSourceBytes) +
                 " bytes of source, found " + std::to_string(op.source.size()));
      if (op.source.empty()) fail("custom.source", sloc, "expected CUDA device code, found \"\"");
      op.operands = read_slot_names(c, cloc, "operands", AMK_MAX_OPERANDS, "custom.operands");
      op.params = read_slot_names(c, cloc, "params", AMK_MAX_PARAMS, "custom.params");
    }
  }

  static std::vector<std::string> read_slot_names(const Value& c, const Loc& cloc,
                                                  std::string_view key, uint64_t limit,
                                                  std::string_view code) {
    std::vector<std::string> out;
    auto m = member(c, key);
    if (!m) return out;
    const Loc loc = cloc / key;
    expect_array(*m, loc);
    if (m->size() > limit)
      fail(code, loc,
           "expected at most " + std::to_string(limit) + " " + std::string(key) + ", found " +
               std::to_string(m->size()));
    for (size_t i = 0; i < m->size(); ++i) {
      const std::string_view s = get_key_name((*m)[i], loc / i);
      if (std::find(out.begin(), out.end(), s) != out.end())
        fail("name.duplicate", loc / i,
             std::string(key) + " name " + in_quotes(s) + " is listed twice");
      out.emplace_back(s);
    }
    return out;
  }

  // ---- instructions ----

  void read_instructions(const Value& j, const Loc& loc) {
    expect_array(j, loc);
    check_count(j, loc, kMaxInstructions, "limit.instructions", "instructions");
    p_.instructions.resize(j.size());
    instruction_names_.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i)
      read_instruction(j[i], loc / i, p_.instructions[i], static_cast<uint32_t>(i));
  }

  void read_instruction(const Value& j, const Loc& loc, Instruction& ins, uint32_t index) {
    check_keys(j, loc, {"name", "op", "operands", "params", "waits", "signals", "ranks"});
    if (auto m = member(j, "name")) {
      const std::string_view name = get_name(*m, loc / "name");
      add_name(instruction_names_, name, index, loc / "name", "instruction");
      ins.name = name;
    }
    const Value& op_j = required(j, loc, "op");
    const std::string_view op_name = get_string(op_j, loc / "op");
    const OpSig* sig = find_op(op_name);
    const CustomOp* custom = nullptr;
    if (sig) {
      ins.op = static_cast<uint16_t>(sig->id);
    } else if (const RetiredOp* retired = find_retired_op(op_name)) {
      fail("op.retired", loc / "op", retired_op_message(*retired));
    } else if (auto it = custom_names_.find(op_name); it != custom_names_.end()) {
      custom = &p_.custom_ops[it->second];
      ins.op = static_cast<uint16_t>(kCustomOpBase + it->second);
    } else {
      std::vector<std::string_view> names;
      for (const OpSig& s : builtin_ops()) names.push_back(s.name);
      for (const CustomOp& c : p_.custom_ops) names.push_back(c.name);
      fail("instruction.op", loc / "op",
           "expected a built-in or custom op, found " + in_quotes(op_name) +
               "; ops are: " + join(names));
    }
    read_operands(j, loc, ins, sig, custom, op_name);
    read_params(j, loc, ins, sig, custom, op_name);
    read_sync(j, loc, "waits", AMK_MAX_WAITS, [&](const Value& w, const Loc& wloc) {
      check_keys(w, wloc, {"counter", "value", "carried"});
      Wait x;
      x.counter = counter_ref(required(w, wloc, "counter"), wloc / "counter");
      x.value =
          static_cast<uint32_t>(get_uint(required(w, wloc, "value"), wloc / "value", kU32Max));
      if (auto m = member(w, "carried")) x.carried = get_bool(*m, wloc / "carried");
      ins.waits.push_back(x);
    });
    read_sync(j, loc, "signals", AMK_MAX_SIGNALS, [&](const Value& s, const Loc& sloc) {
      check_keys(s, sloc, {"counter", "add"});
      Signal x;
      x.counter = counter_ref(required(s, sloc, "counter"), sloc / "counter");
      x.add = static_cast<uint32_t>(opt_uint(s, sloc, "add", kU32Max, 1));
      ins.signals.push_back(x);
    });
    if (auto m = member(j, "ranks")) {  // (launch is read before the instructions)
      const Loc rloc = loc / "ranks";
      expect_array(*m, rloc);
      if (m->empty()) fail("instruction.ranks", rloc, "expected at least one rank");
      for (size_t i = 0; i < m->size(); ++i) {
        const uint64_t r = get_uint((*m)[i], rloc / i, kU32Max);
        if (r >= p_.launch.ranks)
          fail("instruction.ranks", rloc / i,
               "rank " + std::to_string(r) + " of a program with launch.ranks " +
                   std::to_string(p_.launch.ranks));
        if (!ins.ranks.empty() && r <= ins.ranks.back())
          fail("instruction.ranks", rloc / i, "ranks are listed in increasing order, once each");
        ins.ranks.push_back(static_cast<uint32_t>(r));
      }
    }
  }

  template <typename F>
  static void read_sync(const Value& j, const Loc& loc, std::string_view key, uint64_t limit,
                        F&& each) {
    auto m = member(j, key);
    if (!m) return;
    const Loc kloc = loc / key;
    expect_array(*m, kloc);
    if (m->size() > limit)
      fail("instruction.capacity", kloc,
           "expected at most " + std::to_string(limit) + " " + std::string(key) + ", found " +
               std::to_string(m->size()));
    for (size_t i = 0; i < m->size(); ++i) each((*m)[i], kloc / i);
  }

  void read_operands(const Value& j, const Loc& loc, Instruction& ins, const OpSig* sig,
                     const CustomOp* custom, std::string_view op_name_view) {
    const std::string op_name(op_name_view);
    auto ops = member(j, "operands");
    const Loc oloc = loc / "operands";
    if (ops) expect_object(*ops, oloc);
    const size_t n = sig ? sig->operands.size() : custom->operands.size();
    ins.operands.resize(n);
    auto slot_name = [&](size_t s) -> std::string_view {
      return sig ? sig->operands[s].name : std::string_view(custom->operands[s]);
    };
    for (size_t s = 0; s < n; ++s) {
      const std::string_view slot = slot_name(s);
      const std::optional<Value> v = ops ? member(*ops, slot) : std::nullopt;
      if (!v) {
        if (sig && sig->operands[s].optional) continue;  // stays {AMK_NO_BUFFER, 0, 0}
        fail("instruction.operand", ops ? oloc : loc,
             "missing required operand " + in_quotes(slot) + " of op " + op_name);
      }
      ins.operands[s] = read_operand(*v, oloc / slot);
    }
    if (!ops) return;
    for (size_t i = 0; i < ops->size(); ++i) {
      const std::string_view k = (*ops)[i].key();
      if (is_comment_key(k)) continue;
      bool known = false;
      for (size_t s = 0; s < n && !known; ++s) known = slot_name(s) == k;
      if (!known) {
        std::vector<std::string_view> slots;
        for (size_t s = 0; s < n; ++s) slots.push_back(slot_name(s));
        fail("instruction.operand", oloc / std::string_view(k),
             "op " + op_name + " has no operand " + in_quotes(k) +
                 "; its operands are: " + join(slots));
      }
    }
  }

  Operand read_operand(const Value& v, const Loc& loc) {
    Operand o;
    const Buffer* b = nullptr;
    if (v.is_string()) {
      o.buffer = buffer_ref(v, loc);
      b = &p_.buffers[o.buffer];
      o.extent = b->elements();
      if (o.extent > kU32Max)
        fail("instruction.operand", loc,
             "buffer " + in_quotes(b->name) + " has " + std::to_string(o.extent) +
                 " elements, more than the 4294967295 one operand can span");
      return o;
    }
    if (!v.is_object())
      fail("json.type", loc, "expected a buffer name or an object, found " + describe(v));
    check_keys(v, loc, {"buffer", "offset", "extent"});
    o.buffer = buffer_ref(required(v, loc, "buffer"), loc / "buffer");
    b = &p_.buffers[o.buffer];
    const uint64_t elements = b->elements();
    o.offset = opt_uint(v, loc, "offset", kU64Max, 0);
    if (auto e = member(v, "extent")) {
      o.extent = get_uint(*e, loc / "extent", kU64Max);
      if (o.extent > kU32Max)
        fail("instruction.operand", loc / "extent",
             "expected an extent of at most 4294967295 elements, found " +
                 std::to_string(o.extent));
      if (!checked_add(o.offset, o.extent))
        fail("instruction.operand", loc / "extent", "offset + extent overflows 64 bits");
    } else {
      if (o.offset > elements)
        fail("instruction.operand", loc / "offset",
             "offset " + std::to_string(o.offset) + " is past the end of buffer " +
                 in_quotes(b->name) + " (" + std::to_string(elements) + " elements)");
      o.extent = elements - o.offset;
      if (o.extent > kU32Max)
        fail("instruction.operand", loc,
             "the rest of buffer " + in_quotes(b->name) + " is " + std::to_string(o.extent) +
                 " elements, more than the 4294967295 one operand can span");
    }
    return o;
  }

  void read_params(const Value& j, const Loc& loc, Instruction& ins, const OpSig* sig,
                   const CustomOp* custom, std::string_view op_name_view) {
    const std::string op_name(op_name_view);
    auto params = member(j, "params");
    const Loc ploc = loc / "params";
    if (params) expect_object(*params, ploc);
    const size_t n = sig ? sig->params.size() : custom->params.size();
    ins.params.resize(n);
    auto param_name = [&](size_t s) -> std::string_view {
      return sig ? sig->params[s].name : std::string_view(custom->params[s]);
    };
    for (size_t s = 0; s < n; ++s) {
      const std::string_view name = param_name(s);
      const std::optional<Value> v = params ? member(*params, name) : std::nullopt;
      if (sig) {
        const ParamSig& ps = sig->params[s];
        if (!v) {
          if (!ps.default_value)
            fail("instruction.param", params ? ploc : loc,
                 "missing required param " + in_quotes(name) + " of op " + op_name);
          ins.params[s] = encode_param(ps.type, *ps.default_value).value_or(0);
          continue;
        }
        const double d = get_number(*v, ploc / name);
        const auto word = encode_param(ps.type, d);
        if (!word)
          fail("instruction.param", ploc / name,
               "expected a value that fits param type " + std::string(param_type_name(ps.type)) +
                   ", found " + describe(*v));
        ins.params[s] = *word;
      } else {
        if (!v)
          fail("instruction.param", params ? ploc : loc,
               "missing required param " + in_quotes(name) + " of custom op " + op_name);
        ins.params[s] = custom_word(*v, ploc / name);
      }
    }
    if (!params) return;
    for (size_t i = 0; i < params->size(); ++i) {
      const std::string_view k = (*params)[i].key();
      if (is_comment_key(k)) continue;
      bool known = false;
      for (size_t s = 0; s < n && !known; ++s) known = param_name(s) == k;
      if (!known) {
        std::vector<std::string_view> names;
        for (size_t s = 0; s < n; ++s) names.push_back(param_name(s));
        fail("instruction.param", ploc / std::string_view(k),
             "op " + op_name + " has no param " + in_quotes(k) +
                 "; its params are: " + join(names));
      }
    }
  }

  static std::string_view param_type_name(ParamType t) {
    switch (t) {
      case ParamType::f32: return "f32";
      case ParamType::u32: return "u32";
      case ParamType::i32: return "i32";
    }
    return "?";
  }

  // Custom op params are raw 32-bit words: an integer token is the word itself (negative values
  // as two's complement i32), a token with a fraction or exponent is stored as f32 bits.
  static uint32_t custom_word(const Value& v, const Loc& loc) {
    switch (v.kind()) {
      case Kind::unsigned_integer: {
        const uint64_t u = v.u64();
        if (u <= kU32Max) return static_cast<uint32_t>(u);
        break;
      }
      case Kind::integer: {
        const int64_t x = v.i64();
        if (x >= std::numeric_limits<int32_t>::min() && x <= static_cast<int64_t>(kU32Max))
          return static_cast<uint32_t>(x);
        break;
      }
      case Kind::floating: {
        if (const auto w = encode_param(ParamType::f32, v.number())) return *w;
        break;
      }
      default: fail("json.type", loc, "expected a number, found " + describe(v));
    }
    fail("instruction.param", loc,
         "expected an integer in -2147483648..4294967295 or an f32 value, found " + describe(v));
  }

  uint32_t buffer_ref(const Value& v, const Loc& loc) const {
    const std::string_view name = get_string(v, loc);
    auto it = buffer_names_.find(name);
    if (it == buffer_names_.end()) fail("ref.buffer", loc, "no buffer is named " + in_quotes(name));
    return it->second;
  }

  uint32_t counter_ref(const Value& v, const Loc& loc) const {
    const std::string_view name = get_string(v, loc);
    auto it = counter_names_.find(name);
    if (it == counter_names_.end())
      fail("ref.counter", loc, "no counter is named " + in_quotes(name));
    return it->second;
  }

  // ---- queues ----

  void read_queues(const Value& j, const Loc& loc) {
    if (j.is_null()) return;  // amk builds the queues
    expect_array(j, loc);
    check_count(j, loc, kMaxQueues, "limit.queues", "queues");
    if (j.empty()) fail("queue.shape", loc, "expected at least one queue, found none");
    if (p_.launch.grid != 0 && j.size() != p_.launch.grid)
      fail("queue.shape", loc,
           "expected one queue per block of launch.grid = " + std::to_string(p_.launch.grid) +
               ", found " + std::to_string(j.size()) + " queues");
    const size_t n = p_.instructions.size();
    // Where each instruction was placed, to name the first placement of a duplicate.
    std::vector<std::pair<uint32_t, uint32_t>> placed(n, {kU32Max, kU32Max});
    std::vector<std::vector<uint32_t>> queues(j.size());
    for (size_t q = 0; q < j.size(); ++q) {
      const Loc qloc = loc / q;
      const Value& items = j[q];
      expect_array(items, qloc);
      queues[q].reserve(items.size());
      for (size_t k = 0; k < items.size(); ++k) {
        const uint32_t ins = instruction_ref(items[k], qloc / k);
        if (placed[ins].first != kU32Max)
          fail("queue.duplicate", qloc / k,
               "instruction " + std::to_string(ins) + " is already in queue " +
                   std::to_string(placed[ins].first) + " at position " +
                   std::to_string(placed[ins].second));
        placed[ins] = {static_cast<uint32_t>(q), static_cast<uint32_t>(k)};
        queues[q].push_back(ins);
      }
    }
    for (size_t i = 0; i < n; ++i)
      if (placed[i].first == kU32Max)
        fail("queue.missing", loc,
             "instruction " + std::to_string(i) +
                 (p_.instructions[i].name.empty() ? "" : " (" + p_.instructions[i].name + ")") +
                 " is in no queue; every instruction must appear exactly once");
    p_.queues = std::move(queues);
  }

  uint32_t instruction_ref(const Value& v, const Loc& loc) const {
    if (v.is_string()) {
      const std::string_view name = v.str();
      auto it = instruction_names_.find(name);
      if (it == instruction_names_.end())
        fail("ref.instruction", loc, "no instruction is named " + in_quotes(name));
      return it->second;
    }
    if (!v.is_number())
      fail("json.type", loc, "expected an instruction index or name, found " + describe(v));
    const uint64_t i = get_uint(v, loc, kU64Max);
    if (i >= p_.instructions.size())
      fail("ref.instruction", loc,
           "expected an instruction index below " + std::to_string(p_.instructions.size()) +
               ", found " + std::to_string(i));
    return static_cast<uint32_t>(i);
  }

  // ---- TMA descriptor specs ----

  void read_tma(const Value& j, const Loc& loc) {
    expect_array(j, loc);
    check_count(j, loc, kMaxTmaDescriptors, "limit.tma", "TMA descriptors");
    p_.tma.resize(j.size());
    NameMap names;
    for (size_t i = 0; i < j.size(); ++i) {
      const Loc tloc = loc / i;
      const Value& t = j[i];
      TmaSpec& s = p_.tma[i];
      check_keys(t, tloc,
                 {"name", "buffer", "offset", "dims", "strides", "box", "element_strides",
                  "swizzle", "interleave", "l2_promotion", "oob_fill"});
      const std::string_view name = get_name(required(t, tloc, "name"), tloc / "name");
      add_name(names, name, static_cast<uint32_t>(i), tloc / "name", "TMA descriptor");
      s.name = name;
      s.buffer = buffer_ref(required(t, tloc, "buffer"), tloc / "buffer");
      s.offset = opt_uint(t, tloc, "offset", kU64Max, 0);

      const Loc dloc = tloc / "dims";
      const Value& dims = required(t, tloc, "dims");
      expect_array(dims, dloc);
      if (dims.empty() || dims.size() > kMaxTmaRank)
        fail("tma.rank", dloc, "expected 1 to 5 dimensions, found " + std::to_string(dims.size()));
      const size_t rank = dims.size();
      for (size_t d = 0; d < rank; ++d) {
        const uint64_t n = get_uint(dims[d], dloc / d, kU64Max);
        if (n == 0 || n > kMaxTmaDim)
          fail("tma.dims", dloc / d, "expected a dimension in 1..2^32, found " + std::to_string(n));
        s.dims.push_back(n);
      }
      if (auto m = member(t, "strides")) {
        const Loc sloc = tloc / "strides";
        expect_array(*m, sloc);
        if (!m->empty() && m->size() != rank - 1)
          fail("tma.strides", sloc,
               "expected " + std::to_string(rank - 1) + " byte strides (dims 1.." +
                   std::to_string(rank - 1) + ") or [], found " + std::to_string(m->size()));
        for (size_t d = 0; d < m->size(); ++d)
          s.strides.push_back(get_uint((*m)[d], sloc / d, kU64Max));
      }
      const Loc bloc = tloc / "box";
      const Value& box = required(t, tloc, "box");
      expect_array(box, bloc);
      if (box.size() != rank)
        fail("tma.box", bloc,
             "expected " + std::to_string(rank) + " box sizes (one per dim), found " +
                 std::to_string(box.size()));
      for (size_t d = 0; d < rank; ++d) {
        const uint64_t n = get_uint(box[d], bloc / d, kU32Max);
        if (n == 0 || n > 256)
          fail("tma.box", bloc / d, "expected a box size in 1..256, found " + std::to_string(n));
        s.box.push_back(static_cast<uint32_t>(n));
      }
      if (auto m = member(t, "element_strides")) {
        const Loc eloc = tloc / "element_strides";
        expect_array(*m, eloc);
        if (!m->empty() && m->size() != rank)
          fail("tma.element_strides", eloc,
               "expected " + std::to_string(rank) + " element strides or [], found " +
                   std::to_string(m->size()));
        for (size_t d = 0; d < m->size(); ++d) {
          const uint64_t n = get_uint((*m)[d], eloc / d, kU32Max);
          if (n == 0 || n > 8)
            fail("tma.element_strides", eloc / d,
                 "expected an element stride in 1..8, found " + std::to_string(n));
          s.element_strides.push_back(static_cast<uint32_t>(n));
        }
      }
      s.swizzle = read_enum<TmaSwizzle>(t, tloc, "swizzle", "tma.swizzle",
                                        {"none", "32B", "64B", "128B"}, TmaSwizzle::none);
      s.interleave = read_enum<TmaInterleave>(t, tloc, "interleave", "tma.interleave",
                                              {"none", "16B", "32B"}, TmaInterleave::none);
      s.l2_promotion =
          read_enum<TmaL2Promotion>(t, tloc, "l2_promotion", "tma.l2_promotion",
                                    {"none", "64B", "128B", "256B"}, TmaL2Promotion::none);
      s.oob_fill = read_enum<TmaOobFill>(t, tloc, "oob_fill", "tma.oob_fill", {"zeros", "nan"},
                                         TmaOobFill::zeros);
    }
  }

  // Enum names in the order of the enum's values.
  template <typename E>
  static E read_enum(const Value& obj, const Loc& loc, std::string_view key, std::string_view code,
                     std::initializer_list<std::string_view> names, E fallback) {
    auto m = member(obj, key);
    if (!m) return fallback;
    const std::string_view s = get_string(*m, loc / key);
    size_t i = 0;
    for (std::string_view n : names) {
      if (n == s) return static_cast<E>(i);
      ++i;
    }
    fail(code, loc / key, "expected one of " + join(names) + ", found " + in_quotes(s));
  }

  Program& p_;
  const LoadOptions& options_;
  NameMap buffer_names_, counter_names_, instruction_names_, custom_names_;
};

// The 0-based offset of the bracket that opens level kMaxJsonDepth + 1 in text that parses up to
// there (strings skipped), or text.size().
size_t too_deep_at(std::string_view text) {
  uint64_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return text.size();
}

}  // namespace

Program parse_json_program(std::string_view text, const LoadOptions& options) {
  // Offsets in the document tree are 32-bit; the file limit keeps them in range.
  if (text.size() > kMaxFileBytes)
    throw_io_error("io.too_large", "",
                   "the program text is " + std::to_string(text.size()) + " bytes, more than the " +
                       std::to_string(kMaxFileBytes) + " a program may have");
  Doc doc;
  // Rough sizes for typical programs (a value per ~12 bytes of text), so the arrays rarely grow.
  doc.chars.reserve(text.size() / 4);
  doc.nodes.reserve(std::min<size_t>(text.size() / 12, size_t{1} << 26));
  DocBuilder builder(doc);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true);
  } catch (const json::exception& e) {
    // sax_parse reports through the builder; this is a last line of defense.
    throw_program_error("json.syntax", "", e.what());
  }
  if (!ok) {
    if (builder.code.empty()) throw_program_error("json.syntax", "", "the JSON text is invalid");
    if (builder.code == "json.depth") {
      const size_t at = too_deep_at(text);
      const std::string_view before = text.substr(0, at);
      const size_t line_start =
          before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
      const size_t line = 1 + std::count(before.begin(), before.end(), '\n');
      builder.where = "byte " + std::to_string(at + 1);  // 1-based, as the parser's errors
      builder.message += " (line " + std::to_string(line) + ", column " +
                         std::to_string(at - line_start + 1) + ")";
    }
    throw_program_error(builder.code, builder.where, builder.message);
  }
  Program program;
  Reader(program, options).read(Value(&doc, &doc.root));
  return program;
}

}  // namespace amk
