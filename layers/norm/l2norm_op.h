// L2 normalization of each vector over the last dimension, y = x / n, with the two eps rules the
// specs use:
//   L2NormEps::clamp    n = max(||x||, eps)         cosine attention (attention.md 2.4), eps 1e-12
//   L2NormEps::in_sqrt  n = sqrt(sum x^2 + eps)     Gated DeltaNet q/k (gated_deltanet.md 4), eps 1e-6
// Backward (attention.md 3.2, gated_deltanet.md 3.3): dx = (dy - y <y, dy>) / n; on a clamped row
// (||x|| <= eps) n = eps is a constant and dx = dy / eps. Statistics in double on the CPU.
//   Var qn = l2norm(q);                                   // q (B, T, H, D), per head
//   Var kn = l2norm(k, 1e-6, L2NormEps::in_sqrt);
#pragma once
#include "autograd/tape.h"

namespace hyb {

enum class L2NormEps { clamp, in_sqrt };

struct L2NormSaved {
  Tensor y;     // (..., C) the output: the backward is written in terms of it
  Tensor norm;  // (rows,) the denominator n, dtype of x (f32 for bf16 x)
  double eps = 1e-12;
  L2NormEps mode = L2NormEps::clamp;
};

Tensor l2norm_forward(const Tensor& x, double eps, L2NormEps mode, L2NormSaved* saved);
Tensor l2norm_backward(const L2NormSaved& s, const Tensor& dy);
Var l2norm(const Var& x, double eps = 1e-12, L2NormEps mode = L2NormEps::clamp);

// CPU reference (l2norm_cpu.cpp); the CUDA pair lives in l2norm_cuda.cu.
Tensor l2norm_forward_cpu(const Tensor& x, double eps, L2NormEps mode, Tensor* norm);
Tensor l2norm_backward_cpu(const L2NormSaved& s, const Tensor& dy);
#if HYBRID_CUDA
Tensor l2norm_forward_cuda(const Tensor& x, double eps, L2NormEps mode, Tensor* norm);
Tensor l2norm_backward_cuda(const L2NormSaved& s, const Tensor& dy);
#endif

}  // namespace hyb
