// train.optimizer.param_groups (config.md 6.3): per-parameter weight decay and lr multiplier by
// glob over parameter names (`*` any run of characters, dots included; `?` one character). The
// globs are checked for syntax when the config resolves; matching needs the model's parameter
// names, so it happens when the optimizer is built, and a glob that matches nothing is an error.
//   auto s = resolve_param_settings(opt.weight_decay, opt.param_groups, model.named_parameters());
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"
#include "core/param_glob.h"
#include "layers/module.h"

namespace hyb {

extern const KeyTable kParamGroupKeys;

// The check of the param_groups list (a custom key of the optimizer table).
Json check_param_groups(const Json& v, const std::string& path);

struct ParamGroup {
  std::vector<std::string> globs;
  std::optional<double> weight_decay, lr_mult;  // unset: this entry does not decide the field
  std::string source;                           // where the entry was written, for errors
  std::vector<std::string> glob_paths;          // train.optimizer.param_groups[k].params(...), per glob
};

struct ParamSetting {
  double weight_decay = 0;
  double lr_mult = 1;
};

// The default decay set (NamedParameter::decay: two or more dims unless the family says otherwise)
// decays with `weight_decay`, the rest not; then for each field the last group that matches and sets
// it decides. Throws hyb::Error "SOURCE: PATH: expected a glob that matches a parameter, got ...
// (no parameter matches)".
std::vector<ParamSetting> resolve_param_settings(double weight_decay, const std::vector<ParamGroup>& groups,
                                                 const std::vector<NamedParameter>& params);

}  // namespace hyb
