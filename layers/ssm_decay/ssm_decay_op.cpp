// Checks, the device branch and the tape record of the per-head decay.
#include "layers/ssm_decay/ssm_decay_op.h"

namespace hyb {

namespace {

void check_ssm_decay(const char* op, const Tensor& x, const Tensor& dt_bias, const Tensor& A_log) {
  HYB_CHECK(x.dim() >= 1 && dt_bias.dim() == 1 && A_log.dim() == 1 && dt_bias.size(0) == x.size(-1) &&
                A_log.size(0) == x.size(-1),
            op, ": x is ", shape_str(x.shape()), ", dt_bias ", shape_str(dt_bias.shape()), " and A_log ",
            shape_str(A_log.shape()), "; dt_bias and A_log must be (H,) with H = x's last dimension");
  HYB_CHECK(x.dtype() == dt_bias.dtype() && x.dtype() == A_log.dtype(), op,
            ": x, dt_bias and A_log must share a dtype (the decay is computed in the parameters' f32), got ",
            dtype_name(x.dtype()), ", ", dtype_name(dt_bias.dtype()), " and ", dtype_name(A_log.dtype()));
  check_same_device(op, x, dt_bias);
  check_same_device(op, x, A_log);
}

}  // namespace

SsmDecayOutputs ssm_decay_forward(const Tensor& x, const Tensor& dt_bias, const Tensor& A_log, double lo, double hi,
                                  SsmDecaySaved* saved) {
  check_ssm_decay("ssm_decay_forward", x, dt_bias, A_log);
  HYB_CHECK(lo >= 0 && lo <= hi, "ssm_decay_forward: the dt clamp must satisfy 0 <= lo <= hi, got [", lo, ", ", hi, "]");
  SsmDecayOutputs r;
#if HYBRID_CUDA
  if (x.is_cuda()) r = ssm_decay_forward_cuda(x, dt_bias, A_log, lo, hi);
#endif
  if (!r.dt.defined()) r = ssm_decay_forward_cpu(x, dt_bias, A_log, lo, hi);
  if (saved) *saved = {x, dt_bias, A_log, r.g, lo, hi};
  return r;
}

SsmDecayGrads ssm_decay_backward(const SsmDecaySaved& s, const Tensor& ddt, const Tensor& dg, GradMask needed) {
  check_ssm_decay("ssm_decay_backward", s.x, s.dt_bias, s.A_log);
  if (ddt.defined()) check_same_shape("ssm_decay_backward", s.x, ddt, "x", "ddt");
  if (dg.defined()) check_same_shape("ssm_decay_backward", s.x, dg, "x", "dg");
  for (const Tensor* t : {&ddt, &dg})
    if (t->defined()) check_same_device("ssm_decay_backward", s.x, *t);
#if HYBRID_CUDA
  if (s.x.is_cuda()) return ssm_decay_backward_cuda(s, ddt, dg, needed);
#endif
  return ssm_decay_backward_cpu(s, ddt, dg, needed);
}

SsmDecayVars ssm_decay(const Var& x, const Var& dt_bias, const Var& A_log, double lo, double hi) {
  const bool rec = will_record({x, dt_bias, A_log});
  SsmDecaySaved s;
  SsmDecayOutputs r = ssm_decay_forward(x.data(), dt_bias.data(), A_log.data(), lo, hi, rec ? &s : nullptr);
  std::vector<Var> out = record_op(
      "ssm_decay", {x, dt_bias, A_log}, {r.dt, r.g},
      [s](const Grads& douts, GradMask need) {
        SsmDecayGrads g = ssm_decay_backward(s, douts[0], douts[1], need);
        return Grads{g.dx, g.ddt_bias, g.dA_log};
      },
      {{"x", s.x}, {"dt_bias", s.dt_bias}, {"A_log", s.A_log}});
  return {out[0], out[1]};
}

}  // namespace hyb
