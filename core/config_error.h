// Errors in config values (config.md 8.2). A checker knows the path of the value inside the object
// it checks and what is wrong; only the resolver knows where the value was written (the file or
// --set, which block or override carried it into which layers), so checkers throw ConfigKeyError
// and the resolver turns it into the one line "SOURCE: PATH: PROBLEM".
//   throw ConfigKeyError("num_kv_heads", expected_problem("a divisor of num_heads (12)", v));
//   format_config_error("configs/x.json", "model.layers[3].mixer.num_kv_heads", e.problem())
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace hyb {

// Configs keep the order in which keys were written (errors come in file order) and are printed in
// schema order; only the hash sorts keys (config.md 9).
using Json = nlohmann::ordered_json;

class ConfigKeyError : public Error {
 public:
  // value: the value at `path` is wrong. layer: a family rule that reads model keys (d_model,
  // max_seq_len, num_layers) failed; it is reported at the layer's own path (config.md 8.3).
  enum class Scope { value, layer };

  ConfigKeyError(std::string path, std::string problem, Scope scope = Scope::value);
  // An unknown key; `suggestion` is the closest key of the same object, or "" (the resolver then
  // looks for the key elsewhere in the schema).
  static ConfigKeyError unknown_key(std::string path, std::string suggestion);

  const std::string& path() const { return path_; }
  const std::string& problem() const { return problem_; }
  Scope scope() const { return scope_; }
  bool is_unknown_key() const { return unknown_; }
  const std::string& suggestion() const { return suggestion_; }
  // The same error one object further out: path "window" under prefix "mixer" becomes "mixer.window".
  ConfigKeyError prefixed(std::string_view prefix) const;

 private:
  std::string path_, problem_;
  Scope scope_ = Scope::value;
  bool unknown_ = false;
  std::string suggestion_;
};

// The value as compact JSON, strings quoted, cut to 40 characters (the last three are "...").
std::string compact_value(const Json& v);

// "expected DESCRIPTION, got VALUE"
std::string expected_problem(std::string_view description, const Json& got);
// "cannot be used here: REASON"
std::string cannot_be_used_problem(std::string_view reason);
// "missing required key" plus an optional hint in parentheses
std::string missing_key_problem(std::string_view hint = {});

// "a" + "b" -> "a.b", "" + "b" -> "b", "a" + "[3]" -> "a[3]".
std::string join_path(std::string_view prefix, std::string_view key);
// True when `path` is `prefix` or lies inside it ("a.b" is inside "a", "a[2].c" inside "a[2]"; "ab" is not inside "a").
bool path_within(std::string_view path, std::string_view prefix);
// The part of a path after its last "." (the key of the innermost object).
std::string last_key(std::string_view path);

// Levenshtein distance, and the candidate closest to `key` when that distance is at most 2 or a
// third of the key's length (config.md 8.2); "" when none is that close.
size_t edit_distance(std::string_view a, std::string_view b);
std::string closest_key(std::string_view key, const std::vector<std::string>& candidates);

// Resolves a checker's error into the line of config.md 8.2. `full_path` is where the value was
// written; `layers_suffix` is "" or " (in model.layers[...])"; `elsewhere(key)` gives the path of
// a key of that name elsewhere in the schema, or "".
std::string format_config_error(std::string_view source, std::string_view full_path, const ConfigKeyError& e,
                                std::string_view layers_suffix = {},
                                std::string (*elsewhere)(std::string_view key) = nullptr);

}  // namespace hyb
