// CPU reference of LayerNorm (layernorm_op.h has the equations). Row-parallel; each row's mean and
// variance in two passes in double (the direct formula: no cancellation of E[x^2] - mean^2 when
// |mean| >> std), stored in the input's dtype, and the forward normalises with the stored values so
// that the backward's xhat is exactly the forward's.
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/norm/layernorm_op.h"

namespace hyb {

Tensor layernorm_forward_cpu(const Tensor& x0, const Tensor& w0, const Tensor& b0, double eps, Tensor* mean_out,
                             Tensor* rstd_out) {
  Tensor x = x0.contiguous(), w = w0.contiguous().to(x.dtype()), b = b0.contiguous().to(x.dtype());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  Tensor mean = Tensor::empty({rows}, x.dtype()), rstd = Tensor::empty({rows}, x.dtype());
  visit_float("layernorm_forward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* wp = w.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    T* mp = mean.data<T>();
    T* rp = rstd.data<T>();
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = xp + r * C;
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += double(xr[c]);
        const double mu = s / double(C);
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += (double(xr[c]) - mu) * (double(xr[c]) - mu);
        mp[r] = T(mu);
        rp[r] = T(1.0 / std::sqrt(ss / double(C) + eps));
        const double m = double(mp[r]), rs = double(rp[r]);
        for (int64_t c = 0; c < C; ++c) yp[r * C + c] = T(double(wp[c]) * ((double(xr[c]) - m) * rs) + double(bp[c]));
      }
    });
  });
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
  return y;
}

LayerNormGrads layernorm_backward_cpu(const LayerNormSaved& s, const Tensor& dy0, GradMask needed) {
  Tensor x = s.x.contiguous(), dy = dy0.contiguous(), w = s.w.contiguous().to(x.dtype());
  const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  LayerNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype());
  // Per-thread partial sums of dy * xhat and dy over a fixed split of the rows, added in thread order
  // at the end: the result does not depend on scheduling.
  const int nt = num_threads();
  Tensor dw_rows, db_rows;
  if (needed[1]) dw_rows = Tensor::zeros({nt, C}, DType::f64);
  if (needed[2]) db_rows = Tensor::zeros({nt, C}, DType::f64);
  visit_float("layernorm_backward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* gp = dy.data<T>();
    const T* wp = w.data<T>();
    const T* mp = s.mean.contiguous().data<T>();
    const T* rp = s.rstd.contiguous().data<T>();
    T* dxp = needed[0] ? g.dx.data<T>() : nullptr;
    double* dwp = needed[1] ? dw_rows.data<double>() : nullptr;
    double* dbp = needed[2] ? db_rows.data<double>() : nullptr;
    parallel_for(nt, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
        for (int64_t r = lo; r < hi; ++r) {
          const T* xr = xp + r * C;
          const T* gr = gp + r * C;
          const double mu = double(mp[r]), rs = double(rp[r]);
          if (dxp) {
            double mg = 0, mgx = 0;  // mean(g) and mean(g * xhat), g = dy * w
            for (int64_t c = 0; c < C; ++c) {
              const double gw = double(gr[c]) * double(wp[c]);
              mg += gw;
              mgx += gw * (double(xr[c]) - mu) * rs;
            }
            mg /= double(C);
            mgx /= double(C);
            for (int64_t c = 0; c < C; ++c) {
              const double xhat = (double(xr[c]) - mu) * rs;
              dxp[r * C + c] = T(rs * (double(gr[c]) * double(wp[c]) - mg - xhat * mgx));
            }
          }
          if (dwp)
            for (int64_t c = 0; c < C; ++c) dwp[t * C + c] += double(gr[c]) * (double(xr[c]) - mu) * rs;
          if (dbp)
            for (int64_t c = 0; c < C; ++c) dbp[t * C + c] += double(gr[c]);
        }
      }
    });
  });
  auto reduce_rows = [&](const Tensor& part_rows) {
    Tensor out = Tensor::zeros({C}, DType::f64);
    double* o = out.data<double>();
    const double* part = part_rows.data<double>();
    for (int t = 0; t < nt; ++t)
      for (int64_t c = 0; c < C; ++c) o[c] += part[t * C + c];
    return out.to(s.w.dtype());
  };
  if (needed[1]) g.dw = reduce_rows(dw_rows);
  if (needed[2]) g.db = reduce_rows(db_rows);
  return g;
}

}  // namespace hyb
