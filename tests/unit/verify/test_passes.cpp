// Verifier: programs stepped over several passes in one launch. Carried waits in the single-pass
// checks, position bounds, the position rule of the hazard check, no running ahead into the next
// pass, and a decode-like loop over two passes unrolled.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "verify/verify.hpp"

#include "common/program_builder.hpp"
#include "common/files.hpp"

using namespace amk;
using amk_test::contains;
using namespace amk::test;

namespace {

// The params given, then the signature's defaults for the rest.
void set_params(Instruction& ins, std::vector<uint32_t> params) {
  const OpSig* sig = find_op(ins.op);
  for (size_t k = params.size(); k < sig->params.size(); ++k)
    params.push_back(*encode_param(sig->params[k].type, sig->params[k].default_value.value_or(0)));
  ins.params = std::move(params);
}

void set_values(Builder& b, uint32_t buffer, const std::vector<int32_t>& values) {
  BufferInit& init = b.p.buffers[buffer].init;
  init.kind = InitKind::values;
  init.data.resize(values.size() * 4);
  std::memcpy(init.data.data(), values.data(), init.data.size());
}

// attention_decode's params up to `start` (no RoPE): head_dim, scale, position, theta, the
// rope op's four scaling params, start.
std::vector<uint32_t> attention_params(uint32_t hd, uint32_t start) {
  return {hd, 0, 0, 0, f32_bits(32.0f), f32_bits(1.0f), f32_bits(4.0f), 8192, start};
}

// A kv cache of two heads of max_len rows of head_dim, one kv_append at position operand `pos`
// and one attention_decode of head 1 reading rows start..start+rows-1 of k through the same pos.
struct Cache {
  static constexpr uint32_t hd = 4, max_len = 8, heads = 2;
  Builder b;
  uint32_t x, cache, vals, q, out, pos;
  uint32_t append = 0, attend = 0;

  Cache(uint32_t start, uint32_t rows) {
    x = b.buffer("x", DType::f32, heads * hd);
    cache = b.buffer("k_cache", DType::f32, heads * max_len * hd);
    vals = b.buffer("v_rows", DType::f32, max_len * hd);
    q = b.buffer("q", DType::f32, hd);
    out = b.buffer("out", DType::f32, hd + 2);
    pos = b.buffer("pos", DType::u32, 1);
    set_values(b, pos, {3});
    append = b.add("kv_append", {b.whole(x), b.whole(cache), b.whole(pos)}, {}, {}, "append");
    set_params(b.last(), {hd, 0, max_len});
    attend = b.add("attention_decode",
                   {b.whole(q), slice(cache, (max_len + start) * hd, rows * hd),
                    slice(vals, 0, rows * hd), b.whole(out), none(), none(), b.whole(pos)},
                   {}, {}, "attend");
    set_params(b.last(), attention_params(hd, start));
  }
};

}  // namespace

TEST_CASE("carried waits hold in the first pass") {
  Builder b;
  const uint32_t c = b.counter("looped");
  b.add("nop", {}, {{c, 1, true}}, {}, "head");  // waits on the previous pass's tail
  b.add("nop", {}, {}, {{c, 1}}, "tail");
  b.p.launch.grid = 1;
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}};
  CHECK(simulate_queues(b.p, *b.p.queues).empty());
  CHECK_NOTHROW(check_queues(b.p, *b.p.queues));
  CHECK(verify(b.p).critical_path == 2);  // queue order only
  // The same wait within the pass: the head waits for what comes after it.
  b.p.instructions[0].waits[0].carried = false;
  CHECK_ERROR(verify(b.p), "verify.deadlock", "/queues/0/0");

  SUBCASE("without queues: any order, and the carried wait orders nothing within a pass") {
    b.p.instructions[0].waits[0].carried = true;
    b.p.queues.reset();
    b.p.launch.grid = 0;
    CHECK(pool_order(b.p).size() == 2);
    const DependencyGraph g = build_dependency_graph(b.p, nullptr);
    CHECK(g.instruction_edges == 0);
    CHECK(critical_path(g) == 1);
    // But one pass's signals must still reach the carried wait's value.
    b.p.instructions[0].waits[0].value = 2;
    CHECK_ERROR(verify(b.p), "verify.wait.unsatisfiable", "/instructions/0/waits/0/value");
  }
}

