#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "layers/norm/rmsnorm_op.h"

using namespace hyb;

TEST_CASE("rmsnorm gradients match finite differences for x and the gain", "[rmsnorm][cpu][grad]") {
  for (int64_t C : {2, 7, 64}) {
    DYNAMIC_SECTION("C" << C) {
      auto r = gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{rmsnorm(x[0], x[1], 1e-5)}; },
                         {random_tensor({2, 3, C}, 11), random_tensor({C}, 12, DType::f64, 0.5, 1.0)});
      INFO(r.report);
      REQUIRE(r.max_error < 1e-7);
    }
  }
}

TEST_CASE("rmsnorm output has unit root mean square before the gain", "[rmsnorm][cpu]") {
  Tensor x = random_tensor({5, 33}, 13, DType::f32, 3.0);
  Tensor y = rmsnorm_forward(x, Tensor::full({33}, 1.0), 1e-5, nullptr);
  std::vector<double> v = y.to_double_vector();
  for (int r = 0; r < 5; ++r) {
    double ss = 0;
    for (int c = 0; c < 33; ++c) ss += v[size_t(r * 33 + c)] * v[size_t(r * 33 + c)];
    REQUIRE(std::sqrt(ss / 33) == Approx(1.0).epsilon(1e-4));
  }
  REQUIRE_THROWS_WITH(rmsnorm_forward(x, Tensor::full({32}, 1.0), 1e-5, nullptr),
                      Catch::Contains("(5, 33)") && Catch::Contains("(32,)"));
}
