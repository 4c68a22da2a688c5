// The Gated DeltaNet mixer (gated_deltanet.md 2): q/k/v projections, three short convs + SiLU, per-head
// L2 norm of q and k, beta = sigmoid(b_proj x), g = -exp(A_log) softplus(a_proj x + dt_bias), the gated
// delta rule, the per-head RMSNorm then SiLU gate, and o_proj. Parameter names are FLA's: q_proj,
// k_proj, v_proj, a_proj, b_proj, g_proj, o_proj, q_conv1d, k_conv1d, v_conv1d, A_log, dt_bias,
// o_norm.weight. Decoding carries a constant-size state (gated_deltanet.md 5): the last W-1 inputs of
// each conv and the delta-rule state; a decode call is the training forward started from that state.
#pragma once
#include <utility>

#include "layers/linear/linear.h"
#include "layers/mixer.h"

namespace hyb {

struct GatedDeltaNetConfig {
  int64_t d_model = 0, num_heads = 6, num_v_heads = 6, head_dim = 256, v_head_dim = 512;
  bool use_short_conv = true;
  int64_t conv_size = 4;
  bool conv_bias = false, use_gate = true, allow_neg_eigval = false;
  double qk_l2norm_eps = 1e-6, scale = 0.0625, norm_eps = 1e-5;
  std::pair<double, double> A_init_range{0.0, 16.0};
  double dt_min = 0.001, dt_max = 0.1, dt_init_floor = 1e-4, initializer_range = 0.02;
  int64_t chunk_size = 64;

  int64_t key_dim() const { return num_heads * head_dim; }
  int64_t value_dim() const { return num_v_heads * v_head_dim; }
};

// Reads a resolved mixer object (every key present, derived values written out).
GatedDeltaNetConfig gated_deltanet_config_from_json(const nlohmann::json& mixer);

// One layer's decoding state (gated_deltanet.md 5), constant in the sequence length.
struct GatedDeltaNetState : DecodeState {
  Tensor q_conv, k_conv;  // (B, W-1, key_dim) the last W-1 conv inputs, oldest first (undefined without convs)
  Tensor v_conv;          // (B, W-1, value_dim)
  Tensor S;               // (B, HV, K, V) the delta-rule state, the state dtype
  int64_t bytes() const override {
    return int64_t(q_conv.nbytes() + k_conv.nbytes() + v_conv.nbytes() + S.nbytes());
  }
};

class GatedDeltaNetMixer : public Mixer {
 public:
  GatedDeltaNetMixer(const GatedDeltaNetConfig& cfg, const MixerContext& ctx);
  Var forward(const Var& x) override;
  std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype) override;
  Var decode(const Var& x, DecodeState& state) override;
  const GatedDeltaNetConfig& config() const { return cfg_; }

 private:
  // The layer on x (B, T, d_model) from `state` (zeros when null), advancing it when given.
  Var run(const Var& x, GatedDeltaNetState* state);
  // Short conv + SiLU (or SiLU alone) of one projection; advances its cache when given.
  Var short_conv(const Var& lin, const Var& weight, const Var& bias, Tensor* cache);

  GatedDeltaNetConfig cfg_;
  Linear *q_proj_, *k_proj_, *v_proj_, *a_proj_, *b_proj_, *g_proj_ = nullptr, *o_proj_;
  Var q_conv_w_, k_conv_w_, v_conv_w_, q_conv_b_, k_conv_b_, v_conv_b_, A_log_, dt_bias_, o_norm_;
};

std::unique_ptr<Mixer> make_gated_deltanet_mixer(const nlohmann::json& mixer, const MixerContext& ctx);

}  // namespace hyb
