// Key tables: type checks and normalization of config.md 2.1, defaults of 2.2, key applicability
// under a variant key (6.4's schedule keys, 5's task keys), and the docs rows.
#include "core/config_table.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace hyb {

namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

std::string number_text(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

bool applies(const KeySpec& spec, const std::string& variant_value) {
  return spec.only_for.empty() ||
         std::find(spec.only_for.begin(), spec.only_for.end(), variant_value) != spec.only_for.end();
}

std::string quoted_list(const std::vector<std::string>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += str_cat(i ? ", " : "", "\"", values[i], "\"");
  return s;
}

// The type text without article and null ("integer >= 1"), shared by errors and docs.
std::string bare_type(KeyType type, const Range& range, const std::vector<std::string>& values) {
  auto ranged = [&](const char* noun) {
    return range.unbounded() ? std::string(noun) : str_cat(noun, " ", range.text());
  };
  switch (type) {
    case KeyType::integer: return ranged("integer");
    case KeyType::number: return ranged("number");
    case KeyType::boolean: return "boolean";
    case KeyType::string: return "string";
    case KeyType::enumeration: return quoted_list(values);
    case KeyType::list: return "list";
    case KeyType::object: return "object";
    case KeyType::custom: return "value";
  }
  return "value";
}

std::string list_description(const KeySpec& spec) {
  const std::string range = spec.range.unbounded() ? std::string() : " " + spec.range.text();
  const std::string count = spec.list_len >= 0 ? str_cat(spec.list_len, " ") : std::string();
  switch (spec.elem) {
    case KeyType::integer: return str_cat("list of ", count, "integers", range);
    case KeyType::number: return str_cat("list of ", count, "numbers", range);
    case KeyType::string: return str_cat("list of ", count, "strings");
    default: return str_cat("list of ", count, "values");
  }
}

std::string with_article(const std::string& s) {
  if (s.empty()) return s;
  const char c = s[0];
  const bool vowel = c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
  return str_cat(vowel ? "an " : "a ", s);
}

Json normalize_scalar(KeyType type, const Range& range, const std::vector<std::string>& values, const Json& v,
                      const std::string& path, const std::string& description) {
  switch (type) {
    case KeyType::integer: {
      if (!v.is_number()) break;
      double x;
      if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() > uint64_t(kMaxExactInteger)) break;
        x = double(v.get<uint64_t>());
      } else if (v.is_number_integer()) {
        x = double(v.get<int64_t>());
      } else {
        x = v.get<double>();
      }
      if (!std::isfinite(x) || std::floor(x) != x || std::fabs(x) > kMaxExactInteger || !range.contains(x)) break;
      return Json(static_cast<int64_t>(x));
    }
    case KeyType::number: {
      if (!v.is_number()) break;
      const double x = v.get<double>();
      if (!range.contains(x)) break;
      return Json(x);
    }
    case KeyType::boolean:
      if (v.is_boolean()) return v;
      break;
    case KeyType::string:
      if (v.is_string()) return v;
      break;
    case KeyType::enumeration:
      if (v.is_string() && std::find(values.begin(), values.end(), v.get<std::string>()) != values.end()) return v;
      break;
    default: HYB_ASSERT(false, "normalize_scalar: not a scalar type");
  }
  throw ConfigKeyError(path, expected_problem(description, v));
}

}  // namespace

bool Range::contains(double x) const {
  if (lo_open ? !(x > lo) : !(x >= lo)) return false;
  if (hi_open ? !(x < hi) : !(x <= hi)) return false;
  return true;
}

bool Range::unbounded() const { return std::isinf(lo) && std::isinf(hi); }

std::string Range::text() const {
  if (std::isinf(lo) && std::isinf(hi)) return "";
  if (std::isinf(hi)) return str_cat(lo_open ? "> " : ">= ", number_text(lo));
  if (std::isinf(lo)) return str_cat(hi_open ? "< " : "<= ", number_text(hi));
  return str_cat("in ", lo_open ? "(" : "[", number_text(lo), ", ", number_text(hi), hi_open ? ")" : "]");
}

const KeySpec* KeyTable::find(std::string_view name) const {
  for (const KeySpec& k : keys)
    if (name == k.name) return &k;
  return nullptr;
}

std::vector<std::string> KeyTable::names() const {
  std::vector<std::string> out;
  for (const KeySpec& k : keys) out.emplace_back(k.name);
  return out;
}

std::string type_description(const KeySpec& spec) {
  std::string s;
  if (spec.type_doc) s = spec.type_doc;
  else if (spec.type == KeyType::enumeration) s = spec.values.size() == 1 ? str_cat("\"", spec.values[0], "\"") : str_cat("one of ", quoted_list(spec.values));
  else if (spec.type == KeyType::boolean) s = "true or false";
  else if (spec.type == KeyType::list) s = with_article(list_description(spec));
  else s = with_article(bare_type(spec.type, spec.range, spec.values));
  if (spec.null != Null::error) s += " or null";
  return s;
}

