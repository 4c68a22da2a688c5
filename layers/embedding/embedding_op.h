// Embedding lookup: out[n, :] = W[ids[n], :].  ids (...) i32, W (V, C), out (..., C).
// Backward: dW[v, :] = sum of dout[n, :] over the n with ids[n] = v. The CPU and CUDA paths add
// in a fixed order (by row index), so the gradient is deterministic.
#pragma once
#include "autograd/tape.h"

namespace hyb {

Tensor embedding_forward(const Tensor& ids, const Tensor& w);
Tensor embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab);
Var embedding(const Tensor& ids, const Var& w);

Tensor embedding_forward_cpu(const Tensor& ids, const Tensor& w);
Tensor embedding_backward_cpu(const Tensor& ids, const Tensor& dout, int64_t vocab);
#if HYBRID_CUDA
Tensor embedding_forward_cuda(const Tensor& ids, const Tensor& w);
Tensor embedding_backward_cuda(const Tensor& ids, const Tensor& dout, int64_t vocab);
#endif

}  // namespace hyb
