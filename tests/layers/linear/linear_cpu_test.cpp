#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "layers/linear/linear_op.h"

using namespace hyb;

TEST_CASE("linear gradients match finite differences with and without bias", "[linear][cpu][grad]") {
  auto with_bias = gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{linear(x[0], x[1], x[2])}; },
                             {random_tensor({2, 3, 5}, 1), random_tensor({4, 5}, 2), random_tensor({4}, 3)});
  INFO(with_bias.report);
  REQUIRE(with_bias.max_error < 1e-7);
  auto no_bias = gradcheck([](const std::vector<Var>& x) { return std::vector<Var>{linear(x[0], x[1])}; },
                           {random_tensor({7, 3}, 4), random_tensor({2, 3}, 5)});
  REQUIRE(no_bias.max_error < 1e-7);
}

TEST_CASE("linear computes x W^T + b", "[linear][cpu]") {
  Tensor x = random_tensor({3, 4}, 6), w = random_tensor({2, 4}, 7), b = random_tensor({2}, 8);
  std::vector<double> y = linear_forward(x, w, b).to_double_vector();
  std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector(), bv = b.to_double_vector();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = bv[size_t(j)];
      for (int k = 0; k < 4; ++k) s += xv[size_t(i * 4 + k)] * wv[size_t(j * 4 + k)];
      REQUIRE(y[size_t(i * 2 + j)] == Approx(s).epsilon(1e-12));
    }
}

TEST_CASE("linear names both shapes on a width mismatch", "[linear][cpu][errors]") {
  REQUIRE_THROWS_WITH(linear_forward(random_tensor({3, 4}, 1), random_tensor({2, 5}, 2), Tensor()),
                      Catch::Contains("x is (3, 4)") && Catch::Contains("weight is (2, 5)"));
}
