// The `gated_deltanet` mixer object as written in a config (gated_deltanet.md 7): its key table and
// its resolution (d_model from the model, num_v_heads, the value head dim, scale and init std
// written out; GVA and expand_v rules). The module reads the resolved object through
// gated_deltanet_config_from_json (gated_deltanet.h).
//   resolve_gated_deltanet_config(mixer, ctx);   // in place; error paths relative to the mixer
#pragma once
#include "core/config_table.h"
#include "layers/layer_config.h"

namespace hyb {

extern const KeyTable kGatedDeltaNetKeys;

void resolve_gated_deltanet_config(Json& mixer, const LayerConfigContext& ctx);

}  // namespace hyb
