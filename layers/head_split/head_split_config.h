// The `head_split` mixer object as written in a config (intra_hybrid.md 4.8): its key tables and its
// resolution. The sizes it leaves null come from the named blocks `T` (attention) and `M` (mamba2)
// by the rules of 4.1; a preset of 4.4 expands into norm / scalar / fusion / out_proj and is then
// written as null (config.md 2.3). The module reads the resolved object through
// head_split_config_from_json (head_split.h).
//   resolve_head_split_config(mixer, ctx);   // in place; error paths relative to the mixer
#pragma once
#include <string>
#include <vector>

#include "core/config_table.h"
#include "layers/layer_config.h"

namespace hyb {

extern const KeyTable kHeadSplitKeys;
extern const KeyTable kHeadSplitAttnKeys;
extern const KeyTable kHeadSplitSsmKeys;

void resolve_head_split_config(Json& mixer, const LayerConfigContext& ctx);

// The presets of intra_hybrid.md 4.4 (the rows of the study's Table 5), in table order.
std::vector<std::string> head_split_preset_names();

}  // namespace hyb
