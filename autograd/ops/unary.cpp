#include "autograd/ops/unary.h"

#if HYBRID_CUDA
#include "autograd/ops/unary_cuda.h"
#endif

namespace hyb {

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::silu: return "silu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::gelu_tanh: return "gelu_tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::softplus: return "softplus";
    case UnaryOp::logsigmoid: return "logsigmoid";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::relu: return "relu";
  }
  HYB_ASSERT(false, "bad UnaryOp");
}

bool unary_saves_output(UnaryOp op) { return op == UnaryOp::exp || op == UnaryOp::sigmoid; }

Tensor unary_forward(UnaryOp op, const Tensor& x) {
  HYB_CHECK(x.defined(), unary_name(op), ": undefined input");
#if HYBRID_CUDA
  if (x.is_cuda()) return unary_forward_cuda(op, x);
#endif
  return unary_forward_cpu(op, x);
}

Tensor unary_backward(const UnarySaved& s, const Tensor& dy) {
  check_same_shape(unary_name(s.op), s.t, dy, unary_saves_output(s.op) ? "y" : "x", "dy");
  HYB_CHECK(s.t.dtype() == dy.dtype(), unary_name(s.op), ": backward got dy of dtype ", dtype_name(dy.dtype()),
            " for a ", dtype_name(s.t.dtype()), " op");
  check_same_device(unary_name(s.op), s.t, dy);
#if HYBRID_CUDA
  if (dy.is_cuda()) return unary_backward_cuda(s, dy);
#endif
  return unary_backward_cpu(s, dy);
}

Tensor affine_forward(const Tensor& x, double alpha, double beta) {
  HYB_CHECK(x.defined(), "affine: undefined input");
#if HYBRID_CUDA
  if (x.is_cuda()) return affine_forward_cuda(x, alpha, beta);
#endif
  return affine_forward_cpu(x, alpha, beta);
}

namespace {

Var unary(UnaryOp op, const Var& x) {
  Tensor y = unary_forward(op, x.data());
  UnarySaved s{op, unary_saves_output(op) ? y : x.data()};
  return record_op1(
      unary_name(op), {x}, y, [s](const Tensor& dy, GradMask) { return Grads{unary_backward(s, dy)}; },
      {{unary_saves_output(op) ? "y" : "x", s.t}});
}

// y = alpha x + beta; nothing saved, dx = alpha dy.
Var affine(const char* op, const Var& x, double alpha, double beta) {
  return record_op1(op, {x}, affine_forward(x.data(), alpha, beta),
                    [alpha](const Tensor& dy, GradMask) { return Grads{affine_forward(dy, alpha, 0.0)}; });
}

}  // namespace

Var silu(const Var& x) { return unary(UnaryOp::silu, x); }
Var gelu(const Var& x) { return unary(UnaryOp::gelu, x); }
Var gelu_tanh(const Var& x) { return unary(UnaryOp::gelu_tanh, x); }
Var sigmoid(const Var& x) { return unary(UnaryOp::sigmoid, x); }
Var softplus(const Var& x) { return unary(UnaryOp::softplus, x); }
Var logsigmoid(const Var& x) { return unary(UnaryOp::logsigmoid, x); }
Var relu(const Var& x) { return unary(UnaryOp::relu, x); }
Var exp(const Var& x) { return unary(UnaryOp::exp, x); }
Var log(const Var& x) { return unary(UnaryOp::log, x); }
Var neg(const Var& x) { return affine("neg", x, -1.0, 0.0); }
Var add_scalar(const Var& x, double c) { return affine("add_scalar", x, 1.0, c); }
Var mul_scalar(const Var& x, double c) { return affine("mul_scalar", x, c, 0.0); }

}  // namespace hyb
