// The `nha` mixer object as written in a config (nha.md 10): its key table and its resolution
// (d_model from the model, num_kv_heads, value_head_dim and scale written out, the rules between
// keys). The module reads the resolved object through nha_config_from_json (nha.h).
//   resolve_nha_config(mixer, ctx);   // in place; error paths relative to the mixer
#pragma once
#include "core/config_table.h"
#include "layers/layer_config.h"

namespace hyb {

extern const KeyTable kNhaKeys;

void resolve_nha_config(Json& mixer, const LayerConfigContext& ctx);

}  // namespace hyb
