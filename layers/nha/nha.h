// The Native Hybrid Attention mixer as the official paper-era code builds it (nha.md 7): raw q, k
// (RoPE inside the op, window only), v = SiLU(v_proj x), slot gates g = logsigmoid(f_proj x) / 8 and
// write weights s = 1 - exp(g), the nha op, then SiLU, an RMSNorm over all Hq Dv channels and o_proj.
// The ablations of nha.md 8.2-8.3 are config keys: slots 0, window 0, token_shift false, weighted-sum
// fusion (two separate softmaxes, fixed or learned lambda), and the position encodings; the 2026
// layer's swish on the slots' q and k (8.5) is slot_feature_map. Parameter
// names are the official code's: q_proj, k_proj, v_proj, f_proj, g_norm.weight, o_proj, the convs
// q_conv1d/k_conv1d/v_conv1d; hybrid's own: fusion_proj (weighted_learned) and pos_bias
// (learned_short, (Hq, window)). Decoding (nha.md 9): a prompt on an empty state runs the parallel
// op and leaves its final memories and last tokens in the state; later tokens go through the decode
// step (nha_decode.h), one token at a time on the slot memories and a ring of the last w tokens.
#pragma once
#include "layers/linear/linear.h"
#include "layers/mixer.h"
#include "layers/nha/nha_decode.h"
#include "layers/rope/rope_op.h"

namespace hyb {

struct NhaConfig {
  int64_t d_model = 0, num_heads = 16, num_kv_heads = 16, head_dim = 64, value_head_dim = 64, slots = 64;
  int64_t window = 32;  // -1: full
  bool token_shift = true, window_includes_current = true;
  std::string fusion = "softmax";  // softmax | weighted_fixed | weighted_learned
  double fusion_weight = 0.5;
  std::string pos_enc = "rope_short";  // rope_short | rope_short_long | none | learned_short
  double rope_theta = 10000.0, scale = 0.125, gate_logit_normalizer = 8.0, output_norm_eps = 1e-5;
  bool value_silu = true, use_short_conv = false, emit_long_ratio = false, save_chunk_states = false;
  bool save_window_qk = false;
  bool slot_swish = false;  // slot_feature_map "swish": silu on the slots' q and k, the window's raw (nha.md 8.5)
  int64_t conv_size = 4;

  // Keys in the op's window (the current one included); -1: unlimited.
  int64_t window_keys() const;
  // Tokens between a token and its entry into the slots; -1: it never enters.
  int64_t shift() const;
};

NhaConfig nha_config_from_json(const nlohmann::json& mixer);

// One layer's decoding state (nha.md 9): constant in the sequence length except for a full window,
// whose ring is the whole past (a KV cache that doubles when full).
struct NhaState : DecodeState {
  Tensor q_conv, k_conv, v_conv;  // (B, W-1, channels): the last conv inputs (undefined without convs)
  // Slot memories HK, HV (tokens that left the window; undefined: M = 0) and the ring of the last w
  // tokens' op inputs, position p in slot p % w (s, g only while tokens wait to enter the slots).
  NhaDecodeState op;
  int64_t bytes() const override {
    return int64_t(q_conv.nbytes() + k_conv.nbytes() + v_conv.nbytes() + op.HK.nbytes() + op.HV.nbytes() +
                   op.ring_k.nbytes() + op.ring_v.nbytes() + op.ring_s.nbytes() + op.ring_g.nbytes());
  }
};

class NhaMixer : public Mixer {
 public:
  NhaMixer(const NhaConfig& cfg, const MixerContext& ctx);
  Var forward(const Var& x) override;
  std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype) override;
  Var decode(const Var& x, DecodeState& state) override;
  const NhaConfig& config() const { return cfg_; }
  bool set_full_window(bool full) override;
  // omega_L (B, T, Hq) of the last forward when emit_long_ratio is set (nha.md 2.6): the slots' share
  // of the softmax mass; under a weighted fusion, lambda. Undefined otherwise.
  const Tensor& long_ratio() const { return long_ratio_; }
  // Turns omega_L on or off for later forwards (an evaluation probe; the config key sets the default).
  void set_emit_long_ratio(bool on) {
    cfg_.emit_long_ratio = on;
    if (!on) long_ratio_ = Tensor();
  }

 private:
  struct OpInputs {
    Var q, k, v;         // (B, T, Hq, D), (B, T, Hkv, D), (B, T, Hkv, Dv): what the window reads
    Var q_slot, k_slot;  // silu(q), silu(k) for the slots under slot_swish; undefined: q, k
    Var s, g;            // (B, T, Hkv, M) in the state dtype; undefined when M = 0
    Var lambda;          // (B, T, Hq, 1) weighted_learned only
  };
  OpInputs project(const Var& x, NhaState* state);
  Var attend(const OpInputs& in, NhaState* state);
  Var step(const OpInputs& in, NhaState& state);
  Var output(const Var& o);
  Var short_conv(const Var& lin, const Var& weight, Tensor* cache);
  const RopeTable& rope_table_to(int64_t positions, Device device);

  NhaConfig cfg_;
  int64_t configured_window_;  // cfg_.window as built; set_full_window switches cfg_.window
  int64_t max_seq_len_;
  Linear *q_proj_, *k_proj_, *v_proj_, *f_proj_ = nullptr, *o_proj_, *fusion_proj_ = nullptr;
  Var q_conv_w_, k_conv_w_, v_conv_w_, g_norm_, pos_bias_;
  RopeTable rope_;  // built on first use: rope_short_long, and the decode step's window
  Tensor long_ratio_;
};

std::unique_ptr<Mixer> make_nha_mixer(const nlohmann::json& mixer, const MixerContext& ctx);

}  // namespace hyb
