#include "layers/norm/rmsnorm_op.h"

namespace hyb {

Tensor rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, RmsNormSaved* saved) {
  HYB_CHECK(w.dim() == 1 && x.dim() >= 1 && x.size(-1) == w.size(0), "rmsnorm: x is ", shape_str(x.shape()),
            " but weight is ", shape_str(w.shape()), "; weight must be (C,) with C = x's last dimension");
  check_same_device("rmsnorm", x, w);
  Tensor rstd;
  Tensor y;
#if HYBRID_CUDA
  if (x.is_cuda()) y = rmsnorm_forward_cuda(x, w, eps, saved ? &rstd : nullptr);
#endif
  if (!y.defined()) y = rmsnorm_forward_cpu(x, w, eps, saved ? &rstd : nullptr);
  if (saved) *saved = {x, w, rstd};
  return y;
}

RmsNormGrads rmsnorm_backward(const RmsNormSaved& s, const Tensor& dy, GradMask needed) {
  check_same_shape("rmsnorm_backward", s.x, dy, "x", "dy");
#if HYBRID_CUDA
  if (dy.is_cuda()) return rmsnorm_backward_cuda(s, dy, needed);
#endif
  return rmsnorm_backward_cpu(s, dy, needed);
}

Var rmsnorm(const Var& x, const Var& w, double eps) {
  const bool rec = will_record({x, w});
  RmsNormSaved s;
  Tensor y = rmsnorm_forward(x.data(), w.data(), eps, rec ? &s : nullptr);
  return record_op1(
      "rmsnorm", {x, w}, y,
      [s](const Tensor& dy, GradMask need) {
        RmsNormGrads g = rmsnorm_backward(s, dy, need);
        return Grads{g.dx, g.dw};
      },
      {{"x", s.x}, {"w", s.w}});
}

}  // namespace hyb
