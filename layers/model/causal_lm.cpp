#include "layers/model/causal_lm.h"

#include <cmath>

#include "autograd/ops/binary.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/unary.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/matmul.h"
#include "layers/loss/cross_entropy_op.h"
#include "layers/registry.h"

namespace hyb {

namespace {

std::unique_ptr<Block> make_block(const LayerSpec& spec, const BlockContext& ctx) {
  const LayerEntry* e = find_layer(spec.mixer.at("type").get<std::string>());
  if (e && e->make_block) return e->make_block(spec, ctx);
  return std::make_unique<PreNormBlock>(spec, ctx);
}

}  // namespace

PreNormBlock::PreNormBlock(const LayerSpec& spec, const BlockContext& ctx) {
  const MixerContext& m = ctx.mixer;
  mixer_norm_ = register_module("mixer_norm", std::make_unique<RmsNorm>(m.d_model, ctx.norm_eps));
  mixer_ = register_module("mixer", make_mixer(spec.mixer, m));
  if (spec.mlp_type == "swiglu") {
    mlp_norm_ = register_module("mlp_norm", std::make_unique<RmsNorm>(m.d_model, ctx.norm_eps));
    mlp_ = register_module("mlp", std::make_unique<SwigluMlp>(m.d_model, spec.intermediate_size, m.init_std,
                                                              m.residual_std()));
  } else {
    HYB_CHECK(spec.mlp_type == "none", "layer ", m.layer_index, ": unknown mlp type \"", spec.mlp_type, "\"");
  }
}

Var PreNormBlock::forward(const Var& x) {
  Var h;
  {
    ModuleScope scope("mixer");
    h = add(x, mixer_->forward(mixer_norm_->forward(x)));
  }
  if (!mlp_) return h;
  ModuleScope scope("mlp");
  return add(h, mlp_->forward(mlp_norm_->forward(h)));
}

Var PreNormBlock::decode(const Var& x, DecodeState& state) {
  Var h = add(x, mixer_->decode(mixer_norm_->forward(x), state));
  return mlp_ ? add(h, mlp_->forward(mlp_norm_->forward(h))) : h;
}

int64_t LmDecodeState::bytes() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l->bytes();
  return n;
}

Backbone::Backbone(const LmConfig& cfg) : cfg_(cfg) {
  // With the sqrt(d) embedding scale the table starts at N(0, 1/d), so embedded inputs have unit scale
  // (config.md 3.8, pha.md Choice 10).
  const double emb_std = cfg.embed_scale_sqrt_d ? 1.0 / std::sqrt(double(cfg.d_model)) : cfg.init_std;
  embeddings_ = register_module("embeddings", std::make_unique<Embedding>(cfg.vocab_size, cfg.d_model,
                                                                          ParamInit::normal(emb_std)));
  auto layers = std::make_unique<ModuleList>();
  for (size_t i = 0; i < cfg.layers.size(); ++i) {
    const LayerSpec& spec = cfg.layers[i];
    const BlockContext ctx{{cfg.d_model, int64_t(cfg.layers.size()), int64_t(i), cfg.max_seq_len, cfg.init_std, cfg.init,
                            spec.mlp_type != "none"},
                           cfg.norm_eps, cfg.seed, &rng_step_};
    blocks_.push_back(layers->add(std::to_string(i), make_block(spec, ctx)));
  }
  register_module("layers", std::move(layers));
  norm_ = register_module("norm", std::make_unique<RmsNorm>(cfg.d_model, cfg.norm_eps));
}

Var Backbone::embed(const Tensor& ids, DType compute) {
  Var h = embeddings_->forward(ids, compute);
  if (cfg_.embed_scale_sqrt_d) h = mul_scalar(h, std::sqrt(double(cfg_.d_model)));
  if (cfg_.embed_dropout > 0 && training())
    h = dropout(h, cfg_.embed_dropout, cfg_.seed, "model.embed_dropout", rng_step_ << 32, true);
  return h;
}

Var Backbone::decode(const Tensor& ids, LmDecodeState& state, DType compute) {
  HYB_CHECK(state.layers.size() == blocks_.size(), "decode: state for ", state.layers.size(), " layers, model has ",
            blocks_.size());
  Var h = embed(ids, compute);
  for (size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->decode(h, *state.layers[i]);
  return norm_->forward(h);
}

Var Backbone::forward(const Tensor& ids, DType compute) {
  ModuleScope scope("model");
  Var h = embed(ids, compute);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    ModuleScope layer_scope("layers." + std::to_string(i));
    h = blocks_[i]->forward(h);
  }
  return norm_->forward(h);
}

CausalLM::CausalLM(LmConfig cfg) : cfg_(std::move(cfg)) {
  HYB_CHECK(cfg_.real_vocab >= 1 && cfg_.real_vocab <= cfg_.vocab_size, "model.vocab_size: expected at least the tokenizer's ",
            cfg_.real_vocab, ", got ", cfg_.vocab_size);
  model_ = register_module("model", std::make_unique<Backbone>(cfg_));
  if (!cfg_.tie_embeddings)
    lm_head_ = register_module("lm_head", std::make_unique<Linear>(cfg_.d_model, cfg_.vocab_size, false,
                                                                   ParamInit::normal(cfg_.init_std)));
}

Var CausalLM::project_to_vocab(const Var& h) {
  Var h2 = reshape(h, {-1, cfg_.d_model});
  if (lm_head_) return lm_head_->forward(h2);
  return matmul(h2, compute_view(model_->embeddings().weight(), h2.dtype()), false, true);
}

Var CausalLM::logits(const Tensor& ids, DType compute) { return project_to_vocab(model_->forward(ids, compute)); }

LmDecodeState CausalLM::start_decode(int64_t batch, Device device, DType compute) {
  LmDecodeState s;
  for (Block* b : model_->blocks()) s.layers.push_back(b->mixer().start_decode(batch, device, compute));
  return s;
}

Var CausalLM::decode_logits(const Tensor& ids, LmDecodeState& state, DType compute) {
  return project_to_vocab(model_->decode(ids, state, compute));
}

Var CausalLM::decode_last_logits(const Tensor& ids, LmDecodeState& state, DType compute) {
  const Var h = model_->decode(ids, state, compute);
  return project_to_vocab(narrow(h, 1, h.data().size(1) - 1, 1));
}

Var CausalLM::loss(const Tensor& ids, const Tensor& targets, DType compute) {
  Var z = logits(ids, compute);
  return cross_entropy(z, targets.reshape({-1}), cfg_.real_vocab, -1);
}

}  // namespace hyb
