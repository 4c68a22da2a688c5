// CPU reference of the cosine-attention logit scale (logit_scale_op.h has the equations).
#include <algorithm>
#include <cmath>

#include "core/dispatch.h"
#include "layers/softmax_attention/logit_scale_op.h"

namespace hyb {

Tensor logit_scale_forward_cpu(const Tensor& theta0, double max_scale) {
  Tensor theta = theta0.contiguous();
  Tensor tau = Tensor::empty(theta.shape(), theta.dtype());
  const double cap = std::log(max_scale);
  visit_float("logit_scale_forward", theta.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* th = theta.data<T>();
    T* out = tau.data<T>();
    for (int64_t h = 0; h < theta.numel(); ++h) out[h] = T(std::exp(std::min(double(th[h]), cap)));
  });
  return tau;
}

Tensor logit_scale_backward_cpu(const Tensor& theta0, const Tensor& tau0, const Tensor& dtau0, double max_scale) {
  Tensor theta = theta0.contiguous(), tau = tau0.contiguous(), dtau = dtau0.to(theta.dtype()).contiguous();
  Tensor dtheta = Tensor::empty(theta.shape(), theta.dtype());
  const double cap = std::log(max_scale);
  visit_float("logit_scale_backward", theta.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* th = theta.data<T>();
    const T* ta = tau.data<T>();
    const T* dt = dtau.data<T>();
    T* out = dtheta.data<T>();
    // Above the clamp tau no longer depends on theta: the gradient is exactly zero there.
    for (int64_t h = 0; h < theta.numel(); ++h) out[h] = double(th[h]) <= cap ? T(dt[h] * ta[h]) : T(0);
  });
  return dtheta;
}

}  // namespace hyb
