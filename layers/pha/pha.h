// The PHA block (pha.md 2.2, 7, 11.1; config.md 3.2: the one family that replaces the block
// equations). Parallel, residual source "normed":
//   x^ = RMSNorm(x);  m = sum_k w_k RMSNorm_k(branch_k(x^))     (branches attn, gss, ffn; pha_mix_op.h)
//   h = alpha x^ + Dropout(m);  h^ = RMSNorm(h);  x' = alpha h^ + Dropout(MLP(h^))
// Source "raw": h = alpha x + Dropout(m),  x' = h + Dropout(MLP(RMSNorm(h))). Sequential: attention,
// GSS and the MLP one after another, each with its own norm and residual, no mixing.
// Names under model.layers.{i} (config.md 3.9): mixer_norm, mixer.attn.*, mixer.gss.*, mixer.aux_mlp.*,
// mixer.{attn,gss,aux}_out_norm, mixer.mix_logits, mlp_norm, mlp.*; sequential: mixer.attn_norm,
// mixer.attn.*, mixer.gss_norm, mixer.gss.*, mlp_norm, mlp.*.
// Decoding (pha.md 4.4): the attention branch's KV cache and the GSS modal state in one PhaState,
// started by the mixer (CausalLM starts every block's state there) and read by PhaBlock::decode.
#pragma once
#include <optional>

#include "layers/block.h"
#include "layers/mlp/mlp.h"
#include "layers/norm/rmsnorm.h"
#include "layers/pha/gss.h"
#include "layers/pha/pha_config.h"

namespace hyb {

// One PHA block's decode state: each branch's, absent without the branch (the FFNs keep none).
struct PhaState : DecodeState {
  std::unique_ptr<DecodeState> attn;  // the attention mixer's own, a KV cache (attention.md 8)
  std::optional<DssDecodeState> gss;  // (B, Hs, Ns) complex, fp32: Hs Ns 8 bytes a sequence
  int64_t bytes() const override { return (attn ? attn->bytes() : 0) + (gss ? gss->bytes() : 0); }
};

// The branches of a PHA block and their mixing; forward(x^) is the mixture m of a parallel block.
class PhaMixer : public Mixer {
 public:
  PhaMixer(const PhaConfig& cfg, const MixerContext& ctx, double norm_eps);
  Var forward(const Var& x) override;
  // The whole block's PhaState, sequential blocks included.
  std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype) override;
  Var decode(const Var& x, DecodeState& state) override;  // parallel: the mixture m at the next positions
  const PhaConfig& config() const { return cfg_; }
  // The mixing weights w in branch order attn, gss, ffn over the kept ones (pha.md 6.4).
  std::vector<double> mix_weights() const;

 private:
  friend class PhaBlock;
  // A branch at x's positions: forward's when st is null, else decoding on st.
  Var attn_branch(const Var& x, PhaState* st);
  Var gss_branch(const Var& x, PhaState* st);
  Var mixture(const Var& x, PhaState* st);
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
  // The block on x: forward when st is null, else decoding on st (no dropout: decoding is inference).
  Var run(const Var& x, PhaState* st);
  Var drop(const Var& x, const char* site) const;
  // alpha r + Dropout(update): one residual of pha.md 7; without dropout when decoding.
  Var residual(const Var& r, const Var& update, const char* site, double alpha, bool decoding) const;
  BlockContext ctx_;
  RmsNorm* mixer_norm_ = nullptr;  // parallel
  PhaMixer* mixer_;
  RmsNorm* mlp_norm_ = nullptr;
  SwigluMlp* mlp_ = nullptr;
};

std::unique_ptr<Block> make_pha_block(const LayerSpec& spec, const BlockContext& ctx);

}  // namespace hyb
