// A token mixer: the sublayer a layer family contributes to a block, (B, T, C) -> (B, T, C).
// Families implement this and add one line to layers/registry.cpp.
#pragma once
#include <nlohmann/json.hpp>

#include "layers/module.h"

namespace hyb {

// What a family needs to know about the model around it when it builds its mixer.
struct MixerContext {
  int64_t d_model = 0;
  int64_t num_layers = 0;
  int64_t layer_index = 0;
  int64_t max_seq_len = 0;
  double init_std = 0.02;
  std::string init = "family";  // config.md 3.8: "family" or "gpt2"
  bool has_mlp = true;           // an mlp follows the mixer in its block (Mamba2's n_res, mamba2.md 2.1)
  // std of projections that write into the residual stream: init_std / sqrt(2 L)
  double residual_std() const;
};

// A mixer's inference state for incremental decoding (a KV cache, a recurrent state): constant size
// for recurrent and windowed layers, growing for full attention.
class DecodeState {
 public:
  virtual ~DecodeState() = default;
  virtual int64_t bytes() const = 0;  // memory held, for `hybrid bench infer` and the docs' cache tables
  int64_t n_seen = 0;                 // tokens processed so far = position of the next token
};

class Mixer : public Module {
 public:
  virtual Var forward(const Var& x) = 0;
  // Decoding: x (B, n, C) holds the next n tokens of each sequence (positions n_seen .. n_seen + n - 1);
  // returns what forward would return at those positions and advances the state. Families without a
  // decode path say so.
  virtual std::unique_ptr<DecodeState> start_decode(int64_t batch, Device device, DType dtype);
  virtual Var decode(const Var& x, DecodeState& state);
  // Randomised windows in training (nha.md 8.1): later forwards use an unlimited window (true) or
  // the configured one (false). Returns false for families without such a window.
  virtual bool set_full_window(bool full) { return false; }
};

}  // namespace hyb

namespace hyb {
// Builds the mixer of a resolved mixer object through the registry (layers/registry.cpp).
std::unique_ptr<Mixer> make_mixer(const nlohmann::json& mixer, const MixerContext& ctx);
}  // namespace hyb
