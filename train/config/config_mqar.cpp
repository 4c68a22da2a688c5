// MQAR task keys and presets. The presets copy eval.md 4.4's table: segments as (seq_len, n_kv),
// per-segment fixed training sets where Zoology used them, test sets of 3,000 (Figure 2) or 1,000.
#include "train/config/config_mqar.h"

#include <algorithm>
#include <array>

namespace hyb {

namespace {

Json check_vocab(const Json& v, const std::string& path) {
  if (json_int(v) % 2 != 0) throw ConfigKeyError(path, expected_problem("an even integer >= 4", v));
  return v;
}

Json check_list_of(const KeyTable& table, const Json& v, const std::string& path, const char* what) {
  if (!v.is_array() || v.empty()) throw ConfigKeyError(path, expected_problem(what, v));
  Json out = Json::array();
  for (size_t i = 0; i < v.size(); ++i) out.push_back(apply_key_table(table, v[i], str_cat(path, "[", i, "]")));
  return out;
}

Json check_segments(const Json& v, const std::string& path) {
  return check_list_of(kMqarSegmentKeys, v, path, "a list of at least one {\"seq_len\", \"n_kv\", \"train_examples\"}");
}

Json check_test_segments(const Json& v, const std::string& path) {
  return check_list_of(kMqarTestSegmentKeys, v, path, "a list of at least one {\"seq_len\", \"n_kv\"}");
}

// eval.md 4.1: 4 n_kv <= seq_len < vocab, n_kv <= vocab/2 - 1, seq_len even.
void check_generator_limits(const Json& segments, int64_t vocab, const std::string& path) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string p = str_cat(path, "[", i, "]");
    const Json& s = segments[i];
    const int64_t t = json_int(s["seq_len"]), n = json_int(s["n_kv"]);
    if (t % 2 != 0) throw ConfigKeyError(p + ".seq_len", expected_problem("an even integer", s["seq_len"]));
    if (t >= vocab) throw ConfigKeyError(p + ".seq_len", expected_problem(str_cat("an integer below vocab (", vocab, ")"), s["seq_len"]));
    if (4 * n > t) throw ConfigKeyError(p + ".n_kv", expected_problem(str_cat("at most seq_len / 4 (", t / 4, ")"), s["n_kv"]));
    if (n > vocab / 2 - 1)
      throw ConfigKeyError(p + ".n_kv", expected_problem(str_cat("at most vocab / 2 - 1 (", vocab / 2 - 1, ")"), s["n_kv"]));
  }
}

struct Preset {
  const char* name;
  std::vector<std::array<int64_t, 3>> segments;  // seq_len, n_kv, train_examples (0: the key below)
  std::vector<std::array<int64_t, 2>> test;      // empty: the training segments
  bool random_fill;
  int64_t train_examples;  // 0: fresh examples every step
  int64_t test_examples;
};

const Preset kPresets[] = {
    {"zoology-fig2-T64", {{64, 4, 0}}, {}, false, 100000, 3000},
    {"zoology-fig2-T128", {{128, 8, 0}}, {}, false, 100000, 3000},
    {"zoology-fig2-T256", {{256, 16, 0}}, {}, false, 100000, 3000},
    {"zoology-fig2-T512", {{512, 64, 0}}, {}, false, 100000, 3000},
    {"zoology-mix",
     {{64, 4, 100000}, {128, 8, 20000}, {256, 16, 20000}, {256, 32, 20000}, {256, 64, 20000}},
     {{64, 4}, {64, 8}, {64, 16}, {128, 32}, {256, 64}, {512, 128}, {1024, 256}}, true, 0, 1000},
    {"recall-64", {{64, 4, 0}, {64, 8, 0}, {64, 16, 0}}, {}, true, 0, 1000},
    {"recall-128", {{128, 8, 0}, {128, 16, 0}, {128, 32, 0}}, {}, true, 0, 1000},
    {"recall-256", {{256, 16, 0}, {256, 32, 0}, {256, 64, 0}}, {}, true, 0, 1000},
    {"recall-512", {{512, 32, 0}, {512, 64, 0}, {512, 128, 0}}, {}, true, 0, 1000},
};

Json nullable(int64_t v) { return v ? Json(v) : Json(nullptr); }

}  // namespace

const KeyTable kMqarSegmentKeys{"segment", nullptr, {
    {.name = "seq_len", .type = KeyType::integer, .required = true, .range = Range::at_least(2), .doc = "T, even"},
    {.name = "n_kv", .type = KeyType::integer, .required = true, .range = Range::at_least(1), .doc = "N key-value pairs"},
    {.name = "train_examples", .type = KeyType::integer, .null = Null::off, .range = Range::at_least(1),
     .default_doc = "null: `data.mqar.train_examples`", .doc = "a fixed training set for this segment"},
}};

