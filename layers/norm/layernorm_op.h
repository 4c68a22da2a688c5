// LayerNorm over the last dimension with weight and bias (PyTorch nn.LayerNorm; the DSS norm of the
// GSS branch, pha.md 4.2 and 4.6):
//   mean = mean(x),  rstd = 1 / sqrt(mean((x - mean)^2) + eps),  xhat = (x - mean) rstd,  y = w xhat + b
// Backward:  g = dy * w;  dx = rstd (g - mean(g) - xhat mean(g * xhat));
//            dw = sum over rows of dy * xhat;  db = sum over rows of dy.
// Statistics in fp32 (f64 on the f64 CPU path), variance biased (divided by C). x (..., C), w and b (C,).
//   LayerNormSaved s;  Tensor y = layernorm_forward(x, w, b, 1e-5, &s);
//   LayerNormGrads g = layernorm_backward(s, dy, GradMask{7});   // dx, dw, db
#pragma once
#include "autograd/tape.h"

namespace hyb {

// Not saved: b (its gradient needs only dy) and xhat (rebuilt from x, mean and rstd in one pass).
struct LayerNormSaved {
  Tensor x;     // (..., C) input
  Tensor w;     // (C,)
  Tensor mean;  // (rows,) f32 (f64 for f64 inputs on the CPU)
  Tensor rstd;  // (rows,) same dtype as mean: 1/sqrt(var + eps)
};

struct LayerNormGrads {
  Tensor dx, dw, db;
};

Tensor layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, LayerNormSaved* saved);
LayerNormGrads layernorm_backward(const LayerNormSaved& s, const Tensor& dy, GradMask needed);
Var layernorm(const Var& x, const Var& w, const Var& b, double eps);

// CPU reference (layernorm_cpu.cpp); the CUDA pair lives in layernorm_cuda.cu. mean and rstd are
// written only when non-null (under no-grad nothing is kept).
Tensor layernorm_forward_cpu(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor* mean, Tensor* rstd);
LayerNormGrads layernorm_backward_cpu(const LayerNormSaved& s, const Tensor& dy, GradMask needed);
#if HYBRID_CUDA
Tensor layernorm_forward_cuda(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor* mean, Tensor* rstd);
LayerNormGrads layernorm_backward_cuda(const LayerNormSaved& s, const Tensor& dy, GradMask needed);
#endif

}  // namespace hyb
