#include "layers/pha/pha.h"

#include <cmath>

#include "autograd/ops/binary.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/unary.h"
#include "core/param_glob.h"
#include "layers/pha/pha_mix_op.h"
#include "layers/registry.h"

namespace hyb {

namespace {

// pha.md 8: every Linear weight (a 2-d "weight") Xavier-normal, N(0, 2 / (fan_in + fan_out)), or the
// families' own rule under "gpt2"; the beta targets of 7.4 get beta times that std either way.
void set_block_init(Module& block, const PhaConfig& cfg, int64_t layer_index) {
  const std::string prefix = str_cat("model.layers.", layer_index, ".");
  block.override_init([&](const std::string& name, const Shape& shape, const ParamInit& current) -> std::optional<ParamInit> {
    if (shape.size() != 2 || !name.ends_with(".weight")) return std::nullopt;
    double scale = 1;
    for (const std::string& g : cfg.beta_targets)
      if (param_glob_matches(g, prefix + name)) scale = cfg.beta;
    if (cfg.xavier) return ParamInit::normal(scale * std::sqrt(2.0 / double(shape[0] + shape[1])));
    HYB_ASSERT(current.kind == ParamInit::Kind::normal, "pha: ", name, " is not drawn from a normal distribution");
    return ParamInit::normal(scale * current.a, current.b);
  });
}

}  // namespace

PhaMixer::PhaMixer(const PhaConfig& cfg, const MixerContext& ctx, double norm_eps) : cfg_(cfg) {
  const int64_t d = ctx.d_model;
  MixerContext inner = ctx;
  if (cfg.sequential) attn_norm_ = register_module("attn_norm", std::make_unique<RmsNorm>(d, norm_eps));
  if (cfg.attn) attn_ = register_module("attn", make_mixer(cfg.attn_mixer, inner));
  if (cfg.sequential) gss_norm_ = register_module("gss_norm", std::make_unique<RmsNorm>(d, norm_eps));
  if (cfg.gss) gss_ = register_module("gss", std::make_unique<Gss>(cfg.gss_cfg, ctx.init_std, ctx.residual_std()));
  if (cfg.ffn)
    aux_ = register_module("aux_mlp", std::make_unique<SwigluMlp>(d, cfg.aux_hidden, ctx.init_std, ctx.residual_std()));
  if (cfg.sequential) return;
  if (cfg.attn) out_norms_.push_back(register_module("attn_out_norm", std::make_unique<RmsNorm>(d, norm_eps)));
  if (cfg.gss) out_norms_.push_back(register_module("gss_out_norm", std::make_unique<RmsNorm>(d, norm_eps)));
  if (cfg.ffn) out_norms_.push_back(register_module("aux_out_norm", std::make_unique<RmsNorm>(d, norm_eps)));
  if (cfg.branches() > 1)
    mix_logits_ = register_parameter("mix_logits", {cfg.branches()}, ParamInit::constant(cfg.mix_init), false);
}

Var PhaMixer::attn_branch(const Var& x, PhaState* st) {
  ModuleScope scope("attn");
  return st ? attn_->decode(x, *st->attn) : attn_->forward(x);
}

Var PhaMixer::gss_branch(const Var& x, PhaState* st) {
  ModuleScope scope("gss");
  return st ? gss_->decode(x, *st->gss) : gss_->forward(x);
}

Var PhaMixer::mixture(const Var& x, PhaState* st) {
  HYB_CHECK(!cfg_.sequential, "pha: a sequential block has no mixture; PhaBlock runs its sublayers");
  std::vector<Var> n;
  if (attn_) n.push_back(attn_branch(x, st));
  if (gss_) n.push_back(gss_branch(x, st));
  if (aux_) {
    ModuleScope scope("aux_mlp");
    n.push_back(aux_->forward(x));
  }
  for (size_t k = 0; k < n.size(); ++k) n[k] = out_norms_[k]->forward(n[k]);
  if (n.size() == 1) return n[0];
  return pha_mix(n, mix_logits_);
}

Var PhaMixer::forward(const Var& x) { return mixture(x, nullptr); }

std::unique_ptr<DecodeState> PhaMixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto s = std::make_unique<PhaState>();
  if (attn_) s->attn = attn_->start_decode(batch, device, dtype);
  if (gss_) s->gss = gss_->start_decode(batch, device, dtype);
  return s;
}

