// Linear: y = x W^T + b.  x (..., in), W (out, in), b (out,) or undefined; y (..., out).
// Backward: dx = dy W;  dW = dy_flat^T x_flat;  db = sum over rows of dy.
// x is saved only when dW is wanted, W only when dx is wanted (flashlight's habit).
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct LinearSaved {
  Tensor x;  // (..., in): for dW
  Tensor w;  // (out, in): for dx
  bool has_bias = false;
};

struct LinearGrads {
  Tensor dx, dw, db;
};

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b);
LinearGrads linear_backward(const LinearSaved& s, const Tensor& dy, bool need_dx, bool need_dw, bool need_db);
Var linear(const Var& x, const Var& w, const Var& b = Var());

// y (..., out) += b: broadcast over rows. db (out,) = column sums of dy (..., out).
void add_bias_(const Tensor& y, const Tensor& b);
Tensor bias_grad(const Tensor& dy);

}  // namespace hyb
