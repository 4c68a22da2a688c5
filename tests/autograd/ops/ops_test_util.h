// Helpers shared by the tests of the basic ops: a gradcheck that reports, and an elementwise
// comparison that fails on NaN or Inf instead of passing it.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/gradcheck.h"

namespace hyb::test {

// Finite differences in f64 against the op's backward; the preamble's bound is 1e-6.
inline void require_gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double tol = 1e-6) {
  GradcheckResult r = gradcheck(fn, inputs);
  INFO(r.report);
  REQUIRE(r.max_error < tol);
}

// max_i |got_i - want_i| / (|want_i| + floor); infinity when sizes differ or any value is not finite.
inline double max_rel_error(const std::vector<double>& got, const std::vector<double>& want, double floor = 1e-30) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(got[i] - want[i]) / (std::abs(want[i]) + floor));
  }
  return worst;
}

// Elementwise f over the values of t, in f64.
template <typename F>
std::vector<double> map_values(const Tensor& t, F f) {
  std::vector<double> v = t.to_double_vector();
  for (double& x : v) x = f(x);
  return v;
}

}  // namespace hyb::test
