// The short convolution of Mamba2 and Gated DeltaNet: a depthwise causal conv over time followed
// by SiLU (mamba2.md 2.2 step 3 and 3.5, gated_deltanet.md 2.2 step 2 and 3.6), channels-last:
//   xp = concat(x0, x) along time,  pre_t[c] = bias[c] + sum_{j<W} w[c, j] xp[t + j][c],  y_t = silu(pre_t)
// x0 (B, W-1, C) holds the W-1 inputs before the first token: zeros when absent, the decode cache
// otherwise, so one decode step is this op on one token plus conv1d_next_state.
//   Var y = causal_conv1d_silu(x, w, bias, Var());     // x (B, T, C), w (C, W), bias (C,) or undefined
//   Tensor cache = conv1d_next_state(cache, x.data());  // the last W-1 inputs, (B, W-1, C)
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct Conv1dSaved {  // exactly what causal_conv1d_silu_backward reads
  Tensor x;           // (B, T, C) input
  Tensor w;           // (C, W)
  Tensor bias;        // (C,) or undefined
  Tensor x0;          // (B, W-1, C) or undefined (zeros)
  // Not saved: pre-activations (B, T, C); the backward recomputes them (W multiply-adds each).
};

struct Conv1dGrads {
  Tensor dx;     // (B, T, C)
  Tensor dw;     // (C, W), summed over b and t
  Tensor dbias;  // (C,)
  Tensor dx0;    // (B, W-1, C): the gradient into the cache
};

// needed: bit 0 x, 1 w, 2 bias, 3 x0.
Tensor causal_conv1d_silu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& x0,
                                  Conv1dSaved* saved);
Conv1dGrads causal_conv1d_silu_backward(const Conv1dSaved& s, const Tensor& dy, GradMask needed);
Var causal_conv1d_silu(const Var& x, const Var& w, const Var& bias, const Var& x0);

// The cache after x: the last W-1 rows of concat(x0, x) along time (zeros where x0 is undefined and
// T < W-1). No gradient: decoding runs under NoGradGuard.
Tensor conv1d_next_state(const Tensor& x0, const Tensor& x, int64_t W);

// CPU reference (conv1d_cpu.cpp); the CUDA pair lives in conv1d_cuda.cu (W <= 16).
Tensor causal_conv1d_silu_forward_cpu(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& x0);
Conv1dGrads causal_conv1d_silu_backward_cpu(const Conv1dSaved& s, const Tensor& dy, GradMask needed);
Tensor causal_conv1d_silu_forward_cuda(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& x0);
Conv1dGrads causal_conv1d_silu_backward_cuda(const Conv1dSaved& s, const Tensor& dy, GradMask needed);

}  // namespace hyb
