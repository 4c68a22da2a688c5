// CUDA side of softmax, log_softmax and logsumexp over the last dim (softmax.h), same contracts as
// softmax_cpu.cpp (`log` picks log_softmax). Included only under HYBRID_CUDA; kernels in softmax_cuda.cu.
#pragma once
#include "autograd/ops/softmax.h"

namespace hyb {

Tensor softmax_forward_cuda(const Tensor& x, bool log);
Tensor softmax_backward_cuda(const Tensor& y, const Tensor& dy, bool log);
Tensor logsumexp_forward_cuda(const Tensor& x);
Tensor logsumexp_backward_cuda(const LogsumexpSaved& s, const Tensor& dlse);

}  // namespace hyb
