#include "layers/mamba2/mamba2.h"

#include <cmath>

#include "autograd/ops/binary.h"
#include "autograd/ops/cast.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"
#include "layers/conv1d/conv1d_op.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/norm/gated_rmsnorm_op.h"
#include "layers/ssm_decay/ssm_decay_init.h"
#include "layers/ssm_decay/ssm_decay_op.h"

namespace hyb {

using json = nlohmann::json;

Mamba2Config mamba2_config_from_json(const json& m) {
  Mamba2Config c;
  c.d_model = m.at("d_model").get<int64_t>();
  c.d_ssm = m.at("d_ssm").get<int64_t>();
  c.headdim = m.at("headdim").get<int64_t>();
  c.d_state = m.at("d_state").get<int64_t>();
  c.ngroups = m.at("ngroups").get<int64_t>();
  c.d_conv = m.at("d_conv").get<int64_t>();
  c.conv_bias = m.at("conv_bias").get<bool>();
  if (!m.at("conv_init").is_null()) c.conv_init = m.at("conv_init").get<double>();
  c.bias = m.at("bias").get<bool>();
  c.A_init_range = {m.at("A_init_range").at(0).get<double>(), m.at("A_init_range").at(1).get<double>()};
  c.dt_min = m.at("dt_min").get<double>();
  c.dt_max = m.at("dt_max").get<double>();
  c.dt_init_floor = m.at("dt_init_floor").get<double>();
  const json& lim = m.at("dt_limit");
  c.dt_limit = {lim.at(0).get<double>(), lim.at(1).is_null() ? INFINITY : lim.at(1).get<double>()};
  c.D_has_hdim = m.at("D_has_hdim").get<bool>();
  c.rmsnorm = m.at("rmsnorm").get<bool>();
  c.norm_before_gate = m.at("norm_before_gate").get<bool>();
  c.norm_eps = m.at("norm_eps").get<double>();
  c.chunk_size = m.at("chunk_size").get<int64_t>();
  c.out_proj_rescale = m.at("out_proj_rescale").get<bool>();
  return c;
}

// Parameters and their initialization: mamba2.md 2.1 under init "family" (mamba_ssm's PyTorch
// defaults and out_proj rescale); under init "gpt2" the two Linear weights follow config.md 3.8.
Mamba2Mixer::Mamba2Mixer(const Mamba2Config& cfg, const MixerContext& ctx, bool out_proj) : cfg_(cfg) {
  const int64_t H = cfg.heads(), d_ssm = cfg.d_ssm, Cc = cfg.conv_channels(), W = cfg.d_conv;
  const bool gpt2 = ctx.init == "gpt2";
  const double in_bound = 1.0 / std::sqrt(double(cfg.d_model)), out_bound = 1.0 / std::sqrt(double(d_ssm));
  const double n_res = ctx.has_mlp ? 2.0 : 1.0;
  const double rescale = cfg.out_proj_rescale ? std::sqrt(n_res * double(ctx.num_layers)) : 1.0;
  in_proj_ = register_module("in_proj", std::make_unique<Linear>(
      cfg.d_model, 2 * d_ssm + 2 * cfg.ngroups * cfg.d_state + H, cfg.bias,
      gpt2 ? ParamInit::normal(ctx.init_std) : ParamInit::uniform(-in_bound, in_bound)));
  const double conv_bound = 1.0 / std::sqrt(double(W));
  const double conv_w = cfg.conv_init.value_or(conv_bound);
  conv_weight_ = register_parameter("conv1d.weight", {Cc, 1, W}, ParamInit::uniform(-conv_w, conv_w));
  if (cfg.conv_bias) conv_bias_ = register_parameter("conv1d.bias", {Cc}, ParamInit::uniform(-conv_bound, conv_bound));
  dt_bias_ = register_parameter("dt_bias", {H}, dt_bias_init(cfg.dt_min, cfg.dt_max, cfg.dt_init_floor), false);
  A_log_ = register_parameter("A_log", {H}, a_log_init(cfg.A_init_range.first, cfg.A_init_range.second), false);
  D_ = register_parameter("D", {cfg.D_has_hdim ? d_ssm : H}, ParamInit::constant(1.0), false);
  if (cfg.rmsnorm) norm_weight_ = register_parameter("norm.weight", {d_ssm}, ParamInit::constant(1.0), false);
  if (out_proj)
    out_proj_ = register_module("out_proj", std::make_unique<Linear>(
        d_ssm, cfg.d_model, cfg.bias,
        gpt2 ? ParamInit::normal(ctx.residual_std())
             : ParamInit::uniform(-out_bound / rescale, out_bound / rescale)));
}

// mamba2.md 2.2, steps 1-8. The decay path (dt, A, g) runs in the state dtype: f32 under bf16.
Var Mamba2Mixer::run(const Var& x, Mamba2State* st) {
  HYB_CHECK(x.dim() == 3 && x.size(2) == cfg_.d_model, "mamba2: x must be (B, T, d_model = ", cfg_.d_model, "), got ",
            shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), H = cfg_.heads(), P = cfg_.headdim, N = cfg_.d_state,
                G = cfg_.ngroups, d_ssm = cfg_.d_ssm, Cc = cfg_.conv_channels(), W = cfg_.d_conv;
  const DType dt = x.dtype(), sdt = dt == DType::bf16 ? DType::f32 : dt;
  // 1-2: one projection, split as [z | x B C | dt].
  std::vector<Var> zxbcdt = split(in_proj_->forward(x), {d_ssm, Cc, H}, -1);
  const Var &z = zxbcdt[0], &xbc = zxbcdt[1], &dt_raw = zxbcdt[2];
  // 3: the conv on x B C only, then SiLU.
  Var act = causal_conv1d_silu(xbc, reshape(compute_view(conv_weight_, dt), {Cc, W}),
                               conv_bias_.defined() ? compute_view(conv_bias_, dt) : Var(),
                               st ? Var(st->conv) : Var());
  std::vector<Var> parts = split(act, {d_ssm, G * N, G * N}, -1);
  const Var xs = reshape(parts[0], {B, T, H, P}), Bm = reshape(parts[1], {B, T, G, N}),
            Cm = reshape(parts[2], {B, T, G, N});
  // 4-5: dt = clamp(softplus(dt_raw + dt_bias)), g = -exp(A_log) dt.
  SsmDecayVars decay = ssm_decay(cast(dt_raw, sdt), compute_view(dt_bias_, sdt), compute_view(A_log_, sdt),
                                 cfg_.dt_limit.first, cfg_.dt_limit.second);
  // 6: the SSD core with q = C, k = B, v = dt x, scale 1.
  SimpleGlaParams core;
  core.scale = 1.0;
  SimpleGlaVars ssd = simple_gla(Cm, Bm, mul(xs, unsqueeze(cast(decay.dt, dt), -1)), decay.g,
                                 st ? Var(st->ssm) : Var(), core);
  // 7: the D skip on the post-conv x.
  const Var D = compute_view(D_, dt);
  Var y = reshape(add(ssd.o, mul(xs, reshape(D, cfg_.D_has_hdim ? Shape{H, P} : Shape{H, 1}))), {B, T, d_ssm});
  // 8: the gated RMSNorm over groups of d_ssm / G channels (or y silu(z) without the norm).
  if (cfg_.rmsnorm) {
    const int64_t Gs = d_ssm / G;
    const GatedNormOrder order = cfg_.norm_before_gate ? GatedNormOrder::norm_then_gate : GatedNormOrder::gate_then_norm;
    y = reshape(gated_rmsnorm(reshape(y, {B, T, G, Gs}), reshape(z, {B, T, G, Gs}),
                              reshape(compute_view(norm_weight_, dt), {G, Gs}), cfg_.norm_eps, order),
                {B, T, d_ssm});
  } else {
    y = mul(y, silu(z));
  }
  if (st) {
    st->conv = conv1d_next_state(st->conv, xbc.data(), W);
    st->ssm = ssd.final_state.data();
    st->n_seen += T;
  }
  return y;
}

// Step 9.
Var Mamba2Mixer::project_out(const Var& y) const { return out_proj_ ? out_proj_->forward(y) : y; }

Var Mamba2Mixer::forward(const Var& x) { return project_out(run(x, nullptr)); }

std::unique_ptr<DecodeState> Mamba2Mixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto s = std::make_unique<Mamba2State>();
  const DType sdt = dtype == DType::bf16 ? DType::f32 : dtype;
  s->conv = Tensor::zeros({batch, cfg_.d_conv - 1, cfg_.conv_channels()}, dtype, device);
  s->ssm = Tensor::zeros({batch, cfg_.heads(), cfg_.d_state, cfg_.headdim}, sdt, device);
  return s;
}

Var Mamba2Mixer::decode(const Var& x, DecodeState& state) { return project_out(decode_heads(x, state)); }

Var Mamba2Mixer::decode_heads(const Var& x, DecodeState& state) { return run(x, &dynamic_cast<Mamba2State&>(state)); }

std::unique_ptr<Mixer> make_mamba2_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<Mamba2Mixer>(mamba2_config_from_json(mixer), ctx);
}

}  // namespace hyb
