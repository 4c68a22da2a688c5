// L2 normalization on the CPU: both eps rules, gradients, clamped rows and bad inputs.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "layers/norm/l2norm_op.h"

using namespace hyb;

TEST_CASE("l2norm gradients match finite differences under both eps rules", "[l2norm][cpu][grad]") {
  for (L2NormEps mode : {L2NormEps::clamp, L2NormEps::in_sqrt}) {
    for (int64_t C : {2, 7, 60}) {
      DYNAMIC_SECTION((mode == L2NormEps::clamp ? "clamp" : "in_sqrt") << "-C" << C) {
        const double eps = mode == L2NormEps::clamp ? 1e-12 : 1e-6;
        auto r = gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{l2norm(x[0], eps, mode)}; },
                           {random_tensor({2, 5, 3, C}, 20 + uint64_t(C))});
        INFO(r.report);
        REQUIRE(r.max_error < 1e-6);
      }
    }
  }
}

TEST_CASE("l2norm rows have unit norm under the clamp rule and norm sqrt(s / (s + eps)) under in_sqrt",
          "[l2norm][cpu]") {
  Tensor x = random_tensor({4, 9, 13}, 31, DType::f64, 0.05);
  std::vector<double> xv = x.to_double_vector();
  std::vector<double> yc = l2norm_forward(x, 1e-12, L2NormEps::clamp, nullptr).to_double_vector();
  std::vector<double> ys = l2norm_forward(x, 1e-2, L2NormEps::in_sqrt, nullptr).to_double_vector();
  for (size_t r = 0; r < xv.size() / 13; ++r) {
    double sx = 0, sc = 0, ss = 0;
    for (size_t c = 0; c < 13; ++c) {
      sx += xv[r * 13 + c] * xv[r * 13 + c];
      sc += yc[r * 13 + c] * yc[r * 13 + c];
      ss += ys[r * 13 + c] * ys[r * 13 + c];
    }
    REQUIRE(sc == Approx(1.0).epsilon(1e-14));
    REQUIRE(ss == Approx(sx / (sx + 1e-2)).epsilon(1e-12));
  }
}

TEST_CASE("a row below the clamp is divided by eps and its gradient is dy / eps", "[l2norm][cpu][grad]") {
  // Rows of norm about 0.03 against eps 0.5: every row is clamped, also under the finite-difference probes.
  Tensor x = random_tensor({3, 4, 6}, 41, DType::f64, 0.01);
  Tensor y = l2norm_forward(x, 0.5, L2NormEps::clamp, nullptr);
  std::vector<double> xv = x.to_double_vector(), yv = y.to_double_vector();
  for (size_t i = 0; i < xv.size(); ++i) REQUIRE(yv[i] == Approx(xv[i] / 0.5).epsilon(1e-15));
  auto r = gradcheck([](const std::vector<Var>& v) { return std::vector<Var>{l2norm(v[0], 0.5)}; }, {x});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);
  L2NormSaved s;
  l2norm_forward(x, 0.5, L2NormEps::clamp, &s);
  Tensor dy = random_tensor({3, 4, 6}, 42);
  std::vector<double> dx = l2norm_backward(s, dy).to_double_vector(), dyv = dy.to_double_vector();
  for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx[i] == Approx(dyv[i] / 0.5).epsilon(1e-15));
}

TEST_CASE("l2norm rejects a non-positive eps and a gradient of the wrong shape", "[l2norm][cpu]") {
  Tensor x = random_tensor({2, 3, 8}, 51, DType::f32);
  REQUIRE_THROWS_WITH(l2norm_forward(x, 0.0, L2NormEps::clamp, nullptr), Catch::Contains("l2norm") &&
                                                                             Catch::Contains("eps"));
  L2NormSaved s;
  l2norm_forward(x, 1e-12, L2NormEps::clamp, &s);
  REQUIRE_THROWS_WITH(l2norm_backward(s, random_tensor({2, 3, 7}, 52, DType::f32)),
                      Catch::Contains("l2norm_backward") && Catch::Contains("(2, 3, 8)") &&
                          Catch::Contains("(2, 3, 7)"));
}
