// The causal language model of every standard config (attention.md 7, config.md 3.2):
//   h0 = E[tokens] (x sqrt(d_model) with embed_scale), L pre-norm blocks
//   h = x + Mixer(RMSNorm(x)); y = h + MLP(RMSNorm(h)), a final RMSNorm, logits against E or lm_head.
// Parameter names are config.md 3.9's (model.embeddings.weight, model.layers.{i}.mixer.*, ...).
//   CausalLM lm(model_config);  lm.initialize(seed);
//   Var loss = lm.loss(inputs, targets, DType::f32);
#pragma once
#include <memory>
#include <vector>

#include "layers/block.h"
#include "layers/embedding/embedding.h"
#include "layers/mlp/mlp.h"
#include "layers/norm/rmsnorm.h"

namespace hyb {

struct LmConfig {
  int64_t vocab_size = 0;   // rows of the embedding (padded vocabulary)
  int64_t real_vocab = 0;   // the tokenizer's vocabulary: the loss ignores logits above it
  int64_t d_model = 0;
  int64_t max_seq_len = 0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  bool embed_scale_sqrt_d = false;
  double embed_dropout = 0.0;
  uint64_t seed = 0;  // the run's seed: dropout masks are drawn from it (config.md 6.1)
  std::string init = "family";
  double init_std = 0.02;
  std::vector<LayerSpec> layers;
};

// The standard block: h = x + Mixer(RMSNorm(x)); y = h + MLP(RMSNorm(h)).
class PreNormBlock : public Block {
 public:
  PreNormBlock(const LayerSpec& spec, const BlockContext& ctx);
  Var forward(const Var& x) override;
  Var decode(const Var& x, DecodeState& state) override;
  Mixer& mixer() override { return *mixer_; }

 private:
  RmsNorm* mixer_norm_;
  Mixer* mixer_;
  RmsNorm* mlp_norm_ = nullptr;
  SwigluMlp* mlp_ = nullptr;
};

// Every layer's decode state; the model's tokens so far are states[i]->n_seen of any layer.
struct LmDecodeState {
  std::vector<std::unique_ptr<DecodeState>> layers;
  int64_t bytes() const;
};

class Backbone : public Module {
 public:
  explicit Backbone(const LmConfig& cfg);
  Var forward(const Tensor& ids, DType compute);
  Var decode(const Tensor& ids, LmDecodeState& state, DType compute);
  // Which micro-step the next forward is: dropout masks depend on it (and on nothing else that a
  // resumed run could not reproduce).
  void set_rng_step(uint64_t step) { rng_step_ = step; }
  Embedding& embeddings() { return *embeddings_; }
  std::vector<Block*>& blocks() { return blocks_; }

 private:
  Var embed(const Tensor& ids, DType compute);
  const LmConfig& cfg_;
  uint64_t rng_step_ = 0;
  Embedding* embeddings_;
  std::vector<Block*> blocks_;
  RmsNorm* norm_;
};

class CausalLM : public Module {
 public:
  explicit CausalLM(LmConfig cfg);
  // ids (B, T) i32 -> logits (B*T, vocab_size) in `compute` dtype.
  Var logits(const Tensor& ids, DType compute);
  // Mean next-token loss over targets (B, T) i32 (ignore index -1).
  Var loss(const Tensor& ids, const Tensor& targets, DType compute);
  // Incremental decoding: ids (B, n) are the next n tokens; returns their logits (B*n, vocab_size).
  LmDecodeState start_decode(int64_t batch, Device device, DType compute);
  Var decode_logits(const Tensor& ids, LmDecodeState& state, DType compute);
  // The same step, projecting only the last of the n positions: (B, vocab_size). A prefill of long
  // prompts then needs no (B*n, vocab_size) tensor.
  Var decode_last_logits(const Tensor& ids, LmDecodeState& state, DType compute);
  const LmConfig& config() const { return cfg_; }
  Backbone& backbone() { return *model_; }
  void set_rng_step(uint64_t step) { model_->set_rng_step(step); }

 private:
  Var project_to_vocab(const Var& h);  // (B, T, C) -> (B*T, vocab_size)
  LmConfig cfg_;
  Backbone* model_;
  Linear* lm_head_ = nullptr;
};

}  // namespace hyb
