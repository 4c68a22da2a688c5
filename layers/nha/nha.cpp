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
  c.save_chunk_states = m.at("save_chunk_states").get<bool>();
  c.save_window_qk = m.at("save_window_qk").get<bool>();
  c.slot_swish = m.at("slot_feature_map").get<std::string>() == "swish";
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

const RopeTable& NhaMixer::rope_table_to(int64_t positions, Device device) {
  if (!rope_.cos.defined() || rope_.cos.device() != device || rope_.cos.size(0) < positions) {
    int64_t len = std::max<int64_t>(max_seq_len_, 1);
    while (len < positions) len *= 2;
    rope_ = rope_table(cfg_.rope_theta, cfg_.head_dim, len, std::nullopt, device);
  }
  return rope_;
}

// nha.md 7.2: the op inputs of x's tokens, at positions n_seen.. when decoding (convs and RoPE).
NhaMixer::OpInputs NhaMixer::project(const Var& x, NhaState* st) {
  HYB_CHECK(x.dim() == 3 && x.size(2) == cfg_.d_model, "nha: x must be (B, T, d_model = ", cfg_.d_model, "), got ",
            shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), Hq = cfg_.num_heads, Hkv = cfg_.num_kv_heads, D = cfg_.head_dim,
                Dv = cfg_.value_head_dim, M = cfg_.slots;
  const DType sdt = x.dtype() == DType::bf16 ? DType::f32 : x.dtype();
  const int64_t pos = st ? st->n_seen : 0;
  const bool convs = st && cfg_.use_short_conv;
  OpInputs in;
  in.q = reshape(short_conv(q_proj_->forward(x), q_conv_w_, convs ? &st->q_conv : nullptr), {B, T, Hq, D});
  in.k = reshape(short_conv(k_proj_->forward(x), k_conv_w_, convs ? &st->k_conv : nullptr), {B, T, Hkv, D});
  in.v = reshape(short_conv(v_proj_->forward(x), v_conv_w_, convs ? &st->v_conv : nullptr), {B, T, Hkv, Dv});
  if (cfg_.value_silu) in.v = silu(in.v);
  if (M > 0) {
    in.g = mul_scalar(logsigmoid(reshape(cast(f_proj_->forward(x), sdt), {B, T, Hkv, M})), 1.0 / cfg_.gate_logit_normalizer);
    in.s = add_scalar(neg(exp(in.g)), 1.0);
  }
  if (cfg_.pos_enc == "rope_short_long") {
    // Both branches see rotated q, k: rotate before the op, which then applies no RoPE of its own.
    const RopeTable& tab = rope_table_to(pos + T, x.device());
    in.q = rope(in.q, tab, pos);
    in.k = rope(in.k, tab, pos);
  }
  if (cfg_.slot_swish) {
    in.q_slot = silu(in.q);
    in.k_slot = silu(in.k);
  }
  if (fusion_proj_) in.lambda = unsqueeze(sigmoid(fusion_proj_->forward(x)), 3);
  return in;
}

namespace {

// Writes rows (B, n, ...) of positions 0..n-1 into ring slots p % R; only the last R rows stay.
void ring_write(const Tensor& ring, const Tensor& rows) {
  const int64_t R = ring.size(1), n = rows.size(1), keep = std::min(n, R), start = n - keep;
  const int64_t slot = start % R, head = std::min(keep, R - slot);
  ring.narrow(1, slot, head).copy_(rows.narrow(1, start, head));
  if (keep > head) ring.narrow(1, 0, keep - head).copy_(rows.narrow(1, start + head, keep - head));
}

// A KV-cache ring (unlimited window) grown to hold `positions`: position p keeps slot p.
void ring_reserve(Tensor& ring, int64_t positions) {
  if (!ring.defined() || ring.size(1) >= positions) return;
  int64_t n = ring.size(1);
  while (n < positions) n *= 2;
  Shape s = ring.shape();
  s[1] = n;
  Tensor grown = Tensor::zeros(s, ring.dtype(), ring.device());
  grown.narrow(1, 0, ring.size(1)).copy_(ring);
  ring = grown;
}

}  // namespace

