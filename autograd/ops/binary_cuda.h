// CUDA side of the broadcasting elementwise ops (binary.h), same contracts as binary_cpu.cpp:
// forward takes a and b of broadcastable shapes; backward (mul and div only) returns the
// output-shaped da and db, which binary_backward then reduces with sum_to_shape.
// Included only under HYBRID_CUDA; the kernels go in binary_cuda.cu.
#pragma once
#include "autograd/ops/binary.h"

namespace hyb {

Tensor binary_forward_cuda(BinaryOp op, const Tensor& a, const Tensor& b);
std::pair<Tensor, Tensor> binary_backward_cuda(const BinarySaved& s, const Tensor& dy, GradMask needed);

}  // namespace hyb
