// The DSS causal convolution of the GSS branch (specs/pha.md 4.3-4.6, docs/layers/pha.md "DSS
// convolution"): per channel c, y_t[c] = sum_{j<=t} K[j, c] v_{t-j}[c] + D[c] v_t[c] with the kernel
//   K[l, c] = Re sum_n C'[c, n] exp(l Lambda_n),  Lambda_n = -exp(l_re) + i omega_n,  C' = C (e^Lambda - 1) / Lambda
// and omega = exp(l_im) ("exp" imaginary part) or l_im ("linear"). The CPU runs the direct causal sum in
// f64, the GPU an fp32 FFT convolution whose kernel comes from an fp64 Vandermonde basis.
//   Var y = dss_conv(v, lambda_re, lambda_im, c_re, c_im, d, /*lambda_imag_exp=*/true);  // v (B, T, Hs)
//   DssModes m = dss_modes_cpu(lambda_re, lambda_im, c_re, c_im, true);  // s_t = decay s_{t-1} + v_t
#pragma once
#include "autograd/tape.h"

namespace hyb {

struct DssInputs {
  Tensor v;                  // (B, T, Hs) the normalized input
  Tensor lambda_re;          // (Ns,)  l_re: Re Lambda = -exp(l_re)
  Tensor lambda_im;          // (Ns,)  l_im: Im Lambda = exp(l_im) or l_im
  Tensor c_re, c_im;         // (Hs, Ns)
  Tensor d;                  // (Hs,)  the skip D
  bool lambda_imag_exp = true;
};

struct DssSaved {  // exactly what dss_backward reads
  DssInputs in;    // shared with the caller, never copied
  // CUDA only, undefined on the CPU path (its backward rebuilds K from the parameters in f64).
  // Saved because rebuilding them costs Ns * n fp64 transcendentals, a GEMM and an FFT.
  Tensor basis;     // (2 Ns, n) f32: [Re S; Im S], S[m, l] = exp(l Lambda_m), zero for l >= T
  Tensor kernel_f;  // (Hs, n/2 + 1, 2) f32: the real FFT of K^T zero-padded to n
  // Not saved: the FFT of v (B, Hs, n/2 + 1) complex; the backward recomputes it (one batched R2C).
};

struct DssGrads {
  Tensor dv;                      // (B, T, Hs)
  Tensor dlambda_re, dlambda_im;  // (Ns,)
  Tensor dc_re, dc_im;            // (Hs, Ns)
  Tensor dd;                      // (Hs,)
};

// needed: bit 0 v, 1 lambda_re, 2 lambda_im, 3 c_re, 4 c_im, 5 d.
Tensor dss_forward(const DssInputs& in, DssSaved* saved);  // saved == nullptr under no-grad
DssGrads dss_backward(const DssSaved& s, const Tensor& dy, GradMask needed);
Var dss_conv(const Var& v, const Var& lambda_re, const Var& lambda_im, const Var& c_re, const Var& c_im, const Var& d,
             bool lambda_imag_exp);

// The modal form of 4.4, for decoding: s_t[c, n] = decay_n s_{t-1}[c, n] + v_t[c] and
// y_t[c] = Re sum_n cbar[c, n] s_t[c, n] + D[c] v_t[c]. CPU, computed in f64, returned in the
// parameters' dtype (f32 or f64).
struct DssModes {
  Tensor decay_re, decay_im;  // (Ns,)    exp(Lambda_n)
  Tensor cbar_re, cbar_im;    // (Hs, Ns) C' = C Bz
};
DssModes dss_modes_cpu(const Tensor& lambda_re, const Tensor& lambda_im, const Tensor& c_re, const Tensor& c_im,
                       bool lambda_imag_exp);

// y by the recurrence of 4.4, the state in f64: the check of the convolution, O(B T Hs Ns).
Tensor dss_recurrent_cpu(const DssInputs& in);

// The FFT length of 4.5: the smallest n >= 2T - 1 whose only prime factors are 2, 3, 5 and 7.
int64_t dss_fft_length(int64_t T);

// CPU reference (dss_cpu.cpp): the direct causal sum and its hand-written backward, f64 inside.
Tensor dss_forward_cpu(const DssInputs& in);
DssGrads dss_backward_cpu(const DssSaved& s, const Tensor& dy, GradMask needed);
#if HYBRID_CUDA
// CUDA (dss_cuda.cu), f32 only: fills saved->basis and saved->kernel_f when saved is not null.
Tensor dss_forward_cuda(const DssInputs& in, DssSaved* saved);
DssGrads dss_backward_cuda(const DssSaved& s, const Tensor& dy, GradMask needed);
#endif

}  // namespace hyb
