// The PHA block (pha.md 2.2, 7, 11.1; config.md 3.2: the one family that replaces the block
// equations). Parallel, residual source "normed":
//   x^ = RMSNorm(x);  m = sum_k w_k RMSNorm_k(branch_k(x^))     (branches attn, gss, ffn; pha_mix_op.h)
//   h = alpha x^ + Dropout(m);  h^ = RMSNorm(h);  x' = alpha h^ + Dropout(MLP(h^))
// Source "raw": h = alpha x + Dropout(m),  x' = h + Dropout(MLP(RMSNorm(h))). Sequential: attention,
// GSS and the MLP one after another, each with its own norm and residual, no mixing.
// Names under model.layers.{i} (config.md 3.9): mixer_norm, mixer.attn.*, mixer.gss.*, mixer.aux_mlp.*,
// mixer.{attn,gss,aux}_out_norm, mixer.mix_logits, mlp_norm, mlp.*; sequential: mixer.attn_norm,
// mixer.attn.*, mixer.gss_norm, mixer.gss.*, mlp_norm, mlp.*.
#pragma once
#include "layers/block.h"
#include "layers/mlp/mlp.h"
#include "layers/norm/rmsnorm.h"
#include "layers/pha/gss.h"
#include "layers/pha/pha_config.h"

namespace hyb {

// The branches of a PHA block and their mixing; forward(x^) is the mixture m of a parallel block.
class PhaMixer : public Mixer {
 public:
  PhaMixer(const PhaConfig& cfg, const MixerContext& ctx, double norm_eps);
  Var forward(const Var& x) override;
  const PhaConfig& config() const { return cfg_; }
  // The mixing weights w in branch order attn, gss, ffn over the kept ones (pha.md 6.4).
  std::vector<double> mix_weights() const;

 private:
  friend class PhaBlock;
  PhaConfig cfg_;
  Mixer* attn_ = nullptr;
  Gss* gss_ = nullptr;
  SwigluMlp* aux_ = nullptr;
  std::vector<RmsNorm*> out_norms_;  // parallel: one per kept branch, in branch order
  RmsNorm *attn_norm_ = nullptr, *gss_norm_ = nullptr;  // sequential
  Var mix_logits_;                                     // absent with one branch
};

class PhaBlock : public Block {
 public:
  PhaBlock(const LayerSpec& spec, const BlockContext& ctx);
  Var forward(const Var& x) override;
  Var decode(const Var& x, DecodeState& state) override;
  Mixer& mixer() override { return *mixer_; }

 private:
  Var drop(const Var& x, const char* site) const;
  // alpha r + Dropout(update): one residual of pha.md 7.
  Var residual(const Var& r, const Var& update, const char* site, double alpha) const;
  BlockContext ctx_;
  RmsNorm* mixer_norm_ = nullptr;  // parallel
  PhaMixer* mixer_;
  RmsNorm* mlp_norm_ = nullptr;
  SwigluMlp* mlp_ = nullptr;
};

std::unique_ptr<Block> make_pha_block(const LayerSpec& spec, const BlockContext& ctx);

}  // namespace hyb
