// Elementwise a (op) b with numpy broadcasting (broadcast.h), and the backward, which sums each
// input's gradient over the dimensions it was broadcast along (sum_to_shape, reduce.h):
//   add: da = dy,      db = dy
//   sub: da = dy,      db = -dy
//   mul: da = dy b,    db = dy a
//   div: da = dy / b,  db = -dy a / b^2
// a and b share dtype (f32 or f64 on the CPU) and device.
//   Var y = add(x, bias);           // (B, T, C) + (C,)
//   Tensor q = binary_forward(BinaryOp::div, a, b);
#pragma once
#include "autograd/tape.h"

namespace hyb {

enum class BinaryOp { add, sub, mul, div };

const char* binary_name(BinaryOp op);

struct BinarySaved {
  BinaryOp op;
  Shape a_shape, b_shape;  // the inputs' shapes, targets of sum_to_shape
  Tensor a;                // a's shape; mul and div, only when db is wanted
  Tensor b;                // b's shape; mul when da is wanted, div whenever any gradient is
};

// Output shape is broadcast_shapes(a, b); errors name the op and both shapes.
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b);
std::pair<Tensor, Tensor> binary_backward(const BinarySaved& s, const Tensor& dy, GradMask needed);

Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);

// CPU reference (binary_cpu.cpp); the CUDA side is declared in binary_cuda.h. The backward pair
// returns the output-shaped gradients of mul and div before the reduction to the input shapes.
Tensor binary_forward_cpu(BinaryOp op, const Tensor& a, const Tensor& b);
std::pair<Tensor, Tensor> binary_backward_cpu(const BinarySaved& s, const Tensor& dy, GradMask needed);

}  // namespace hyb
