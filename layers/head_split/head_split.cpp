#include "layers/head_split/head_split.h"

namespace hyb {

using json = nlohmann::json;

namespace {

template <typename E>
E enum_of(const json& v, std::initializer_list<std::pair<const char*, E>> names) {
  for (const auto& [name, e] : names)
    if (v == name) return e;
  HYB_ASSERT(false, "head_split: unresolved value ", v.dump());
  return names.begin()->second;
}

}  // namespace

// The halves take their families' defaults for every key 4.8 does not name (attention.md 10,
// mamba2.md 7): the struct defaults are those tables' defaults.
HeadSplitConfig head_split_config_from_json(const json& m) {
  HeadSplitConfig c;
  const json &attn = m.at("attn"), &ssm = m.at("ssm");
  c.attn.num_heads = attn.at("num_heads").get<int64_t>();
  c.attn.num_kv_heads = attn.at("num_kv_heads").get<int64_t>();
  c.attn.head_dim = attn.at("head_dim").get<int64_t>();
  c.attn.v_head_dim = attn.at("v_head_dim").get<int64_t>();
  c.attn.rope_theta = attn.at("rope_theta").get<double>();
  c.attn.rope_dim = c.attn.head_dim;
  c.ssm.d_ssm = ssm.at("d_ssm").get<int64_t>();
  c.ssm.headdim = ssm.at("headdim").get<int64_t>();
  c.ssm.d_state = ssm.at("d_state").get<int64_t>();
  c.ssm.ngroups = ssm.at("ngroups").get<int64_t>();
  c.ssm.d_conv = ssm.at("d_conv").get<int64_t>();
  c.ssm.chunk_size = ssm.at("chunk_size").get<int64_t>();
  FusionConfig& f = c.fusion;
  f.norm = enum_of<FusionNorm>(m.at("norm"), {{"none", FusionNorm::none}, {"group", FusionNorm::group}});
  f.scalar = enum_of<FusionScalar>(
      m.at("scalar"), {{"none", FusionScalar::none}, {"scale", FusionScalar::scale}, {"gate", FusionScalar::gate}});
  f.op = enum_of<FusionOp>(m.at("fusion"), {{"add", FusionOp::add}, {"diff", FusionOp::diff}, {"conc", FusionOp::conc}});
  f.out_proj = m.at("out_proj").get<int64_t>();
  if (m.contains("scale_init")) f.scale_init = m.at("scale_init").get<double>();
  f.group_norm_eps = m.at("group_norm_eps").get<double>();
  f.attn_head_dim = c.attn.v_head_dim;
  f.ssm_head_dim = c.ssm.headdim;
  return c;
}

// intra_hybrid.md 1.3 is this family's initialization under both settings of model.init: every
// Linear weight N(0, init_std^2), the ones writing into the residual stream (each output projection
// of 4.4) N(0, (init_std / sqrt(2 L))^2). The Mamba half's other parameters keep mamba2.md 2.1.
HeadSplitMixer::HeadSplitMixer(const HeadSplitConfig& cfg, const MixerContext& ctx) : cfg_(cfg) {
  MixerContext half = ctx;
  half.init = "gpt2";
  cfg_.attn.max_position = ctx.max_seq_len;
  cfg_.ssm.d_model = ctx.d_model;
  const FusionConfig& f = cfg_.fusion;
  const bool own = f.out_proj == 2;
  attn_ = register_module("attn", std::make_unique<AttentionMixer>(cfg_.attn, half, own));
  ssm_ = register_module("ssm", std::make_unique<Mamba2Mixer>(cfg_.ssm, half, own));
  const int64_t D_T = cfg_.attn.num_heads * cfg_.attn.v_head_dim, D_M = cfg_.ssm.d_ssm;
  if (!own)
    o_proj_ = register_module("o_proj", std::make_unique<Linear>(f.op == FusionOp::conc ? D_T + D_M : D_T, ctx.d_model, false,
                                                                 ParamInit::normal(ctx.residual_std())));
  if (f.scalar == FusionScalar::scale) {
    attn_scale_ = register_parameter("attn_scale", {D_T}, ParamInit::constant(f.scale_init), false);
    ssm_scale_ = register_parameter("ssm_scale", {D_M}, ParamInit::constant(f.scale_init), false);
  } else if (f.scalar == FusionScalar::gate) {
    gate_logit_ = register_parameter("gate_logit", {D_T}, ParamInit::constant(0.0), false);
  }
}

Var HeadSplitMixer::fuse(const Var& o_T, const Var& o_M) const {
  const DType dt = o_T.dtype();
  auto view = [dt](const Var& p) { return p.defined() ? compute_view(p, dt) : Var(); };
  FusionWeights w;
  w.attn_scale = view(attn_scale_);
  w.ssm_scale = view(ssm_scale_);
  w.gate_logit = view(gate_logit_);
  if (o_proj_) {
    w.o_proj = view(o_proj_->weight());
  } else {
    w.attn_o_proj = view(attn_->o_proj()->weight());
    w.ssm_out_proj = view(ssm_->out_proj()->weight());
  }
  return fuse_halves(o_T, o_M, w, cfg_.fusion);
}

Var HeadSplitMixer::forward(const Var& x) {
  Var o_T, o_M;
  {
    ModuleScope scope("attn");
    o_T = attn_->heads(x);
  }
  {
    ModuleScope scope("ssm");
    o_M = ssm_->heads(x);
  }
  return fuse(o_T, o_M);
}

std::unique_ptr<DecodeState> HeadSplitMixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto s = std::make_unique<HeadSplitState>();
  s->attn = attn_->start_decode(batch, device, dtype);
  s->ssm = ssm_->start_decode(batch, device, dtype);
  return s;
}

Var HeadSplitMixer::decode(const Var& x, DecodeState& state) {
  auto& s = dynamic_cast<HeadSplitState&>(state);
  const Var o_T = attn_->decode_heads(x, *s.attn), o_M = ssm_->decode_heads(x, *s.ssm);
  s.n_seen = s.attn->n_seen;
  return fuse(o_T, o_M);
}

std::unique_ptr<Mixer> make_head_split_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<HeadSplitMixer>(head_split_config_from_json(mixer), ctx);
}

}  // namespace hyb
