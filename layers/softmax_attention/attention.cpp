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

AttentionMixer::AttentionMixer(const AttentionConfig& cfg, const MixerContext& ctx, bool o_proj)
    : cfg_(cfg), max_seq_len_(ctx.max_seq_len) {
  const int64_t C = ctx.d_model, Hq = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_dim, Dv = cfg.v_head_dim;
  const ParamInit w = ParamInit::normal(ctx.init_std);
  q_proj_ = register_module("q_proj", std::make_unique<Linear>(C, Hq * D, cfg.qkv_bias, w));
  k_proj_ = register_module("k_proj", std::make_unique<Linear>(C, Hkv * D, cfg.qkv_bias, w));
  v_proj_ = register_module("v_proj", std::make_unique<Linear>(C, Hkv * Dv, cfg.qkv_bias, w));
  if (o_proj)
    o_proj_ = register_module("o_proj", std::make_unique<Linear>(Hq * Dv, C, cfg.o_bias, ParamInit::normal(ctx.residual_std())));
  if (cfg.qk_norm == "rms") {
    q_norm_ = register_parameter("q_norm.weight", {D}, ParamInit::constant(1.0));
    k_norm_ = register_parameter("k_norm.weight", {D}, ParamInit::constant(1.0));
  }
  if (cfg.logits == "cosine")
    logit_scale_ = register_parameter("logit_scale", {Hq}, ParamInit::constant(std::log(cfg.cosine_logit_scale_init)));
}

AttentionMixer::Qkv AttentionMixer::project(const Var& x, int64_t offset) {
  HYB_CHECK(x.dim() == 3, "attention: x must be (B, T, C), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1);
  Qkv r;
  r.q = reshape(q_proj_->forward(x), {B, T, cfg_.num_heads, cfg_.head_dim});
  r.k = reshape(k_proj_->forward(x), {B, T, cfg_.num_kv_heads, cfg_.head_dim});
  r.v = reshape(v_proj_->forward(x), {B, T, cfg_.num_kv_heads, cfg_.v_head_dim});
  if (cfg_.qk_norm == "rms") {
    r.q = rmsnorm(r.q, compute_view(q_norm_, r.q.dtype()), cfg_.qk_norm_eps);
    r.k = rmsnorm(r.k, compute_view(k_norm_, r.k.dtype()), cfg_.qk_norm_eps);
  }
  if (cfg_.logits == "cosine") {
    r.q = l2norm(r.q);
    r.k = l2norm(r.k);
  }
  if (cfg_.rope) {
    const int64_t need = offset + T;
    if (!rope_.cos.defined() || rope_.cos.device() != x.device() || rope_.cos.size(0) < need) {
      // Decoding past the table doubles it, so positions stay exact (fp64 angles) at any length.
      int64_t len = std::max(cfg_.max_position, int64_t(1));
      while (len < need) len *= 2;
      rope_ = rope_table(cfg_.rope_theta, cfg_.rope_dim, len, cfg_.rope_scaling, x.device());
    }
    r.q = rope(r.q, rope_, offset);
    r.k = rope(r.k, rope_, offset);
  }
  return r;
}

AttentionParams AttentionMixer::core_params() const {
  AttentionParams p;
  p.scale = cfg_.softmax_scale;
  p.window = cfg_.window;
  p.sinks = cfg_.sinks;
  p.deterministic = cfg_.deterministic;
  return p;
}

Var AttentionMixer::attend(const Qkv& qkv, const AttentionParams& p) {
  const int64_t B = qkv.q.size(0), T = qkv.q.size(1);
  Var o = cfg_.logits == "cosine"
              ? attention_with_lse(qkv.q, qkv.k, qkv.v, logit_scale(logit_scale_, cfg_.cosine_logit_scale_max), p).o
              : attention(qkv.q, qkv.k, qkv.v, p);
  return reshape(o, {B, T, cfg_.num_heads * cfg_.v_head_dim});
}

Var AttentionMixer::project_out(const Var& heads) const { return o_proj_ ? o_proj_->forward(heads) : heads; }

Var AttentionMixer::heads(const Var& x) { return attend(project(x, 0), core_params()); }

Var AttentionMixer::forward(const Var& x) { return project_out(heads(x)); }

int64_t AttentionMixer::cache_slot(int64_t p) const {
  if (cfg_.window == 0 || p < cfg_.sinks) return p;
  return cfg_.sinks + (p - cfg_.sinks) % cfg_.window;
}

std::unique_ptr<DecodeState> AttentionMixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto c = std::make_unique<AttentionCache>();
  const int64_t cap = cfg_.window > 0 ? cfg_.sinks + cfg_.window : std::max<int64_t>(max_seq_len_, 1);
  c->k = Tensor::zeros({batch, cap, cfg_.num_kv_heads, cfg_.head_dim}, dtype, device);
  c->v = Tensor::zeros({batch, cap, cfg_.num_kv_heads, cfg_.v_head_dim}, dtype, device);
  return c;
}

