// Relative error ||x - ref|| / ||ref|| for tests (golden files, parity, identities), in double on
// the host, whatever the dtypes and devices. A non-finite value in x gives NaN, so `err < tol`
// fails on it; a zero reference falls back to ||x - ref||.
#pragma once
#include <cmath>

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

}  // namespace hyb
