// Checks, the device branch and the tape record of the gated RMSNorm.
#include "layers/norm/gated_rmsnorm_op.h"

namespace hyb {

namespace {

void check_gated_rmsnorm(const char* op, const Tensor& x, const Tensor& z, const Tensor& w) {
  check_same_shape(op, x, z, "x", "z");
  bool suffix = x.dim() >= 1 && w.dim() >= 1 && w.dim() <= x.dim();
  for (int64_t i = 1; suffix && i <= w.dim(); ++i) suffix = w.size(-i) == x.size(-i);
  HYB_CHECK(suffix, op, ": x is ", shape_str(x.shape()), " but weight is ", shape_str(w.shape()),
            "; weight's shape must be a suffix of x's, (Gs,) or (G, Gs)");
  HYB_CHECK(x.dtype() == z.dtype() && x.dtype() == w.dtype(), op, ": x, z and weight must share a dtype, got ",
            dtype_name(x.dtype()), ", ", dtype_name(z.dtype()), " and ", dtype_name(w.dtype()));
  check_same_device(op, x, z);
  check_same_device(op, x, w);
}

}  // namespace

Tensor gated_rmsnorm_forward(const Tensor& x, const Tensor& z, const Tensor& w, double eps, GatedNormOrder order,
                             GatedRmsNormSaved* saved) {
  check_gated_rmsnorm("gated_rmsnorm_forward", x, z, w);
  HYB_CHECK(eps > 0, "gated_rmsnorm_forward: eps must be > 0, got ", eps);
  Tensor rstd;
  Tensor y;
#if HYBRID_CUDA
  if (x.is_cuda()) y = gated_rmsnorm_forward_cuda(x, z, w, eps, order, saved ? &rstd : nullptr);
#endif
  if (!y.defined()) y = gated_rmsnorm_forward_cpu(x, z, w, eps, order, saved ? &rstd : nullptr);
  if (saved) *saved = {x, z, w, rstd, eps, order};
  return y;
}

GatedRmsNormGrads gated_rmsnorm_backward(const GatedRmsNormSaved& s, const Tensor& dy, GradMask needed) {
  check_gated_rmsnorm("gated_rmsnorm_backward", s.x, s.z, s.w);
  check_same_shape("gated_rmsnorm_backward", s.x, dy, "x", "dy");
  check_same_device("gated_rmsnorm_backward", s.x, dy);
#if HYBRID_CUDA
  if (dy.is_cuda()) return gated_rmsnorm_backward_cuda(s, dy, needed);
#endif
  return gated_rmsnorm_backward_cpu(s, dy, needed);
}

Var gated_rmsnorm(const Var& x, const Var& z, const Var& w, double eps, GatedNormOrder order) {
  const bool rec = will_record({x, z, w});
  GatedRmsNormSaved s;
  Tensor y = gated_rmsnorm_forward(x.data(), z.data(), w.data(), eps, order, rec ? &s : nullptr);
  return record_op1(
      "gated_rmsnorm", {x, z, w}, y,
      [s](const Tensor& dy, GradMask need) {
        GatedRmsNormGrads g = gated_rmsnorm_backward(s, dy, need);
        return Grads{g.dx, g.dz, g.dw};
      },
      {{"x", s.x}, {"z", s.z}, {"w", s.w}});
}

}  // namespace hyb
