// --set parsing and path assignment.
#include "train/config/config_assign.h"

#include "train/config/config_json.h"

namespace hyb {

Assignment parse_assignment(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos)
    throw Error(str_cat("--set: ", arg, ": expected PATH=VALUE such as model.layers[11].mixer.window=4096, got ", compact_value(arg)));
  const std::string path_text = arg.substr(0, eq), value_text = arg.substr(eq + 1);
  auto path = parse_config_path(path_text);
  if (!path)
    throw Error(str_cat("--set: ", path_text, ": expected a path such as model.layers[11].mixer.window or train.optimizer.lr, got ",
                        compact_value(path_text)));
  Assignment a{*path, Json()};
  if (Json::accept(value_text)) {
    try {
      a.value = parse_json_no_duplicates(value_text, path_text);
    } catch (const ConfigKeyError& e) {
      throw Error(format_config_error("--set", e.path(), e));
    }
  } else {
    a.value = value_text;
  }
  return a;
}

void assign_path(Json& node, const ConfigPath& path, size_t from, const std::string& prefix, const Json& value,
                 const std::function<void(const std::string&)>& on_set) {
  const PathStep& step = path.steps[from];
  const bool last = from + 1 == path.steps.size();
  if (step.is_key) {
    if (node.is_null()) node = Json::object();
    if (!node.is_object())
      throw ConfigKeyError(prefix, expected_problem(str_cat("an object (the path goes on to .", step.key, ")"), node));
    const std::string here = join_path(prefix, step.key);
    if (last) {
      node[step.key] = value;
      on_set(here);
      return;
    }
    if (!node.contains(step.key)) node[step.key] = Json::object();
    assign_path(node[step.key], path, from + 1, here, value, on_set);
    return;
  }
  if (!node.is_array())
    throw ConfigKeyError(prefix, expected_problem(str_cat("a list (the path selects [", step.selector.text, "])"), node));
  for (int64_t i : select_indices(step.selector, int64_t(node.size()), SelectorTarget::list, path.text)) {
    const std::string here = str_cat(prefix, "[", i, "]");
    if (last) {
      node[size_t(i)] = value;
      on_set(here);
    } else {
      assign_path(node[size_t(i)], path, from + 1, here, value, on_set);
    }
  }
}

}  // namespace hyb
