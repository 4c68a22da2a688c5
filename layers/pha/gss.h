// The GSS branch of a PHA block (pha.md 4.2): Mehta et al.'s Gated State Space layer without its own
// pre-norm and skip (Choice 4). Parameter names are lucidrains' (pha.md 9): to_u, to_v, dss.*,
// to_gate, to_out.
//   u = GELU(W_u x);  v~ = LayerNorm(GELU(W_v x));  y = K * v~ + D v~  (the DSS, dss_op.h, in fp32)
//   z = W_o ((W_g y) .* u) + b_o
// Decoding runs the DSS by its recurrence (dss_decode.h) on a carried modal state; the rest is forward's.
//   Gss gss(cfg, init_std, residual_std);  Var z = gss.forward(x_hat);
//   DssDecodeState st = gss.start_decode(B, device, compute);  Var z_t = gss.decode(x_hat_t, st);
#pragma once
#include "layers/linear/linear.h"
#include "layers/norm/layernorm.h"
#include "layers/pha/dss_decode.h"
#include "layers/pha/pha_config.h"

namespace hyb {

// The DSS kernel's parameters and the LayerNorm in front of it (pha.md 4.3): dss.Lambda_real,
// dss.Lambda_imag (Ns), dss.C_real, dss.C_imag (Hs, Ns), dss.param_D (Hs), dss.norm.*. None decays.
class Dss : public Module {
 public:
  explicit Dss(const GssConfig& cfg);
  Var forward(const Var& v) const;  // v (B, T, Hs) f32, GELU(W_v x): LayerNorm, then the convolution
  // The state in state_dtype (f32, or f64 on the CPU) with the modes of the current parameters.
  DssDecodeState start_decode(int64_t batch, DType state_dtype, Device device) const;
  // v (B, n, Hs): LayerNorm, then the recurrence from st, which advances n tokens.
  Var decode(const Var& v, DssDecodeState& st) const;
  const GssConfig& config() const { return cfg_; }
  const Var& lambda_re() const { return lambda_re_; }
  const Var& lambda_im() const { return lambda_im_; }
  const Var& c_re() const { return c_re_; }
  const Var& c_im() const { return c_im_; }
  const Var& d() const { return d_; }
  const LayerNorm& norm() const { return *norm_; }

 private:
  GssConfig cfg_;
  LayerNorm* norm_;
  Var lambda_re_, lambda_im_, c_re_, c_im_, d_;
};

class Gss : public Module {
 public:
  Gss(const GssConfig& cfg, double init_std, double residual_std);
  Var forward(const Var& x) const;  // x (B, T, d) in the compute dtype -> (B, T, d)
  // The DSS state for decoding in compute dtype `compute`: fp32 for bf16 and f32, f64 for f64.
  DssDecodeState start_decode(int64_t batch, Device device, DType compute) const;
  Var decode(const Var& x, DssDecodeState& st) const;  // x (B, n, d): forward at the next n positions

 private:
  // z from u and the DSS output y, the part forward and decode share.
  Var gate_and_project(const Var& u, const Var& y, DType compute) const;
  Linear *to_u_, *to_v_, *to_gate_, *to_out_;
  Dss* dss_;
};

}  // namespace hyb
