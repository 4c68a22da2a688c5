#include "layers/gated_deltanet/gated_deltanet.h"

#include <cmath>

#include "autograd/ops/cast.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"
#include "layers/conv1d/conv1d_op.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"
#include "layers/norm/gated_rmsnorm_op.h"
#include "layers/norm/l2norm_op.h"
#include "layers/norm/rmsnorm_op.h"
#include "layers/ssm_decay/ssm_decay_init.h"
#include "layers/ssm_decay/ssm_decay_op.h"

namespace hyb {

using json = nlohmann::json;

GatedDeltaNetConfig gated_deltanet_config_from_json(const json& m) {
  GatedDeltaNetConfig c;
  c.d_model = m.at("d_model").get<int64_t>();
  c.num_heads = m.at("num_heads").get<int64_t>();
  c.num_v_heads = m.at("num_v_heads").get<int64_t>();
  c.head_dim = m.at("head_dim").get<int64_t>();
  c.v_head_dim = int64_t(m.at("expand_v").get<double>() * double(c.head_dim));
  c.use_short_conv = m.at("use_short_conv").get<bool>();
  c.conv_size = m.at("conv_size").get<int64_t>();
  c.conv_bias = m.at("conv_bias").get<bool>();
  c.use_gate = m.at("use_gate").get<bool>();
  c.allow_neg_eigval = m.at("allow_neg_eigval").get<bool>();
  c.qk_l2norm_eps = m.at("qk_l2norm_eps").get<double>();
  c.scale = m.at("scale").get<double>();
  c.norm_eps = m.at("norm_eps").get<double>();
  c.A_init_range = {m.at("A_init_range").at(0).get<double>(), m.at("A_init_range").at(1).get<double>()};
  c.dt_min = m.at("dt_min").get<double>();
  c.dt_max = m.at("dt_max").get<double>();
  c.dt_init_floor = m.at("dt_init_floor").get<double>();
  c.initializer_range = m.at("initializer_range").get<double>();
  c.chunk_size = m.at("chunk_size").get<int64_t>();
  return c;
}

// Parameters and their initialization: gated_deltanet.md 2.1 under init "family" (FLA's N(0, std)
// for every Linear and conv weight); under init "gpt2" the Linear weights follow config.md 3.8 and
// the convs keep the family rule.
GatedDeltaNetMixer::GatedDeltaNetMixer(const GatedDeltaNetConfig& cfg, const MixerContext& ctx) : cfg_(cfg) {
  const int64_t d = cfg.d_model, kd = cfg.key_dim(), vd = cfg.value_dim(), HV = cfg.num_v_heads, W = cfg.conv_size;
  const bool gpt2 = ctx.init == "gpt2";
  const ParamInit family = ParamInit::normal(cfg.initializer_range);
  const ParamInit proj = gpt2 ? ParamInit::normal(ctx.init_std) : family;
  auto linear = [&](const char* name, int64_t in, int64_t out, const ParamInit& init) {
    return register_module(name, std::make_unique<Linear>(in, out, false, init));
  };
  q_proj_ = linear("q_proj", d, kd, proj);
  k_proj_ = linear("k_proj", d, kd, proj);
  v_proj_ = linear("v_proj", d, vd, proj);
  a_proj_ = linear("a_proj", d, HV, proj);
  b_proj_ = linear("b_proj", d, HV, proj);
  A_log_ = register_parameter("A_log", {HV}, a_log_init(cfg.A_init_range.first, cfg.A_init_range.second), false);
  dt_bias_ = register_parameter("dt_bias", {HV}, dt_bias_init(cfg.dt_min, cfg.dt_max, cfg.dt_init_floor), false);
  if (cfg.use_short_conv) {
    q_conv_w_ = register_parameter("q_conv1d.weight", {kd, 1, W}, family);
    k_conv_w_ = register_parameter("k_conv1d.weight", {kd, 1, W}, family);
    v_conv_w_ = register_parameter("v_conv1d.weight", {vd, 1, W}, family);
    if (cfg.conv_bias) {
      q_conv_b_ = register_parameter("q_conv1d.bias", {kd}, ParamInit::constant(0.0));
      k_conv_b_ = register_parameter("k_conv1d.bias", {kd}, ParamInit::constant(0.0));
      v_conv_b_ = register_parameter("v_conv1d.bias", {vd}, ParamInit::constant(0.0));
    }
  }
  if (cfg.use_gate) g_proj_ = linear("g_proj", d, vd, proj);
  o_norm_ = register_parameter("o_norm.weight", {cfg.v_head_dim}, ParamInit::constant(1.0), false);
  o_proj_ = linear("o_proj", vd, d, gpt2 ? ParamInit::normal(ctx.residual_std()) : family);
}

Var GatedDeltaNetMixer::short_conv(const Var& lin, const Var& weight, const Var& bias, Tensor* cache) {
  if (!cfg_.use_short_conv) return silu(lin);
  const DType dt = lin.dtype();
  Var out = causal_conv1d_silu(lin, reshape(compute_view(weight, dt), {weight.size(0), cfg_.conv_size}),
                               bias.defined() ? compute_view(bias, dt) : Var(), cache ? Var(*cache) : Var());
  if (cache) *cache = conv1d_next_state(*cache, lin.data(), cfg_.conv_size);
  return out;
}

// gated_deltanet.md 2.2, steps 1-9. beta and the decay run in the state dtype: f32 under bf16.
Var GatedDeltaNetMixer::run(const Var& x, GatedDeltaNetState* st) {
  HYB_CHECK(x.dim() == 3 && x.size(2) == cfg_.d_model, "gated_deltanet: x must be (B, T, d_model = ", cfg_.d_model,
            "), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), H = cfg_.num_heads, HV = cfg_.num_v_heads, K = cfg_.head_dim,
                V = cfg_.v_head_dim;
  const DType dt = x.dtype(), sdt = dt == DType::bf16 ? DType::f32 : dt;
  // 1-3: projections, short convs + SiLU, heads.
  const bool convs = st && cfg_.use_short_conv;
  Var q = reshape(short_conv(q_proj_->forward(x), q_conv_w_, q_conv_b_, convs ? &st->q_conv : nullptr), {B, T, H, K});
  Var k = reshape(short_conv(k_proj_->forward(x), k_conv_w_, k_conv_b_, convs ? &st->k_conv : nullptr), {B, T, H, K});
  Var v = reshape(short_conv(v_proj_->forward(x), v_conv_w_, v_conv_b_, convs ? &st->v_conv : nullptr), {B, T, HV, V});
  // 4: per-head L2 norm, eps inside the square root of the sum.
  q = l2norm(q, cfg_.qk_l2norm_eps, L2NormEps::in_sqrt);
  k = l2norm(k, cfg_.qk_l2norm_eps, L2NormEps::in_sqrt);
  // 5-6: beta and the decay.
  Var beta = sigmoid(cast(b_proj_->forward(x), sdt));
  if (cfg_.allow_neg_eigval) beta = mul_scalar(beta, 2.0);
  Var g = ssm_decay(cast(a_proj_->forward(x), sdt), compute_view(dt_bias_, sdt), compute_view(A_log_, sdt), 0.0,
                    INFINITY).g;
  // 7: the delta rule.
  GatedDeltaParams core;
  core.scale = cfg_.scale;
  GatedDeltaVars rule = gated_delta_rule(q, k, v, beta, g, st ? Var(st->S) : Var(), core);
  // 8: per-head RMSNorm with one shared (V,) gain, then the SiLU gate.
  const Var w = compute_view(o_norm_, dt);
  Var o = cfg_.use_gate ? gated_rmsnorm(rule.o, reshape(g_proj_->forward(x), {B, T, HV, V}), w, cfg_.norm_eps,
                                        GatedNormOrder::norm_then_gate)
                        : rmsnorm(rule.o, w, cfg_.norm_eps);
  if (st) {
    st->S = rule.final_state.data();
    st->n_seen += T;
  }
  // 9.
  return o_proj_->forward(reshape(o, {B, T, cfg_.value_dim()}));
}

Var GatedDeltaNetMixer::forward(const Var& x) { return run(x, nullptr); }

std::unique_ptr<DecodeState> GatedDeltaNetMixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto s = std::make_unique<GatedDeltaNetState>();
  if (cfg_.use_short_conv) {
    const int64_t keep = cfg_.conv_size - 1;
    s->q_conv = Tensor::zeros({batch, keep, cfg_.key_dim()}, dtype, device);
    s->k_conv = Tensor::zeros({batch, keep, cfg_.key_dim()}, dtype, device);
    s->v_conv = Tensor::zeros({batch, keep, cfg_.value_dim()}, dtype, device);
  }
  const DType sdt = dtype == DType::bf16 ? DType::f32 : dtype;
  s->S = Tensor::zeros({batch, cfg_.num_v_heads, cfg_.head_dim, cfg_.v_head_dim}, sdt, device);
  return s;
}

Var GatedDeltaNetMixer::decode(const Var& x, DecodeState& state) {
  return run(x, &dynamic_cast<GatedDeltaNetState&>(state));
}

std::unique_ptr<Mixer> make_gated_deltanet_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<GatedDeltaNetMixer>(gated_deltanet_config_from_json(mixer), ctx);
}

}  // namespace hyb
