// SwiGLU gate: z = silu(a) * b  (attention.md 7), a and b of equal shape.
// Backward: da = dz * b * s (1 + a (1 - s)) with s = sigmoid(a);  db = dz * silu(a).
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct SwigluSaved {
  Tensor a;  // gate pre-activation
  Tensor b;  // up projection
};

Tensor swiglu_forward(const Tensor& a, const Tensor& b);
std::pair<Tensor, Tensor> swiglu_backward(const SwigluSaved& s, const Tensor& dz, GradMask needed);
Var swiglu(const Var& a, const Var& b);

Tensor swiglu_forward_cpu(const Tensor& a, const Tensor& b);
std::pair<Tensor, Tensor> swiglu_backward_cpu(const SwigluSaved& s, const Tensor& dz, GradMask needed);
#if HYBRID_CUDA
Tensor swiglu_forward_cuda(const Tensor& a, const Tensor& b);
std::pair<Tensor, Tensor> swiglu_backward_cuda(const SwigluSaved& s, const Tensor& dz, GradMask needed);
#endif

}  // namespace hyb
