// The `mamba2` mixer object as written in a config (mamba2.md 7): its key table and its resolution
// (d_model from the model, d_ssm = expand * d_model, the head count, the rules between keys). The
// module reads the resolved object through mamba2_config_from_json (mamba2.h).
//   resolve_mamba2_config(mixer, ctx);   // in place; error paths relative to the mixer
#pragma once
#include "core/config_table.h"
#include "layers/layer_config.h"

namespace hyb {

extern const KeyTable kMamba2Keys;

void resolve_mamba2_config(Json& mixer, const LayerConfigContext& ctx);

}  // namespace hyb
