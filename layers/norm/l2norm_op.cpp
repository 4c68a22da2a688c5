// Checks, the CPU/CUDA branch and the tape record of the L2 normalization.
#include "layers/norm/l2norm_op.h"

namespace hyb {

Tensor l2norm_forward(const Tensor& x, double eps, L2NormEps mode, L2NormSaved* saved) {
  HYB_CHECK(x.dim() >= 1, "l2norm: x must have at least one dimension, got ", shape_str(x.shape()));
  HYB_CHECK(eps > 0, "l2norm: eps must be > 0, got ", eps);
  Tensor norm, y;
#if HYBRID_CUDA
  if (x.is_cuda()) y = l2norm_forward_cuda(x, eps, mode, saved ? &norm : nullptr);
#endif
  if (!y.defined()) y = l2norm_forward_cpu(x, eps, mode, saved ? &norm : nullptr);
  if (saved) *saved = {y, norm, eps, mode};
  return y;
}

Tensor l2norm_backward(const L2NormSaved& s, const Tensor& dy) {
  check_same_shape("l2norm_backward", s.y, dy, "y", "dy");
#if HYBRID_CUDA
  if (dy.is_cuda()) return l2norm_backward_cuda(s, dy);
#endif
  return l2norm_backward_cpu(s, dy);
}

Var l2norm(const Var& x, double eps, L2NormEps mode) {
  const bool rec = will_record({x});
  L2NormSaved s;
  Tensor y = l2norm_forward(x.data(), eps, mode, rec ? &s : nullptr);
  return record_op1("l2norm", {x}, y, [s](const Tensor& dy, GradMask) { return Grads{l2norm_backward(s, dy)}; });
}

}  // namespace hyb
