#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/ops/matmul.h"

using namespace hyb;

TEST_CASE("matmul gradients match finite differences for every transpose and a shared b", "[matmul][cpu][grad]") {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      DYNAMIC_SECTION("batched ta=" << ta << " tb=" << tb) {
        Shape sa = ta ? Shape{2, 5, 3} : Shape{2, 3, 5};
        Shape sb = tb ? Shape{2, 4, 5} : Shape{2, 5, 4};
        auto r = gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{matmul(x[0], x[1], ta, tb)}; },
                           {random_tensor(sa, 1), random_tensor(sb, 2)});
        INFO(r.report);
        REQUIRE(r.max_error < 1e-7);
      }
    }
  for (int tb = 0; tb < 2; ++tb) {
    DYNAMIC_SECTION("shared b tb=" << tb) {
      Shape sb = tb ? Shape{4, 5} : Shape{5, 4};
      auto r = gradcheck([&](const std::vector<Var>& x) { return std::vector<Var>{matmul(x[0], x[1], false, tb)}; },
                         {random_tensor({2, 3, 5}, 3), random_tensor(sb, 4)});
      INFO(r.report);
      REQUIRE(r.max_error < 1e-7);
    }
  }
}

TEST_CASE("matmul agrees with a naive triple loop at sizes that are not multiples of the tiles", "[matmul][cpu]") {
  for (auto [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1}, {7, 17, 300}, {73, 130, 9}, {200, 3, 513}}) {
    DYNAMIC_SECTION("M" << M << " N" << N << " K" << K) {
      Tensor a = random_tensor({M, K}, 5, DType::f32), b = random_tensor({N, K}, 6, DType::f32);
      Tensor c = matmul_forward(a, b, false, true);
      std::vector<double> av = a.to_double_vector(), bv = b.to_double_vector(), cv = c.to_double_vector();
      double err = 0, ref = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += av[size_t(i * K + k)] * bv[size_t(j * K + k)];
          err += (s - cv[size_t(i * N + j)]) * (s - cv[size_t(i * N + j)]);
          ref += s * s;
        }
      REQUIRE(std::sqrt(err / ref) < 1e-6);
    }
  }
}

TEST_CASE("matmul names both shapes when the inner dimensions differ", "[matmul][cpu][errors]") {
  REQUIRE_THROWS_WITH(matmul_forward(random_tensor({3, 4}, 1), random_tensor({5, 6}, 2)),
                      Catch::Contains("(3, 4)") && Catch::Contains("(5, 6)") && Catch::Contains("inner"));
}
