// The per-head decay on the CPU: gradients with and without the clamp, agreement with the same math
// built from existing ops, the softplus threshold, the initial values.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "autograd/ops/binary.h"
#include "autograd/ops/unary.h"
#include "compare.h"
#include "layers/ssm_decay/ssm_decay_init.h"
#include "layers/ssm_decay/ssm_decay_op.h"

using namespace hyb;

TEST_CASE("ssm_decay gradients of x, dt_bias and A_log through dt and g match finite differences, clamped or not",
          "[ssm_decay][cpu][grad]") {
  // softplus of N(0, 1) + N(0, 1) spreads over about (0.05, 4); the clamp [0.4, 1.5] cuts both tails.
  for (bool clamp : {false, true}) {
    DYNAMIC_SECTION((clamp ? "clamp [0.4, 1.5]" : "no clamp")) {
      auto r = gradcheck(
          [&](const std::vector<Var>& x) {
            SsmDecayVars d = ssm_decay(x[0], x[1], x[2], clamp ? 0.4 : 0.0, clamp ? 1.5 : INFINITY);
            return std::vector<Var>{d.dt, d.g};
          },
          {random_tensor({2, 7, 3}, 1), random_tensor({3}, 2), random_tensor({3}, 3, DType::f64, 0.5)});
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
    }
  }
}

TEST_CASE("ssm_decay equals -exp(A_log) softplus(x + dt_bias) built from existing ops, gradients too", "[ssm_decay][cpu]") {
  Tensor xt = random_tensor({3, 5, 4}, 10, DType::f64, 3.0), bt = random_tensor({4}, 11), at = random_tensor({4}, 12);
  Tensor ddt = random_tensor({3, 5, 4}, 13), dg = random_tensor({3, 5, 4}, 14);
  Var x1(xt, true), b1(bt, true), a1(at, true), x2(xt, true), b2(bt, true), a2(at, true);
  SsmDecayVars fused = ssm_decay(x1, b1, a1, 0.0, INFINITY);
  Var dt = softplus(add(x2, b2));
  Var g = mul(neg(exp(a2)), dt);
  REQUIRE(rel_error(fused.dt.data(), dt.data()) < 1e-15);
  REQUIRE(rel_error(fused.g.data(), g.data()) < 1e-15);
  backward({fused.dt, fused.g, dt, g}, {ddt, dg, ddt, dg});
  REQUIRE(rel_error(x1.grad(), x2.grad()) < 1e-14);
  REQUIRE(rel_error(b1.grad(), b2.grad()) < 1e-14);
  REQUIRE(rel_error(a1.grad(), a2.grad()) < 1e-14);
}

TEST_CASE("above 20 softplus is the identity and passes the gradient unchanged; the clamp passes none", "[ssm_decay][cpu]") {
  Tensor x = Tensor::from_vector<double>({25.0, 30.0, -1.0}, {3}), bias = Tensor::zeros({3}, DType::f64),
         A_log = Tensor::zeros({3}, DType::f64);
  SsmDecaySaved s;
  SsmDecayOutputs r = ssm_decay_forward(x, bias, A_log, 0.5, 28.0, &s);
  const std::vector<double> dt = r.dt.to_double_vector();
  REQUIRE(dt[0] == 25.0);
  REQUIRE(dt[1] == 28.0);  // clamped from above
  REQUIRE(dt[2] == 0.5);   // softplus(-1) = 0.31 clamped from below
  SsmDecayGrads g = ssm_decay_backward(s, Tensor::full({3}, 2.0, DType::f64), Tensor(), GradMask{1});
  REQUIRE(g.dx.to_double_vector() == std::vector<double>{2.0, 0.0, 0.0});
}

TEST_CASE("initial dt_bias gives softplus(dt_bias) in [dt_min, dt_max], A_log gives A0 in (lo, hi]", "[ssm_decay][cpu]") {
  Tensor dt_bias = Tensor::empty({4096}, DType::f64), A_log = Tensor::empty({4096}, DType::f64);
  dt_bias_init(0.001, 0.1, 1e-4).fn(dt_bias, 7, "dt_bias");
  a_log_init(0.0, 16.0).fn(A_log, 7, "A_log");
  double mean_log = 0;
  for (double b : dt_bias.to_double_vector()) {
    const double dt = std::log1p(std::exp(b));
    REQUIRE(dt >= 0.001 * (1 - 1e-12));
    REQUIRE(dt <= 0.1 * (1 + 1e-12));
    mean_log += std::log(dt) / 4096.0;
  }
  // Log-uniform: the mean of ln dt is the midpoint of [ln 0.001, ln 0.1].
  REQUIRE(mean_log == Approx(0.5 * (std::log(0.001) + std::log(0.1))).margin(0.1));
  for (double a : A_log.to_double_vector()) {
    REQUIRE(std::isfinite(a));
    REQUIRE(std::exp(a) <= 16.0 * (1 + 1e-12));
  }
}

TEST_CASE("ssm_decay rejects parameters that do not fit x and an inverted clamp", "[ssm_decay][cpu]") {
  Tensor x = random_tensor({2, 3, 4}, 20);
  REQUIRE_THROWS_WITH(ssm_decay_forward(x, random_tensor({3}, 21), random_tensor({4}, 22), 0.0, INFINITY, nullptr),
                      Catch::Contains("ssm_decay_forward") && Catch::Contains("dt_bias (3,)") &&
                          Catch::Contains("(2, 3, 4)"));
  REQUIRE_THROWS_WITH(ssm_decay_forward(x, random_tensor({4}, 21), random_tensor({4}, 22), 1.0, 0.5, nullptr),
                      Catch::Contains("clamp"));
}
