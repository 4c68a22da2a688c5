// The `gsa` mixer object as written in a config (gsa.md 8): its key table and its resolution
// (d_model from the model, num_kv_heads and num_slots written out, the rules between keys). The
// module reads the resolved object through gsa_config_from_json (gsa.h).
//   resolve_gsa_config(mixer, ctx);   // in place; error paths relative to the mixer
#pragma once
#include "core/config_table.h"
#include "layers/layer_config.h"

namespace hyb {

extern const KeyTable kGsaKeys;

void resolve_gsa_config(Json& mixer, const LayerConfigContext& ctx);

}  // namespace hyb
