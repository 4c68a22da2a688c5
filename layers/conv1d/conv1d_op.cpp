// Checks, the device branch and the tape record of the causal depthwise conv + SiLU.
#include "layers/conv1d/conv1d_op.h"

#include <algorithm>

namespace hyb {

namespace {

void check_conv1d(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& x0) {
  HYB_CHECK(x.dim() == 3 && w.dim() == 2 && w.size(0) == x.size(2) && w.size(1) >= 1, op, ": x is ",
            shape_str(x.shape()), " and w is ", shape_str(w.shape()), "; expected x (B, T, C) and w (C, W) with C = ",
            x.dim() == 3 ? x.size(2) : -1);
  HYB_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == x.size(2)), op, ": bias is ",
            shape_str(bias.shape()), " but x is ", shape_str(x.shape()), "; bias must be (C,)");
  const int64_t W = w.size(1);
  HYB_CHECK(!x0.defined() || (x0.dim() == 3 && x0.size(0) == x.size(0) && x0.size(1) == W - 1 && x0.size(2) == x.size(2)),
            op, ": the initial state x0 is ", shape_str(x0.shape()), " but x is ", shape_str(x.shape()), " and w is ",
            shape_str(w.shape()), "; x0 must be (B, W-1, C) = (", x.size(0), ", ", W - 1, ", ", x.size(2), ")");
  for (const Tensor* t : {&w, &bias, &x0}) {
    if (!t->defined()) continue;
    HYB_CHECK(t->dtype() == x.dtype(), op, ": every input must have x's dtype ", dtype_name(x.dtype()), ", got ",
              dtype_name(t->dtype()));
    check_same_device(op, x, *t);
  }
}

}  // namespace

Tensor causal_conv1d_silu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& x0,
                                  Conv1dSaved* saved) {
  check_conv1d("causal_conv1d_silu_forward", x, w, bias, x0);
  Tensor y;
#if HYBRID_CUDA
  if (x.is_cuda()) y = causal_conv1d_silu_forward_cuda(x, w, bias, x0);
#endif
  if (!y.defined()) y = causal_conv1d_silu_forward_cpu(x, w, bias, x0);
  if (saved) *saved = {x, w, bias, x0};
  return y;
}

Conv1dGrads causal_conv1d_silu_backward(const Conv1dSaved& s, const Tensor& dy, GradMask needed) {
  check_conv1d("causal_conv1d_silu_backward", s.x, s.w, s.bias, s.x0);
  check_same_shape("causal_conv1d_silu_backward", s.x, dy, "x", "dy");
  check_same_device("causal_conv1d_silu_backward", s.x, dy);
#if HYBRID_CUDA
  if (dy.is_cuda()) return causal_conv1d_silu_backward_cuda(s, dy, needed);
#endif
  return causal_conv1d_silu_backward_cpu(s, dy, needed);
}

Var causal_conv1d_silu(const Var& x, const Var& w, const Var& bias, const Var& x0) {
  const bool rec = will_record({x, w, bias, x0});
  Conv1dSaved s;
  Tensor y = causal_conv1d_silu_forward(x.data(), w.data(), bias.defined() ? bias.data() : Tensor(),
                                        x0.defined() ? x0.data() : Tensor(), rec ? &s : nullptr);
  return record_op1(
      "causal_conv1d_silu", {x, w, bias, x0}, y,
      [s](const Tensor& dy, GradMask need) {
        Conv1dGrads g = causal_conv1d_silu_backward(s, dy, need);
        return Grads{g.dx, g.dw, g.dbias, g.dx0};
      },
      {{"x", s.x}, {"w", s.w}, {"bias", s.bias}, {"x0", s.x0}});
}

Tensor conv1d_next_state(const Tensor& x0, const Tensor& x, int64_t W) {
  HYB_CHECK(x.dim() == 3 && W >= 1, "conv1d_next_state: x must be (B, T, C) and W >= 1, got x ", shape_str(x.shape()),
            " and W = ", W);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), keep = W - 1;
  Tensor next = Tensor::zeros({B, keep, C}, x.dtype(), x.device());
  // Rows of the new state that still come from the old one, then the newest rows of x.
  const int64_t from_x = std::min(T, keep), from_old = keep - from_x;
  if (from_old > 0 && x0.defined()) next.narrow(1, 0, from_old).copy_(x0.narrow(1, keep - from_old, from_old));
  if (from_x > 0) next.narrow(1, from_old, from_x).copy_(x.narrow(1, T - from_x, from_x));
  return next;
}

}  // namespace hyb