TEST_CASE("position bounds") {
  Cache k(0, 3);
  Builder& b = k.b;
  set_values(b, k.pos, {12});
  b.p.buffers[k.cache].shape = {Cache::heads * 16 * Cache::hd};  // max_len 16
  b.p.instructions[k.append].operands[1] = b.whole(k.cache);
  b.p.instructions[k.append].params[2] = 16;
  b.p.instructions.pop_back();  // the append alone
  const std::string at = "/instructions/0/operands/position";

  // 12 + 4 - 1 = 15: the last row of the cache.
  CHECK_NOTHROW(check_position_bounds(b.p, 4));
  b.p.launch.passes = 4;
  CHECK_NOTHROW(verify(b.p));
  b.p.launch.passes = 5;
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.position.range");
  CHECK(e->where() == at);
  CHECK(contains(e->message(), "position 16 in the last of 5 passes"));
  CHECK(contains(e->message(), "max_len = 16"));
  CHECK_ERROR(check_position_bounds(b.p, 5), "verify.position.range", at);
  CHECK_NOTHROW(check_position_bounds(b.p, 1));  // what the run path re-checks

  SUBCASE("a constant or zeros is read too") {
    b.p.buffers[k.pos].init = BufferInit{};
    CHECK_ERROR(check_position_bounds(b.p, 17), "verify.position.range", at);
    CHECK_NOTHROW(check_position_bounds(b.p, 16));
    b.p.buffers[k.pos].init.kind = InitKind::constant;
    b.p.buffers[k.pos].init.constant = 15;
    CHECK_NOTHROW(check_position_bounds(b.p, 1));
    CHECK_ERROR(check_position_bounds(b.p, 2), "verify.position.range", at);
  }
  SUBCASE("a negative start") {
    b.p.buffers[k.pos].dtype = DType::i32;
    set_values(b, k.pos, {-1});
    CHECK_ERROR(check_position_bounds(b.p, 4), "verify.position.range", at);
  }
  SUBCASE("an initial value the verifier cannot read") {
    b.p.buffers[k.pos].init = BufferInit{};
    b.p.buffers[k.pos].init.kind = InitKind::random;
    auto u = error_of([&] { check_position_bounds(b.p, 1); });
    REQUIRE(u);
    CHECK(u->code() == "verify.position.unknown");
    CHECK(u->where() == at);
    CHECK(contains(u->message(), "init random"));
    b.p.buffers[k.pos].init.kind = InitKind::npy;
    CHECK_ERROR(check_position_bounds(b.p, 1), "verify.position.unknown", at);
  }
  SUBCASE("a position some instruction writes") {
    const uint32_t big = b.buffer("big", DType::u32, 4);
    set_values(b, big, {0, 1, 2, 3});
    b.p.instructions[0].operands[2] = slice(big, 2, 1);
    b.add("fill", {slice(big, 0, 2)}, {}, {}, "clear");
    CHECK_NOTHROW(check_position_bounds(b.p, 4));  // another element of the buffer
    b.last().operands[0] = slice(big, 1, 3);
    auto w = error_of([&] { check_position_bounds(b.p, 1); });
    REQUIRE(w);
    CHECK(w->code() == "verify.position.written");
    CHECK(w->where() == at);
    CHECK(contains(w->message(), "instruction 1 'clear' (fill) writes"));
  }
  SUBCASE("rope: unknown positions too, but no cache to bound") {
    const uint32_t x = b.buffer("xr", DType::f32, 8);
    b.p.instructions.clear();
    b.add("rope", {b.whole(x), b.whole(x), b.whole(k.pos)});
    set_params(b.last(), {4, 0});
    CHECK_NOTHROW(check_position_bounds(b.p, 1000));
    b.p.buffers[k.pos].init.kind = InitKind::raw;
    CHECK_ERROR(check_position_bounds(b.p, 1), "verify.position.unknown", at);
  }
}

