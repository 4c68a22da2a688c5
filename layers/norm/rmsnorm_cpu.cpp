// CPU reference of RMSNorm (rmsnorm_op.h has the equations). Row-parallel, accumulation in the
// statistics type A: f32 rows accumulate in double here, which is at least as accurate as the GPU.
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/norm/rmsnorm_op.h"

namespace hyb {

Tensor rmsnorm_forward_cpu(const Tensor& x0, const Tensor& w0, double eps, Tensor* rstd_out) {
  Tensor x = x0.contiguous(), w = w0.contiguous().to(x.dtype());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  Tensor rstd = Tensor::empty({rows}, x.dtype());
  visit_float("rmsnorm_forward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* wp = w.data<T>();
    T* yp = y.data<T>();
    T* rp = rstd.data<T>();
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = xp + r * C;
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += double(xr[c]) * double(xr[c]);
        const T rs = T(1.0 / std::sqrt(ss / double(C) + eps));
        rp[r] = rs;
        for (int64_t c = 0; c < C; ++c) yp[r * C + c] = wp[c] * (xr[c] * rs);
      }
    });
  });
  if (rstd_out) *rstd_out = rstd;
  return y;
}

RmsNormGrads rmsnorm_backward_cpu(const RmsNormSaved& s, const Tensor& dy0, GradMask needed) {
  Tensor x = s.x.contiguous(), dy = dy0.contiguous(), w = s.w.contiguous().to(x.dtype());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  RmsNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype());
  Tensor dw_rows;  // per-thread partial sums of dy * xhat, reduced at the end (deterministic)
  const int nt = num_threads();
  if (needed[1]) dw_rows = Tensor::zeros({nt, C}, DType::f64);
  visit_float("rmsnorm_backward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* gp = dy.data<T>();
    const T* wp = w.data<T>();
    const T* rp = s.rstd.contiguous().data<T>();
    T* dxp = needed[0] ? g.dx.data<T>() : nullptr;
    double* dwp = needed[1] ? dw_rows.data<double>() : nullptr;
    parallel_for(nt, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
        for (int64_t r = lo; r < hi; ++r) {
          const T* xr = xp + r * C;
          const T* gr = gp + r * C;
          const double rs = double(rp[r]);
          if (dxp) {
            double m = 0;  // mean over the row of (dy * w) * xhat
            for (int64_t c = 0; c < C; ++c) m += double(gr[c]) * double(wp[c]) * double(xr[c]) * rs;
            m /= double(C);
            for (int64_t c = 0; c < C; ++c)
              dxp[r * C + c] = T(rs * (double(gr[c]) * double(wp[c]) - double(xr[c]) * rs * m));
          }
          if (dwp)
            for (int64_t c = 0; c < C; ++c) dwp[t * C + c] += double(gr[c]) * double(xr[c]) * rs;
        }
      }
    });
  });
  if (needed[1]) {
    Tensor dw = Tensor::zeros({C}, DType::f64);
    double* out = dw.data<double>();
    const double* part = dw_rows.data<double>();
    for (int t = 0; t < nt; ++t)
      for (int64_t c = 0; c < C; ++c) out[c] += part[t * C + c];
    g.dw = dw.to(s.w.dtype());
  }
  return g;
}

}  // namespace hyb
