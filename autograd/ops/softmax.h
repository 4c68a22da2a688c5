// softmax, log_softmax and logsumexp over the last dimension, all max-subtracted (m = max_j x_j):
//   softmax:     y_i = exp(x_i - m) / sum_j exp(x_j - m)      dx = y (dy - sum_j dy_j y_j)      (saves y)
//   log_softmax: y_i = x_i - lse                              dx = dy - exp(y) sum_j dy_j       (saves y)
//   logsumexp:   lse = m + log sum_j exp(x_j - m)             dx_i = dy exp(x_i - lse)          (saves x, lse)
// f64 inputs are computed in f64 throughout; the CPU reference sums in f64 for f32 too. A row of all
// -inf has logsumexp -inf and gradient 0 (softmax NaN, as 0/0); a +inf entry gives logsumexp +inf.
//   Var p = softmax(scores);   Var l = logsumexp(logits);   // (N, V) -> (N,)
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct LogsumexpSaved {
  Tensor x;    // (..., V) input
  Tensor lse;  // (...) the output, without the kept dim
};

Tensor softmax_forward(const Tensor& x);
Tensor softmax_backward(const Tensor& y, const Tensor& dy);
Tensor log_softmax_forward(const Tensor& x);
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy);
Tensor logsumexp_forward(const Tensor& x);                                  // (..., V) -> (...)
Tensor logsumexp_backward(const LogsumexpSaved& s, const Tensor& dlse);     // dlse (...)

Var softmax(const Var& x);
Var log_softmax(const Var& x);
Var logsumexp(const Var& x, bool keepdim = false);

// CPU reference (softmax_cpu.cpp); the CUDA side is declared in softmax_cuda.h.
Tensor softmax_forward_cpu(const Tensor& x, bool log);
Tensor softmax_backward_cpu(const Tensor& y, const Tensor& dy, bool log);
Tensor logsumexp_forward_cpu(const Tensor& x);
Tensor logsumexp_backward_cpu(const LogsumexpSaved& s, const Tensor& dlse);

}  // namespace hyb
