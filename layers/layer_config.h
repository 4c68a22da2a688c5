// What a layer family's config resolution may read besides its own mixer object (config.md 3.3, 3.6
// step 6): the model's sizes, the layer's position, and the named blocks for families that take
// sizes from the blocks `T` and `M`.
//   void resolve_attention_config(Json& mixer, const LayerConfigContext& ctx);   // ctx.d_model ...
#pragma once
#include <cstdint>

#include "core/config_error.h"

namespace hyb {

struct LayerConfigContext {
  int64_t d_model = 0;
  int64_t max_seq_len = 0;  // model.max_seq_len, resolved before the layers
  int64_t num_layers = 0;
  int64_t layer_index = 0;        // 0-based index in the resolved list
  double init_std = 0.02;         // model.init_std: the std of family rules written "N(0, 0.02) of the model"
  const Json* blocks = nullptr;  // model.blocks as written (after phase-1 --set), or nullptr
};

}  // namespace hyb
