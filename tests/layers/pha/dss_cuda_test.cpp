// The DSS convolution on CUDA (fp32 FFT convolution, kernel from an fp64 basis) against the f64 CPU
// reference (direct causal sum): output and every gradient, at the GSS sizes of a small model and at
// odd ones, both imaginary parameterizations, the series branch of Bz; a forward without a saved
// record; f64 refused.
#include <catch2/catch.hpp>

#include "compare.h"
#include "layers/pha/dss_op.h"
#include "layers/pha/dss_test_util.h"
#include "parity.h"

using namespace hyb;

TEST_CASE("dss_conv on cuda matches the cpu reference, output and every gradient", "[dss][gpu]") {
  struct Case {
    DssDims d;
    bool imag_exp, series;
  };
  // T 1000 has n = 2000 = 2^4 5^3, T 37 n = 75 = 3 5^2, T 129 n = 270 = 2 3^3 5: every radix but 7;
  // T 25 has n = 49 = 7^2.
  for (const Case& c : {Case{{2, 1000, 64, 128}, true, false}, Case{{2, 37, 64, 128}, true, true},
                        Case{{3, 129, 5, 7}, false, true}, Case{{2, 1000, 64, 128}, false, false},
                        Case{{4, 25, 33, 17}, true, false}}) {
    DYNAMIC_SECTION("B" << c.d.B << "-T" << c.d.T << "-Hs" << c.d.Hs << "-Ns" << c.d.Ns << " "
                        << (c.imag_exp ? "exp" : "linear") << (c.series ? " series" : "")) {
      ParityOptions opt;
      opt.bf16 = false;  // the op is fp32 on the GPU (specs/pha.md 4.5 step 6)
      auto r = cuda_parity(
          [&](const std::vector<Var>& x) {
            return std::vector<Var>{dss_conv(x[0], x[1], x[2], x[3], x[4], x[5], c.imag_exp)};
          },
          dss_inputs(c.d, c.imag_exp, c.series, 60 + uint64_t(c.d.T)), opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("dss forward on cuda without a saved record matches the cpu reference", "[dss][gpu]") {
  const std::vector<Tensor> x = dss_inputs({3, 70, 16, 32}, true, false, 70);
  std::vector<Tensor> xc;
  for (const Tensor& t : x) xc.push_back(t.to(DType::f32).to(Device::cuda(0)));
  const Tensor want = dss_forward(as_inputs(x, true), nullptr);
  const Tensor got = dss_forward(as_inputs(xc, true), nullptr);
  REQUIRE(rel_error(got, want) < 1e-5);
  std::vector<Tensor> x64;
  for (const Tensor& t : x) x64.push_back(t.to(Device::cuda(0)));
  REQUIRE_THROWS_WITH(dss_forward(as_inputs(x64, true), nullptr), Catch::Contains("dss_forward") && Catch::Contains("f32"));
}