TEST_CASE("a kv_append at a position and an attention_decode below it, in one pass") {
  Cache k(2, 5);  // rows 2..6 of head 1; the append writes row 3 (+ pass - 1) of each head
  CHECK_NOTHROW(verify(k.b.p));  // unordered, yet disjoint: attention reads rows below 3
  Instruction& attend = k.b.p.instructions[k.attend];
  const std::string at = "/instructions/1/operands/k";

  SUBCASE("another position scalar, even of the same value") {
    const uint32_t other = k.b.buffer("pos2", DType::u32, 1);
    set_values(k.b, other, {3});
    attend.operands[6] = k.b.whole(other);
    CHECK_ERROR(verify(k.b.p), "verify.hazard", at);
  }
  SUBCASE("a start that is not where the view begins") {
    attend.params[8] = 1;
    CHECK_ERROR(verify(k.b.p), "verify.hazard", at);
  }
  SUBCASE("a view past the head's max_len rows") {
    attend.params[8] = 7;  // head 0's rows 7 and 8, which is head 1's row 0
    attend.operands[1] = slice(k.cache, 7 * Cache::hd, 2 * Cache::hd);
    attend.operands[2] = slice(k.vals, 0, 2 * Cache::hd);
    CHECK_ERROR(verify(k.b.p), "verify.hazard", at);
  }
  SUBCASE("other readers of the cache need an order") {
    const uint32_t y = k.b.buffer("y", DType::f32, Cache::hd);
    k.b.add("copy", {slice(k.cache, 0, Cache::hd), k.b.whole(y)}, {}, {}, "peek");
    auto e = error_of([&] { verify(k.b.p); });
    REQUIRE(e);
    CHECK(e->code() == "verify.hazard");
    CHECK(contains(e->message(), "'append' (kv_append) writes"));
    CHECK(contains(e->message(), "'peek' (copy) reads"));
    CHECK(contains(e->message(), "a kv_append at a position operand"));
  }
}

TEST_CASE("a kv_append at a position and an attention_decode over passes") {
  Cache k(2, 5);
  Builder& b = k.b;
  b.p.launch.passes = 2;
  // Unordered: pass 1's append writes row 3, which pass 2's attention (rows below 4) reads.
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.hazard");
  CHECK(e->where() == "/instructions/1/operands/k");
  CHECK(contains(e->message(), "'append' (kv_append) in pass 1 writes"));
  CHECK(contains(e->message(), "'attend' (attention_decode) in pass 2 reads"));

  // A step loop orders every pass after the one before: feed -> (carried) step -> append and
  // attend, unordered within a pass -> feed.
  const uint32_t c_step = b.counter("step"), c_app = b.counter("appended");
  const uint32_t c_att = b.counter("attended"), c_feed = b.counter("fed");
  b.p.instructions[k.append].waits = {{c_step, 1}};
  b.p.instructions[k.append].signals = {{c_app, 1}};
  b.p.instructions[k.attend].waits = {{c_step, 1}};
  b.p.instructions[k.attend].signals = {{c_att, 1}};
  b.add("fill", {b.whole(k.x)}, {{c_feed, 1, true}}, {{c_step, 1}}, "step");
  b.add("nop", {}, {{c_app, 1}, {c_att, 1}}, {{c_feed, 1}}, "feed");
  CHECK_NOTHROW(verify(b.p));
  b.p.launch.grid = 2;
  b.p.queues = std::vector<std::vector<uint32_t>>{{2, 0, 3}, {1}};
  CHECK_NOTHROW(verify(b.p));

  SUBCASE("with the position rule broken, the unordered pair within a pass is a hazard") {
    b.p.instructions[k.attend].params[8] = 0;
    CHECK_ERROR(verify(b.p), "verify.hazard", "/instructions/1/operands/k");
  }
}

