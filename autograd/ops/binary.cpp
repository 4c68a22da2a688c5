#include "autograd/ops/binary.h"

#include "autograd/ops/broadcast.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/unary.h"
#if HYBRID_CUDA
#include "autograd/ops/binary_cuda.h"
#endif

namespace hyb {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
  }
  HYB_ASSERT(false, "bad BinaryOp");
}

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  HYB_CHECK(a.defined() && b.defined(), name, ": undefined input");
  broadcast_shapes(name, a.shape(), b.shape());
  HYB_CHECK(a.dtype() == b.dtype(), name, ": a ", shape_str(a.shape()), " is ", dtype_name(a.dtype()), " but b ",
            shape_str(b.shape()), " is ", dtype_name(b.dtype()), "; cast one side first");
  check_same_device(name, a, b);
#if HYBRID_CUDA
  if (a.is_cuda()) return binary_forward_cuda(op, a, b);
#endif
  return binary_forward_cpu(op, a, b);
}

// The output-shaped gradients of mul and div, before the reduction to the input shapes.
static std::pair<Tensor, Tensor> binary_backward_full(const BinarySaved& s, const Tensor& dy, GradMask needed) {
#if HYBRID_CUDA
  if (dy.is_cuda()) return binary_backward_cuda(s, dy, needed);
#endif
  return binary_backward_cpu(s, dy, needed);
}

std::pair<Tensor, Tensor> binary_backward(const BinarySaved& s, const Tensor& dy, GradMask needed) {
  const char* name = binary_name(s.op);
  HYB_CHECK(dy.shape() == broadcast_shapes(name, s.a_shape, s.b_shape), name, ": backward got dy ",
            shape_str(dy.shape()), " for inputs ", shape_str(s.a_shape), " and ", shape_str(s.b_shape));
  Tensor da, db;
  if (s.op == BinaryOp::add || s.op == BinaryOp::sub) {
    if (needed[0]) da = sum_to_shape(dy, s.a_shape);
    if (needed[1]) db = sum_to_shape(dy, s.b_shape);
    if (needed[1] && s.op == BinaryOp::sub) db = affine_forward(db, -1.0, 0.0);
    return {da, db};
  }
  auto [da_full, db_full] = binary_backward_full(s, dy, needed);
  if (needed[0]) da = sum_to_shape(da_full, s.a_shape);
  if (needed[1]) db = sum_to_shape(db_full, s.b_shape);
  return {da, db};
}

namespace {

Var binary(BinaryOp op, const Var& a, const Var& b) {
  Tensor y = binary_forward(op, a.data(), b.data());
  BinarySaved s{op, a.shape(), b.shape(), Tensor(), Tensor()};
  // Save only what a wanted gradient reads (binary.h lists which).
  if (op == BinaryOp::mul) {
    if (b.requires_grad()) s.a = a.data();
    if (a.requires_grad()) s.b = b.data();
  } else if (op == BinaryOp::div) {
    if (b.requires_grad()) s.a = a.data();
    s.b = b.data();
  }
  return record_op1(
      binary_name(op), {a, b}, y,
      [s](const Tensor& dy, GradMask need) {
        auto [da, db] = binary_backward(s, dy, need);
        return Grads{da, db};
      },
      {{"a", s.a}, {"b", s.b}});
}

}  // namespace

Var add(const Var& a, const Var& b) { return binary(BinaryOp::add, a, b); }
Var sub(const Var& a, const Var& b) { return binary(BinaryOp::sub, a, b); }
Var mul(const Var& a, const Var& b) { return binary(BinaryOp::mul, a, b); }
Var div(const Var& a, const Var& b) { return binary(BinaryOp::div, a, b); }

}  // namespace hyb