// The parallel op(s) of nha.md 7.2 with the variants of 8.2-8.3. With a state (a prompt on an empty
// one) the final memories and the last tokens' op inputs stay in it for the decode steps (nha.md 9).
Var NhaMixer::attend(const OpInputs& in, NhaState* st) {
  const int64_t B = in.q.size(0), T = in.q.size(1), Hq = cfg_.num_heads, M = cfg_.slots, Wk = cfg_.window_keys(),
                shift = cfg_.shift();
  const DType dt = in.q.dtype();
  NhaParams p;
  p.scale = cfg_.scale;
  p.rope = cfg_.pos_enc == "rope_short";
  p.rope_theta = cfg_.rope_theta;
  if (p.rope) p.rope_table = rope_table_to(T, in.q.device());
  p.long_ratio = cfg_.emit_long_ratio && cfg_.fusion == "softmax";
  p.save_chunk_states = cfg_.save_chunk_states;
  p.save_window_qk = cfg_.save_window_qk;
  const Var bias = pos_bias_.defined() ? compute_view(pos_bias_, dt) : Var();
  // The slots read q_slot, k_slot when the feature map sets them; the window always reads q, k.
  const bool apart = in.q_slot.defined();
  const Var &qs = apart ? in.q_slot : in.q, &ks = apart ? in.k_slot : in.k;
  Var o, HK, HV;
  if (cfg_.fusion == "softmax") {
    p.window = Wk;
    p.shift = shift;
    NhaVars y = nha(qs, ks, in.v, in.s, in.g, Var(), Var(), bias, p, apart ? in.q : Var(), apart ? in.k : Var());
    o = y.o;
    HK = y.HK;
    HV = y.HV;
    if (p.long_ratio) long_ratio_ = y.long_ratio;
  } else {
    // nha.md 8.2: o = lambda oL + (1 - lambda) oS with two separate softmaxes.
    auto weigh = [&](const Var& branch, bool long_branch) {
      const double c = cfg_.fusion_weight;
      if (!in.lambda.defined()) return mul_scalar(branch, long_branch ? c : 1.0 - c);
      return mul(long_branch ? in.lambda : add_scalar(neg(in.lambda), 1.0), branch);
    };
    if (M > 0) {
      p.window = 0;
      p.shift = shift;
      NhaVars y = nha(qs, ks, in.v, in.s, in.g, Var(), Var(), Var(), p);
      o = weigh(y.o, true);
      HK = y.HK;
      HV = y.HV;
    }
    if (Wk != 0) {
      p.window = Wk;
      p.shift = 0;
      Var oS = weigh(nha(in.q, in.k, in.v, Var(), Var(), Var(), Var(), bias, p).o, false);
      o = o.defined() ? add(o, oS) : oS;
    }
    if (cfg_.emit_long_ratio) {
      long_ratio_ = in.lambda.defined() ? reshape(in.lambda, {B, T, Hq}).data()
                                        : Tensor::full({B, T, Hq}, cfg_.fusion_weight, dt, in.q.device());
    }
  }
  if (st) {
    HYB_ASSERT(st->n_seen == 0, "nha: a parallel prefill continues no state");
    NhaDecodeState& ds = st->op;
    if (M > 0) {
      ds.HK = HK.data();
      ds.HV = HV.data();
    }
    if (Wk < 0) {
      ring_reserve(ds.ring_k, T);
      ring_reserve(ds.ring_v, T);
    }
    if (ds.ring_k.defined()) {
      ring_write(ds.ring_k, in.k.data());
      ring_write(ds.ring_v, in.v.data());
    }
    if (ds.ring_s.defined()) {
      ring_write(ds.ring_s, in.s.data());
      ring_write(ds.ring_g, in.g.data());
    }
    st->n_seen = T;
  }
  return o;
}

