// The `attention` mixer object as written in a config (attention.md 10): its key table and its
// resolution (defaults, the derived head sizes, softmax scale, rotary width and table length, and
// the validation rules of attention.md 10). The module reads the resolved object through
// attention_config_from_json (attention.h).
//   resolve_attention_config(mixer, ctx);   // in place; error paths relative to the mixer
#pragma once
#include "core/config_table.h"
#include "layers/layer_config.h"

namespace hyb {

extern const KeyTable kAttentionKeys;
extern const KeyTable kRopeScalingKeys;

void resolve_attention_config(Json& mixer, const LayerConfigContext& ctx);

}  // namespace hyb
