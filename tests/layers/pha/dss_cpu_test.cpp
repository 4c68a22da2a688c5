// The DSS convolution on the CPU (specs/pha.md 14, items 1 and 2): the direct causal sum against the
// recurrence, gradients of the input and of every kernel parameter against finite differences (both
// imaginary parameterizations, the series branch of Bz), f32 against f64, the zero-order-hold factor
// against its Taylor series on both sides of the switch, the FFT length, bad inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "layers/pha/dss_op.h"
#include "layers/pha/dss_test_util.h"

using namespace hyb;

namespace {

std::vector<Tensor> grads_of(const DssInputs& in, const Tensor& dy) {
  DssSaved s;
  dss_forward(in, &s);
  const DssGrads g = dss_backward(s, dy, GradMask{0x3f});
  return {g.dv, g.dlambda_re, g.dlambda_im, g.dc_re, g.dc_im, g.dd};
}

}  // namespace

TEST_CASE("dss direct causal sum equals the modal recurrence to 1e-12 in f64", "[dss][cpu]") {
  for (int64_t T : {37, 70, 129}) {
    for (bool imag_exp : {true, false}) {
      DYNAMIC_SECTION("B2-T" << T << "-Hs5-Ns7 " << (imag_exp ? "exp" : "linear")) {
        const DssInputs in = as_inputs(dss_inputs({2, T, 5, 7}, imag_exp, T == 70, 10 + uint64_t(T)), imag_exp);
        const Tensor direct = dss_forward(in, nullptr), recurrent = dss_recurrent_cpu(in);
        REQUIRE(rel_error(direct, recurrent) < 1e-12);
      }
    }
  }
}

TEST_CASE("dss gradients of v and every kernel parameter match finite differences", "[dss][cpu][grad]") {
  struct Case {
    DssDims d;
    bool imag_exp, series;
  };
  for (const Case& c : {Case{{2, 37, 3, 4}, true, false}, Case{{2, 37, 3, 4}, false, false},
                        Case{{3, 70, 2, 3}, true, true}, Case{{2, 70, 2, 3}, false, true},
                        Case{{2, 129, 2, 3}, true, false}}) {
    DYNAMIC_SECTION("B" << c.d.B << "-T" << c.d.T << "-Hs" << c.d.Hs << "-Ns" << c.d.Ns << " "
                        << (c.imag_exp ? "exp" : "linear") << (c.series ? " series" : "")) {
      auto r = gradcheck(
          [&](const std::vector<Var>& x) {
            return std::vector<Var>{dss_conv(x[0], x[1], x[2], x[3], x[4], x[5], c.imag_exp)};
          },
          dss_inputs(c.d, c.imag_exp, c.series, 20 + uint64_t(c.d.T)));
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
    }
  }
}

TEST_CASE("dss in f32 agrees with f64 to 1e-5, output and every gradient", "[dss][cpu]") {
  for (bool imag_exp : {true, false}) {
    DYNAMIC_SECTION((imag_exp ? "exp" : "linear")) {
      const std::vector<Tensor> x = dss_inputs(DssDims{2, 70, 6, 9}, imag_exp, true, 30);
      std::vector<Tensor> x32;
      for (const Tensor& t : x) x32.push_back(t.to(DType::f32));
      const DssInputs in = as_inputs(x, imag_exp), in32 = as_inputs(x32, imag_exp);
      const Tensor dy = random_tensor({2, 70, 6}, 31);
      REQUIRE(rel_error(dss_forward(in32, nullptr), dss_forward(in, nullptr)) < 1e-5);
      const std::vector<Tensor> g = grads_of(in, dy), g32 = grads_of(in32, dy.to(DType::f32));
      for (size_t i = 0; i < g.size(); ++i) {
        INFO("gradient of input " << i);
        REQUIRE(g32[i].dtype() == DType::f32);
        REQUIRE(rel_error(g32[i], g[i]) < 1e-5);
      }
    }
  }
}

TEST_CASE("dss backward computes only the gradients asked for", "[dss][cpu]") {
  const DssInputs in = as_inputs(dss_inputs(DssDims{2, 9, 3, 4}, true, false, 40), true);
  DssSaved s;
  dss_forward(in, &s);
  const DssGrads g = dss_backward(s, random_tensor({2, 9, 3}, 41), GradMask{(1u << 0) | (1u << 4)});
  REQUIRE(g.dv.defined());
  REQUIRE(g.dc_im.defined());
  REQUIRE_FALSE(g.dlambda_re.defined());
  REQUIRE_FALSE(g.dlambda_im.defined());
  REQUIRE_FALSE(g.dc_re.defined());
  REQUIRE_FALSE(g.dd.defined());
}

