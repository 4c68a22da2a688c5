// Differentiable dtype change: y = x converted to `dtype` (round to nearest even into bf16), and
// dx = dy converted back to x's dtype. The mixed-precision pattern: an f32 master weight, a bf16 copy
// for the compute, the gradient arriving back at the master in f32.
//   Var w16 = cast(w, DType::bf16);
// Floating dtypes only; casting to x's own dtype returns x (no node). The copy is Tensor::to, which
// every device implements, so there is no kernel here.
#pragma once
#include "autograd/tape.h"

namespace hyb {

Tensor cast_forward(const Tensor& x, DType dtype);
Tensor cast_backward(const Tensor& dy, DType x_dtype);
Var cast(const Var& x, DType dtype);

}  // namespace hyb
