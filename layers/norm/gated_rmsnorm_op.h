// RMSNorm with a SiLU gate over the last dimension, in the two orders the specs use; they are two
// named modes, never one hidden default (mamba2.md 2.2 step 8, gated_deltanet.md 2.2 step 8):
//   gate_then_norm (Mamba2):       a = x silu(z),  r = 1/sqrt(mean(a^2) + eps),  y = a r w
//   norm_then_gate (GDN, and Mamba2 with norm_before_gate): r = 1/sqrt(mean(x^2) + eps),  y = x r w silu(z)
// Backward: mamba2.md 3.6 and gated_deltanet.md 3.7. x and z are (..., Gs): each row of Gs channels
// is one group. w's shape is a suffix of x's, (Gs,) shared by every group (GDN's per-head norm) or
// (G, Gs) with one gain per channel (Mamba2's d_ssm gains over G groups).
//   Var y = gated_rmsnorm(reshape(y, {B, T, G, Gs}), reshape(z, {B, T, G, Gs}), reshape(w, {G, Gs}), 1e-5,
//                         GatedNormOrder::gate_then_norm);
#pragma once
#include "autograd/tape.h"

namespace hyb {

enum class GatedNormOrder { gate_then_norm, norm_then_gate };

struct GatedRmsNormSaved {  // exactly what gated_rmsnorm_backward reads
  Tensor x;                 // (..., Gs)
  Tensor z;                 // (..., Gs) the gate input
  Tensor w;                 // a suffix of x's shape
  Tensor rstd;              // (rows,) r of the row, one pass saved in the backward: x's dtype on the
                            // CPU, f32 on CUDA
  double eps = 1e-5;
  GatedNormOrder order = GatedNormOrder::gate_then_norm;
};

struct GatedRmsNormGrads {
  Tensor dx, dz, dw;
};

// needed: bit 0 x, 1 z, 2 w.
Tensor gated_rmsnorm_forward(const Tensor& x, const Tensor& z, const Tensor& w, double eps, GatedNormOrder order,
                             GatedRmsNormSaved* saved);
GatedRmsNormGrads gated_rmsnorm_backward(const GatedRmsNormSaved& s, const Tensor& dy, GradMask needed);
Var gated_rmsnorm(const Var& x, const Var& z, const Var& w, double eps, GatedNormOrder order);

// CPU reference (gated_rmsnorm_cpu.cpp); the CUDA pair lives in gated_rmsnorm_cuda.cu.
Tensor gated_rmsnorm_forward_cpu(const Tensor& x, const Tensor& z, const Tensor& w, double eps, GatedNormOrder order,
                                 Tensor* rstd);
GatedRmsNormGrads gated_rmsnorm_backward_cpu(const GatedRmsNormSaved& s, const Tensor& dy, GradMask needed);
Tensor gated_rmsnorm_forward_cuda(const Tensor& x, const Tensor& z, const Tensor& w, double eps, GatedNormOrder order,
                                  Tensor* rstd);
GatedRmsNormGrads gated_rmsnorm_backward_cuda(const GatedRmsNormSaved& s, const Tensor& dy, GradMask needed);

}  // namespace hyb
