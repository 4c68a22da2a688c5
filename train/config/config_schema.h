// The whole config schema as one list of key tables (config.md sections 1, 3 to 7 and each
// family's mixer table): the top-level keys, the schema-wide lookup behind "did you mean
// "train.optimizer.lr"?", and the key reference of docs/configs.md.
//   schema_key_path("lr")             // "train.optimizer.lr"
//   std::string md = config_reference_markdown();
#pragma once
#include <string>
#include <string_view>

#include "core/config_table.h"

namespace hyb {

extern const KeyTable kRunKeys;

// The path of a key of this name in the schema (the first in schema order), or "".
std::string schema_key_path(std::string_view key);

// Every key table with its path, rendered as markdown; docs/configs.md holds this text between
// its "generated" markers, and a test keeps the two equal.
std::string config_reference_markdown();

}  // namespace hyb
