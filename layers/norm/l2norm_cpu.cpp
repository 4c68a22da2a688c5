// CPU reference of the L2 normalization (l2norm_op.h has the equations). Row-parallel; each row's
// sums are accumulated in double.
#include <algorithm>
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/norm/l2norm_op.h"

namespace hyb {

Tensor l2norm_forward_cpu(const Tensor& x0, double eps, L2NormEps mode, Tensor* norm_out) {
  Tensor x = x0.contiguous();
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  Tensor norm = Tensor::empty({rows}, x.dtype());
  visit_float("l2norm_forward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    T* np = norm.data<T>();
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += double(xp[r * C + c]) * double(xp[r * C + c]);
        const double n = mode == L2NormEps::clamp ? std::max(std::sqrt(ss), eps) : std::sqrt(ss + eps);
        np[r] = T(n);
        for (int64_t c = 0; c < C; ++c) yp[r * C + c] = T(double(xp[r * C + c]) / n);
      }
    });
  });
  if (norm_out) *norm_out = norm;
  return y;
}

Tensor l2norm_backward_cpu(const L2NormSaved& s, const Tensor& dy0) {
  Tensor y = s.y.contiguous(), dy = dy0.contiguous(), norm = s.norm.contiguous();
  const int64_t C = y.size(-1), rows = y.numel() / std::max<int64_t>(C, 1);
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  visit_float("l2norm_backward", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* yp = y.data<T>();
    const T* gp = dy.data<T>();
    const T* np = norm.data<T>();
    T* dxp = dx.data<T>();
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const double n = double(np[r]);
        // A clamped row divides by the constant eps, so the projection term vanishes.
        const bool clamped = s.mode == L2NormEps::clamp && np[r] <= T(s.eps);
        double ydy = 0;
        if (!clamped)
          for (int64_t c = 0; c < C; ++c) ydy += double(yp[r * C + c]) * double(gp[r * C + c]);
        for (int64_t c = 0; c < C; ++c)
          dxp[r * C + c] = T((double(gp[r * C + c]) - double(yp[r * C + c]) * ydy) / n);
      }
    });
  });
  return dx;
}

}  // namespace hyb