// The decode step (nha_decode.h) on x's tokens, one after another; a weighted fusion takes its two
// branches from one call (split softmaxes) and weighs them as attend() does.
Var NhaMixer::step(const OpInputs& in, NhaState& st) {
  HYB_CHECK(!grad_enabled(), "nha decode: the decode step records no gradient; decode under NoGradGuard");
  const int64_t B = in.q.size(0), T = in.q.size(1), Hq = cfg_.num_heads;
  const DType dt = in.q.dtype();
  NhaDecodeParams p;
  p.scale = cfg_.scale;
  p.window = cfg_.window_keys();
  p.shift = cfg_.shift();
  p.pos = st.n_seen;
  p.split = cfg_.fusion != "softmax";
  p.long_ratio = cfg_.emit_long_ratio && !p.split;
  p.slot_silu = cfg_.slot_swish;
  if (p.window < 0) {  // a KV cache: nothing waits in it to enter the slots (shift is -1 or 0)
    ring_reserve(st.op.ring_k, p.pos + T);
    ring_reserve(st.op.ring_v, p.pos + T);
  }
  const RopeTable* tab = cfg_.pos_enc == "rope_short" && p.window != 0 ? &rope_table_to(p.pos + T, in.q.device()) : nullptr;
  const Tensor bias = pos_bias_.defined() ? compute_view(pos_bias_, dt).data().contiguous() : Tensor();
  auto data = [](const Var& x) { return x.defined() ? x.data() : Tensor(); };
  NhaDecodeOutputs y = nha_decode_step(in.q.data(), in.k.data(), in.v.data(), data(in.s), data(in.g), bias, tab, st.op, p);
  st.n_seen += T;
  if (!p.split) {
    if (p.long_ratio) long_ratio_ = y.long_ratio;
    return Var(y.o);
  }
  Var o;
  auto add_branch = [&](const Tensor& branch, bool long_branch) {
    if (!branch.defined()) return;
    const double c = cfg_.fusion_weight;
    const Var w = in.lambda.defined() ? mul(long_branch ? in.lambda : add_scalar(neg(in.lambda), 1.0), Var(branch))
                                      : mul_scalar(Var(branch), long_branch ? c : 1.0 - c);
    o = o.defined() ? add(o, w) : w;
  };
  add_branch(y.o, true);
  add_branch(y.o_window, false);
  if (cfg_.emit_long_ratio)
    long_ratio_ = in.lambda.defined() ? reshape(in.lambda, {B, T, Hq}).data()
                                      : Tensor::full({B, T, Hq}, cfg_.fusion_weight, dt, in.q.device());
  return o;
}

Var NhaMixer::output(const Var& o) {
  const int64_t B = o.size(0), T = o.size(1);
  return o_proj_->forward(rmsnorm(silu(reshape(o, {B, T, cfg_.num_heads * cfg_.value_head_dim})),
                                  compute_view(g_norm_, o.dtype()), cfg_.output_norm_eps));
}

bool NhaMixer::set_full_window(bool full) {
  // A learned bias has one entry per distance of the configured window; the config resolver refuses
  // randomised windows with it (config_resolve.cpp).
  HYB_ASSERT(!full || !pos_bias_.defined(), "nha: randomised windows with pos_enc learned_short");
  cfg_.window = full ? -1 : configured_window_;
  return true;
}

Var NhaMixer::forward(const Var& x) { return output(attend(project(x, nullptr), nullptr)); }

std::unique_ptr<DecodeState> NhaMixer::start_decode(int64_t batch, Device device, DType dtype) {
  auto s = std::make_unique<NhaState>();
  const int64_t Hq = cfg_.num_heads, Hkv = cfg_.num_kv_heads, D = cfg_.head_dim, Dv = cfg_.value_head_dim, M = cfg_.slots;
  const DType sdt = dtype == DType::bf16 ? DType::f32 : dtype;
  if (cfg_.use_short_conv) {
    const int64_t keep = cfg_.conv_size - 1;
    s->q_conv = Tensor::zeros({batch, keep, Hq * D}, dtype, device);
    s->k_conv = Tensor::zeros({batch, keep, Hkv * D}, dtype, device);
    s->v_conv = Tensor::zeros({batch, keep, Hkv * Dv}, dtype, device);
  }
  if (M > 0) {
    s->op.HK = Tensor::zeros({batch, Hkv, D, M}, sdt, device);
    s->op.HV = Tensor::zeros({batch, Hkv, M, Dv}, sdt, device);
  }
  // The ring holds the window's keys and the tokens still to enter the slots: w slots (shift is w or
  // 0), or every position for an unlimited window (from max_seq_len, doubled on demand).
  const int64_t Wk = cfg_.window_keys(), shift = cfg_.shift();
  const int64_t R = Wk < 0 ? std::max<int64_t>(max_seq_len_, 1) : std::max(Wk, shift);
  if (R > 0) {
    s->op.ring_k = Tensor::zeros({batch, R, Hkv, D}, dtype, device);
    s->op.ring_v = Tensor::zeros({batch, R, Hkv, Dv}, dtype, device);
  }
  if (M > 0 && shift > 0) {
    s->op.ring_s = Tensor::zeros({batch, R, Hkv, M}, sdt, device);
    s->op.ring_g = Tensor::zeros({batch, R, Hkv, M}, sdt, device);
  }
  return s;
}

Var NhaMixer::decode(const Var& x, DecodeState& state) {
  auto& st = dynamic_cast<NhaState&>(state);
  OpInputs in = project(x, &st);
  return output(st.n_seen == 0 && x.size(1) > 1 ? attend(in, &st) : step(in, st));
}

std::unique_ptr<Mixer> make_nha_mixer(const json& mixer, const MixerContext& ctx) {
  return std::make_unique<NhaMixer>(nha_config_from_json(mixer), ctx);
}

}  // namespace hyb