TEST_CASE("a signaler that can run into the next pass ahead of a waiter") {
  Builder b;
  const uint32_t c = b.counter("ready"), d = b.counter("done");
  b.add("nop", {}, {}, {{c, 1}}, "producer");
  b.add("nop", {}, {{c, 1}}, {{d, 1}}, "consumer");
  CHECK_NOTHROW(verify(b.p));  // one pass
  b.p.launch.passes = 3;
  auto e = error_of([&] { verify(b.p); });
  REQUIRE(e);
  CHECK(e->code() == "verify.pass.overtake");
  CHECK(e->where() == "/instructions/1/waits/0");
  CHECK(contains(e->message(), "'consumer' (nop) waits on counter 'ready' in each pass"));
  CHECK(contains(e->message(), "'producer' (nop) may signal it for the next pass"));

  // The producer waits for the consumer's previous pass: the loop is safe.
  b.p.instructions[0].waits = {{d, 1, true}};
  CHECK_NOTHROW(verify(b.p));

  SUBCASE("a carried wait its own pass's signal can meet early") {
    b.add("nop", {}, {}, {{d, 1}}, "stray");  // signals 'done' unordered with the producer
    b.p.instructions[1].signals = {{d, 1}};
    b.p.instructions[0].waits = {{d, 2, true}};
    auto o = error_of([&] { verify(b.p); });
    REQUIRE(o);
    CHECK(o->code() == "verify.pass.overtake");
    CHECK(o->where() == "/instructions/0/waits/0");
    CHECK(contains(o->message(), "waits on counter 'done' carried"));
    CHECK(contains(o->message(), "'stray' (nop) may signal it in the same pass first"));
  }
  SUBCASE("one block orders everything") {
    b.p.instructions[0].waits.clear();
    b.p.launch.grid = 1;
    b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1}};
    CHECK_NOTHROW(verify(b.p));
  }
}

// A decode loop: the token -> embedding -> logits -> argmax -> feed_token -> the next token, the
// embedding waiting (carried) for the previous pass's feed.
TEST_CASE("a decode-like loop over several passes") {
  const uint32_t vocab = 16, dim = 8, prompt_len = 3, steps = 6;
  Builder b;
  const uint32_t table = b.buffer("table", DType::f32, vocab * dim);
  const uint32_t w = b.buffer("lm_head", DType::f32, vocab * dim);
  const uint32_t token = b.buffer("token", DType::u32, 1);
  const uint32_t h = b.buffer("h", DType::f32, dim);
  const uint32_t logits = b.buffer("logits", DType::f32, vocab);
  const uint32_t index = b.buffer("index", DType::u32, 1);
  const uint32_t prompt = b.buffer("prompt", DType::u32, prompt_len);
  const uint32_t ids = b.buffer("ids", DType::u32, steps);
  const uint32_t all = b.buffer("all_logits", DType::f32, steps * vocab);
  set_values(b, prompt, {5, 7, 9});
  set_values(b, token, {5});
  const uint32_t c_h = b.counter("h"), c_logits = b.counter("logits");
  const uint32_t c_index = b.counter("index"), c_fed = b.counter("fed");
  b.add("embedding", {b.whole(table), b.whole(token), b.whole(h)}, {{c_fed, 1, true}}, {{c_h, 1}},
        "embed");
  for (uint32_t r = 0; r < 2; ++r)  // two row halves
    b.add("gemv",
          {slice(w, r * vocab / 2 * dim, vocab / 2 * dim), b.whole(h),
           slice(logits, r * vocab / 2, vocab / 2), none(), none(), none()},
          {{c_h, 1}}, {{c_logits, 1}}, "lm_head." + std::to_string(r));
  b.add("argmax", {b.whole(logits), b.whole(index), none(), none()}, {{c_logits, 2}},
        {{c_index, 1}}, "argmax");
  b.add("feed_token",
        {b.whole(index), b.whole(prompt), b.whole(token), b.whole(ids), b.whole(logits),
         b.whole(all), none()},
        {{c_index, 1}}, {{c_fed, 1}}, "feed");
  b.p.launch.passes = steps;
  CHECK_NOTHROW(verify(b.p));
  b.p.launch.grid = 2;
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1, 3}, {2, 4}};
  const VerifySummary s = verify(b.p);
  CHECK(s.critical_path == 4);

  SUBCASE("without the carried wait the next pass's embedding runs ahead") {
    b.p.instructions[0].waits.clear();
    CHECK_ERROR(verify(b.p), "verify.hazard", "/instructions/4/operands/token");
    b.p.queues.reset();
    b.p.launch.grid = 0;
    CHECK_ERROR(verify(b.p), "verify.pass.overtake", "/instructions/1/waits/0");
  }
}

