// The pieces of a config error line (config.md 8.2): value formatting, problem texts, paths and
// the did-you-mean rule.
#include "core/config_error.h"

#include <algorithm>

namespace hyb {

ConfigKeyError::ConfigKeyError(std::string path, std::string problem, Scope scope)
    : Error(path + ": " + problem), path_(std::move(path)), problem_(std::move(problem)), scope_(scope) {}

ConfigKeyError ConfigKeyError::unknown_key(std::string path, std::string suggestion) {
  ConfigKeyError e(std::move(path), "unknown key");
  e.unknown_ = true;
  e.suggestion_ = std::move(suggestion);
  return e;
}

ConfigKeyError ConfigKeyError::prefixed(std::string_view prefix) const {
  ConfigKeyError e(*this);
  e.path_ = join_path(prefix, path_);
  static_cast<Error&>(e) = Error(e.path_ + ": " + e.problem_);
  return e;
}

std::string compact_value(const Json& v) {
  constexpr size_t kMax = 40;
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > kMax) s = s.substr(0, kMax - 3) + "...";
  return s;
}

std::string expected_problem(std::string_view description, const Json& got) {
  return str_cat("expected ", description, ", got ", compact_value(got));
}

std::string cannot_be_used_problem(std::string_view reason) { return str_cat("cannot be used here: ", reason); }

std::string missing_key_problem(std::string_view hint) {
  return hint.empty() ? std::string("missing required key") : str_cat("missing required key (", hint, ")");
}

std::string join_path(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  if (!key.empty() && key.front() == '[') return str_cat(prefix, key);
  return str_cat(prefix, ".", key);
}

bool path_within(std::string_view path, std::string_view prefix) {
  if (prefix.empty()) return true;
  if (path.substr(0, prefix.size()) != prefix) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
}

std::string last_key(std::string_view path) {
  const size_t dot = path.rfind('.');
  return std::string(dot == std::string_view::npos ? path : path.substr(dot + 1));
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_key(std::string_view key, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, key.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(key, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string format_config_error(std::string_view source, std::string_view full_path, const ConfigKeyError& e,
                                std::string_view layers_suffix, std::string (*elsewhere)(std::string_view key)) {
  std::string problem = e.problem();
  if (e.is_unknown_key()) {
    std::string hint;
    if (!e.suggestion().empty()) {
      const size_t dot = full_path.rfind('.');
      hint = join_path(dot == std::string_view::npos ? std::string_view() : full_path.substr(0, dot), e.suggestion());
    } else if (elsewhere) {
      hint = elsewhere(last_key(full_path));
    }
    if (!hint.empty() && hint != full_path) problem += str_cat(" (did you mean \"", hint, "\"?)");
  }
  return str_cat(source, ": ", full_path, ": ", problem, layers_suffix);
}

}  // namespace hyb
