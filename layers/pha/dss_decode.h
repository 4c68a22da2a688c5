// The DSS decode step (specs/pha.md 4.4, docs/layers/pha.md "Decoding"): the convolution of dss_op.h
// as its modal recurrence on a carried state, n new tokens at a time, taken in order:
//   s_t[c, n] = decay_n s_{t-1}[c, n] + v_t[c],   y_t[c] = Re sum_n C'[c, n] s_t[c, n] + D[c] v_t[c]
// The modes (decay = e^Lambda, C' = C Bz) come from dss_modes_cpu once, when the state starts, so a
// step reads no transcendental. Prompts run through the same recurrence (exact, O(n Hs Ns)). Forward
// only: decoding records no tape. CPU reference in dss_decode_cpu.cpp, CUDA in dss_decode.cu.
//   DssDecodeState st = dss_decode_start(B, lambda_re, lambda_im, c_re, c_im, true, DType::f32, dev);
//   Tensor y = dss_decode_step(v, d, st);   // v (B, n, Hs) in the state dtype; advances st
#pragma once
#include "layers/pha/dss_op.h"

namespace hyb {

struct DssDecodeState {
  Tensor s_re, s_im;  // (B, Hs, Ns) the complex modal state in the state dtype, updated in place
  // On the state's device: decay (Ns,) in f64, C' (Hs, Ns) in the state dtype. The decay stays f64
  // because its rounding error repeats at every step: rounded to fp32 it would bias a mode of memory
  // 1/a tokens by about 6e-8 / a (1e-4 at S4D-Lin's slowest a = 5e-4), where rounding the state
  // only adds a random walk of about 6e-8 / sqrt(2 a).
  DssModes modes;
  // Only the modal state is per sequence; the modes are the layer's, a function of its parameters.
  int64_t bytes() const { return int64_t(s_re.nbytes() + s_im.nbytes()); }
};

// A zero state for `batch` sequences in state_dtype (f32; f64 on the CPU), the modes computed in f64
// from the parameters (on any device).
DssDecodeState dss_decode_start(int64_t batch, const Tensor& lambda_re, const Tensor& lambda_im, const Tensor& c_re,
                                const Tensor& c_im, bool lambda_imag_exp, DType state_dtype, Device device);

// v (B, n, Hs) and d (Hs,) in the state dtype on its device; returns y (B, n, Hs).
Tensor dss_decode_step(const Tensor& v, const Tensor& d, DssDecodeState& st);
// The shape, dtype and device checks both paths run first.
void check_dss_decode(const Tensor& v, const Tensor& d, const DssDecodeState& st);

Tensor dss_decode_step_cpu(const Tensor& v, const Tensor& d, DssDecodeState& st);
#if HYBRID_CUDA
Tensor dss_decode_step_cuda(const Tensor& v, const Tensor& d, DssDecodeState& st);  // f32 only
#endif

}  // namespace hyb
