// RMSNorm over the last dimension with a gain (attention.md 3.3 and 7):
//   r = 1 / sqrt(mean(x^2) + eps),  y = w * (r x)
// Backward:  g = dy * w;  dx = r (g - xhat mean(g * xhat));  dw = sum over rows of dy * xhat.
// Statistics in fp32 (f64 on the f64 CPU path). x (..., C), w (C,).
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct RmsNormSaved {
  Tensor x;     // (..., C) input
  Tensor w;     // (C,)
  Tensor rstd;  // (rows,) f32 (f64 for f64 inputs): 1/sqrt(mean(x^2)+eps), one pass saved in backward
};

struct RmsNormGrads {
  Tensor dx, dw;
};

Tensor rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, RmsNormSaved* saved);
RmsNormGrads rmsnorm_backward(const RmsNormSaved& s, const Tensor& dy, GradMask needed);
Var rmsnorm(const Var& x, const Var& w, double eps);

// CPU reference (rmsnorm_cpu.cpp); the CUDA pair lives in rmsnorm_cuda.cu.
Tensor rmsnorm_forward_cpu(const Tensor& x, const Tensor& w, double eps, Tensor* rstd);
RmsNormGrads rmsnorm_backward_cpu(const RmsNormSaved& s, const Tensor& dy, GradMask needed);
#if HYBRID_CUDA
Tensor rmsnorm_forward_cuda(const Tensor& x, const Tensor& w, double eps, Tensor* rstd);
RmsNormGrads rmsnorm_backward_cuda(const RmsNormSaved& s, const Tensor& dy, GradMask needed);
#endif

}  // namespace hyb
