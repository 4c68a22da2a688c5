#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "autograd/gradcheck.h"
#include "kernels/exp_cpu.h"

using namespace hyb;

TEST_CASE("exp_cpu for float is within 2 ulp of exp over the whole finite range", "[exp][cpu]") {
  Tensor x = random_tensor({200000}, 91, DType::f64, 40.0);
  std::vector<double> xs = x.to_double_vector();
  for (double v = -103.0; v < 88.7; v += 0.0625) xs.push_back(v);
  double worst = 0;
  for (double v : xs) {
    const float xf = float(v);
    const double ref = std::exp(double(xf));
    if (ref > std::numeric_limits<float>::max() || ref < std::numeric_limits<float>::min()) continue;
    const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
    worst = std::max(worst, std::abs(double(exp_cpu(xf)) - ref) / ulp);
  }
  INFO("worst error " << worst << " ulp");
  REQUIRE(worst <= 2.0);
}

TEST_CASE("exp_cpu for float overflows to inf, underflows to 0 and keeps NaN", "[exp][cpu]") {
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(exp_cpu(88.73f) == inf);
  REQUIRE(exp_cpu(1000.0f) == inf);
  REQUIRE(exp_cpu(inf) == inf);
  REQUIRE(exp_cpu(88.72f) < inf);
  REQUIRE(exp_cpu(-inf) == 0.0f);
  REQUIRE(exp_cpu(-110.0f) == 0.0f);
  // Subnormal results keep their magnitude (exp(-100) is about 3.7e-44).
  REQUIRE(exp_cpu(-100.0f) == Approx(std::exp(-100.0)).epsilon(0.05));
  REQUIRE(std::isnan(exp_cpu(std::numeric_limits<float>::quiet_NaN())));
}
