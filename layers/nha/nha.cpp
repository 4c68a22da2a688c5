#include "layers/nha/nha.h"

#include "autograd/ops/binary.h"
#include "autograd/ops/cast.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"
#include "layers/conv1d/conv1d_op.h"
#include "layers/nha/nha_op.h"
#include "layers/norm/rmsnorm_op.h"

namespace hyb {

using json = nlohmann::json;

int64_t NhaConfig::window_keys() const {
  if (window < 0) return -1;
  return window + (window_includes_current ? 0 : 1);
}

int64_t NhaConfig::shift() const { return token_shift ? window_keys() : 0; }

NhaConfig nha_config_from_json(const json& m) {
  NhaConfig c;
  c.d_model = m.at("d_model").get<int64_t>();
  c.num_heads = m.at("num_heads").get<int64_t>();
  c.num_kv_heads = m.at("num_kv_heads").get<int64_t>();
  c.head_dim = m.at("head_dim").get<int64_t>();
  c.value_head_dim = m.at("value_head_dim").get<int64_t>();
  c.slots = m.at("slots").get<int64_t>();
  c.window = m.at("window").get<int64_t>();
  c.token_shift = m.at("token_shift").get<bool>();
  c.window_includes_current = m.at("window_includes_current").get<bool>();
  c.fusion = m.at("fusion").get<std::string>();
  c.fusion_weight = m.at("fusion_weight").get<double>();
  c.pos_enc = m.at("pos_enc").get<std::string>();
  c.rope_theta = m.at("rope_theta").get<double>();
  c.scale = m.at("scale").get<double>();
  c.gate_logit_normalizer = m.at("gate_logit_normalizer").get<double>();
  c.value_silu = m.at("value_act").get<std::string>() == "silu";
  c.output_norm_eps = m.at("output_norm_eps").get<double>();
  c.use_short_conv = m.at("use_short_conv").get<bool>();
  c.conv_size = m.at("conv_size").get<int64_t>();
  c.emit_long_ratio = m.at("emit_long_ratio").get<bool>();
  return c;
}

// Parameters (nha.md 7.1): every Linear and conv weight N(0, init_std) without the official rescale
// (config.md 3.8); under init "gpt2" o_proj takes the residual std. fusion_proj starts at 0 (lambda
// = 1/2, nha.md 8.2) and pos_bias at 0 (8.3).
NhaMixer::NhaMixer(const NhaConfig& cfg, const MixerContext& ctx)
    : cfg_(cfg), configured_window_(cfg.window), max_seq_len_(ctx.max_seq_len) {
  const int64_t d = cfg.d_model, Hq = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_dim,
                Dv = cfg.value_head_dim, M = cfg.slots, W = cfg.conv_size;
  const ParamInit family = ParamInit::normal(ctx.init_std);
  auto linear = [&](const char* name, int64_t in, int64_t out, bool bias, const ParamInit& init) {
    return register_module(name, std::make_unique<Linear>(in, out, bias, init));
  };
  q_proj_ = linear("q_proj", d, Hq * D, false, family);
  k_proj_ = linear("k_proj", d, Hkv * D, false, family);
  v_proj_ = linear("v_proj", d, Hkv * Dv, false, family);
  if (M > 0) f_proj_ = linear("f_proj", d, Hkv * M, false, family);
  if (cfg.use_short_conv) {
    q_conv_w_ = register_parameter("q_conv1d.weight", {Hq * D, 1, W}, family);
    k_conv_w_ = register_parameter("k_conv1d.weight", {Hkv * D, 1, W}, family);
    v_conv_w_ = register_parameter("v_conv1d.weight", {Hkv * Dv, 1, W}, family);
  }
  if (cfg.fusion == "weighted_learned") fusion_proj_ = linear("fusion_proj", d, Hq, true, ParamInit::constant(0.0));
  if (cfg.pos_enc == "learned_short" && cfg.window_keys() != 0) {
    // One bias per distance the window can hold: w, or max_seq_len for a full window.
    const int64_t nb = cfg.window_keys() < 0 ? ctx.max_seq_len : cfg.window_keys();
    HYB_CHECK(nb > 0, "nha: pos_enc learned_short with a full window needs model.max_seq_len > 0");
    pos_bias_ = register_parameter("pos_bias", {Hq, nb}, ParamInit::constant(0.0), false);
  }
  g_norm_ = register_parameter("g_norm.weight", {Hq * Dv}, ParamInit::constant(1.0), false);
  o_proj_ = linear("o_proj", Hq * Dv, d, false, ctx.init == "gpt2" ? ParamInit::normal(ctx.residual_std()) : family);
}

Var NhaMixer::short_conv(const Var& lin, const Var& weight, Tensor* cache) {
  if (!cfg_.use_short_conv) return lin;
  const DType dt = lin.dtype();
  Var out = causal_conv1d_silu(lin, reshape(compute_view(weight, dt), {weight.size(0), cfg_.conv_size}), Var(),
                               cache ? Var(*cache) : Var());
  if (cache) *cache = conv1d_next_state(*cache, lin.data(), cfg_.conv_size);
  return out;
}

// nha.md 7.2 with the variants of 8.2-8.3. With a state, the op runs on [ring ; x's tokens] from the
// carried memories and only the new rows are kept (nha.md 9).
Var NhaMixer::run(const Var& x, NhaState* st) {
  HYB_CHECK(x.dim() == 3 && x.size(2) == cfg_.d_model, "nha: x must be (B, T, d_model = ", cfg_.d_model, "), got ",
            shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), Hq = cfg_.num_heads, Hkv = cfg_.num_kv_heads, D = cfg_.head_dim,
                Dv = cfg_.value_head_dim, M = cfg_.slots, Wk = cfg_.window_keys(), shift = cfg_.shift();
  const DType dt = x.dtype(), sdt = dt == DType::bf16 ? DType::f32 : dt;
  const int64_t pos = st ? st->n_seen : 0;
  const bool convs = st && cfg_.use_short_conv;
  Var q = reshape(short_conv(q_proj_->forward(x), q_conv_w_, convs ? &st->q_conv : nullptr), {B, T, Hq, D});
  Var k = reshape(short_conv(k_proj_->forward(x), k_conv_w_, convs ? &st->k_conv : nullptr), {B, T, Hkv, D});
  Var v = reshape(short_conv(v_proj_->forward(x), v_conv_w_, convs ? &st->v_conv : nullptr), {B, T, Hkv, Dv});
  if (cfg_.value_silu) v = silu(v);
  Var s, g;
  if (M > 0) {
    g = mul_scalar(logsigmoid(reshape(cast(f_proj_->forward(x), sdt), {B, T, Hkv, M})), 1.0 / cfg_.gate_logit_normalizer);
    s = add_scalar(neg(exp(g)), 1.0);
  }
  if (cfg_.pos_enc == "rope_short_long") {
    // Both branches see rotated q, k: rotate before the op, which then applies no RoPE of its own.
    const int64_t need = pos + T;
    if (!rope_.cos.defined() || rope_.cos.device() != x.device() || rope_.cos.size(0) < need) {
      int64_t len = std::max<int64_t>(max_seq_len_, 1);
      while (len < need) len *= 2;
      rope_ = rope_table(cfg_.rope_theta, D, len, std::nullopt, x.device());
    }
    q = rope(q, rope_, pos);
    k = rope(k, rope_, pos);
  }
  // Decoding: prepend the ring of the last r tokens' op inputs; their rows are recomputed and dropped.
  const int64_t r = st && st->ring_k.defined() ? st->ring_k.size(1) : 0;
  Var kx = k, vx = v, sx = s, gx = g, qx = q;
  if (r > 0) {
    qx = concat({Var(Tensor::zeros({B, r, Hq, D}, dt, x.device())), q}, 1);
    kx = concat({Var(st->ring_k), k}, 1);
    vx = concat({Var(st->ring_v), v}, 1);
    if (M > 0) {
      sx = concat({Var(st->ring_s), s}, 1);
      gx = concat({Var(st->ring_g), g}, 1);
    }
  }
  NhaParams p;
  p.scale = cfg_.scale;
  p.rope = cfg_.pos_enc == "rope_short";
  p.rope_theta = cfg_.rope_theta;
  p.rope_offset = pos - r;
  p.long_ratio = cfg_.emit_long_ratio && cfg_.fusion == "softmax";
  const Var HK0 = st && M > 0 ? Var(st->HK) : Var(), HV0 = st && M > 0 ? Var(st->HV) : Var();
  const Var bias = pos_bias_.defined() ? compute_view(pos_bias_, dt) : Var();
  Var o, HK, HV;
  if (cfg_.fusion == "softmax") {
    p.window = Wk;
    p.shift = shift;
    NhaVars y = nha(qx, kx, vx, sx, gx, HK0, HV0, bias, p);
    o = y.o;
    HK = y.HK;
    HV = y.HV;
    if (p.long_ratio) long_ratio_ = y.long_ratio.narrow(1, r, T).contiguous();
  } else {
    // nha.md 8.2: o = lambda oL + (1 - lambda) oS with two separate softmaxes.
    Var lambda = fusion_proj_ ? unsqueeze(sigmoid(fusion_proj_->forward(x)), 3) : Var();
    if (lambda.defined() && r > 0) lambda = concat({Var(Tensor::zeros({B, r, Hq, 1}, dt, x.device())), lambda}, 1);
    auto weigh = [&](const Var& branch, bool long_branch) {
      const double c = cfg_.fusion_weight;
      if (!lambda.defined()) return mul_scalar(branch, long_branch ? c : 1.0 - c);
      return mul(long_branch ? lambda : add_scalar(neg(lambda), 1.0), branch);
    };
    if (M > 0) {
      p.window = 0;
      p.shift = shift;
      NhaVars y = nha(qx, kx, vx, sx, gx, HK0, HV0, Var(), p);
      o = weigh(y.o, true);
      HK = y.HK;
      HV = y.HV;
    }
    if (Wk != 0) {
      p.window = Wk;
      p.shift = 0;
      Var oS = weigh(nha(qx, kx, vx, Var(), Var(), Var(), Var(), bias, p).o, false);
      o = o.defined() ? add(o, oS) : oS;
    }
    if (cfg_.emit_long_ratio) {
      long_ratio_ = lambda.defined() ? reshape(lambda, {B, r + T, Hq}).data().narrow(1, r, T).contiguous()
                                     : Tensor::full({B, T, Hq}, cfg_.fusion_weight, dt, x.device());
    }
  }
  if (r > 0) o = narrow(o, 1, r, T);
  if (st) {
    if (M > 0) {
      st->HK = HK.data();
      st->HV = HV.data();
    }
    // The ring keeps the last min(w, r + T) rows (all rows for a full window). With shift 0 their
    // tokens are already in the slots: zero s and g make absorbing them again a no-op.
    const int64_t n = r + T, keep = Wk < 0 ? n : std::min(Wk, n);
    if (keep > 0) {
      st->ring_k = kx.data().narrow(1, n - keep, keep).contiguous();
      st->ring_v = vx.data().narrow(1, n - keep, keep).contiguous();
      if (M > 0) {
        st->ring_s = shift == 0 ? Tensor::zeros({B, keep, Hkv, M}, sdt, x.device())
                                : sx.data().narrow(1, n - keep, keep).contiguous();
        st->ring_g = shift == 0 ? Tensor::zeros({B, keep, Hkv, M}, sdt, x.device())
                                : gx.data().narrow(1, n - keep, keep).contiguous();
      }
    }
    st->n_seen += T;
  }
  return o_proj_->forward(rmsnorm(silu(reshape(o, {B, T, Hq * Dv})), compute_view(g_norm_, dt), cfg_.output_norm_eps));
}

bool NhaMixer::set_full_window(bool full) {
  // A learned bias has one entry per distance of the configured window; the config resolver refuses
  // randomised windows with it (config_resolve.cpp).
  HYB_ASSERT(!full || !pos_bias_.defined(), "nha: randomised windows with pos_enc learned_short");
  cfg_.window = full ? -1 : configured_window_;
  return true;
}

Var NhaMixer::forward(const Var& x) { return run(x, nullptr); }

std::unique_ptr<DecodeState> NhaMixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto s = std::make_unique<NhaState>();
  const int64_t Hq = cfg_.num_heads, Hkv = cfg_.num_kv_heads, D = cfg_.head_dim, Dv = cfg_.value_head_dim, M = cfg_.slots;
  if (cfg_.use_short_conv) {
    const int64_t keep = cfg_.conv_size - 1;
    s->q_conv = Tensor::zeros({batch, keep, Hq * D}, dtype, device);
    s->k_conv = Tensor::zeros({batch, keep, Hkv * D}, dtype, device);
    s->v_conv = Tensor::zeros({batch, keep, Hkv * Dv}, dtype, device);
  }
  if (M > 0) {
    const DType sdt = dtype == DType::bf16 ? DType::f32 : dtype;
    s->HK = Tensor::zeros({batch, Hkv, D, M}, sdt, device);
    s->HV = Tensor::zeros({batch, Hkv, M, Dv}, sdt, device);
  }
  return s;
}

Var NhaMixer::decode(const Var& x, DecodeState& state) { return run(x, &dynamic_cast<NhaState&>(state)); }

std::unique_ptr<Mixer> make_nha_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<NhaMixer>(nha_config_from_json(mixer), ctx);
}

}  // namespace hyb
