// The model section's keys (config.md 3.1), the block, layout, generator and override objects (3.2,
// 3.5, intra_hybrid.md 2.1), and step 5's resolution of the model's own keys, whose derived values
// come from the data section.
//   Json scalars = resolve_model_keys(model, resolved_data);   // d_model ... init_std, in table order
#pragma once
#include "core/config_table.h"

namespace hyb {

extern const KeyTable kModelKeys;
extern const KeyTable kBlockKeys;
extern const KeyTable kLayoutKeys;
extern const KeyTable kGenerateKeys;
extern const KeyTable kOverrideKeys;

// The keys of kModelKeys up to init_std, resolved. Errors are ConfigKeyError under "model".
Json resolve_model_keys(const Json& model, const Json& data);

}  // namespace hyb
