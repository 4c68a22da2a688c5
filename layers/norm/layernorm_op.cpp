#include "layers/norm/layernorm_op.h"

namespace hyb {

Tensor layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, LayerNormSaved* saved) {
  HYB_CHECK(w.dim() == 1 && b.dim() == 1 && x.dim() >= 1 && x.size(-1) == w.size(0) && x.size(-1) == b.size(0),
            "layernorm: x is ", shape_str(x.shape()), ", weight ", shape_str(w.shape()), " and bias ",
            shape_str(b.shape()), "; weight and bias must be (C,) with C = x's last dimension");
  HYB_CHECK(w.dtype() == b.dtype(), "layernorm: weight is ", dtype_name(w.dtype()), " but bias is ",
            dtype_name(b.dtype()), "; db is returned in weight's dtype");
  check_same_device("layernorm", x, w);
  check_same_device("layernorm", x, b);
  Tensor mean, rstd;
  Tensor y;
#if HYBRID_CUDA
  if (x.is_cuda()) y = layernorm_forward_cuda(x, w, b, eps, saved ? &mean : nullptr, saved ? &rstd : nullptr);
#endif
  if (!y.defined()) y = layernorm_forward_cpu(x, w, b, eps, saved ? &mean : nullptr, saved ? &rstd : nullptr);
  if (saved) *saved = {x, w, mean, rstd};
  return y;
}

LayerNormGrads layernorm_backward(const LayerNormSaved& s, const Tensor& dy, GradMask needed) {
  check_same_shape("layernorm_backward", s.x, dy, "x", "dy");
#if HYBRID_CUDA
  if (dy.is_cuda()) return layernorm_backward_cuda(s, dy, needed);
#endif
  return layernorm_backward_cpu(s, dy, needed);
}

Var layernorm(const Var& x, const Var& w, const Var& b, double eps) {
  const bool rec = will_record({x, w, b});
  LayerNormSaved s;
  Tensor y = layernorm_forward(x.data(), w.data(), b.data(), eps, rec ? &s : nullptr);
  return record_op1(
      "layernorm", {x, w, b}, y,
      [s](const Tensor& dy, GradMask need) {
        LayerNormGrads g = layernorm_backward(s, dy, need);
        return Grads{g.dx, g.dw, g.db};
      },
      {{"x", s.x}, {"w", s.w}});
}

}  // namespace hyb