TEST_CASE("a loop that may end at eos: every block must see feed_token's previous pass") {
  const uint32_t vocab = 16, dim = 8, steps = 6;
  Builder b;
  const uint32_t table = b.buffer("table", DType::f32, vocab * dim);
  const uint32_t w = b.buffer("lm_head", DType::f32, vocab * dim);
  const uint32_t token = b.buffer("token", DType::u32, 1);
  const uint32_t h = b.buffer("h", DType::f32, dim);
  const uint32_t logits = b.buffer("logits", DType::f32, vocab);
  const uint32_t index = b.buffer("index", DType::u32, 1);
  const uint32_t prompt = b.buffer("prompt", DType::u32, 2);
  const uint32_t ids = b.buffer("ids", DType::u32, steps);
  const uint32_t eos = b.buffer("eos", DType::i32, 1);
  const uint32_t side = b.buffer("side", DType::f32, 4);
  set_values(b, prompt, {5, 7});
  set_values(b, token, {5});
  set_values(b, eos, {3});
  const uint32_t c_h = b.counter("h"), c_logits = b.counter("logits");
  const uint32_t c_index = b.counter("index"), c_fed = b.counter("fed");
  b.add("embedding", {b.whole(table), b.whole(token), b.whole(h)}, {{c_fed, 1, true}}, {{c_h, 1}},
        "embed");
  b.add("gemv", {b.whole(w), b.whole(h), b.whole(logits), none(), none(), none()}, {{c_h, 1}},
        {{c_logits, 1}}, "lm_head");
  b.add("argmax", {b.whole(logits), b.whole(index), none(), none()}, {{c_logits, 1}},
        {{c_index, 1}}, "argmax");
  b.add(
      "feed_token",
      {b.whole(index), b.whole(prompt), b.whole(token), b.whole(ids), none(), none(), b.whole(eos)},
      {{c_index, 1}}, {{c_fed, 1}}, "feed");
  b.p.launch.passes = steps;
  b.p.launch.grid = 2;
  b.p.queues = std::vector<std::vector<uint32_t>>{{0, 1, 2}, {3}};
  CHECK_NOTHROW(verify(b.p));
  CHECK(stopping_feed_token(b.p) == 3u);
  // A block whose work never waits on the token: it would not see the stop word in time.
  b.add("fill", {b.whole(side)}, {}, {}, "side");
  b.p.queues->push_back({4});
  b.p.launch.grid = 3;
  CHECK_ERROR(verify(b.p), "verify.stop.unseen", "/queues/2");

  SUBCASE("in a queue that waits, the same instruction is seen to") {
    (*b.p.queues)[0].push_back(4);
    b.p.queues->pop_back();
    b.p.launch.grid = 2;
    CHECK_NOTHROW(verify(b.p));
  }
  SUBCASE("without queues, every instruction must wait on it") {
    b.p.queues.reset();
    b.p.launch.grid = 0;
    CHECK_ERROR(verify(b.p), "verify.stop.unseen", "/instructions/4");
    // After the embedding, and before feed_token (so that it cannot run into the next pass).
    const uint32_t c_side = b.counter("side");
    b.p.instructions[4].waits.push_back({c_h, 1});
    b.p.instructions[4].signals.push_back({c_side, 1});
    b.p.instructions[3].waits.push_back({c_side, 1});
    CHECK_NOTHROW(verify(b.p));
  }
  SUBCASE("one feed_token at most may end the launch") {
    b.p.instructions[4] = b.p.instructions[3];
    b.p.queues->back() = {4};
    CHECK_ERROR(verify(b.p), "verify.stop.many", "/instructions/4/operands/6");
  }
  SUBCASE("eos holds one id") {
    b.p.instructions[3].operands[6] = b.whole(ids);
    CHECK_ERROR(verify(b.p), "verify.shape", "/instructions/3/operands/eos");
  }
}

TEST_CASE("a long loop: the ancestor bitsets in ranges of ranks answer the pass questions") {
  // 20000 in-place scales in a chain, the first waiting (carried) for the last: 40000
  // instructions unrolled, more than one range of source ranks.
  const uint32_t n = 20000;
  Builder b;
  const uint32_t x = b.buffer("x", DType::f32, 64);
  for (uint32_t i = 0; i < n; ++i) b.counter("c" + std::to_string(i));
  b.p.instructions.reserve(n);
  for (uint32_t i = 0; i < n; ++i)
    b.add("scale", {b.whole(x), b.whole(x)}, {{i == 0 ? n - 1 : i - 1, 1, i == 0}}, {{i, 1}});
  b.p.launch.passes = 2;
  CHECK(verify(b.p).critical_path == n);
  b.p.instructions[0].waits.clear();
  CHECK_ERROR(verify(b.p), "verify.pass.overtake", "/instructions/1/waits/0");
}
