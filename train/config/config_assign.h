// `--set PATH=VALUE` (config.md 4.2, 4.3): parsing, and writing a value at a path. VALUE is JSON
// when it parses as JSON and a string otherwise. Phase 1 (every path not into model.layers) edits
// the config as written; phase 2 (model.layers...) edits the formed layer list; the resolver
// applies them in that order.
//   Assignment a = parse_assignment("model.layers[11].mixer.window=4096");   // a.phase2() == true
//   assign_path(cfg, a.path, 0, "", a.value, [](const std::string& written) { ... });
#pragma once
#include <functional>
#include <string>

#include "train/config/config_path.h"

namespace hyb {

struct Assignment {
  ConfigPath path;
  Json value;
  bool phase2() const { return path.starts_with("model", "layers"); }
};

// Throws hyb::Error "--set: ..." for a missing '=', a malformed path or a duplicate key in VALUE.
Assignment parse_assignment(const std::string& arg);

// Writes `value` at path.steps[from..] below `node`, whose own path is `prefix`. Absent keys (and
// null values on the way) become objects; list elements must exist. `on_set` receives the concrete
// path of every place written (a selector may pick several). Errors are ConfigKeyError: selector
// errors at the path as written, a value that is not an object or list at its concrete path.
void assign_path(Json& node, const ConfigPath& path, size_t from, const std::string& prefix, const Json& value,
                 const std::function<void(const std::string&)>& on_set);

}  // namespace hyb
