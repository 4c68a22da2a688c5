// CUDA side of the linear op (layers/linear/linear_cuda.cu).
#pragma once
#include "core/tensor.h"

namespace hyb {
void add_bias_cuda(const Tensor& y, const Tensor& b);
Tensor bias_grad_cuda(const Tensor& dy);
}  // namespace hyb
