// What a layer family's config resolution may read besides its own mixer object (config.md 3.3, 3.6
// step 6): the model's sizes, the layer's position, and the named blocks for families that take
// sizes from the blocks `T` and `M`.
//   void resolve_attention_config(Json& mixer, const LayerConfigContext& ctx);   // ctx.d_model ...
#pragma once
#include <cstdint>

#include "core/config_error.h"
#include "core/config_table.h"

namespace hyb {

struct LayerConfigContext {
  int64_t d_model = 0;
  int64_t max_seq_len = 0;  // model.max_seq_len, resolved before the layers
  int64_t num_layers = 0;
  int64_t layer_index = 0;        // 0-based index in the resolved list
  double init_std = 0.02;         // model.init_std: the std of family rules written "N(0, 0.02) of the model"
  const Json* blocks = nullptr;  // model.blocks as written (after phase-1 --set), or nullptr
};

// The d_model key of the families that carry one (null: model.d_model; any other value must equal
// it), and its rule, applied by the family's resolver.
KeySpec mixer_d_model_key();
void resolve_mixer_d_model(Json& mixer, const LayerConfigContext& ctx);

// The chunk lengths the GSA, NHA and Gated DeltaNet CUDA kernels are written for: 16, 32 or 64.
Json check_chunk_size_16_32_64(const Json& value, const std::string& path);

}  // namespace hyb
