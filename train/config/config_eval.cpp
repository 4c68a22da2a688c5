// Eval keys. Parameter probes are globs over parameter names like param_groups'; they are checked
// for syntax here and matched when the model exists.
#include "train/config/config_eval.h"

#include "train/config/config_param_groups.h"

namespace hyb {

namespace {

Json check_probes(const Json& v, const std::string& path) {
  if (!v.is_array()) throw ConfigKeyError(path, expected_problem("a list of globs of parameter names", v));
  for (size_t i = 0; i < v.size(); ++i) check_param_glob(v[i], str_cat(path, "[", i, "]"));
  return v;
}

}  // namespace

const KeyTable kAverageKeys{"average", nullptr, {
    {.name = "keep", .type = KeyType::integer, .required = true, .range = Range::at_least(1),
     .doc = "K: checkpoints with the lowest validation loss kept in host memory"},
    {.name = "average", .type = KeyType::integer, .required = true, .range = Range::at_least(1),
     .doc = "A <= K: the best that are averaged at the end (eval.md 2)"},
}};

const KeyTable kEvalKeys{"eval", nullptr, {
    {.name = "max_windows", .type = KeyType::integer, .null = Null::off, .range = Range::at_least(1),
     .default_doc = "null: all", .doc = "validation uses the first M windows of the validation stream"},
    {.name = "average", .type = KeyType::object, .null = Null::off, .table = &kAverageKeys,
     .doc = "checkpoint averaging (eval.md 2); needs train.eval_interval > 0"},
    {.name = "param_probes", .type = KeyType::custom, .default_value = Json::array(), .check = check_probes,
     .type_doc = "list of globs", .default_doc = "`[]`", .doc = "parameters logged at every validation (eval.md 6.3)"},
}};

Json resolve_eval_section(const Json& eval) {
  Json e = apply_key_table(kEvalKeys, eval, "eval");
  const Json& avg = e["average"];
  if (!avg.is_null() && json_int(avg["average"]) > json_int(avg["keep"]))
    throw ConfigKeyError("eval.average.average", expected_problem(str_cat("at most keep (", avg["keep"].dump(), ")"), avg["average"]));
  return e;
}

}  // namespace hyb
