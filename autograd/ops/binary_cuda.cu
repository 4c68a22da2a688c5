// CUDA broadcasting elementwise ops (binary.h has the equations), on the shared elementwise launch
// (elementwise_cuda.cuh): both inputs are walked as stride-0 views of the output shape, 16-byte packs
// when both are contiguous and of that shape, a strided walk otherwise (a (B, T, C) + (C,) bias add
// merges to two dims and costs one multiply-shift division per element). fp32 math, f32 or bf16 tensors.
// The backward returns output-shaped gradients; binary_backward reduces them with sum_to_shape, whose
// CUDA sum (reduce_cuda.cu) adds in a fixed order, so no atomics touch the gradients.
#include "autograd/ops/binary_cuda.h"
#include "autograd/ops/elementwise_cuda.cuh"

namespace hyb {
namespace {

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SubOp {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct DivOp {
  __device__ float operator()(float a, float b) const { return a / b; }
};
// div's second gradient, -dy a / b^2.
struct DivGradB {
  __device__ float operator()(float dy, float a, float b) const { return -dy * a / (b * b); }
};

}  // namespace

Tensor binary_forward_cuda(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  const Shape shape = broadcast_shapes(name, a.shape(), b.shape());
  return visit_cuda_float(name, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::add: return map_cuda<T, 2>("add_forward_kernel", shape, {a, b}, AddOp{});
      case BinaryOp::sub: return map_cuda<T, 2>("sub_forward_kernel", shape, {a, b}, SubOp{});
      case BinaryOp::mul: return map_cuda<T, 2>("mul_forward_kernel", shape, {a, b}, MulOp{});
      case BinaryOp::div: return map_cuda<T, 2>("div_forward_kernel", shape, {a, b}, DivOp{});
    }
    HYB_ASSERT(false, "bad BinaryOp");
  });
}

std::pair<Tensor, Tensor> binary_backward_cuda(const BinarySaved& s, const Tensor& dy, GradMask needed) {
  HYB_ASSERT(s.op == BinaryOp::mul || s.op == BinaryOp::div, "binary_backward_cuda is for mul and div");
  const char* name = binary_name(s.op);
  return visit_cuda_float(name, dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Shape& shape = dy.shape();
    Tensor da, db;
    if (s.op == BinaryOp::mul) {
      if (needed[0]) da = map_cuda<T, 2>("mul_backward_kernel", shape, {dy, s.b}, MulOp{});
      if (needed[1]) db = map_cuda<T, 2>("mul_backward_kernel", shape, {dy, s.a}, MulOp{});
    } else {
      if (needed[0]) da = map_cuda<T, 2>("div_backward_a_kernel", shape, {dy, s.b}, DivOp{});
      if (needed[1]) db = map_cuda<T, 3>("div_backward_b_kernel", shape, {dy, s.a, s.b}, DivGradB{});
    }
    return std::pair<Tensor, Tensor>{da, db};
  });
}

}  // namespace hyb
