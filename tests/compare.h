// Relative error ||x - ref|| / ||ref|| for tests (golden files, parity, identities), in double on
// the host, whatever the dtypes and devices. A non-finite value in x gives NaN, so `err < tol`
// fails on it; a zero reference falls back to ||x - ref||. max_rel_error is the elementwise form,
// for claims about every element (small values included).
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "core/tensor.h"

namespace hyb {

inline double rel_error(const Tensor& x, const Tensor& ref) {
  HYB_CHECK(x.shape() == ref.shape(), "rel_error: x is ", shape_str(x.shape()), " but ref is ",
            shape_str(ref.shape()));
  std::vector<double> a = x.to_double_vector(), b = ref.to_double_vector();
  double dn = 0, rn = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return std::nan("");
    dn += (a[i] - b[i]) * (a[i] - b[i]);
    rn += b[i] * b[i];
  }
  return rn > 0 ? std::sqrt(dn / rn) : std::sqrt(dn);
}

// max_i |got_i - want_i| / (|want_i| + floor); infinity when the sizes differ or any value is not finite.
inline double max_rel_error(const std::vector<double>& got, const std::vector<double>& want, double floor = 1e-30) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(got[i] - want[i]) / (std::abs(want[i]) + floor));
  }
  return worst;
}

}  // namespace hyb
