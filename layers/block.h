// One layer of the backbone (config.md 3.2): the standard pre-norm block of layers/model, or the
// block of a family that replaces the block equations (pha, layers/pha). A block maps the residual
// stream (B, T, C) to (B, T, C) and names its parameters under model.layers.{i}.
#pragma once
#include <nlohmann/json.hpp>

#include "layers/mixer.h"

namespace hyb {

// A layer of the resolved list, as the model is built from it.
struct LayerSpec {
  nlohmann::json mixer;             // resolved mixer object, with "type"
  std::string mlp_type = "swiglu";  // "swiglu" or "none"
  int64_t intermediate_size = 0;
};

// What a block needs of the model around it besides its mixer's context.
struct BlockContext {
  MixerContext mixer;
  double norm_eps = 1e-5;
  uint64_t seed = 0;                   // the run's seed: in-block dropout masks are drawn from it
  const uint64_t* rng_step = nullptr;  // the backbone's micro-step, which dropout masks also depend on
};

class Block : public Module {
 public:
  virtual Var forward(const Var& x) = 0;
  virtual Var decode(const Var& x, DecodeState& state) = 0;
  // The block's token mixer: decode states and the trainer's window switch go through it.
  virtual Mixer& mixer() = 0;
};

}  // namespace hyb
