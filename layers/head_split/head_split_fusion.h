// The fusion of a head_split block (intra_hybrid.md 4.4, docs/layers/head_split.md 3): the two
// halves' outputs o_T (B, T, D_T) and o_M (B, T, D_M), each head divided by its RMS, scaled or gated,
// then added, subtracted or concatenated, through one output projection or one per half. Composed
// of existing differentiable ops that all have CUDA paths (rmsnorm with a unit gain, mul, sigmoid,
// add, sub, concat, linear), so the backward of 4.6 is theirs and needs no kernel of its own.
//   Var y = fuse_halves(o_T, o_M, weights, cfg);   // (B, T, d)
#pragma once
#include "autograd/tape.h"

namespace hyb {

enum class FusionNorm { none, group };
enum class FusionScalar { none, scale, gate };
enum class FusionOp { add, diff, conc };

struct FusionConfig {
  FusionNorm norm = FusionNorm::group;
  FusionScalar scalar = FusionScalar::none;
  FusionOp op = FusionOp::diff;
  int64_t out_proj = 2;
  double scale_init = 1.0;       // initial attn_scale and ssm_scale
  double group_norm_eps = 1e-5;
  int64_t attn_head_dim = 0;     // Dv: the width of one attention head's output, a group of the norm
  int64_t ssm_head_dim = 0;      // P: the same for one SSM head
};

// The fusion's learnable inputs in the activations' dtype; undefined where the config has none.
struct FusionWeights {
  Var attn_scale, ssm_scale;       // (D_T,), (D_M,): scalar "scale"
  Var gate_logit;                  // (D_T,): scalar "gate"
  Var o_proj;                      // (d, D_T), or (d, D_T + D_M) for conc: out_proj 1
  Var attn_o_proj, ssm_out_proj;   // (d, D_T), (d, D_M): out_proj 2
};

// Each group of head_dim channels of x (..., H head_dim) divided by its RMS: n = x / sqrt(mean(x^2) + eps).
Var group_rms_norm(const Var& x, int64_t head_dim, double eps);

// y (B, T, d) from the halves' outputs, by the settings of cfg.
Var fuse_halves(const Var& o_T, const Var& o_M, const FusionWeights& w, const FusionConfig& cfg);

}  // namespace hyb
