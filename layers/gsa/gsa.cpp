#include "layers/gsa/gsa.h"

#include "autograd/ops/cast.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"
#include "layers/conv1d/conv1d_op.h"
#include "layers/gsa/gsa_op.h"
#include "layers/norm/rmsnorm_op.h"

namespace hyb {

using json = nlohmann::json;

GsaConfig gsa_config_from_json(const json& m) {
  GsaConfig c;
  c.d_model = m.at("d_model").get<int64_t>();
  c.num_heads = m.at("num_heads").get<int64_t>();
  c.num_kv_heads = m.at("num_kv_heads").get<int64_t>();
  c.head_k_dim = int64_t(m.at("expand_k").get<double>() * double(c.d_model)) / c.num_heads;
  c.head_v_dim = int64_t(m.at("expand_v").get<double>() * double(c.d_model)) / c.num_heads;
  c.num_slots = m.at("num_slots").get<int64_t>();
  c.gate_logit_normalizer = m.at("gate_logit_normalizer").get<double>();
  c.scale = m.at("scale").get<double>();
  c.norm_eps = m.at("norm_eps").get<double>();
  c.use_short_conv = m.at("use_short_conv").get<bool>();
  c.conv_bias = m.at("conv_bias").get<bool>();
  c.conv_size = m.at("conv_size").get<int64_t>();
  c.elementwise_affine = m.at("elementwise_affine").get<bool>();
  c.feature_map = m.at("feature_map").get<std::string>();
  c.save_chunk_states = m.at("save_chunk_states").get<bool>();
  return c;
}

// Parameters (gsa.md 5.1): every Linear and conv weight N(0, init_std) (FLA's initializer_range, the
// model's init_std); under init "gpt2" o_proj takes the residual std (config.md 3.8).
GsaMixer::GsaMixer(const GsaConfig& cfg, const MixerContext& ctx) : cfg_(cfg) {
  const int64_t d = cfg.d_model, Hq = cfg.num_heads, Hkv = cfg.num_kv_heads, K = cfg.head_k_dim, V = cfg.head_v_dim,
                M = cfg.num_slots, W = cfg.conv_size;
  const ParamInit family = ParamInit::normal(ctx.init_std);
  auto linear = [&](const char* name, int64_t in, int64_t out, const ParamInit& init) {
    return register_module(name, std::make_unique<Linear>(in, out, false, init));
  };
  q_proj_ = linear("q_proj", d, Hq * K, family);
  k_proj_ = linear("k_proj", d, Hkv * K, family);
  v_proj_ = linear("v_proj", d, Hkv * V, family);
  f_proj_ = linear("f_proj", d, Hkv * M, family);
  if (cfg.use_short_conv) {
    q_conv_w_ = register_parameter("q_conv1d.weight", {Hq * K, 1, W}, family);
    k_conv_w_ = register_parameter("k_conv1d.weight", {Hkv * K, 1, W}, family);
    v_conv_w_ = register_parameter("v_conv1d.weight", {Hkv * V, 1, W}, family);
    if (cfg.conv_bias) {
      q_conv_b_ = register_parameter("q_conv1d.bias", {Hq * K}, ParamInit::constant(0.0));
      k_conv_b_ = register_parameter("k_conv1d.bias", {Hkv * K}, ParamInit::constant(0.0));
      v_conv_b_ = register_parameter("v_conv1d.bias", {Hkv * V}, ParamInit::constant(0.0));
    }
  }
  if (cfg.feature_map == "t2r") feature_layer_ = linear("feature_map.layer", K, K, family);
  if (cfg.elementwise_affine) g_norm_ = register_parameter("g_norm.weight", {Hq * V}, ParamInit::constant(1.0), false);
  o_proj_ = linear("o_proj", Hq * V, d, ctx.init == "gpt2" ? ParamInit::normal(ctx.residual_std()) : family);
}

Var GsaMixer::feature_map(const Var& x) const {
  if (cfg_.feature_map == "relu") return relu(x);
  if (cfg_.feature_map == "t2r") return relu(feature_layer_->forward(x));
  return silu(x);
}

Var GsaMixer::short_conv(const Var& lin, const Var& weight, const Var& bias, Tensor* cache) {
  if (!cfg_.use_short_conv) return lin;
  const DType dt = lin.dtype();
  Var out = causal_conv1d_silu(lin, reshape(compute_view(weight, dt), {weight.size(0), cfg_.conv_size}),
                               bias.defined() ? compute_view(bias, dt) : Var(), cache ? Var(*cache) : Var());
  if (cache) *cache = conv1d_next_state(*cache, lin.data(), cfg_.conv_size);
  return out;
}

// gsa.md 5.2, steps 1-7. f, g and s run in the state dtype: f32 under bf16.
Var GsaMixer::run(const Var& x, GsaState* st) {
  HYB_CHECK(x.dim() == 3 && x.size(2) == cfg_.d_model, "gsa: x must be (B, T, d_model = ", cfg_.d_model, "), got ",
            shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), Hq = cfg_.num_heads, Hkv = cfg_.num_kv_heads, K = cfg_.head_k_dim,
                V = cfg_.head_v_dim, M = cfg_.num_slots;
  const DType dt = x.dtype(), sdt = dt == DType::bf16 ? DType::f32 : dt;
  const bool convs = st && cfg_.use_short_conv;
  // 1-4: projections, short convs, heads, the feature map on q and k, SiLU on v (twice with convs, as FLA).
  Var q = feature_map(reshape(short_conv(q_proj_->forward(x), q_conv_w_, q_conv_b_, convs ? &st->q_conv : nullptr), {B, T, Hq, K}));
  Var k = feature_map(reshape(short_conv(k_proj_->forward(x), k_conv_w_, k_conv_b_, convs ? &st->k_conv : nullptr), {B, T, Hkv, K}));
  Var v = silu(reshape(short_conv(v_proj_->forward(x), v_conv_w_, v_conv_b_, convs ? &st->v_conv : nullptr), {B, T, Hkv, V}));
  // 5: g = logsigmoid(f) / tau, s = 1 - exp(g).
  Var g = mul_scalar(logsigmoid(reshape(cast(f_proj_->forward(x), sdt), {B, T, Hkv, M})), 1.0 / cfg_.gate_logit_normalizer);
  Var s = add_scalar(neg(exp(g)), 1.0);
  // 6.
  GsaParams core;
  core.scale = cfg_.scale;
  core.save_chunk_states = cfg_.save_chunk_states;
  GsaVars r = gsa(q, k, v, s, g, st ? Var(st->Hk) : Var(), st ? Var(st->Hv) : Var(), core);
  if (st) {
    st->Hk = r.Hk.data();
    st->Hv = r.Hv.data();
    st->n_seen += T;
  }
  // 7: SiLU, RMSNorm over all Hq V channels, o_proj.
  const Var w = cfg_.elementwise_affine ? compute_view(g_norm_, dt) : Var(Tensor::full({Hq * V}, 1.0, dt, x.device()));
  return o_proj_->forward(rmsnorm(silu(reshape(r.o, {B, T, Hq * V})), w, cfg_.norm_eps));
}

Var GsaMixer::forward(const Var& x) { return run(x, nullptr); }

std::unique_ptr<DecodeState> GsaMixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto s = std::make_unique<GsaState>();
  const int64_t Hq = cfg_.num_heads, Hkv = cfg_.num_kv_heads, K = cfg_.head_k_dim, V = cfg_.head_v_dim;
  if (cfg_.use_short_conv) {
    const int64_t keep = cfg_.conv_size - 1;
    s->q_conv = Tensor::zeros({batch, keep, Hq * K}, dtype, device);
    s->k_conv = Tensor::zeros({batch, keep, Hkv * K}, dtype, device);
    s->v_conv = Tensor::zeros({batch, keep, Hkv * V}, dtype, device);
  }
  const DType sdt = dtype == DType::bf16 ? DType::f32 : dtype;
  s->Hk = Tensor::zeros({batch, Hkv, K, cfg_.num_slots}, sdt, device);
  s->Hv = Tensor::zeros({batch, Hkv, cfg_.num_slots, V}, sdt, device);
  return s;
}

Var GsaMixer::decode(const Var& x, DecodeState& state) { return run(x, &dynamic_cast<GsaState&>(state)); }

std::unique_ptr<Mixer> make_gsa_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<GsaMixer>(gsa_config_from_json(mixer), ctx);
}

}  // namespace hyb
