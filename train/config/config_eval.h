// The eval section (config.md 7): what `hybrid train` evaluates at each validation.
//   Json eval = resolve_eval_section(cfg.value("eval", Json::object()));
#pragma once
#include "core/config_table.h"

namespace hyb {

extern const KeyTable kEvalKeys;
extern const KeyTable kAverageKeys;

// Errors are ConfigKeyError under "eval".
Json resolve_eval_section(const Json& eval);

}  // namespace hyb
