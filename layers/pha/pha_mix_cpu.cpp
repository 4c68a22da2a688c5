// CPU reference of PHA's mixing (pha_mix_op.h has the equations). The branch reductions g_i are
// accumulated in double, per thread over fixed row ranges, then added in thread order.
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/pha/pha_mix_op.h"

namespace hyb {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

Tensor pha_mix_forward_cpu(const std::vector<Tensor>& n0, const Tensor& p) {
  const std::vector<double> w = pha_mix_weights(p);
  std::vector<Tensor> n;
  for (const Tensor& t : n0) n.push_back(t.contiguous());
  Tensor m = Tensor::empty(n[0].shape(), n[0].dtype());
  const int64_t N = m.numel();
  const int k = int(n.size());
  visit_float("pha_mix_forward", m.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* mp = m.data<T>();
    parallel_for(N, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t e = lo; e < hi; ++e) {
        double acc = 0;
        for (int i = 0; i < k; ++i) acc += w[size_t(i)] * double(n[size_t(i)].data<T>()[e]);
        mp[e] = T(acc);
      }
    });
  });
  return m;
}

PhaMixGrads pha_mix_backward_cpu(const PhaMixSaved& s, const Tensor& dm0, GradMask needed) {
  const std::vector<double> w = pha_mix_weights(s.p);
  const int k = int(s.n.size());
  const Tensor dm = dm0.contiguous();
  const int64_t N = dm.numel();
  PhaMixGrads g;
  g.dn.resize(size_t(k));
  const bool need_p = needed[size_t(k)];
  const int nt = num_threads();
  std::vector<double> partial(size_t(nt * k), 0.0);
  visit_float("pha_mix_backward", dm.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* gp = dm.data<T>();
    for (int i = 0; i < k; ++i) {
      if (!needed[size_t(i)]) continue;
      g.dn[size_t(i)] = Tensor::empty(dm.shape(), dm.dtype());
      T* dp = g.dn[size_t(i)].data<T>();
      parallel_for(N, 4096, [&](int64_t lo, int64_t hi) {
        for (int64_t e = lo; e < hi; ++e) dp[e] = T(w[size_t(i)] * double(gp[e]));
      });
    }
    if (!need_p) return;
    std::vector<Tensor> n;
    for (const Tensor& t : s.n) n.push_back(t.contiguous());
    parallel_for(nt, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int i = 0; i < k; ++i) {
          const T* np = n[size_t(i)].data<T>();
          double acc = 0;
          for (int64_t e = N * t / nt; e < N * (t + 1) / nt; ++e) acc += double(gp[e]) * double(np[e]);
          partial[size_t(t * k + i)] = acc;
        }
    });
  });
  if (!need_p) return g;
  std::vector<double> gi(size_t(k), 0.0);
  for (int t = 0; t < nt; ++t)
    for (int i = 0; i < k; ++i) gi[size_t(i)] += partial[size_t(t * k + i)];
  const Tensor ph = s.p.to(DType::f64).contiguous();
  double S = 0, gbar = 0;
  for (int i = 0; i < k; ++i) {
    const double x = ph.data<double>()[i];
    S += std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
    gbar += w[size_t(i)] * gi[size_t(i)];
  }
  Tensor dp = Tensor::empty({k}, DType::f64);
  for (int i = 0; i < k; ++i) dp.data<double>()[i] = sigmoid(ph.data<double>()[i]) * (gi[size_t(i)] - gbar) / S;
  g.dp = dp.to(s.p.dtype());
  return g;
}

}  // namespace hyb