// A full layer's cache doubles when a position passes its end; a window layer's never has to.
void AttentionMixer::reserve(AttentionCache& c, int64_t slots) {
  const int64_t cap = c.k.size(1);
  if (slots <= cap) return;
  HYB_ASSERT(cfg_.window == 0, "a window layer's cache has a fixed size");
  int64_t n = cap;
  while (n < slots) n *= 2;
  auto grow = [&](const Tensor& t) {
    Shape s = t.shape();
    s[1] = n;
    Tensor g = Tensor::zeros(s, t.dtype(), t.device());
    g.narrow(1, 0, cap).copy_(t);
    return g;
  };
  c.k = grow(c.k);
  c.v = grow(c.v);
}

// One token at position p = n_seen: its key and value go to slot(p) first (the slot it evicts, p - w,
// is no longer visible to p), then the query attends to every valid slot. Positions are baked into
// the keys by RoPE and the softmax ignores slot order, so no mask is needed.
Var AttentionMixer::decode_one(const Var& x, AttentionCache& c) {
  const int64_t p = c.n_seen;
  Qkv qkv = project(x, p);
  const int64_t slot = cache_slot(p);
  reserve(c, slot + 1);
  c.k.narrow(1, slot, 1).copy_(qkv.k.data());
  c.v.narrow(1, slot, 1).copy_(qkv.v.data());
  const int64_t valid = std::min(p + 1, c.k.size(1));
  AttentionParams all = core_params();
  all.window = 0;
  all.sinks = 0;
  Qkv cached{qkv.q, Var(c.k.narrow(1, 0, valid)), Var(c.v.narrow(1, 0, valid))};
  ++c.n_seen;
  return attend(cached, all);
}

Var AttentionMixer::decode(const Var& x, DecodeState& state) { return project_out(decode_heads(x, state)); }

Var AttentionMixer::decode_heads(const Var& x, DecodeState& state) {
  auto& c = dynamic_cast<AttentionCache&>(state);
  const int64_t n = x.size(1);
  if (c.n_seen == 0 && n > 1) {
    // Prefill: the training computation over the prompt, then the positions that stay visible go
    // to their slots (sinks and the last w, or all of them for a full layer).
    Qkv qkv = project(x, 0);
    Var out = attend(qkv, core_params());
    for (int64_t p = 0; p < n; ++p) {
      const bool keep = cfg_.window == 0 || p < cfg_.sinks || p >= std::max(cfg_.sinks, n - cfg_.window);
      if (!keep) continue;
      reserve(c, cache_slot(p) + 1);
      c.k.narrow(1, cache_slot(p), 1).copy_(qkv.k.data().narrow(1, p, 1));
      c.v.narrow(1, cache_slot(p), 1).copy_(qkv.v.data().narrow(1, p, 1));
    }
    c.n_seen = n;
    return out;
  }
  std::vector<Var> outs;
  for (int64_t t = 0; t < n; ++t) outs.push_back(decode_one(n == 1 ? x : narrow(x, 1, t, 1), c));
  return n == 1 ? outs[0] : concat(outs, 1);
}

std::unique_ptr<Mixer> make_attention_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<AttentionMixer>(attention_config_from_json(mixer), ctx);
}

}  // namespace hyb