Var PhaMixer::decode(const Var& x, DecodeState& state) {
  auto& s = dynamic_cast<PhaState&>(state);
  const Var m = mixture(x, &s);
  s.n_seen += x.size(1);
  return m;
}

std::vector<double> PhaMixer::mix_weights() const {
  if (!mix_logits_.defined()) return {1.0};
  return pha_mix_weights(mix_logits_.data());
}

PhaBlock::PhaBlock(const LayerSpec& spec, const BlockContext& ctx) : ctx_(ctx) {
  const int64_t d = ctx.mixer.d_model;
  const PhaConfig cfg = pha_config_from_json(spec.mixer, d);
  if (!cfg.sequential) mixer_norm_ = register_module("mixer_norm", std::make_unique<RmsNorm>(d, ctx.norm_eps));
  mixer_ = register_module("mixer", std::make_unique<PhaMixer>(cfg, ctx.mixer, ctx.norm_eps));
  if (spec.mlp_type == "swiglu") {
    mlp_norm_ = register_module("mlp_norm", std::make_unique<RmsNorm>(d, ctx.norm_eps));
    mlp_ = register_module("mlp", std::make_unique<SwigluMlp>(d, spec.intermediate_size, ctx.mixer.init_std,
                                                              ctx.mixer.residual_std()));
  } else {
    HYB_CHECK(spec.mlp_type == "none", "layer ", ctx.mixer.layer_index, ": unknown mlp type \"", spec.mlp_type, "\"");
  }
  set_block_init(*this, cfg, ctx.mixer.layer_index);
}

Var PhaBlock::drop(const Var& x, const char* site) const {
  const double p = mixer_->config().dropout;
  if (p == 0 || !training()) return x;
  const uint64_t step = ctx_.rng_step ? *ctx_.rng_step : 0;
  return dropout(x, p, ctx_.seed, str_cat("model.layers.", ctx_.mixer.layer_index, ".", site), step << 32, true);
}

Var PhaBlock::residual(const Var& r, const Var& update, const char* site, double alpha, bool decoding) const {
  return add(alpha == 1 ? r : mul_scalar(r, alpha), decoding ? update : drop(update, site));
}

Var PhaBlock::run(const Var& x, PhaState* st) {
  const PhaConfig& c = mixer_->config();
  const bool normed = c.residual_normed, dec = st != nullptr;
  Var h;
  if (!c.sequential) {
    const Var xh = mixer_norm_->forward(x);
    ModuleScope scope("mixer");
    h = residual(normed ? xh : x, dec ? mixer_->decode(xh, *st) : mixer_->forward(xh), "mix_dropout", c.alpha, dec);
  } else {
    ModuleScope scope("mixer");
    const Var x1 = mixer_->attn_norm_->forward(x);
    const Var h1 = residual(normed ? x1 : x, mixer_->attn_branch(x1, st), "attn_dropout", c.alpha, dec);
    const Var x2 = mixer_->gss_norm_->forward(h1);
    h = residual(normed ? x2 : h1, mixer_->gss_branch(x2, st), "gss_dropout", normed ? c.alpha : 1.0, dec);
    if (st) st->n_seen += x.size(1);
  }
  if (!mlp_) return h;
  ModuleScope scope("mlp");
  const Var hh = mlp_norm_->forward(h);
  return residual(normed ? hh : h, mlp_->forward(hh), "mlp_dropout", normed ? c.alpha : 1.0, dec);
}

Var PhaBlock::forward(const Var& x) { return run(x, nullptr); }

Var PhaBlock::decode(const Var& x, DecodeState& state) { return run(x, &dynamic_cast<PhaState&>(state)); }

std::unique_ptr<Block> make_pha_block(const LayerSpec& spec, const BlockContext& ctx) {
  return std::make_unique<PhaBlock>(spec, ctx);
}

}  // namespace hyb
