// CUDA side of dropout (dropout.h): y = dropout_keep(d, i) ? x_i * d.scale : 0 over x's row-major
// elements, the same contract as dropout_forward_cpu. Included only under HYBRID_CUDA; the kernel goes
// in dropout_cuda.cu and calls dropout_keep_block, as the CPU loop does, so the masks match bit for bit.
#pragma once
#include "autograd/ops/dropout.h"

namespace hyb {

Tensor dropout_forward_cuda(const Tensor& x, const DropoutParams& d);

}  // namespace hyb
