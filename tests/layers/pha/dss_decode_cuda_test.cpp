// The DSS decode step on CUDA (fp32 state and sums, f64 decay) against the f64 CPU step: every
// output and the final state within 1e-5, token by token, after prefills and in chunks, at Ns below,
// at and past the block's 128 threads up to the kernel's 1024; f64 refused.
#include <catch2/catch.hpp>

#include "compare.h"
#include "layers/pha/dss_decode.h"
#include "layers/pha/dss_test_util.h"

using namespace hyb;

TEST_CASE("the dss decode step on cuda matches the f64 cpu step, outputs and final state", "[pha][dss][gpu][decode]") {
  struct Case {
    DssDims d;
    bool imag_exp, series;
  };
  for (const Case& c : {Case{{2, 1000, 64, 128}, true, false}, Case{{3, 37, 5, 7}, false, true},
                        Case{{2, 129, 33, 300}, true, true}, Case{{2, 70, 4, 1024}, false, false}}) {
    const std::vector<Tensor> x = dss_inputs(c.d, c.imag_exp, c.series, 100 + uint64_t(c.d.Ns));
    std::vector<Tensor> xg;
    for (const Tensor& t : x) xg.push_back(t.to(DType::f32).to(Device::cuda(0)));
    struct Split {
      int64_t first, chunk;
    };
    for (const Split& s : {Split{1, 1}, Split{17, 1}, Split{c.d.T, 1}, Split{5, 32}}) {
      DYNAMIC_SECTION("B" << c.d.B << "-T" << c.d.T << "-Hs" << c.d.Hs << "-Ns" << c.d.Ns << " "
                          << (c.imag_exp ? "exp" : "linear") << (c.series ? " series" : "") << " prefill " << s.first
                          << " then " << s.chunk << " a call") {
        DssDecodeState ref = dss_decode_start(c.d.B, x[1], x[2], x[3], x[4], c.imag_exp, DType::f64, Device::cpu());
        DssDecodeState got =
            dss_decode_start(c.d.B, xg[1], xg[2], xg[3], xg[4], c.imag_exp, DType::f32, Device::cuda(0));
        const std::vector<Tensor> want = decode_in_chunks(x[0], x[5], ref, s.first, s.chunk);
        const std::vector<Tensor> have = decode_in_chunks(xg[0], xg[5], got, s.first, s.chunk);
        REQUIRE(want.size() == have.size());
        for (size_t i = 0; i < want.size(); ++i) {
          INFO("call " << i);
          REQUIRE(rel_error(have[i], want[i]) < 1e-5);
        }
        REQUIRE(rel_error(got.s_re.to(Device::cpu()).to(DType::f64), ref.s_re) < 1e-5);
        REQUIRE(rel_error(got.s_im.to(Device::cpu()).to(DType::f64), ref.s_im) < 1e-5);
        REQUIRE(got.bytes() == c.d.B * c.d.Hs * c.d.Ns * 8);
      }
    }
  }
}

TEST_CASE("the dss decode state on cuda is fp32 and the cuda step refuses more than 1024 modes",
          "[pha][dss][gpu][decode]") {
  const std::vector<Tensor> x = dss_inputs({2, 3, 2, 1025}, true, false, 110);
  std::vector<Tensor> xg;
  for (const Tensor& t : x) xg.push_back(t.to(DType::f32).to(Device::cuda(0)));
  REQUIRE_THROWS_WITH(dss_decode_start(2, xg[1], xg[2], xg[3], xg[4], true, DType::f64, Device::cuda(0)),
                      Catch::Contains("the state is f32 (or f64 on the CPU), got f64"));
  DssDecodeState st = dss_decode_start(2, xg[1], xg[2], xg[3], xg[4], true, DType::f32, Device::cuda(0));
  REQUIRE_THROWS_WITH(dss_decode_step(xg[0], xg[5], st), Catch::Contains("Ns = 1025 modes"));
}
