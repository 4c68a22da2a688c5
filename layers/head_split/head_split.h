// The head-split intra-layer hybrid mixer (intra_hybrid.md 4, the X block): the attention half
// (attention.md 6 with Dk != Dv, stopped before o_proj) and the Mamba2 half (mamba2.md 2, stopped
// before out_proj) read the same input; their outputs are fused (head_split_fusion.h) and projected.
// Parameter names are 4.7's: the halves are the children `attn` and `ssm`, each with its own output
// projection when out_proj = 2 (attn.o_proj, ssm.out_proj), else one `o_proj` of the mixer. The
// decode state is the two halves' states side by side; the fusion has none (4.9).
//   HeadSplitMixer x(head_split_config_from_json(resolved), ctx);   Var y = x.forward(u);
#pragma once
#include <memory>

#include "layers/head_split/head_split_fusion.h"
#include "layers/mamba2/mamba2.h"
#include "layers/mixer.h"
#include "layers/softmax_attention/attention.h"

namespace hyb {

struct HeadSplitConfig {
  AttentionConfig attn;  // the attention half; max_position is the model's, set by the mixer
  Mamba2Config ssm;      // the Mamba2 half; d_model is the model's, set by the mixer
  FusionConfig fusion;
};

// Reads a resolved mixer object (every key present, derived values written out).
HeadSplitConfig head_split_config_from_json(const nlohmann::json& mixer);

// The attention half's KV cache (attention.md 8) and the Mamba half's state (mamba2.md 5).
struct HeadSplitState : DecodeState {
  std::unique_ptr<DecodeState> attn, ssm;
  int64_t bytes() const override { return attn->bytes() + ssm->bytes(); }
};

class HeadSplitMixer : public Mixer {
 public:
  HeadSplitMixer(const HeadSplitConfig& cfg, const MixerContext& ctx);
  Var forward(const Var& x) override;
  std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype) override;
  Var decode(const Var& x, DecodeState& state) override;
  const HeadSplitConfig& config() const { return cfg_; }

 private:
  Var fuse(const Var& o_T, const Var& o_M) const;

  HeadSplitConfig cfg_;
  AttentionMixer* attn_;
  Mamba2Mixer* ssm_;
  Linear* o_proj_ = nullptr;
  Var attn_scale_, ssm_scale_, gate_logit_;
};

std::unique_ptr<Mixer> make_head_split_mixer(const nlohmann::json& mixer, const MixerContext& ctx);

}  // namespace hyb
