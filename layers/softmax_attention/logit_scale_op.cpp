// Checks, the CPU/CUDA branch and the tape record of the cosine-attention logit scale.
#include "layers/softmax_attention/logit_scale_op.h"

#if HYBRID_CUDA
#include "layers/softmax_attention/attention_cuda.h"
#endif

namespace hyb {

Tensor logit_scale_forward(const Tensor& theta, double max_scale, LogitScaleSaved* saved) {
  HYB_CHECK(theta.dim() == 1, "logit_scale: theta must be (Hq,), got ", shape_str(theta.shape()));
  HYB_CHECK(max_scale > 0, "logit_scale: max_scale must be > 0, got ", max_scale);
  check_dtype("logit_scale", theta, "theta", {DType::f32, DType::f64});
  Tensor tau;
#if HYBRID_CUDA
  if (theta.is_cuda()) tau = logit_scale_forward_cuda(theta, max_scale);
#endif
  if (!tau.defined()) tau = logit_scale_forward_cpu(theta, max_scale);
  if (saved) *saved = {theta, tau, max_scale};
  return tau;
}

Tensor logit_scale_backward(const LogitScaleSaved& s, const Tensor& dtau) {
  check_same_shape("logit_scale_backward", s.tau, dtau, "tau", "dtau");
#if HYBRID_CUDA
  if (dtau.is_cuda()) return logit_scale_backward_cuda(s.theta, s.tau, dtau, s.max_scale);
#endif
  return logit_scale_backward_cpu(s.theta, s.tau, dtau, s.max_scale);
}

Var logit_scale(const Var& theta, double max_scale) {
  const bool rec = will_record({theta});
  LogitScaleSaved s;
  Tensor tau = logit_scale_forward(theta.data(), max_scale, rec ? &s : nullptr);
  return record_op1(
      "logit_scale", {theta}, tau, [s](const Tensor& dtau, GradMask) { return Grads{logit_scale_backward(s, dtau)}; },
      {{"theta", s.theta}});
}

}  // namespace hyb
