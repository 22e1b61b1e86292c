// Canonical JSON text of a program: fixed key order, every default written out, one record
// (buffer, instruction, queue, ...) per line so that diffs of large programs stay readable.
// parse_json_program(program_to_json(p)) == p for every program the loaders produce.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/numeric.hpp"
#include "io/load.hpp"
#include "ops/registry.hpp"

namespace amk {
namespace {

using json = nlohmann::json;

// A JSON pointer for the few errors the writer can raise (programs no loader would produce).
std::string ptr(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) {
    out += '/';
    out += p;
  }
  return out;
}

std::string num(uint64_t v) { return std::to_string(v); }

class Writer {
public:
  explicit Writer(const Program& p) : p_(p) { out_.reserve(256 + p.instructions.size() * 192); }

  std::string run() {
    out_ += "{\n";
    line_key("format");
    put_string("amk.program", "/format");
    out_ += ",\n";
    line_key("version");
    put_uint(p_.version);
    out_ += ",\n";
    line_key("name");
    put_string(p_.name, "/name");
    out_ += ",\n";
    line_key("description");
    put_string(p_.description, "/description");
    out_ += ",\n";
    line_key("target");
    write_target();
    out_ += ",\n";
    line_key("launch");
    write_launch();
    out_ += ",\n";
    line_key("buffers");
    write_list(p_.buffers.size(), [&](size_t i) { write_buffer(i); });
    out_ += ",\n";
    line_key("counters");
    write_list(p_.counters.size(), [&](size_t i) {
      put_string(p_.counters[i].name, ptr({"counters", num(i)}));
    });
    out_ += ",\n";
    line_key("instructions");
    write_list(p_.instructions.size(), [&](size_t i) { write_instruction(i); });
    out_ += ",\n";
    line_key("queues");
    if (!p_.queues) {
      out_ += "null";
    } else {
      const auto& qs = *p_.queues;
      write_list(qs.size(), [&](size_t q) {
        out_ += '[';
        for (size_t k = 0; k < qs[q].size(); ++k) {
          if (k) out_ += ", ";
          if (qs[q][k] >= p_.instructions.size())
            throw_program_error("ref.instruction", ptr({"queues", num(q), num(k)}),
                                "instruction index " + num(qs[q][k]) + " is out of range");
          put_uint(qs[q][k]);
        }
        out_ += ']';
      });
    }
    out_ += ",\n";
    line_key("tma");
    write_list(p_.tma.size(), [&](size_t i) { write_tma(i); });
    out_ += ",\n";
    line_key("custom_ops");
    write_list(p_.custom_ops.size(), [&](size_t i) { write_custom_op(i); });
    out_ += "\n}\n";
    return std::move(out_);
  }

private:
  // ---- scalars ----

  void put_uint(uint64_t v) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  void put_int(int64_t v) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  void put_bool(bool v) { out_ += v ? "true" : "false"; }

