// Parameter groups: syntax checks at resolution, matching once the parameter names exist.
#include "train/config/config_param_groups.h"

namespace hyb {

namespace {

Json check_globs(const Json& v, const std::string& path) {
  if (v.is_array()) {
    if (v.empty()) throw ConfigKeyError(path, expected_problem("a glob or a list of at least one glob", v));
    for (size_t i = 0; i < v.size(); ++i) check_param_glob(v[i], str_cat(path, "[", i, "]"));
    return v;
  }
  return check_param_glob(v, path);
}

}  // namespace

const KeyTable kParamGroupKeys{"param group", nullptr, {
    {.name = "params", .type = KeyType::custom, .required = true, .check = check_globs,
     .type_doc = "a glob or a list of globs", .doc = "parameter names: `*` any run of characters (dots included), `?` one character"},
    {.name = "weight_decay", .type = KeyType::number, .null = Null::off, .range = Range::at_least(0),
     .default_doc = "null: not set by this entry", .doc = "decay of the matched parameters"},
    {.name = "lr_mult", .type = KeyType::number, .null = Null::off, .range = Range::above(0),
     .default_doc = "null: not set by this entry (1)", .doc = "learning-rate multiplier of the matched parameters"},
}};

Json check_param_groups(const Json& v, const std::string& path) {
  if (!v.is_array()) throw ConfigKeyError(path, expected_problem("a list of {\"params\", \"weight_decay\", \"lr_mult\"}", v));
  Json out = Json::array();
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string p = str_cat(path, "[", k, "]");
    require_object(v[k], p, "an object {\"params\", \"weight_decay\", \"lr_mult\"}");
    Json g = apply_key_table(kParamGroupKeys, v[k], p);
    if (g["weight_decay"].is_null() && g["lr_mult"].is_null())
      throw ConfigKeyError(p, expected_problem("\"weight_decay\" or \"lr_mult\" besides \"params\"", v[k]));
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<ParamSetting> resolve_param_settings(double weight_decay, const std::vector<ParamGroup>& groups,
                                                 const std::vector<NamedParameter>& params) {
  std::vector<ParamSetting> out;
  for (const NamedParameter& p : params) out.push_back({p.decay ? weight_decay : 0.0, 1.0});
  for (const ParamGroup& g : groups) {
    for (size_t k = 0; k < g.globs.size(); ++k) {
      bool matched = false;
      for (size_t i = 0; i < params.size(); ++i) {
        if (!param_glob_matches(g.globs[k], params[i].name)) continue;
        matched = true;
        if (g.weight_decay) out[i].weight_decay = *g.weight_decay;
        if (g.lr_mult) out[i].lr_mult = *g.lr_mult;
      }
      if (!matched)
        throw Error(str_cat(g.source, ": ", g.glob_paths[k], ": ",
                            expected_problem("a glob that matches a parameter", Json(g.globs[k])), " (no parameter matches)"));
    }
  }
  return out;
}

}  // namespace hyb
