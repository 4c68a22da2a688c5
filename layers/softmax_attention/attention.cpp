#include "layers/softmax_attention/attention.h"

#include <cmath>

#include "autograd/ops/shape_ops.h"
#include "layers/norm/l2norm_op.h"
#include "layers/norm/rmsnorm_op.h"
#include "layers/softmax_attention/logit_scale_op.h"

namespace hyb {

using json = nlohmann::json;

AttentionConfig attention_config_from_json(const json& m) {
  AttentionConfig c;
  c.num_heads = m.at("num_heads").get<int64_t>();
  c.num_kv_heads = m.at("num_kv_heads").get<int64_t>();
  c.head_dim = m.at("head_dim").get<int64_t>();
  c.v_head_dim = m.at("v_head_dim").get<int64_t>();
  c.qkv_bias = m.at("qkv_bias").get<bool>();
  c.o_bias = m.at("o_bias").get<bool>();
  c.qk_norm = m.at("qk_norm").get<std::string>();
  c.qk_norm_eps = m.at("qk_norm_eps").get<double>();
  c.logits = m.at("logits").get<std::string>();
  if (!m.at("softmax_scale").is_null()) c.softmax_scale = m.at("softmax_scale").get<double>();
  c.cosine_logit_scale_init = m.at("cosine_logit_scale_init").get<double>();
  c.cosine_logit_scale_max = m.at("cosine_logit_scale_max").get<double>();
  c.window = m.at("window").get<int64_t>();
  c.sinks = m.at("sinks").get<int64_t>();
  c.rope = m.at("rope").get<bool>();
  c.rope_theta = m.at("rope_theta").get<double>();
  c.rope_dim = m.at("rope_dim").get<int64_t>();
  if (!m.at("rope_scaling").is_null()) {
    const json& s = m.at("rope_scaling");
    c.rope_scaling = RopeScaling{s.at("factor").get<double>(), s.at("low_freq_factor").get<double>(),
                                 s.at("high_freq_factor").get<double>(), s.at("original_max_position").get<double>()};
  }
  c.max_position = m.at("max_position").get<int64_t>();
  c.deterministic = m.at("deterministic").get<bool>();
  return c;
}

AttentionMixer::AttentionMixer(const AttentionConfig& cfg, const MixerContext& ctx) : cfg_(cfg) {
  const int64_t C = ctx.d_model, Hq = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_dim, Dv = cfg.v_head_dim;
  const ParamInit w = ParamInit::normal(ctx.init_std);
  q_proj_ = register_module("q_proj", std::make_unique<Linear>(C, Hq * D, cfg.qkv_bias, w));
  k_proj_ = register_module("k_proj", std::make_unique<Linear>(C, Hkv * D, cfg.qkv_bias, w));
  v_proj_ = register_module("v_proj", std::make_unique<Linear>(C, Hkv * Dv, cfg.qkv_bias, w));
  o_proj_ = register_module("o_proj", std::make_unique<Linear>(Hq * Dv, C, cfg.o_bias, ParamInit::normal(ctx.residual_std())));
  if (cfg.qk_norm == "rms") {
    q_norm_ = register_parameter("q_norm.weight", {D}, ParamInit::constant(1.0));
    k_norm_ = register_parameter("k_norm.weight", {D}, ParamInit::constant(1.0));
  }
  if (cfg.logits == "cosine")
    logit_scale_ = register_parameter("logit_scale", {Hq}, ParamInit::constant(std::log(cfg.cosine_logit_scale_init)));
}

Var AttentionMixer::forward(const Var& x) {
  HYB_CHECK(x.dim() == 3, "attention: x must be (B, T, C), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1);
  Var q = reshape(q_proj_->forward(x), {B, T, cfg_.num_heads, cfg_.head_dim});
  Var k = reshape(k_proj_->forward(x), {B, T, cfg_.num_kv_heads, cfg_.head_dim});
  Var v = reshape(v_proj_->forward(x), {B, T, cfg_.num_kv_heads, cfg_.v_head_dim});
  if (cfg_.qk_norm == "rms") {
    q = rmsnorm(q, compute_view(q_norm_, q.dtype()), cfg_.qk_norm_eps);
    k = rmsnorm(k, compute_view(k_norm_, k.dtype()), cfg_.qk_norm_eps);
  }
  if (cfg_.logits == "cosine") {
    q = l2norm(q);
    k = l2norm(k);
  }
  if (cfg_.rope) {
    if (!rope_.cos.defined() || rope_.cos.device() != x.device() || rope_.cos.size(0) < T)
      rope_ = rope_table(cfg_.rope_theta, cfg_.rope_dim, std::max(cfg_.max_position, T), cfg_.rope_scaling, x.device());
    q = rope(q, rope_);
    k = rope(k, rope_);
  }
  AttentionParams p;
  p.scale = cfg_.softmax_scale;
  p.window = cfg_.window;
  p.sinks = cfg_.sinks;
  p.deterministic = cfg_.deterministic;
  Var o = cfg_.logits == "cosine"
              ? attention_with_lse(q, k, v, logit_scale(logit_scale_, cfg_.cosine_logit_scale_max), p).o
              : attention(q, k, v, p);
  return o_proj_->forward(reshape(o, {B, T, cfg_.num_heads * cfg_.v_head_dim}));
}

std::unique_ptr<Mixer> make_attention_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<AttentionMixer>(attention_config_from_json(mixer), ctx);
}

}  // namespace hyb