TEST_CASE("dss decay is exp(Lambda) and C' = C Bz matches the Taylor series of Bz on both sides of 1e-4", "[dss][cpu]") {
  // One mode per magnitude, arguments spread over the half plane Re Lambda < 0.
  const std::vector<double> mag{1e-7, 5e-5, 0.99e-4, 1.01e-4, 3e-4, 1e-3, 0.05};
  const int64_t Ns = int64_t(mag.size());
  std::vector<double> lre, lim;
  std::vector<std::complex<double>> lambda;
  for (int64_t n = 0; n < Ns; ++n) {
    const double angle = 1.6 + 1.5 * double(n) / double(Ns);  // in (pi/2, 3 pi/2): Re Lambda < 0
    lambda.emplace_back(std::polar(mag[size_t(n)], angle));
    lre.push_back(std::log(-lambda.back().real()));
    lim.push_back(lambda.back().imag());
  }
  const DssModes m = dss_modes_cpu(Tensor::from_vector(lre, {Ns}), Tensor::from_vector(lim, {Ns}),
                                   Tensor::full({1, Ns}, 1.0, DType::f64), Tensor::zeros({1, Ns}, DType::f64), false);
  const std::vector<double> dre = m.decay_re.to_double_vector(), dim = m.decay_im.to_double_vector();
  const std::vector<double> bre = m.cbar_re.to_double_vector(), bim = m.cbar_im.to_double_vector();
  for (int64_t n = 0; n < Ns; ++n) {
    INFO("|Lambda| = " << mag[size_t(n)]);
    const std::complex<double> L = lambda[size_t(n)];
    std::complex<double> series = 0, term = 1;  // sum_k L^k / (k + 1)!
    for (int k = 0; k < 20; ++k) {
      term = k == 0 ? 1.0 : term * L / double(k + 1);
      series += term;
    }
    // Below the switch the three-term series of 4.3 stops short by |Lambda|^3 / 24: 4.2e-14 at 1e-4.
    REQUIRE(std::abs(std::complex<double>(bre[size_t(n)], bim[size_t(n)]) - series) < 5e-14 * std::abs(series));
    REQUIRE(std::abs(std::complex<double>(dre[size_t(n)], dim[size_t(n)]) - std::exp(L)) < 1e-15);
  }
}

TEST_CASE("dss FFT length is the smallest 7-smooth n >= 2T - 1", "[dss][cpu]") {
  auto smooth = [](int64_t n) {
    for (int64_t p : {2, 3, 5, 7})
      while (n % p == 0) n /= p;
    return n == 1;
  };
  REQUIRE(dss_fft_length(1) == 1);
  REQUIRE(dss_fft_length(1024) == 2048);
  REQUIRE(dss_fft_length(37) == 75);
  for (int64_t T = 1; T <= 5000; ++T) {
    const int64_t n = dss_fft_length(T);
    INFO("T = " << T << ", n = " << n);
    REQUIRE(n >= 2 * T - 1);
    REQUIRE(smooth(n));
    for (int64_t m = 2 * T - 1; m < n; ++m) REQUIRE_FALSE(smooth(m));
  }
}

TEST_CASE("dss rejects parameters that do not fit v, naming the op and the shapes", "[dss][cpu]") {
  const std::vector<Tensor> x = dss_inputs(DssDims{2, 5, 4, 3}, true, false, 50);
  auto with = [&](size_t i, const Tensor& t) {
    std::vector<Tensor> y = x;
    y[i] = t;
    return as_inputs(y, true);
  };
  REQUIRE_THROWS_WITH(dss_forward(with(0, random_tensor({2, 5}, 51)), nullptr),
                      Catch::Contains("dss_forward") && Catch::Contains("v is (2, 5)"));
  REQUIRE_THROWS_WITH(dss_forward(with(2, random_tensor({4}, 52)), nullptr),
                      Catch::Contains("lambda_im is (4,)") && Catch::Contains("(Ns,)"));
  REQUIRE_THROWS_WITH(dss_forward(with(3, random_tensor({3, 4}, 53)), nullptr),
                      Catch::Contains("c_re is (3, 4)") && Catch::Contains("(2, 5, 4)") && Catch::Contains("(4, 3)"));
  REQUIRE_THROWS_WITH(dss_forward(with(5, random_tensor({3}, 54)), nullptr),
                      Catch::Contains("d is (3,)") && Catch::Contains("(4,)"));
  REQUIRE_THROWS_WITH(dss_forward(with(4, random_tensor({4, 3}, 55, DType::f32)), nullptr),
                      Catch::Contains("c_im is f32 but v is f64"));
  DssSaved s;
  dss_forward(as_inputs(x, true), &s);
  REQUIRE_THROWS_WITH(dss_backward(s, random_tensor({2, 6, 4}, 56), GradMask{1}),
                      Catch::Contains("dss_backward") && Catch::Contains("(2, 6, 4)"));
}
