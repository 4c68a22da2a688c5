// Pointwise activations, y = f(x) on any shape, and their hand-written backward (docs/ops.md):
//   silu(x)       = x s,  s = sigmoid(x)                          dx = dy s (1 + x (1 - s))
//   gelu(x)       = x Phi(x),  Phi(x) = erfc(-x/sqrt 2) / 2   (exact, PyTorch's default; pha.md 4.2)
//                                          dx = dy (Phi(x) + x phi(x)),  phi(x) = exp(-x^2/2) / sqrt(2 pi)
//   gelu_tanh(x)  = x/2 (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)    (GPT-2's approximation)
//                                          dx = dy (1/2 (1 + tanh u) + x/2 (1 - tanh^2 u) du/dx)
//   sigmoid(x)    = 1 / (1 + exp(-x))                              dx = dy y (1 - y)      (saves y)
//   softplus(x)   = log(1 + exp(x)), or x when x > 20 (PyTorch's threshold)   dx = dy sigmoid(x), dy above 20
//   logsigmoid(x) = min(x, 0) - log1p(exp(-|x|))                   dx = dy sigmoid(-x)
//   relu(x)       = max(x, 0)                                       dx = dy [x > 0]
//   exp(x)        (saves y: dx = dy y);  log(x): dx = dy / x;  neg(x) = -x
//   add_scalar(x, c) = x + c,  mul_scalar(x, c) = c x: both the affine map alpha x + beta.
// Example: Var h = silu(x);  Tensor p = unary_forward(UnaryOp::sigmoid, logits);
#pragma once
#include "autograd/tape.h"

namespace hyb {

enum class UnaryOp { silu, gelu, gelu_tanh, sigmoid, softplus, logsigmoid, exp, log, relu };

const char* unary_name(UnaryOp op);
// exp and sigmoid write their derivative in terms of the output, so they save y instead of x.
bool unary_saves_output(UnaryOp op);

struct UnarySaved {
  UnaryOp op;
  Tensor t;  // x's shape and dtype: the output y when unary_saves_output(op), else the input x
};

Tensor unary_forward(UnaryOp op, const Tensor& x);
Tensor unary_backward(const UnarySaved& s, const Tensor& dy);
// alpha x + beta in one pass: add_scalar, mul_scalar, neg and their backward.
Tensor affine_forward(const Tensor& x, double alpha, double beta);

Var silu(const Var& x);
Var gelu(const Var& x);
Var gelu_tanh(const Var& x);
Var sigmoid(const Var& x);
Var softplus(const Var& x);
Var logsigmoid(const Var& x);
Var relu(const Var& x);
Var exp(const Var& x);
Var log(const Var& x);
Var neg(const Var& x);
Var add_scalar(const Var& x, double c);
Var mul_scalar(const Var& x, double c);

// CPU reference (unary_cpu.cpp): f32 and f64; the CUDA side is declared in unary_cuda.h.
Tensor unary_forward_cpu(UnaryOp op, const Tensor& x);
Tensor unary_backward_cpu(const UnarySaved& s, const Tensor& dy);
Tensor affine_forward_cpu(const Tensor& x, double alpha, double beta);

}  // namespace hyb
