// The attention mixer (attention.md 6): q/k/v projections, optional per-head RMS qk-norm or
// scaled-cosine logits, RoPE, the core op with window and sinks, and the output projection.
// Parameter names follow FLA's Transformer: q_proj, k_proj, v_proj, o_proj, q_norm, k_norm,
// logit_scale. Built from a resolved `attention` mixer object (attention.md 10).
#pragma once
#include <optional>

#include "layers/linear/linear.h"
#include "layers/mixer.h"
#include "layers/rope/rope_op.h"
#include "layers/softmax_attention/attention_op.h"

namespace hyb {

struct AttentionConfig {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, v_head_dim = 0;
  bool qkv_bias = false, o_bias = false;
  std::string qk_norm = "none";  // "none" | "rms"
  double qk_norm_eps = 1e-5;
  std::string logits = "dot";    // "dot" | "cosine"
  std::optional<double> softmax_scale;
  double cosine_logit_scale_init = 10.0, cosine_logit_scale_max = 100.0;
  int64_t window = 0, sinks = 0;
  bool rope = true;
  double rope_theta = 10000.0;
  int64_t rope_dim = 0;
  std::optional<RopeScaling> rope_scaling;
  int64_t max_position = 0;
  bool deterministic = false;
};

// Reads a resolved mixer object (every key present, derived values written out).
AttentionConfig attention_config_from_json(const nlohmann::json& mixer);

// The KV cache of one attention layer (attention.md 8): keys after RoPE, values, in slots. A full
// layer gives position p slot p (the cache grows by doubling); a window layer keeps the S sinks and a
// ring of w recent positions, S + w slots. All sequences of a batch advance together, so the valid
// slots are always the prefix [0, min(n_seen, capacity)).
struct AttentionCache : DecodeState {
  Tensor k, v;  // (B, capacity, Hkv, D) and (B, capacity, Hkv, Dv), in the compute dtype
  int64_t bytes() const override { return int64_t(k.nbytes() + v.nbytes()); }
};

class AttentionMixer : public Mixer {
 public:
  // o_proj false builds the attention half of a head_split block (intra_hybrid.md 4.2): the fusion
  // owns the output projection, so forward and decode return the heads' output (B, T, Hq Dv).
  AttentionMixer(const AttentionConfig& cfg, const MixerContext& ctx, bool o_proj = true);
  Var forward(const Var& x) override;
  std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype) override;
  Var decode(const Var& x, DecodeState& state) override;
  // The concatenated heads before o_proj, (B, T, Hq Dv): what a head_split block fuses.
  Var heads(const Var& x);
  Var decode_heads(const Var& x, DecodeState& state);
  const Linear* o_proj() const { return o_proj_; }  // null when built without one
  const AttentionConfig& config() const { return cfg_; }
  int64_t cache_slot(int64_t position) const;

 private:
  struct Qkv {
    Var q, k, v;  // (B, T, Hq, D), (B, T, Hkv, D), (B, T, Hkv, Dv): normalised and rotated
  };
  Qkv project(const Var& x, int64_t position_offset);
  AttentionParams core_params() const;
  Var attend(const Qkv& qkv, const AttentionParams& p);  // the heads, (B, T, Hq Dv)
  Var project_out(const Var& heads) const;
  Var decode_one(const Var& x, AttentionCache& cache);
  void reserve(AttentionCache& cache, int64_t slots);

  AttentionConfig cfg_;
  int64_t max_seq_len_;
  Linear *q_proj_, *k_proj_, *v_proj_, *o_proj_ = nullptr;
  Var q_norm_, k_norm_, logit_scale_;
  RopeTable rope_;  // built on first use on the activations' device
};

std::unique_ptr<Mixer> make_attention_mixer(const nlohmann::json& mixer, const MixerContext& ctx);

}  // namespace hyb