  // Strings go through nlohmann so escaping (and UTF-8 validation) match the reader exactly.
  void put_string(std::string_view s, const std::string& where) {
    // Names (the common case) need no escaping.
    bool plain = true;
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x80 || c == '"' || c == '\\') {
        plain = false;
        break;
      }
    }
    if (plain) {
      out_ += '"';
      out_ += s;
      out_ += '"';
      return;
    }
    try {
      out_ += json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::strict);
    } catch (const json::exception&) {
      throw_program_error("json.unrepresentable", where,
                          "the string is not valid UTF-8 and cannot be written as JSON");
    }
  }

  // Shortest text that reads back to the same double.
  void put_double(double d, const std::string& where) {
    if (!std::isfinite(d))
      throw_program_error("json.unrepresentable", where,
                          "JSON has no representation for " +
                              std::string(std::isnan(d) ? "NaN" : "infinity"));
    if (d == 0.0 && std::signbit(d)) {
      out_ += "-0.0";  // "-0" would read back as the integer 0 and lose the sign
      return;
    }
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, d);
    out_.append(buf, r.ptr);
  }

  // Shortest text that reads back (as a double, then rounded to f32, as the reader does) to
  // the same float. Falls back to the exact value when the short form would double-round, or
  // would read as a double above the type's maximum (FLT_MAX prints as 3.4028235e+38, which the
  // reader's range check refuses).
  void put_f32(float f, DType range, const std::string& where) {
    if (!std::isfinite(f) || f == 0.0f) {
      put_double(f, where);  // non-finite: json.unrepresentable; zero: keeps the sign
      return;
    }
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, f);
    *r.ptr = '\0';
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f && value_fits(range, d)) {
      out_.append(buf, r.ptr);
      return;
    }
    put_double(static_cast<double>(f), where);
  }

  void key(std::string_view k) {
    out_ += '"';
    out_ += k;
    out_ += "\": ";
  }
  void line_key(std::string_view k) {
    out_ += "  ";
    key(k);
  }
  void sep(bool& first) {
    if (!first) out_ += ", ";
    first = false;
  }

  // A list of records, one per line; [] when empty.
  template <typename F>
  void write_list(size_t n, F&& each) {
    if (n == 0) {
      out_ += "[]";
      return;
    }
    out_ += "[\n";
    for (size_t i = 0; i < n; ++i) {
      out_ += "    ";
      each(i);
      out_ += i + 1 < n ? ",\n" : "\n";
    }
    out_ += "  ]";
  }

  template <typename T>
  void uint_array(const std::vector<T>& v) {
    out_ += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out_ += ", ";
      put_uint(v[i]);
    }
    out_ += ']';
  }

  // ---- sections ----

  void write_target() {
    const Target& t = p_.target;
    out_ += "{\"min_arch\": ";
    if (t.min_arch == 0)
      out_ += '0';
    else
      out_ += "\"sm_" + num(t.min_arch) + '"';
    out_ += ", \"features\": [";
    bool first = true;
    for (const std::string& f : feature_names(t.features)) {
      sep(first);
      put_string(f, "/target/features");
    }
    out_ += "], \"smem_per_block\": ";
    put_uint(t.smem_per_block);
    out_ += '}';
  }

  void write_launch() {
    const Launch& l = p_.launch;
    out_ += "{\"mode\": ";
    out_ += l.mode == LaunchMode::cluster ? "\"cluster\"" : "\"cooperative\"";
    out_ += ", \"grid\": ";
    if (l.grid == 0)
      out_ += "\"auto\"";
    else
      put_uint(l.grid);
    out_ += ", \"block\": ";
    put_uint(l.block);
    out_ += ", \"cluster\": [";
    put_uint(l.cluster[0]);
    out_ += ", ";
    put_uint(l.cluster[1]);
    out_ += ", ";
    put_uint(l.cluster[2]);
    out_ += "], \"dynamic_smem\": ";
    put_uint(l.dynamic_smem);
    out_ += ", \"timeout_ms\": ";
    put_uint(l.timeout_ms);
    if (l.passes != 1) {  // (absent: one pass, the files of programs that never loop)
      out_ += ", \"passes\": ";
      put_uint(l.passes);
    }
    if (l.ranks != 1) {  // (absent: one rank)
      out_ += ", \"ranks\": ";
      put_uint(l.ranks);
    }
    out_ += '}';
  }

  void write_buffer(size_t i) {
    const Buffer& b = p_.buffers[i];
    const std::string where = ptr({"buffers", num(i)});
    out_ += "{\"name\": ";
    put_string(b.name, where + "/name");
    out_ += ", \"dtype\": \"";
    out_ += dtype_name(b.dtype);
    out_ += "\", \"shape\": ";
    uint_array(b.shape);
    out_ += ", \"init\": ";
    if (b.rank_inits.empty()) {
      write_init(b, where + "/init");
    } else {  // one a rank
      out_ += '[';
      for (size_t r = 0; r < b.rank_inits.size(); ++r) {
        if (r != 0) out_ += ", ";
        Buffer each = b;
        each.init = b.rank_inits[r];
        write_init(each, where + "/init/" + num(r));
      }
      out_ += ']';
    }
    out_ += ", \"output\": ";
    put_bool(b.output);
    out_ += '}';
  }

  void write_init(const Buffer& b, const std::string& where) {
    const BufferInit& init = b.init;
    out_ += "{\"kind\": \"";
    out_ += init_kind_name(init.kind);
    out_ += '"';
    switch (init.kind) {
      case InitKind::zeros: break;
      case InitKind::constant:
        out_ += ", \"value\": ";
        put_double(init.constant, where + "/value");
        break;
      case InitKind::random: {
        const bool normal = init.distribution == Distribution::normal;
        out_ += ", \"seed\": ";
        put_uint(init.seed);
        out_ += normal ? ", \"distribution\": \"normal\", \"mean\": "
                       : ", \"distribution\": \"uniform\", \"low\": ";
        put_double(init.a, where + (normal ? "/mean" : "/low"));
        out_ += normal ? ", \"std\": " : ", \"high\": ";
        put_double(init.b, where + (normal ? "/std" : "/high"));
        break;
      }
      case InitKind::values: write_values(b, where + "/values"); break;
      case InitKind::npy:
        out_ += ", \"path\": ";
        put_string(init.path, where + "/path");
        break;
      case InitKind::raw:
        out_ += ", \"path\": ";
        put_string(init.path, where + "/path");
        out_ += ", \"offset\": ";
        put_uint(init.offset);
        break;
      case InitKind::safetensors:
        out_ += ", \"path\": ";
        put_string(init.path, where + "/path");
        out_ += ", \"tensor\": ";
        put_string(init.tensor, where + "/tensor");
        break;
      default:
        throw_program_error("init.kind", where + "/kind",
                            "unknown init kind " + num(static_cast<unsigned>(init.kind)));
    }
    if (!init.window_of.empty()) {
      out_ += ", \"window\": {\"of\": ";
      uint_array(init.window_of);
      out_ += ", \"at\": ";
      uint_array(init.window_at);
      out_ += '}';
    }
    out_ += '}';
  }

  // Integer dtypes are written exactly (i64 included); floats as the shortest text that reads
  // back to the stored element.
  void write_values(const Buffer& b, const std::string& where) {
    const size_t esize = dtype_size(b.dtype);
    const uint64_t n = b.elements();
    if (esize == 0 || b.init.data.size() / esize != n || b.init.data.size() % esize != 0)
      throw_program_error("init.values", where,
                          "inline data holds " + num(b.init.data.size()) + " bytes, expected " +
                              num(n) + " elements of " + std::string(dtype_name(b.dtype)));
    const std::byte* data = b.init.data.data();
    out_ += ", \"values\": [";
    for (uint64_t i = 0; i < n; ++i) {
      if (i) out_ += ", ";
      switch (b.dtype) {
        case DType::i64: {
          int64_t v;
          std::memcpy(&v, data + i * 8, 8);
          put_int(v);
          break;
        }
        case DType::i32:
        case DType::u32:
        case DType::u8: put_int(static_cast<int64_t>(load_element(data, b.dtype, i))); break;
        default: {
          // f32 / f16 / bf16 all widen exactly to f32.
          const auto f = static_cast<float>(load_element(data, b.dtype, i));
          put_f32(f, b.dtype, where + "/" + num(i));
        }
      }
    }
    out_ += ']';
  }

  const std::string& counter_name(uint32_t c, const std::string& where) {
    if (c >= p_.counters.size())
      throw_program_error("ref.counter", where, "counter index " + num(c) + " is out of range");
    return p_.counters[c].name;
  }

  void write_instruction(size_t i) {
    const Instruction& ins = p_.instructions[i];
    const std::string where = ptr({"instructions", num(i)});
    const OpSig* sig = find_op(ins.op);
    const CustomOp* custom = nullptr;
    if (!sig) {
      if (ins.op >= kCustomOpBase && size_t{ins.op} - kCustomOpBase < p_.custom_ops.size())
        custom = &p_.custom_ops[ins.op - kCustomOpBase];
      else
        throw_program_error("instruction.op", where + "/op", "unknown op id " + num(ins.op));
    }
    const size_t n_slots = sig ? sig->operands.size() : custom->operands.size();
    const size_t n_params = sig ? sig->params.size() : custom->params.size();
    if (ins.operands.size() != n_slots)
      throw_program_error("instruction.operand", where + "/operands",
                          "expected " + num(n_slots) + " operands, found " +
                              num(ins.operands.size()));
    if (ins.params.size() != n_params)
      throw_program_error("instruction.param", where + "/params",
                          "expected " + num(n_params) + " params, found " + num(ins.params.size()));

    out_ += '{';
    if (!ins.name.empty()) {
      key("name");
      put_string(ins.name, where + "/name");
      out_ += ", ";
    }
    key("op");
    put_string(sig ? sig->name : std::string_view(custom->name), where + "/op");
    out_ += ", \"operands\": {";
    bool first = true;
    for (size_t s = 0; s < n_slots; ++s) {
      const Operand& o = ins.operands[s];
      const std::string_view slot =
          sig ? sig->operands[s].name : std::string_view(custom->operands[s]);
      if (o.buffer == AMK_NO_BUFFER) {
        if (sig && sig->operands[s].optional) continue;
        throw_program_error("instruction.operand", where + "/operands/" + std::string(slot),
                            "required operand has no buffer");
      }
      if (o.buffer >= p_.buffers.size())
        throw_program_error("ref.buffer", where + "/operands/" + std::string(slot),
                            "buffer index " + num(o.buffer) + " is out of range");
      sep(first);
      put_string(slot, where + "/operands");
      out_ += ": {\"buffer\": ";
      put_string(p_.buffers[o.buffer].name, where);
      out_ += ", \"offset\": ";
      put_uint(o.offset);
      out_ += ", \"extent\": ";
      put_uint(o.extent);
      out_ += '}';
    }
    out_ += "}, \"params\": {";
    first = true;
    for (size_t s = 0; s < n_params; ++s) {
      const uint32_t w = ins.params[s];
      if (!custom && sig->params[s].omit_default &&
          encode_param(sig->params[s].type, sig->params[s].default_value.value_or(0)) == w)
        continue;  // a later param at its default: left out
      sep(first);
      if (custom) {
        put_string(custom->params[s], where + "/params");
        out_ += ": ";
        put_uint(w);  // raw word; integers read back unchanged
        continue;
      }
      const ParamSig& ps = sig->params[s];
      key(ps.name);
      switch (ps.type) {
        case ParamType::f32:
          put_f32(bits_f32(w), DType::f32, where + "/params/" + std::string(ps.name));
          break;
        case ParamType::u32: put_uint(w); break;
        case ParamType::i32: put_int(static_cast<int32_t>(w)); break;
      }
    }
    out_ += "}, \"waits\": [";
    first = true;
    for (size_t k = 0; k < ins.waits.size(); ++k) {
      sep(first);
      out_ += "{\"counter\": ";
      put_string(counter_name(ins.waits[k].counter, where + "/waits/" + num(k)), where);
      out_ += ", \"value\": ";
      put_uint(ins.waits[k].value);
      if (ins.waits[k].carried) out_ += ", \"carried\": true";
      out_ += '}';
    }
    out_ += "], \"signals\": [";
    first = true;
    for (size_t k = 0; k < ins.signals.size(); ++k) {
      sep(first);
      out_ += "{\"counter\": ";
      put_string(counter_name(ins.signals[k].counter, where + "/signals/" + num(k)), where);
      out_ += ", \"add\": ";
      put_uint(ins.signals[k].add);
      out_ += '}';
    }
    out_ += ']';
    if (!ins.ranks.empty()) {
      out_ += ", \"ranks\": ";
      uint_array(ins.ranks);
    }
    out_ += '}';
  }

  template <typename E>
  void put_enum(E v, std::initializer_list<std::string_view> names, const std::string& where) {
    const auto i = static_cast<size_t>(v);
    if (i >= names.size())
      throw_program_error("json.unrepresentable", where,
                          "enum value " + num(i) + " is out of range");
    out_ += '"';
    out_ += names.begin()[i];
    out_ += '"';
  }

  void write_tma(size_t i) {
    const TmaSpec& t = p_.tma[i];
    const std::string where = ptr({"tma", num(i)});
    if (t.buffer >= p_.buffers.size())
      throw_program_error("ref.buffer", where + "/buffer",
                          "buffer index " + num(t.buffer) + " is out of range");
    out_ += "{\"name\": ";
    put_string(t.name, where + "/name");
    out_ += ", \"buffer\": ";
    put_string(p_.buffers[t.buffer].name, where + "/buffer");
    out_ += ", \"offset\": ";
    put_uint(t.offset);
    out_ += ", \"dims\": ";
    uint_array(t.dims);
    out_ += ", \"strides\": ";
    uint_array(t.strides);
    out_ += ", \"box\": ";
    uint_array(t.box);
    out_ += ", \"element_strides\": ";
    uint_array(t.element_strides);
    out_ += ", \"swizzle\": ";
    put_enum(t.swizzle, {"none", "32B", "64B", "128B"}, where + "/swizzle");
    out_ += ", \"interleave\": ";
    put_enum(t.interleave, {"none", "16B", "32B"}, where + "/interleave");
    out_ += ", \"l2_promotion\": ";
    put_enum(t.l2_promotion, {"none", "64B", "128B", "256B"}, where + "/l2_promotion");
    out_ += ", \"oob_fill\": ";
    put_enum(t.oob_fill, {"zeros", "nan"}, where + "/oob_fill");
    out_ += '}';
  }

  void write_custom_op(size_t i) {
    const CustomOp& c = p_.custom_ops[i];
    const std::string where = ptr({"custom_ops", num(i)});
    out_ += "{\"name\": ";
    put_string(c.name, where + "/name");
    for (const auto* list : {&c.operands, &c.params}) {
      const bool ops = list == &c.operands;
      out_ += ops ? ", \"operands\": [" : ", \"params\": [";
      bool first = true;
      for (const std::string& s : *list) {
        sep(first);
        put_string(s, where + (ops ? "/operands" : "/params"));
      }
      out_ += ']';
    }
    out_ += ", \"source\": ";
    put_string(c.source, where + "/source");
    out_ += '}';
  }

  const Program& p_;
  std::string out_;
};

}  // namespace

std::string program_to_json(const Program& program) { return Writer(program).run(); }

}  // namespace amk
