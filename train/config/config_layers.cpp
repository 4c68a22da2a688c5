// Layer-list forms, overrides and per-layer resolution with origins. A value's origin is the path
// where it was written; merging keeps the origin of every value it leaves in place, so the layers a
// bad value reached are the layers whose value at that key has the same origin.
#include "train/config/config_layers.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "layers/mlp/mlp_config.h"
#include "layers/registry.h"
#include "train/config/config_model.h"
#include "train/config/config_schema.h"
#include "train/config/layout_generate.h"

namespace hyb {

namespace {

// The prefix of rel one component shorter: "mixer.branches[1]" -> "mixer.branches" -> "mixer" -> "".
std::string parent_rel(const std::string& rel) {
  const size_t cut = rel.find_last_of(".[");
  return cut == std::string::npos ? std::string() : rel.substr(0, cut);
}

bool is_code(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A (possibly partial) block as written: an object of mixer and mlp objects.
void check_block(const Json& b, const std::string& path) {
  require_object(b, path, "a block object ({\"mixer\": {...}, \"mlp\": {...}})");
  check_known_keys(kBlockKeys, b, path);
  for (const char* k : {"mixer", "mlp"})
    if (b.contains(k)) require_object(b[k], join_path(path, k));
}

int64_t checked_count(const Json& v, const std::string& path) {
  return json_int(normalize_value(*kModelKeys.find("num_layers"), v, path));
}

std::vector<std::string> parse_codes(const Json& v, const std::string& path) {
  std::vector<std::string> codes;
  if (v.is_string()) {
    for (char c : v.get<std::string>()) codes.emplace_back(1, c);
  } else if (v.is_array()) {
    for (const Json& c : v) {
      if (!c.is_string()) throw ConfigKeyError(path, expected_problem("codes: a string of one-character codes or a list of code strings", v));
      codes.push_back(c.get<std::string>());
    }
  } else {
    throw ConfigKeyError(path, expected_problem("codes: a string of one-character codes or a list of code strings", v));
  }
  if (codes.empty()) throw ConfigKeyError(path, expected_problem("at least one code", v));
  for (const std::string& c : codes)
    if (!is_code(c))
      throw ConfigKeyError(path, expected_problem("block codes of letters, digits and _, not starting with a digit", Json(c)));
  return codes;
}

// Throws unless `code` names a block of model.blocks.
void require_defined(const std::string& code, const Json& blocks, const std::string& path) {
  if (blocks.contains(code)) return;
  std::vector<std::string> names;
  for (const auto& [k, v] : blocks.items()) names.push_back(k);
  std::sort(names.begin(), names.end());
  std::string defined;
  for (const std::string& n : names) defined += str_cat(defined.empty() ? "" : ", ", "\"", n, "\"");
  throw ConfigKeyError(path, expected_problem(str_cat("a code defined in model.blocks (", defined, ")"), Json(code)));
}

std::vector<std::string> generate_layout(const Json& generate, const Json& blocks) {
  const std::string path = "model.layout.generate";
  const Json g = apply_key_table(kGenerateKeys, generate, path);
  for (const char* k : {"base", "special"}) require_defined(g[k].get<std::string>(), blocks, join_path(path, k));
  auto given = [&](const char* k) { return g.contains(k) ? std::optional<int64_t>(json_int(g[k])) : std::nullopt; };
  const LayoutRule rule{g["placement"].get<std::string>(), json_int(g["n_layers"]), given("n_special"), given("position"),
                        given("period")};
  try {
    return place_codes(rule.n_layers, special_layers(rule), g["base"].get<std::string>(), g["special"].get<std::string>());
  } catch (const ConfigKeyError& e) {
    throw e.prefixed(path);
  }
}

// The layout expanded into one code per layer.
std::vector<std::string> expand_layout(const Json& layout, const Json& blocks) {
  const std::string path = "model.layout";
  require_object(layout, path);
  check_known_keys(kLayoutKeys, layout, path);
  const bool pattern = layout.contains("pattern"), repeat = layout.contains("repeat"), generate = layout.contains("generate");
  if (!pattern && !repeat && !generate) throw ConfigKeyError(path, expected_problem("one of pattern, repeat or generate", layout));
  if (pattern && repeat) throw ConfigKeyError("model.layout.repeat", cannot_be_used_problem("model.layout has pattern"));
  if (generate && (pattern || repeat))
    throw ConfigKeyError("model.layout.generate", cannot_be_used_problem(str_cat("model.layout has ", pattern ? "pattern" : "repeat")));
  if (!repeat && layout.contains("n_layers"))
    throw ConfigKeyError("model.layout.n_layers", cannot_be_used_problem("n_layers goes with repeat"));
  if (generate) return generate_layout(layout["generate"], blocks);
  const std::string codes_path = pattern ? "model.layout.pattern" : "model.layout.repeat";
  std::vector<std::string> codes = parse_codes(layout[pattern ? "pattern" : "repeat"], codes_path);
  for (const std::string& c : codes) require_defined(c, blocks, codes_path);
  if (pattern) return codes;

  if (!layout.contains("n_layers")) throw ConfigKeyError("model.layout.n_layers", missing_key_problem("repeat needs n_layers"));
  const int64_t n = checked_count(layout["n_layers"], "model.layout.n_layers");
  if (n % int64_t(codes.size()) != 0)
    throw ConfigKeyError("model.layout.n_layers",
                         expected_problem(str_cat("a multiple of the number of codes of model.layout.repeat (", codes.size(), ")"),
                                          layout["n_layers"]));
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(codes[size_t(i) % codes.size()]);
  return out;
}

void apply_overrides(LayerList& list, const Json& overrides, const SourceMap& src) {
  if (!overrides.is_array()) throw ConfigKeyError("model.overrides", expected_problem("a list of override entries", overrides));
  const int64_t n = int64_t(list.layers.size());
  for (size_t k = 0; k < overrides.size(); ++k) {
    const std::string path = str_cat("model.overrides[", k, "]");
    const Json& entry = overrides[k];
    require_object(entry, path, "an override ({\"layers\": SELECTOR, \"mixer\": {...}, \"mlp\": {...}})");
    check_known_keys(kOverrideKeys, entry, path);
    if (!entry.contains("layers")) throw ConfigKeyError(join_path(path, "layers"), missing_key_problem());
    if (!entry.contains("mixer") && !entry.contains("mlp"))
      throw ConfigKeyError(path, expected_problem("\"mixer\" or \"mlp\" besides \"layers\"", entry));
    Json partial = entry;
    partial.erase("layers");
    for (const auto& [part, v] : partial.items()) require_object(v, join_path(path, part));
    for (int64_t i : select_layers(entry["layers"], n, join_path(path, "layers"))) {
      FormedLayer& l = list.layers[size_t(i)];
      merge_tracked(l.block, l.origins, "", partial, path, src);
    }
  }
}

}  // namespace

void LayerOrigins::record_tree(const std::string& rel, const Json& value, const std::string& path, const SourceMap& src) {
  map_[rel] = src.origin(path);
  if (value.is_object())
    for (const auto& [k, v] : value.items()) record_tree(join_path(rel, k), v, join_path(path, k), src);
}

void LayerOrigins::record(const std::string& rel, const Json& value, const std::string& path, const SourceMap& src) {
  for (auto it = map_.begin(); it != map_.end();) it = path_within(it->first, rel) ? map_.erase(it) : std::next(it);
  record_tree(rel, value, path, src);
}

Origin LayerOrigins::find(const std::string& rel) const {
  for (std::string r = rel;; r = parent_rel(r)) {
    auto it = map_.find(r);
    if (it != map_.end())
      return {it->second.source, r.empty() ? join_path(it->second.path, rel) : it->second.path + rel.substr(r.size())};
    HYB_ASSERT(!r.empty(), "layer origin of ", rel, " not recorded");
  }
}

void merge_tracked(Json& a, LayerOrigins& origins, const std::string& rel, const Json& b, const std::string& b_path,
                   const SourceMap& src) {
  const bool objects = a.is_object() && b.is_object();
  const bool other_type = objects && a.contains("type") && b.contains("type") && a["type"] != b["type"];
  if (!objects || other_type) {
    a = b;
    origins.record(rel, b, b_path, src);
    return;
  }
  for (const auto& [k, v] : b.items()) {
    const std::string r = join_path(rel, k), p = join_path(b_path, k);
    if (a.contains(k)) {
      merge_tracked(a[k], origins, r, v, p, src);
    } else {
      a[k] = v;
      origins.record(r, v, p, src);
    }
  }
}

LayerList form_layer_list(const Json& model, const SourceMap& src) {
  LayerList list;
  auto has = [&](const char* k) { return model.contains(k); };
  if (has("layers")) {
    for (const char* k : {"block", "blocks", "layout"})
      if (has(k)) throw ConfigKeyError(str_cat("model.", k), cannot_be_used_problem("model.layers lists the layers explicitly"));
    const Json& layers = model["layers"];
    if (!layers.is_array() || layers.empty())
      throw ConfigKeyError("model.layers", expected_problem("a list of at least one block object", layers));
    if (has("num_layers") && checked_count(model["num_layers"], "model.num_layers") != int64_t(layers.size()))
      throw ConfigKeyError("model.num_layers",
                           expected_problem(str_cat(layers.size(), " (the length of model.layers)"), model["num_layers"]));
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string path = str_cat("model.layers[", i, "]");
      check_block(layers[i], path);
      FormedLayer l{layers[i], {}};
      l.origins.record("", layers[i], path, src);
      list.layers.push_back(std::move(l));
    }
  } else {
    if (has("block")) check_block(model["block"], "model.block");
    if (has("blocks")) {
      require_object(model["blocks"], "model.blocks", "an object of named blocks");
      for (const auto& [code, b] : model["blocks"].items()) {
        if (!is_code(code))
          throw ConfigKeyError("model.blocks", expected_problem("block codes of letters, digits and _, not starting with a digit", Json(code)));
        check_block(b, join_path("model.blocks", code));
      }
    }
    if (has("layout")) {
      if (!has("blocks")) throw ConfigKeyError("model.blocks", missing_key_problem("the layout form names its blocks in model.blocks"));
      list.codes = expand_layout(model["layout"], model["blocks"]);
      if (has("num_layers") && checked_count(model["num_layers"], "model.num_layers") != int64_t(list.codes.size()))
        throw ConfigKeyError("model.num_layers",
                             expected_problem(str_cat(list.codes.size(), " (the number of layers of model.layout)"), model["num_layers"]));
      for (const std::string& code : list.codes) {
        const std::string path = join_path("model.blocks", code);
        FormedLayer l{Json::object(), {}};
        l.origins.record("", l.block, path, src);
        if (has("block")) merge_tracked(l.block, l.origins, "", model["block"], "model.block", src);
        merge_tracked(l.block, l.origins, "", model["blocks"][code], path, src);
        l.origins.set_root(path, src);
        list.layers.push_back(std::move(l));
      }
    } else {
      if (!has("num_layers")) throw ConfigKeyError("model.num_layers", missing_key_problem());
      if (!has("block")) throw ConfigKeyError("model.block", missing_key_problem());
      const int64_t n = checked_count(model["num_layers"], "model.num_layers");
      for (int64_t i = 0; i < n; ++i) {
        FormedLayer l{model["block"], {}};
        l.origins.record("", l.block, "model.block", src);
        list.layers.push_back(std::move(l));
      }
    }
  }
  if (has("overrides")) apply_overrides(list, model["overrides"], src);
  return list;
}

void apply_layer_assignment(LayerList& list, const Assignment& a, SourceMap& src) {
  const ConfigPath& p = a.path;
  if (p.steps.size() == 2) {  // model.layers = [...]: a new list
    if (!a.value.is_array() || a.value.empty())
      throw ConfigKeyError("model.layers", expected_problem("a list of at least one block object", a.value));
    list.layers.clear();
    list.codes.clear();
    for (size_t i = 0; i < a.value.size(); ++i) {
      const std::string path = str_cat("model.layers[", i, "]");
      check_block(a.value[i], path);
      src.add_set(path);
      FormedLayer l{a.value[i], {}};
      l.origins.record("", a.value[i], path, src);
      list.layers.push_back(std::move(l));
    }
    return;
  }
  if (p.steps[2].is_key)
    throw ConfigKeyError(p.text, expected_problem("a selector after model.layers, such as model.layers[11].mixer.window", Json(p.text)));
  const int64_t n = int64_t(list.layers.size());
  for (int64_t i : select_indices(p.steps[2].selector, n, SelectorTarget::layers, p.text)) {
    FormedLayer& l = list.layers[size_t(i)];
    const std::string layer_path = str_cat("model.layers[", i, "]");
    if (p.steps.size() == 3) {
      check_block(a.value, layer_path);
      src.add_set(layer_path);
      l.block = a.value;
      l.origins.record("", a.value, layer_path, src);
      continue;
    }
    assign_path(l.block, p, 3, "", a.value, [&](const std::string& rel) {
      src.add_set(join_path(layer_path, rel));
      l.origins.record(rel, a.value, join_path(layer_path, rel), src);
    });
  }
}

Json resolve_layers(LayerList& list, const LayerConfigContext& base) {
  const std::vector<std::string> type_names = layer_types();
  std::string types;
  for (const std::string& t : type_names) types += str_cat(types.empty() ? "" : ", ", t);
  const int64_t n = int64_t(list.layers.size());
  Json out = Json::array();
  for (int64_t i = 0; i < n; ++i) {
    FormedLayer& l = list.layers[size_t(i)];
    try {
      Json& b = l.block;
      check_known_keys(kBlockKeys, b, "");
      if (!b.contains("mixer")) throw ConfigKeyError("mixer", missing_key_problem());
      Json mixer = b["mixer"];
      require_object(mixer, "mixer");
      if (!mixer.contains("type")) throw ConfigKeyError("mixer.type", missing_key_problem());
      const LayerEntry* entry = mixer["type"].is_string() ? find_layer(mixer["type"].get<std::string>()) : nullptr;
      if (!entry) throw ConfigKeyError("mixer.type", expected_problem(str_cat("a layer type (", types, ")"), mixer["type"]));
      LayerConfigContext ctx = base;
      ctx.num_layers = n;
      ctx.layer_index = i;
      try {
        entry->resolve_config(mixer, ctx);
      } catch (const ConfigKeyError& e) {
        throw e.prefixed("mixer");
      }
      Json mlp = b.contains("mlp") ? b["mlp"] : Json{{"type", "swiglu"}};
      try {
        resolve_mlp_config(mlp, base.d_model);
      } catch (const ConfigKeyError& e) {
        throw e.prefixed("mlp");
      }
      out.push_back(Json{{"mixer", std::move(mixer)}, {"mlp", std::move(mlp)}});
    } catch (const ConfigKeyError& e) {
      const Origin o = l.origins.find(e.path());
      if (e.scope() == ConfigKeyError::Scope::layer)
        throw Error(format_config_error(o.source, str_cat("model.layers[", i, "].", e.path()), e, {}, schema_key_path));
      std::string suffix;
      if (!path_within(o.path, "model.layers")) {
        std::vector<int64_t> reached;
        for (int64_t j = 0; j < n; ++j)
          if (list.layers[size_t(j)].origins.find(e.path()) == o) reached.push_back(j);
        suffix = str_cat(" (in model.layers[", format_layer_selector(reached, n), "])");
      }
      throw Error(format_config_error(o.source, o.path, e, suffix, schema_key_path));
    }
  }
  return out;
}

}  // namespace hyb
