// The `pha` mixer object (pha.md 10) and what the PHA block is built from: which branches it keeps,
// how its residuals are scaled (DeepNorm's alpha and beta, pha.md 7), the GSS branch's sizes (4.3)
// and the nested attention and auxiliary-FFN objects, each resolved by its own family's rules.
//   resolve_pha_config(mixer, ctx);                  // in place; paths relative to the mixer
//   PhaConfig c = pha_config_from_json(mixer, d_model);
#pragma once
#include <string>
#include <vector>

#include "core/config_table.h"
#include "layers/layer_config.h"

namespace hyb {

extern const KeyTable kPhaKeys;
extern const KeyTable kPhaResidualKeys;
extern const KeyTable kPhaMixKeys;
extern const KeyTable kPhaGssKeys;

void resolve_pha_config(Json& mixer, const LayerConfigContext& ctx);

// The GSS branch (pha.md 4.2, 4.3): F = expand d_model, Hs = dss_dim, Ns = dss_state.
struct GssConfig {
  int64_t d_model = 0, wide = 0, dss_dim = 0, dss_state = 0;
  bool lambda_imag_exp = true;  // omega = exp(Lambda_imag); false: omega = Lambda_imag ("linear")
  bool s4d_lin_init = false;    // false: every kernel parameter N(0, 1) ("random")
  double layernorm_eps = 1e-5;
};

struct PhaConfig {
  bool sequential = false;
  bool attn = true, gss = true, ffn = true;  // kept branches (parallel)
  double dropout = 0.1;
  bool residual_normed = true;  // residual.source "normed": alpha times the sublayer's normed input
  double alpha = 1, beta = 1;
  std::vector<std::string> beta_targets;  // parameter-name globs whose init std is multiplied by beta
  double mix_init = 0;
  Json attn_mixer;  // the resolved attention object (null when the branch is not kept)
  GssConfig gss_cfg;
  int64_t aux_hidden = 0;  // the auxiliary FFN's width (0 when the branch is not kept)
  bool xavier = true;      // init "xavier_normal"; false: "gpt2"
  int branches() const { return int(attn) + int(gss) + int(ffn); }
};

PhaConfig pha_config_from_json(const Json& mixer, int64_t d_model);

}  // namespace hyb
