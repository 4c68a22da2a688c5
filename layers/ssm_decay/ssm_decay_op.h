// The per-head decay of Mamba2 and Gated DeltaNet: a time step through softplus with a learned
// bias, and the log decay g = A dt with A = -exp(A_log) < 0 (mamba2.md 2.2 steps 4-5 and 3.3-3.4,
// gated_deltanet.md 2.2 step 6 and 3.5). Per head h (the last dimension of x):
//   dt = clamp(softplus(x + dt_bias[h]), lo, hi)      softplus is the identity above 20
//   g  = -exp(A_log[h]) dt                             <= 0
// Backward: dzz = (ddt + A dg) sigma(x + dt_bias) [lo <= softplus <= hi] (sigma taken as 1 above 20),
// dx = dzz, ddt_bias = sum dzz, dA_log = sum dg g. One fused op: the GPU fuses it into the chunk cumsum.
//   SsmDecayVars d = ssm_decay(dt_raw, dt_bias, A_log, 0.0, INFINITY);   // Mamba2: d.dt and d.g
//   Var g = ssm_decay(a, dt_bias, A_log, 0.0, INFINITY).g;                 // GDN: the decay only
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct SsmDecaySaved {  // exactly what ssm_decay_backward reads
  Tensor x;             // (..., H) the raw time-step input
  Tensor dt_bias;       // (H,)
  Tensor A_log;         // (H,)
  Tensor g;             // (..., H) the output g: dA_log = sum dg g
  double lo = 0, hi = 0;
};

struct SsmDecayOutputs {
  Tensor dt, g;  // (..., H) each, dtype of x
};

struct SsmDecayGrads {
  Tensor dx, ddt_bias, dA_log;
};

// needed: bit 0 x, 1 dt_bias, 2 A_log. ddt or dg may be undefined (that output carried no gradient).
SsmDecayOutputs ssm_decay_forward(const Tensor& x, const Tensor& dt_bias, const Tensor& A_log, double lo, double hi,
                                  SsmDecaySaved* saved);
SsmDecayGrads ssm_decay_backward(const SsmDecaySaved& s, const Tensor& ddt, const Tensor& dg, GradMask needed);

struct SsmDecayVars {
  Var dt, g;
};
SsmDecayVars ssm_decay(const Var& x, const Var& dt_bias, const Var& A_log, double lo, double hi);

// CPU reference (ssm_decay_cpu.cpp); the CUDA pair lives in ssm_decay_cuda.cu.
SsmDecayOutputs ssm_decay_forward_cpu(const Tensor& x, const Tensor& dt_bias, const Tensor& A_log, double lo, double hi);
SsmDecayGrads ssm_decay_backward_cpu(const SsmDecaySaved& s, const Tensor& ddt, const Tensor& dg, GradMask needed);
SsmDecayOutputs ssm_decay_forward_cuda(const Tensor& x, const Tensor& dt_bias, const Tensor& A_log, double lo, double hi);
SsmDecayGrads ssm_decay_backward_cuda(const SsmDecaySaved& s, const Tensor& ddt, const Tensor& dg, GradMask needed);

}  // namespace hyb
