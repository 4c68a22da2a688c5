// The path grammar of config.md 4.1 and Python's slice semantics: slice bounds are clipped to the
// list, a single index outside it is an error.
#include "train/config/config_path.h"

#include <algorithm>
#include <cctype>

namespace hyb {

namespace {

bool is_key_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// index = [ "-" ] digits
std::optional<int64_t> parse_index(std::string_view s, bool allow_sign) {
  bool neg = false;
  if (allow_sign && !s.empty() && s[0] == '-') {
    neg = true;
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 15) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return neg ? -v : v;
}

std::optional<SelectorItem> parse_item(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t from = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == ':') {
      parts.push_back(s.substr(from, i - from));
      from = i + 1;
    }
  SelectorItem item;
  if (parts.size() == 1) {
    auto i = parse_index(parts[0], true);
    if (!i) return std::nullopt;
    item.index = *i;
    return item;
  }
  if (parts.size() > 3) return std::nullopt;
  item.slice = true;
  for (int b = 0; b < 2; ++b) {
    if (parts[b].empty()) continue;
    auto i = parse_index(parts[b], true);
    if (!i) return std::nullopt;
    (b == 0 ? item.start : item.stop) = *i;
  }
  if (parts.size() == 3) {
    auto st = parse_index(parts[2], false);
    if (!st) return std::nullopt;
    item.step = *st;
  }
  return item;
}

std::string noun(SelectorTarget t, int64_t n) {
  return t == SelectorTarget::layers ? str_cat("the model has ", n, n == 1 ? " layer" : " layers")
                                     : str_cat("the list has ", n, n == 1 ? " element" : " elements");
}

std::string syntax_problem(SelectorTarget t, const Json& got) {
  return expected_problem(t == SelectorTarget::layers ? "a layer selector such as \"6::8\", \"3,11\" or \"*\""
                                                      : "a selector such as \"1\", \"0:2\" or \"*\"",
                          got);
}

// Checks and returns the picks: every index in range, none twice, at least one.
std::vector<int64_t> checked_picks(std::vector<int64_t> picks, const std::vector<int64_t>& single, int64_t n,
                                   SelectorTarget t, const Json& got, const std::string& path) {
  const char* what = t == SelectorTarget::layers ? "layer" : "element";
  for (int64_t i : single) {
    if (i >= n) throw ConfigKeyError(path, expected_problem(str_cat("indices below ", n, " (", noun(t, n), ")"), got));
    if (i < -n)
      throw ConfigKeyError(path, expected_problem(str_cat("indices from ", -n, " to ", n - 1, " (", noun(t, n), ")"), got));
  }
  if (picks.empty())
    throw ConfigKeyError(path, expected_problem(str_cat("a selector that picks at least one ", what, " (", noun(t, n), ")"), got));
  std::vector<int64_t> sorted = picks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i] == sorted[i - 1])
      throw ConfigKeyError(path, expected_problem(str_cat("a selector that picks each ", what, " once"), got) +
                                     str_cat(" (", what, " ", sorted[i], " twice)"));
  return picks;
}

}  // namespace

bool ConfigPath::starts_with(std::string_view a, std::string_view b) const {
  return steps.size() >= 2 && steps[0].is_key && steps[0].key == a && steps[1].is_key && steps[1].key == b;
}

std::optional<Selector> parse_selector(std::string_view text) {
  Selector s;
  s.text = std::string(text);
  if (text == "*") {
    s.all = true;
    return s;
  }
  size_t from = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ',') {
      auto item = parse_item(text.substr(from, i - from));
      if (!item) return std::nullopt;
      s.items.push_back(*item);
      from = i + 1;
    }
  return s;
}

std::optional<ConfigPath> parse_config_path(std::string_view text) {
  ConfigPath p;
  p.text = std::string(text);
  size_t i = 0;
  auto read_key = [&]() -> bool {
    if (i >= text.size() || !is_key_start(text[i])) return false;
    const size_t from = i;
    while (i < text.size() && is_key_char(text[i])) ++i;
    p.steps.push_back({true, std::string(text.substr(from, i - from)), {}});
    return true;
  };
  if (!read_key()) return std::nullopt;
  while (i < text.size()) {
    if (text[i] == '.') {
      ++i;
      if (!read_key()) return std::nullopt;
    } else if (text[i] == '[') {
      const size_t close = text.find(']', i);
      if (close == std::string_view::npos) return std::nullopt;
      auto sel = parse_selector(text.substr(i + 1, close - i - 1));
      if (!sel) return std::nullopt;
      p.steps.push_back({false, {}, *sel});
      i = close + 1;
    } else {
      return std::nullopt;
    }
  }
  return p;
}

std::vector<int64_t> select_indices(const Selector& s, int64_t n, SelectorTarget target, const std::string& path) {
  const Json got = s.text;
  std::vector<int64_t> picks, single;
  if (s.all) {
    for (int64_t i = 0; i < n; ++i) picks.push_back(i);
    return checked_picks(picks, single, n, target, got, path);
  }
  for (const SelectorItem& it : s.items) {
    if (!it.slice) {
      single.push_back(it.index);
      picks.push_back(it.index < 0 ? it.index + n : it.index);
      continue;
    }
    if (it.step < 1) throw ConfigKeyError(path, expected_problem("a slice step >= 1", got));
    auto clip = [n](std::optional<int64_t> b, int64_t fallback) {
      if (!b) return fallback;
      const int64_t v = *b < 0 ? *b + n : *b;
      return std::clamp<int64_t>(v, 0, n);
    };
    for (int64_t i = clip(it.start, 0); i < clip(it.stop, n); i += it.step) picks.push_back(i);
  }
  return checked_picks(picks, single, n, target, got, path);
}

std::vector<int64_t> select_layers(const Json& value, int64_t num_layers, const std::string& path) {
  if (value.is_string()) {
    auto s = parse_selector(value.get<std::string>());
    if (!s) throw ConfigKeyError(path, syntax_problem(SelectorTarget::layers, value));
    return select_indices(*s, num_layers, SelectorTarget::layers, path);
  }
  if (!value.is_array() && !value.is_number_integer()) throw ConfigKeyError(path, syntax_problem(SelectorTarget::layers, value));
  std::vector<int64_t> picks, single;
  for (const Json& v : value.is_array() ? value : Json::array({value})) {
    if (!v.is_number_integer()) throw ConfigKeyError(path, syntax_problem(SelectorTarget::layers, value));
    const int64_t i = v.get<int64_t>();
    single.push_back(i);
    picks.push_back(i < 0 ? i + num_layers : i);
  }
  return checked_picks(picks, single, num_layers, SelectorTarget::layers, value, path);
}

std::string format_layer_selector(const std::vector<int64_t>& idx, int64_t num_layers) {
  if (int64_t(idx.size()) == num_layers) return "*";
  std::string out;
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && idx[j + 1] == idx[j] + 1) ++j;
    const std::string part = j - i >= 2 ? str_cat(idx[i], ":", idx[j] + 1)
                           : j == i     ? str_cat(idx[i])
                                        : str_cat(idx[i], ",", idx[j]);
    out += str_cat(out.empty() ? "" : ",", part);
    i = j + 1;
  }
  return out;
}

}  // namespace hyb
