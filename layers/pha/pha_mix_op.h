// PHA's learnable static mixing (pha.md 6): k branch outputs n_0 .. n_{k-1} (already RMS-normalized,
// each (..., C), one dtype) and k logits p (fp32):
//   s_i = softplus(p_i),  S = sum_i s_i,  w_i = s_i / S,  m = sum_i w_i n_i
// Backward, with G = dL/dm:
//   dn_i = w_i G;   g_i = sum over every element of G n_i;   gbar = sum_i w_i g_i
//   dp_i = sigmoid(p_i) (g_i - gbar) / S
// w does not depend on the token, so the k reductions g_i are the only cross-token work; both paths
// reduce them in a fixed order (no float atomics).
//   Var m = pha_mix({n_attn, n_gss, n_ffn}, mix_logits);
#pragma once
#include <vector>

#include "autograd/tape.h"

namespace hyb {

constexpr int kPhaMaxBranches = 3;

struct PhaMixSaved {
  std::vector<Tensor> n;  // the branch inputs
  Tensor p;               // (k,) logits
};

struct PhaMixGrads {
  std::vector<Tensor> dn;  // undefined where not needed
  Tensor dp;
};

// The weights w of logits p (k,), in double, on the host: the mixing report reads them (pha.md 6.4).
std::vector<double> pha_mix_weights(const Tensor& p);

Tensor pha_mix_forward(const std::vector<Tensor>& n, const Tensor& p, PhaMixSaved* saved);
PhaMixGrads pha_mix_backward(const PhaMixSaved& s, const Tensor& dm, GradMask needed);
Var pha_mix(const std::vector<Var>& n, const Var& p);

// CPU reference (pha_mix_cpu.cpp); the CUDA pair lives in pha_mix_cuda.cu.
Tensor pha_mix_forward_cpu(const std::vector<Tensor>& n, const Tensor& p);
PhaMixGrads pha_mix_backward_cpu(const PhaMixSaved& s, const Tensor& dm, GradMask needed);
#if HYBRID_CUDA
Tensor pha_mix_forward_cuda(const std::vector<Tensor>& n, const Tensor& p);
PhaMixGrads pha_mix_backward_cuda(const PhaMixSaved& s, const Tensor& dm, GradMask needed);
#endif

}  // namespace hyb
