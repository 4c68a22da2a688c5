// CPU reference of the per-head decay (ssm_decay_op.h has the equations). Element-parallel for
// dt, g and dx; the per-head sums of ddt_bias and dA_log run over the rows in order, one task per
// head, so they do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/ssm_decay/ssm_decay_op.h"

namespace hyb {

namespace {

constexpr double kSoftplusThreshold = 20.0;  // identity above, as the references' softplus

double softplus(double z) { return z > kSoftplusThreshold ? z : std::log1p(std::exp(z)); }
double softplus_slope(double z) { return z > kSoftplusThreshold ? 1.0 : 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

SsmDecayOutputs ssm_decay_forward_cpu(const Tensor& x0, const Tensor& dt_bias0, const Tensor& A_log0, double lo,
                                      double hi) {
  const Tensor x = x0.contiguous(), bias = dt_bias0.contiguous(), A_log = A_log0.contiguous();
  const int64_t H = x.size(-1), n = x.numel();
  SsmDecayOutputs r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(x.shape(), x.dtype())};
  visit_float("ssm_decay_forward", x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E *xp = x.data<E>(), *bp = bias.data<E>(), *ap = A_log.data<E>();
    E *dtp = r.dt.data<E>(), *gp = r.g.data<E>();
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t h = i % H;
        const double dt = std::clamp(softplus(double(xp[i]) + double(bp[h])), lo, hi);
        dtp[i] = E(dt);
        gp[i] = E(-std::exp(double(ap[h])) * dt);
      }
    });
  });
  return r;
}

SsmDecayGrads ssm_decay_backward_cpu(const SsmDecaySaved& s, const Tensor& ddt0, const Tensor& dg0, GradMask needed) {
  const Tensor x = s.x.contiguous(), bias = s.dt_bias.contiguous(), A_log = s.A_log.contiguous(), g = s.g.contiguous();
  const Tensor ddt = ddt0.defined() ? ddt0.contiguous() : Tensor(), dg = dg0.defined() ? dg0.contiguous() : Tensor();
  const int64_t H = x.size(-1), n = x.numel(), rows = n / std::max<int64_t>(H, 1);
  const DType dtype = x.dtype();
  SsmDecayGrads out;
  // dzz is dx itself; it is also what ddt_bias sums, so it is formed whenever either is wanted.
  Tensor dzz = Tensor::empty(x.shape(), dtype);
  visit_float("ssm_decay_backward", dtype, [&](auto tag) {
    using E = decltype(tag);
    const E *xp = x.data<E>(), *bp = bias.data<E>(), *ap = A_log.data<E>(), *gp = g.data<E>();
    const E* ddtp = ddt.defined() ? ddt.data<E>() : nullptr;
    const E* dgp = dg.defined() ? dg.data<E>() : nullptr;
    E* dzp = dzz.data<E>();
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t h = i % H;
        const double zz = double(xp[i]) + double(bp[h]), sp = softplus(zz);
        // g = A dt, so dg reaches dt as A dg; the clamp passes no gradient where it is active.
        double d = (ddtp ? double(ddtp[i]) : 0.0) + (dgp ? -std::exp(double(ap[h])) * double(dgp[i]) : 0.0);
        d *= (sp >= s.lo && sp <= s.hi) ? softplus_slope(zz) : 0.0;
        dzp[i] = E(d);
      }
    });
    if (needed[1] || needed[2]) {
      std::vector<double> db(size_t(H), 0.0), da(size_t(H), 0.0);
      parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t r = 0; r < rows; ++r) {
            db[size_t(h)] += double(dzp[r * H + h]);
            if (dgp) da[size_t(h)] += double(dgp[r * H + h]) * double(gp[r * H + h]);
          }
      });
      if (needed[1]) out.ddt_bias = Tensor::from_vector<double>(db, {H}).to(dtype);
      if (needed[2]) out.dA_log = Tensor::from_vector<double>(da, {H}).to(dtype);
    }
  });
  if (needed[0]) out.dx = dzz;
  return out;
}

}  // namespace hyb
