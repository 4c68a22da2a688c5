// The DSS decode step on the CPU (specs/pha.md 4.4, 14 item 6): token by token, after prefills and
// in chunks, it equals the convolution and the recurrence to 1e-12 in f64 (both imaginary
// parameterizations, the series branch of Bz); an f32 state tracks the f64 one; the state's size;
// bad inputs.
#include <catch2/catch.hpp>

#include "compare.h"
#include "layers/mixer_test_util.h"
#include "layers/pha/dss_decode.h"
#include "layers/pha/dss_test_util.h"

using namespace hyb;

namespace {

DssDecodeState start(const std::vector<Tensor>& x, bool imag_exp, DType dt) {
  return dss_decode_start(x[0].size(0), x[1], x[2], x[3], x[4], imag_exp, dt, Device::cpu());
}

}  // namespace

TEST_CASE("the dss decode step equals the convolution and the recurrence to 1e-12 in f64, from the first token, "
          "after prefills and in chunks",
          "[pha][dss][cpu][decode]") {
  struct Case {
    int64_t T;
    bool imag_exp, series;
  };
  for (const Case& c : {Case{37, true, false}, Case{37, false, true}, Case{70, true, true}, Case{129, false, false}}) {
    const std::vector<Tensor> x = dss_inputs({2, c.T, 5, 7}, c.imag_exp, c.series, 30 + uint64_t(c.T));
    const DssInputs in = as_inputs(x, c.imag_exp);
    const Tensor conv = dss_forward(in, nullptr), rec = dss_recurrent_cpu(in);
    struct Split {
      int64_t first, chunk;
    };
    for (const Split& s : {Split{1, 1}, Split{6, 1}, Split{17, 1}, Split{c.T, 1}, Split{5, 4}}) {
      DYNAMIC_SECTION("B2-T" << c.T << "-Hs5-Ns7 " << (c.imag_exp ? "exp" : "linear") << (c.series ? " series" : "")
                             << " prefill " << s.first << " then " << s.chunk << " a call") {
        DssDecodeState st = start(x, c.imag_exp, DType::f64);
        const std::vector<Tensor> steps = decode_in_chunks(x[0], x[5], st, s.first, s.chunk);
        require_rows_match(steps, conv, 1e-12);
        require_rows_match(steps, rec, 1e-12);
      }
    }
  }
}

TEST_CASE("the dss decode state is Hs Ns complex values a sequence, and an f32 state tracks the f64 one to 1e-5",
          "[pha][dss][cpu][decode]") {
  const int64_t B = 3, T = 70, Hs = 6, Ns = 9;
  const std::vector<Tensor> x = dss_inputs({B, T, Hs, Ns}, true, true, 80);
  DssDecodeState s64 = start(x, true, DType::f64);
  std::vector<Tensor> x32;
  for (const Tensor& t : x) x32.push_back(t.to(DType::f32));
  DssDecodeState s32 = start(x32, true, DType::f32);
  REQUIRE(s64.bytes() == B * Hs * Ns * 16);
  REQUIRE(s32.bytes() == B * Hs * Ns * 8);
  const std::vector<Tensor> y64 = decode_in_chunks(x[0], x[5], s64, 9, 1);
  const std::vector<Tensor> y32 = decode_in_chunks(x32[0], x32[5], s32, 9, 1);
  for (size_t i = 0; i < y64.size(); ++i) REQUIRE(rel_error(y32[i], y64[i]) < 1e-5);
  REQUIRE(rel_error(s32.s_re.to(DType::f64), s64.s_re) < 1e-5);
  REQUIRE(rel_error(s32.s_im.to(DType::f64), s64.s_im) < 1e-5);
  REQUIRE(s64.bytes() == B * Hs * Ns * 16);
}

TEST_CASE("the dss decode step refuses a state that does not fit v, d or their dtype", "[pha][dss][cpu][decode]") {
  const std::vector<Tensor> x = dss_inputs({2, 5, 3, 4}, true, false, 90);
  DssDecodeState st = start(x, true, DType::f64);
  REQUIRE_THROWS_WITH(dss_decode_step(random_tensor({2, 5, 4}, 91), x[5], st),
                      Catch::Contains("v is (2, 5, 4) but the state is (2, 3, 4); v must be (B, n, Hs) = (2, n, 3)"));
  REQUIRE_THROWS_WITH(dss_decode_step(x[0], random_tensor({4}, 92), st),
                      Catch::Contains("d is (4,); it must be (Hs,) = (3,)"));
  REQUIRE_THROWS_WITH(dss_decode_step(x[0].to(DType::f32), x[5], st),
                      Catch::Contains("v is f32 but the state is f64"));
  DssDecodeState unstarted;
  REQUIRE_THROWS_WITH(dss_decode_step(x[0], x[5], unstarted),
                      Catch::Contains("the state is not started"));
  REQUIRE_THROWS_WITH(dss_decode_start(2, x[1], x[2], x[3], x[4], true, DType::bf16, Device::cpu()),
                      Catch::Contains("the state is f32 (or f64 on the CPU), got bf16"));
}