const KeyTable kMqarTestSegmentKeys{"test segment", nullptr, {
    {.name = "seq_len", .type = KeyType::integer, .required = true, .range = Range::at_least(2), .doc = "T, even"},
    {.name = "n_kv", .type = KeyType::integer, .required = true, .range = Range::at_least(1), .doc = "N key-value pairs"},
}};

const KeyTable kMqarKeys{"mqar", nullptr, {
    {.name = "preset", .type = KeyType::string, .null = Null::off,
     .doc = "a preset of eval.md 4.4; fills every key below that is not given, and is written as null"},
    {.name = "vocab", .type = KeyType::integer, .default_value = 8192, .range = Range::at_least(4), .check = check_vocab,
     .type_doc = "an even integer >= 4", .doc = "V"},
    {.name = "power_a", .type = KeyType::number, .default_value = 0.01, .range = Range::open_closed(0, 1),
     .doc = "power-law exponent of the query gaps"},
    {.name = "random_fill", .type = KeyType::boolean, .default_value = true, .doc = "filler tokens random (true) or 0"},
    {.name = "segments", .type = KeyType::custom, .check = check_segments,
     .type_doc = "list of {\"seq_len\", \"n_kv\", \"train_examples\"}", .default_doc = "required unless `preset`",
     .doc = "training segments, one per step in turn; `train_examples` overrides the key below for one segment"},
    {.name = "test_segments", .type = KeyType::custom, .null = Null::derived, .check = check_test_segments,
     .type_doc = "list of {\"seq_len\", \"n_kv\"}", .default_doc = "null: `segments`", .doc = "test segments"},
    {.name = "test_examples", .type = KeyType::integer, .default_value = 1000, .range = Range::at_least(1),
     .doc = "test examples per segment"},
    {.name = "test_seed", .type = KeyType::integer, .default_value = 1000003, .range = Range::at_least(0),
     .doc = "seed of the test set, independent of the run's seed"},
    {.name = "train_examples", .type = KeyType::integer, .null = Null::off, .range = Range::at_least(1),
     .default_doc = "null: fresh examples every step", .doc = "a fixed set of this many examples per segment, cycled"},
}};

std::vector<std::string> mqar_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

Json mqar_preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    Json segments = Json::array(), test = nullptr;
    for (const auto& s : p.segments) segments.push_back({{"seq_len", s[0]}, {"n_kv", s[1]}, {"train_examples", nullable(s[2])}});
    if (!p.test.empty()) {
      test = Json::array();
      for (const auto& s : p.test) test.push_back({{"seq_len", s[0]}, {"n_kv", s[1]}});
    }
    return {{"vocab", 8192}, {"power_a", 0.01}, {"random_fill", p.random_fill}, {"segments", segments},
            {"test_segments", test}, {"test_examples", p.test_examples}, {"train_examples", nullable(p.train_examples)}};
  }
  throw Error(str_cat("unknown MQAR preset \"", name, "\""));
}

Json resolve_mqar(const Json& mqar, const std::string& path) {
  require_object(mqar, path);
  check_known_keys(kMqarKeys, mqar, path);
  Json given = mqar;
  if (given.contains("preset") && !given["preset"].is_null()) {
    const Json name = given["preset"];
    const std::vector<std::string> names = mqar_preset_names();
    if (!name.is_string() || std::find(names.begin(), names.end(), name.get<std::string>()) == names.end()) {
      std::string list;
      for (const std::string& n : names) list += str_cat(list.empty() ? "" : ", ", "\"", n, "\"");
      throw ConfigKeyError(join_path(path, "preset"), expected_problem(str_cat("a preset (", list, ") or null"), name));
    }
    const Json preset = mqar_preset(name.get<std::string>());
    for (const auto& [k, v] : preset.items())
      if (!given.contains(k)) given[k] = v;
  }
  Json m = apply_key_table(kMqarKeys, given, path);
  if (!m.contains("segments"))
    throw ConfigKeyError(join_path(path, "segments"), missing_key_problem(str_cat("give ", path, ".segments or ", path, ".preset")));
  if (m["test_segments"].is_null()) {
    Json test = Json::array();
    for (const Json& s : m["segments"]) test.push_back({{"seq_len", s["seq_len"]}, {"n_kv", s["n_kv"]}});
    m["test_segments"] = test;
  }
  const int64_t vocab = json_int(m["vocab"]);
  check_generator_limits(m["segments"], vocab, join_path(path, "segments"));
  check_generator_limits(m["test_segments"], vocab, join_path(path, "test_segments"));
  m["preset"] = nullptr;
  return m;
}

}  // namespace hyb
