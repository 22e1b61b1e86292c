// --check's comparison with the CPU reference: normalized error on known vectors, a run that
// matches, one that differs beyond the tolerance, and a poisoned element the run never wrote.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/check_inputs.hpp"
#include "backend/cpu_backend.hpp"
#include "core/numeric.hpp"
#include "plan/plan.hpp"
#include "session/check.hpp"

#include "backend/helpers.hpp"
#include "common/program_builder.hpp"

using namespace amk;
using amk::test::nonzero_floats;

namespace {

constexpr uint64_t kN = 64;

std::vector<std::byte> encode(DType t, const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store_element(out.data(), t, i, v[i]);
  return out;
}

// x (input, random) -> y = 2.5 x and z = -0.75 x, both f32 outputs.
struct Scaled {
  Program p;
  HostBuffers initial;
  static constexpr uint32_t y = 1, z = 2;

  Scaled() {
    test::Builder b;
    const uint32_t x = b.buffer("x", DType::f32, kN);
    REQUIRE(b.buffer("y", DType::f32, kN) == y);
    REQUIRE(b.buffer("z", DType::f32, kN) == z);
    b.add("scale", {b.whole(x), b.whole(y)});
    b.last().params[0] = *encode_param(ParamType::f32, 2.5);
    b.add("scale", {b.whole(x), b.whole(z)});
    b.last().params[0] = *encode_param(ParamType::f32, -0.75);
    b.p.buffers[y].output = b.p.buffers[z].output = true;
    p = b.p;
    initial.data = {encode(DType::f32, nonzero_floats(kN, 7)), std::vector<std::byte>(kN * 4),
                    std::vector<std::byte>(kN * 4)};
  }

  // What the CPU backend makes of `data`.
  [[nodiscard]] HostBuffers run(const HostBuffers& data) const {
    HostBuffers out = copy_host_buffers(data);
    PlanOptions po;
    po.grid_hint = 2;
    (void)run_cpu(p, make_plan(p, po), out);
    return out;
  }

  [[nodiscard]] nlohmann::ordered_json check(const HostBuffers& result,
                                             const std::vector<bool>& poisoned = {}) const {
    return check_against_cpu(p, copy_host_buffers(initial), result, 1, poisoned);
  }
};

float get(const HostBuffers& h, uint32_t b, uint64_t i) {
  return static_cast<float>(load_element(h.data[b].data(), DType::f32, i));
}
void set(HostBuffers& h, uint32_t b, uint64_t i, float v) {
  store_element(h.data[b].data(), DType::f32, i, v);
}

}  // namespace

TEST_CASE("normalized_error on known vectors") {
  const auto b = encode(DType::f32, {1, 2, 3, 5});
  CHECK(normalized_error(DType::f32, b, b, 4) == 0.0);
  CHECK(normalized_error(DType::f32, encode(DType::f32, {1, 2, 3, 4}), b, 4) ==
        doctest::Approx(1.0 / std::sqrt(39.0)));
  // Only the first `elements` count.
  CHECK(normalized_error(DType::f32, encode(DType::f32, {1, 2, 3, 4}), b, 3) == 0.0);
  // bf16 holds 1.5 and 2.5 exactly: ||(0.5, 0.5)|| / ||(1, 2)||.
  CHECK(normalized_error(DType::bf16, encode(DType::bf16, {1.5f, 2.5f}),
                         encode(DType::bf16, {1.0f, 2.0f}),
                         2) == doctest::Approx(std::sqrt(0.5) / std::sqrt(5.0)));

  SUBCASE("a uniform relative error on random data") {
    const std::vector<float> ref = nonzero_floats(256, 3);
    std::vector<float> off = ref;
    for (float& v : off) v *= 1.01f;
    CHECK(normalized_error(DType::f32, encode(DType::f32, off), encode(DType::f32, ref), 256) ==
          doctest::Approx(0.01).epsilon(1e-4));
  }
  SUBCASE("NaN") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(normalized_error(DType::f32, encode(DType::f32, {1, 2, nan, 5}), b, 4) == inf);
    CHECK(normalized_error(DType::f32, b, encode(DType::f32, {1, 2, nan, 5}), 4) == inf);
    // NaN where the reference has NaN too is left out of the sums.
    CHECK(normalized_error(DType::f32, encode(DType::f32, {1, nan, 3, 4}),
                           encode(DType::f32, {1, nan, 3, 5}),
                           4) == doctest::Approx(1.0 / std::sqrt(35.0)));
  }
  SUBCASE("infinities") {
    // The same infinity on both sides (an empty attention chunk's max score) matches and is
    // left out; an infinity the other side does not hold is a mismatch.
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(normalized_error(DType::f32, encode(DType::f32, {1, -inf, 3, 4}),
                           encode(DType::f32, {1, -inf, 3, 5}),
                           4) == doctest::Approx(1.0 / std::sqrt(35.0)));
    CHECK(normalized_error(DType::f32, encode(DType::f32, {1, inf, 3, 4}),
                           encode(DType::f32, {1, -inf, 3, 4}),
                           4) == std::numeric_limits<double>::infinity());
    CHECK(normalized_error(DType::f32, encode(DType::f32, {1, 2, 3, 4}),
                           encode(DType::f32, {1, -inf, 3, 4}),
                           4) == std::numeric_limits<double>::infinity());
  }
}

