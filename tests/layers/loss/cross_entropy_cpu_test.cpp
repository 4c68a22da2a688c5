#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "layers/loss/cross_entropy_op.h"

using namespace hyb;

TEST_CASE("cross-entropy gradient matches finite differences with ignored rows and padded columns", "[cross_entropy][cpu][grad]") {
  Tensor targets = Tensor::from_vector<int32_t>({2, -1, 0, 4, 4}, {5});
  auto r = gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{cross_entropy(x[0], targets, 5, -1)}; },
                     {random_tensor({5, 8}, 41, DType::f64, 2.0)});
  INFO(r.report);
  REQUIRE(r.max_error < 1e-7);
}

TEST_CASE("cross-entropy equals the mean negative log-softmax over counted rows", "[cross_entropy][cpu]") {
  Tensor logits = random_tensor({4, 6}, 42, DType::f32, 3.0);
  Tensor targets = Tensor::from_vector<int32_t>({1, 5, -1, 0}, {4});
  Var loss = cross_entropy(Var(logits), targets, 6, -1);
  std::vector<double> z = logits.to_double_vector();
  double total = 0;
  for (int n : {0, 1, 3}) {
    int t = n == 0 ? 1 : n == 1 ? 5 : 0;
    double m = -1e300, s = 0;
    for (int v = 0; v < 6; ++v) m = std::max(m, z[size_t(n * 6 + v)]);
    for (int v = 0; v < 6; ++v) s += std::exp(z[size_t(n * 6 + v)] - m);
    total += m + std::log(s) - z[size_t(n * 6 + t)];
  }
  REQUIRE(loss.data().item() == Approx(total / 3).epsilon(1e-6));
  REQUIRE_THROWS_WITH(cross_entropy(Var(logits), Tensor::from_vector<int32_t>({1, 6, 0, 0}, {4}), 6, -1),
                      Catch::Contains("target 6 at row 1"));
}
