// Globs over parameter names (`*` any run of characters, dots included; `?` one character), shared by
// the optimizer's param_groups (config.md 6.3), the eval probes and the families that pick their own
// parameters by name (pha.md 7.4's residual.beta_targets).
//   if (param_glob_matches("model.layers.*.mixer.gss.dss.*", name)) ...
#pragma once
#include <string>

#include "core/config_table.h"

namespace hyb {

// One glob of parameter names: letters, digits, '_', '.', '*' and '?'.
Json check_param_glob(const Json& v, const std::string& path);
bool param_glob_matches(const std::string& glob, const std::string& name);

}  // namespace hyb
