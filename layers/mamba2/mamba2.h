// The Mamba2 mixer (mamba2.md 2): in_proj to [z | x B C | dt], a depthwise causal conv + SiLU on
// x B C, dt = softplus(dt + dt_bias), A = -exp(A_log), the SSD core simple_gla (q = C, k = B,
// v = dt x, g = A dt), the D skip, the gated RMSNorm and out_proj. Parameter names are mamba_ssm's:
// in_proj, conv1d, dt_bias, A_log, D, norm.weight, out_proj. Decoding carries a constant-size state
// (mamba2.md 5): the last W-1 conv inputs and the SSM state; a decode call is the training forward
// started from that state, so prefill and single steps are one code path.
#pragma once
#include <cmath>
#include <optional>
#include <utility>

#include "layers/linear/linear.h"
#include "layers/mixer.h"

namespace hyb {

struct Mamba2Config {
  int64_t d_model = 0, d_ssm = 0, headdim = 64, d_state = 128, ngroups = 1, d_conv = 4;
  bool conv_bias = true, bias = false;
  std::optional<double> conv_init;
  std::pair<double, double> A_init_range{1.0, 16.0};
  double dt_min = 0.001, dt_max = 0.1, dt_init_floor = 1e-4;
  std::pair<double, double> dt_limit{0.0, INFINITY};
  bool D_has_hdim = false, rmsnorm = true, norm_before_gate = false;
  double norm_eps = 1e-5;
  int64_t chunk_size = 256;
  bool out_proj_rescale = true;

  int64_t heads() const { return d_ssm / headdim; }
  int64_t conv_channels() const { return d_ssm + 2 * ngroups * d_state; }
};

// Reads a resolved mixer object (every key present, derived values written out).
Mamba2Config mamba2_config_from_json(const nlohmann::json& mixer);

// One layer's decoding state (mamba2.md 5), constant in the sequence length.
struct Mamba2State : DecodeState {
  Tensor conv;  // (B, W-1, Cc) the last W-1 inputs of the conv (x B C before it), oldest first
  Tensor ssm;   // (B, H, N, P) the SSD state in the golden layout, the state dtype
  int64_t bytes() const override { return int64_t(conv.nbytes() + ssm.nbytes()); }
};

class Mamba2Mixer : public Mixer {
 public:
  // out_proj false builds the Mamba half of a head_split block (intra_hybrid.md 4.3): the fusion
  // owns the output projection, so forward and decode return the gated norm's output (B, T, d_ssm).
  Mamba2Mixer(const Mamba2Config& cfg, const MixerContext& ctx, bool out_proj = true);
  Var forward(const Var& x) override;
  std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype) override;
  Var decode(const Var& x, DecodeState& state) override;
  // The gated norm's output before out_proj, (B, T, d_ssm): what a head_split block fuses.
  Var heads(const Var& x) { return run(x, nullptr); }
  Var decode_heads(const Var& x, DecodeState& state);
  const Linear* out_proj() const { return out_proj_; }  // null when built without one
  const Mamba2Config& config() const { return cfg_; }

 private:
  // Steps 1-8 on x (B, T, d_model) from `state` (zeros when null), advancing it when given.
  Var run(const Var& x, Mamba2State* state);
  Var project_out(const Var& y) const;

  Mamba2Config cfg_;
  Linear *in_proj_, *out_proj_ = nullptr;
  Var conv_weight_, conv_bias_, dt_bias_, A_log_, D_, norm_weight_;
};

std::unique_ptr<Mixer> make_mamba2_mixer(const nlohmann::json& mixer, const MixerContext& ctx);

}  // namespace hyb
