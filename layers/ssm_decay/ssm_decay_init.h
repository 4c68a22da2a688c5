// Initial values of the decay parameters shared by Mamba2 and Gated DeltaNet (mamba2.md 2.1,
// gated_deltanet.md 2.1), per head and independently:
//   dt_bias: dt0 = exp(u (ln dt_max - ln dt_min) + ln dt_min), u ~ U(0, 1); dt0 = max(dt0, floor);
//            dt_bias = dt0 + ln(-expm1(-dt0)), the inverse of softplus, so softplus(dt_bias) = dt0
//   A_log:   A0 ~ U(lo, hi), A_log = ln A0
//   register_parameter("dt_bias", {H}, dt_bias_init(0.001, 0.1, 1e-4), false);
#pragma once
#include "layers/module.h"

namespace hyb {

ParamInit dt_bias_init(double dt_min, double dt_max, double dt_init_floor);
// A0 is drawn from (lo, hi], not [lo, hi): with GDN's lo = 0 a draw of exactly 0 would give -inf.
ParamInit a_log_init(double lo, double hi);

}  // namespace hyb
