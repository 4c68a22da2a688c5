// Per-query-head logit scale of scaled-cosine attention (attention.md 2.4 and 3.2, Swin V2):
//   tau_h = exp(min(theta_h, ln max_scale))        theta stored in log space, init ln 10, max 100
//   dtheta_h = dtau_h * tau_h * [theta_h <= ln max_scale]   (inclusive, like torch.clamp)
// With dtau_h = dscale_h from attention_backward this is 3.2's dtheta = sum <q̂, dq̂>.
//   Var tau = logit_scale(theta);                                   // theta (Hq,)
//   Var o = attention_with_lse(l2norm(q), l2norm(k), v, tau, p).o;
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct LogitScaleSaved {
  Tensor theta;  // (Hq,): which heads sit above the clamp
  Tensor tau;    // (Hq,) the forward output: dtau/dtheta = tau below the clamp
  double max_scale = 100.0;
};

Tensor logit_scale_forward(const Tensor& theta, double max_scale, LogitScaleSaved* saved);
Tensor logit_scale_backward(const LogitScaleSaved& s, const Tensor& dtau);
Var logit_scale(const Var& theta, double max_scale = 100.0);

// CPU reference (logit_scale_cpu.cpp); the CUDA pair is declared in attention_cuda.h.
Tensor logit_scale_forward_cpu(const Tensor& theta, double max_scale);
Tensor logit_scale_backward_cpu(const Tensor& theta, const Tensor& tau, const Tensor& dtau, double max_scale);

}  // namespace hyb