TEST_CASE("check_against_cpu passes the CPU's own result and small differences") {
  const Scaled s;
  HostBuffers result = s.run(s.initial);
  REQUIRE(get(result, Scaled::y, 5) == doctest::Approx(2.5 * get(s.initial, 0, 5)));
  REQUIRE(get(result, Scaled::z, 5) != 0.0f);

  auto c = s.check(result);
  CHECK(c["passed"].get<bool>());
  CHECK(c["summary"] == "every output matches the CPU reference");
  CHECK(c["poisoned"] == "");
  REQUIRE(c["outputs"].size() == 2);
  CHECK(c["outputs"][0]["name"] == "y");
  CHECK(c["outputs"][1]["name"] == "z");
  for (const auto& o : c["outputs"]) {
    CHECK(o["error"].get<double>() == 0.0);
    CHECK(o["tolerance"].get<double>() == 1e-4);  // f32's
    CHECK(o["passed"].get<bool>());
  }

  // Within f32's tolerance: a non-zero error that still passes.
  set(result, Scaled::z, 3, get(result, Scaled::z, 3) * (1.0f + 1e-5f));
  c = s.check(result);
  CHECK(c["passed"].get<bool>());
  CHECK(c["outputs"][1]["error"].get<double>() > 0.0);
  CHECK(c["outputs"][1]["error"].get<double>() < 1e-4);
}

TEST_CASE("check_against_cpu fails an output perturbed beyond its tolerance, naming it") {
  const Scaled s;
  HostBuffers result = s.run(s.initial);
  set(result, Scaled::z, 5, get(result, Scaled::z, 5) + 1.0f);
  // A smaller difference in y, also beyond the tolerance: z is the worst.
  set(result, Scaled::y, 9, get(result, Scaled::y, 9) * 1.1f);

  const auto c = s.check(result);
  CHECK_FALSE(c["passed"].get<bool>());
  CHECK(c["worst"] == "/buffers/2 (z)");
  const std::string summary = c["summary"];
  CHECK_MESSAGE(summary.rfind("output z: differs from the CPU reference: normalized error ", 0) ==
                    0,
                summary);
  CHECK_MESSAGE(summary.find("(tolerance 0.0001)") != std::string::npos, summary);
  CHECK_FALSE(c["outputs"][0]["passed"].get<bool>());
  CHECK_FALSE(c["outputs"][1]["passed"].get<bool>());
  CHECK(c["outputs"][1]["error"].get<double>() > c["outputs"][0]["error"].get<double>());
}

TEST_CASE("check_against_cpu fails a poisoned element the reference writes and the run did not") {
  Scaled s;
  const std::vector<bool> poisoned = poisonable_outputs(s.p);
  REQUIRE(poisoned == std::vector<bool>{false, true, true});
  poison_buffers(s.p, poisoned, s.initial);
  REQUIRE(is_poison(DType::f32, s.initial.data[Scaled::y].data(), 7));

  HostBuffers result = s.run(s.initial);
  auto c = s.check(result, poisoned);
  CHECK(c["passed"].get<bool>());
  CHECK(c["poisoned"] == "y, z");
  CHECK(c["outputs"][0]["poisoned"].get<bool>());
  CHECK(c["outputs"][0]["unwritten"].get<uint64_t>() == 0);

  // Element 7 of y left as it was before the run.
  std::memcpy(result.data[Scaled::y].data() + 7 * 4, s.initial.data[Scaled::y].data() + 7 * 4, 4);
  c = s.check(result, poisoned);
  CHECK_FALSE(c["passed"].get<bool>());
  CHECK(c["worst"] == "/buffers/1 (y)");
  const std::string summary = c["summary"];
  CHECK_MESSAGE(summary.rfind("output y: 1 element(s) the CPU reference writes were never "
                              "written",
                              0) == 0,
                summary);
  CHECK_MESSAGE(summary.find("first at element 7") != std::string::npos, summary);
  CHECK(c["outputs"][0]["unwritten"].get<uint64_t>() == 1);
  CHECK_FALSE(c["outputs"][0]["passed"].get<bool>());
  CHECK(c["outputs"][1]["passed"].get<bool>());

  // Where the reference writes NaN, the poison (a NaN too) passes the error but not the check.
  set(s.initial, 0, 7, std::numeric_limits<float>::quiet_NaN());
  result = s.run(s.initial);
  REQUIRE(std::isnan(get(result, Scaled::y, 7)));
  CHECK(s.check(result, poisoned)["passed"].get<bool>());
  std::memcpy(result.data[Scaled::y].data() + 7 * 4, s.initial.data[Scaled::y].data() + 7 * 4, 4);
  c = s.check(result, poisoned);
  CHECK(c["outputs"][0]["error"].get<double>() < 1e-4);
  CHECK(c["outputs"][0]["unwritten"].get<uint64_t>() == 1);
  CHECK_FALSE(c["passed"].get<bool>());
  CHECK(c["worst"] == "/buffers/1 (y)");
}