void require_object(const Json& v, const std::string& path, std::string_view what) {
  if (!v.is_object()) throw ConfigKeyError(path, expected_problem(what, v));
}

int64_t json_int(const Json& v) { return v.get<int64_t>(); }

void check_known_keys(const KeyTable& table, const Json& obj, const std::string& path) {
  const std::vector<std::string> names = table.names();
  for (const auto& [key, value] : obj.items())
    if (!table.find(key)) throw ConfigKeyError::unknown_key(join_path(path, key), closest_key(key, names));
}

Json normalize_value(const KeySpec& spec, const Json& value, const std::string& path) {
  Json out;
  switch (spec.type) {
    case KeyType::custom:
      HYB_ASSERT(spec.check, "key ", spec.name, " is custom but has no check");
      return spec.check(value, path);
    case KeyType::object:
      require_object(value, path, type_description(spec));
      out = spec.table ? apply_key_table(*spec.table, value, path) : value;
      break;
    case KeyType::list: {
      const std::string description = type_description(spec);
      if (!value.is_array() || (spec.list_len >= 0 && int(value.size()) != spec.list_len))
        throw ConfigKeyError(path, expected_problem(description, value));
      out = Json::array();
      const std::string elem_description = with_article(bare_type(spec.elem, spec.range, spec.values));
      for (size_t i = 0; i < value.size(); ++i)
        out.push_back(normalize_scalar(spec.elem, spec.range, spec.values, value[i], str_cat(path, "[", i, "]"),
                                       elem_description));
      break;
    }
    default: out = normalize_scalar(spec.type, spec.range, spec.values, value, path, type_description(spec));
  }
  return spec.check ? spec.check(out, path) : out;
}

Json apply_key_table(const KeyTable& table, const Json& obj, const std::string& path) {
  require_object(obj, path);
  check_known_keys(table, obj, path);
  std::string variant_value;
  Json out = Json::object();
  for (const KeySpec& spec : table.keys) {
    const std::string key_path = join_path(path, spec.name);
    const bool here = applies(spec, variant_value);
    auto it = obj.find(spec.name);
    if (it != obj.end()) {
      if (!here)
        throw ConfigKeyError(key_path, cannot_be_used_problem(str_cat(table.noun, " ", table.variant_key, " is \"", variant_value, "\"")));
      if (it->is_null()) {
        if (spec.null == Null::error) throw ConfigKeyError(key_path, expected_problem(type_description(spec), *it));
        out[spec.name] = nullptr;
      } else {
        out[spec.name] = normalize_value(spec, *it, key_path);
      }
    } else if (here) {
      if (spec.required) throw ConfigKeyError(key_path, missing_key_problem());
      if (!spec.default_value.is_null()) out[spec.name] = normalize_value(spec, spec.default_value, key_path);
      else if (spec.null != Null::error) out[spec.name] = nullptr;
    }
    if (table.variant_key && spec.name == std::string_view(table.variant_key)) variant_value = out[spec.name].get<std::string>();
  }
  return out;
}

std::string key_table_markdown(const KeyTable& table) {
  std::string md = "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const KeySpec& spec : table.keys) {
    std::string type;
    if (spec.type_doc) {
      type = spec.type_doc;
      for (const char* article : {"a ", "an "})
        if (type.rfind(article, 0) == 0) type = type.substr(std::string_view(article).size());
    } else if (spec.type == KeyType::list) {
      type = list_description(spec);
    } else if (spec.type == KeyType::enumeration) {
      for (size_t i = 0; i < spec.values.size(); ++i) type += str_cat(i ? ", " : "", "`\"", spec.values[i], "\"`");
    } else if (spec.type == KeyType::object && spec.table) {
      type = str_cat("object (", spec.table->noun, " keys below)");
    } else {
      type = bare_type(spec.type, spec.range, spec.values);
    }
    if (spec.null != Null::error) type += ", or null";
    std::string def;
    if (spec.default_doc) def = spec.default_doc;
    else if (spec.required) def = "required";
    else if (!spec.default_value.is_null()) def = str_cat("`", spec.default_value.dump(), "`");
    else if (spec.null == Null::derived) def = "null: derived";
    else if (spec.null == Null::off) def = "`null`";
    else def = "absent";
    std::string meaning = spec.doc;
    if (!spec.only_for.empty()) {
      std::string when;
      for (size_t i = 0; i < spec.only_for.size(); ++i) when += str_cat(i ? ", " : "", "`\"", spec.only_for[i], "\"`");
      meaning += str_cat(meaning.empty() ? "" : " ", "(only with `", table.variant_key, "` ", when, ")");
    }
    md += str_cat("| `", spec.name, "` | ", type, " | ", def, " | ", meaning, " |\n");
  }
  return md;
}

}  // namespace hyb
