// The Gated Slot Attention mixer as FLA builds it (gsa.md 5): q/k/v/f projections, optional short
// convs + SiLU, the swish feature map on q and k, SiLU on v, slot gates g = logsigmoid(f) / tau and
// write weights s = 1 - exp(g), the gsa op, then SiLU, an RMSNorm over all Hq V channels and o_proj.
// Parameter names are FLA's: q_proj, k_proj, v_proj, f_proj, q_conv1d, k_conv1d, v_conv1d, g_norm.weight,
// o_proj. Decoding carries the two slot memories (and the conv inputs), constant in the sequence
// length (gsa.md 6); a decode call is the training forward started from that state.
#pragma once
#include "layers/linear/linear.h"
#include "layers/mixer.h"

namespace hyb {

struct GsaConfig {
  int64_t d_model = 0, num_heads = 4, num_kv_heads = 4, head_k_dim = 0, head_v_dim = 0, num_slots = 64;
  double gate_logit_normalizer = 8.0, scale = 1.0, norm_eps = 1e-6;
  std::string feature_map = "swish";  // on q and k: swish | relu | t2r
  bool use_short_conv = false, conv_bias = false, elementwise_affine = true, save_chunk_states = false;
  int64_t conv_size = 4;
};

// Reads a resolved mixer object (every key present, derived values written out).
GsaConfig gsa_config_from_json(const nlohmann::json& mixer);

// One layer's decoding state (gsa.md 6).
struct GsaState : DecodeState {
  Tensor q_conv, k_conv, v_conv;  // (B, W-1, channels): the last W-1 conv inputs (undefined without convs)
  Tensor Hk, Hv;                  // (B, Hkv, K, M), (B, Hkv, M, V) in the state dtype
  int64_t bytes() const override {
    return int64_t(q_conv.nbytes() + k_conv.nbytes() + v_conv.nbytes() + Hk.nbytes() + Hv.nbytes());
  }
};

class GsaMixer : public Mixer {
 public:
  GsaMixer(const GsaConfig& cfg, const MixerContext& ctx);
  Var forward(const Var& x) override;
  std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype) override;
  Var decode(const Var& x, DecodeState& state) override;
  const GsaConfig& config() const { return cfg_; }

 private:
  Var run(const Var& x, GsaState* state);
  Var short_conv(const Var& lin, const Var& weight, const Var& bias, Tensor* cache);

  GsaConfig cfg_;
  Var feature_map(const Var& x) const;  // gsa.md 5.2 step 4

  Linear *q_proj_, *k_proj_, *v_proj_, *f_proj_, *o_proj_;
  Linear* feature_layer_ = nullptr;  // t2r's shared K x K matrix
  Var q_conv_w_, k_conv_w_, v_conv_w_, q_conv_b_, k_conv_b_, v_conv_b_, g_norm_;
};

std::unique_ptr<Mixer> make_gsa_mixer(const nlohmann::json& mixer, const MixerContext& ctx);

}  // namespace hyb
