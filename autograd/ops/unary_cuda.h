// CUDA side of the pointwise ops (unary.h), same signatures as the CPU reference in unary_cpu.cpp.
// Included only under HYBRID_CUDA; the kernels go in unary_cuda.cu.
#pragma once
#include "autograd/ops/unary.h"

namespace hyb {

Tensor unary_forward_cuda(UnaryOp op, const Tensor& x);
Tensor unary_backward_cuda(const UnarySaved& s, const Tensor& dy);
Tensor affine_forward_cuda(const Tensor& x, double alpha, double beta);

}  // namespace hyb
