// The suite format of ablations.md 3 as key tables (core/config_table.h), so suite files get the
// checks, defaults and messages of run configs; lists of objects are checked element by element.
#include "eval/ablate/ablate_suite.h"

#include <algorithm>
#include <set>

#include "core/config_table.h"
#include "train/config/config_json.h"
#include "train/config/config_path.h"

namespace hyb {

namespace {

Json any_value(const Json& v, const std::string&) { return v; }

Json check_string_or_object(const Json& v, const std::string& path) {
  if (!v.is_string() && !v.is_object()) throw ConfigKeyError(path, expected_problem("a config file path or an inline config object", v));
  return v;
}

Json check_object_value(const Json& v, const std::string& path) {
  require_object(v, path);
  return v;
}

Json check_paper_numbers(const Json& v, const std::string& path) {
  require_object(v, path);
  for (const auto& [k, x] : v.items())
    if (!x.is_null() && !x.is_number()) throw ConfigKeyError(join_path(path, k), expected_problem("a number or null", x));
  return v;
}

Json refuse_bench(const Json& v, const std::string& path) {
  if (!v.is_null()) throw ConfigKeyError(path, cannot_be_used_problem("inference benchmarks per row (eval.md 7.3) are not implemented yet"));
  return v;
}

const KeyTable kEvalEntryKeys{"eval", "metric", {
    {.name = "metric", .type = KeyType::enumeration, .required = true, .values = {"ppl", "mqar"},
     .doc = "ppl: loss on a split (eval.md 2); mqar: recall (eval.md 4.3)"},
    {.name = "split", .type = KeyType::string, .null = Null::derived, .only_for = {"ppl"}, .doc = "brown.val, ts.val, ..."},
    {.name = "data", .type = KeyType::string, .null = Null::derived, .only_for = {"ppl"},
     .doc = "the shard; default the split's shard from `hybrid tokenize`"},
    {.name = "preset", .type = KeyType::string, .null = Null::derived, .only_for = {"mqar"},
     .doc = "an MQAR preset (eval.md 4.4); default the run's own test set"},
}};

const KeyTable kColumnKeys{"column", nullptr, {
    {.name = "id", .type = KeyType::string, .required = true},
    {.name = "paper", .type = KeyType::string, .default_value = ""},
    {.name = "paper_better", .type = KeyType::enumeration, .default_value = "higher", .values = {"higher", "lower"}},
    {.name = "ours", .type = KeyType::string, .null = Null::off, .doc = "null: a paper column with no counterpart of ours"},
    {.name = "ours_better", .type = KeyType::enumeration, .null = Null::derived, .values = {"higher", "lower"}},
    {.name = "delta_min", .type = KeyType::number, .null = Null::derived, .range = Range::at_least(0)},
    {.name = "eps", .type = KeyType::number, .null = Null::derived, .range = Range::above(0)},
}};

const KeyTable kMatchKeys{"match_params", nullptr, {
    {.name = "key", .type = KeyType::string, .required = true},
    {.name = "target", .type = KeyType::string, .null = Null::derived},
    {.name = "mode", .type = KeyType::enumeration, .default_value = "closest", .values = {"closest", "at_least"}},
    {.name = "from", .type = KeyType::number, .required = true},
    {.name = "to", .type = KeyType::number, .required = true},
    {.name = "step", .type = KeyType::number, .default_value = 1, .range = Range::above(0)},
    {.name = "tolerance", .type = KeyType::number, .default_value = 0.05, .range = Range::at_least(0)},
}};

const KeyTable kSearchKeys{"eval_search", nullptr, {
    {.name = "start", .type = KeyType::list, .required = true, .range = Range::at_least(0), .elem = KeyType::integer},
    {.name = "add", .type = KeyType::integer, .default_value = 1, .range = Range::closed(1, 1)},
    {.name = "candidates", .type = KeyType::enumeration, .default_value = "all", .values = {"all"}},
    {.name = "search_test_seed", .type = KeyType::integer, .required = true, .range = Range::at_least(0)},
}};

const KeyTable kRowKeys{"row", nullptr, {
    {.name = "name", .type = KeyType::string, .required = true},
    {.name = "base", .type = KeyType::boolean, .default_value = false},
    {.name = "set", .type = KeyType::custom, .default_value = Json::object(), .check = check_object_value},
    {.name = "eval_set", .type = KeyType::custom, .default_value = Json::object(), .check = check_object_value},
    {.name = "eval_search", .type = KeyType::object, .null = Null::off, .table = &kSearchKeys},
    {.name = "tasks", .type = KeyType::list, .null = Null::derived, .elem = KeyType::string},
    {.name = "config", .type = KeyType::custom, .default_value = Json::object(), .check = check_object_value},
    {.name = "match_params", .type = KeyType::object, .null = Null::off, .table = &kMatchKeys},
    {.name = "paper", .type = KeyType::custom, .default_value = Json::object(), .check = check_paper_numbers},
    {.name = "paper_note", .type = KeyType::string, .default_value = ""},
    {.name = "note", .type = KeyType::string, .default_value = ""},
}};

const KeyTable kClaimKeys{"claim", nullptr, {
    {.name = "id", .type = KeyType::string, .required = true},
    {.name = "column", .type = KeyType::string, .required = true},
    {.name = "a", .type = KeyType::string, .required = true},
    {.name = "b", .type = KeyType::string, .required = true},
    {.name = "expect", .type = KeyType::enumeration, .required = true, .values = {"a_better", "b_better", "tie"}},
    {.name = "eps", .type = KeyType::number, .null = Null::off, .range = Range::above(0)},
    {.name = "strength", .type = KeyType::enumeration, .required = true, .values = {"primary", "secondary", "informational"}},
    {.name = "paper_delta", .type = KeyType::number, .null = Null::off},
}};

const KeyTable kTaskKeys{"task", nullptr, {
    {.name = "config", .type = KeyType::custom, .required = true, .check = check_string_or_object},
    {.name = "eval", .type = KeyType::custom, .required = true, .check = any_value},
}};

const KeyTable kSuiteKeys{"suite", nullptr, {
    {.name = "suite", .type = KeyType::string, .required = true},
    {.name = "paper", .type = KeyType::custom, .default_value = Json::object(), .check = check_object_value},
    {.name = "budget_s", .type = KeyType::number, .default_value = 600, .range = Range::above(0)},
    {.name = "seeds", .type = KeyType::list, .default_value = Json::array({0, 1, 2}), .range = Range::at_least(0),
     .elem = KeyType::integer},
    {.name = "tasks", .type = KeyType::custom, .required = true, .check = check_object_value},
    {.name = "columns", .type = KeyType::custom, .required = true, .check = any_value},
    {.name = "rows", .type = KeyType::custom, .required = true, .check = any_value},
    {.name = "claims", .type = KeyType::custom, .default_value = Json::array(), .check = any_value},
    {.name = "deviations", .type = KeyType::list, .default_value = Json::array(), .elem = KeyType::string},
    {.name = "calibration", .type = KeyType::custom, .null = Null::off, .check = any_value},
    {.name = "bench", .type = KeyType::custom, .null = Null::off, .check = refuse_bench},
}};

// Each element of the list at `path` through `table`.
std::vector<Json> object_list(const KeyTable& table, const Json& v, const std::string& path, bool nonempty) {
  if (!v.is_array() || (nonempty && v.empty()))
    throw ConfigKeyError(path, expected_problem(nonempty ? "a non-empty list of objects" : "a list of objects", v));
  std::vector<Json> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = str_cat(path, "[", i, "]");
    require_object(v[i], at);
    out.push_back(apply_key_table(table, v[i], at));
  }
  return out;
}

std::string opt_string(const Json& v) { return v.is_null() ? std::string() : v.get<std::string>(); }

MetricRef parse_metric_ref(const std::string& text, const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = text.find('.', start)) != std::string::npos; start = dot + 1) parts.push_back(text.substr(start, dot - start));
  parts.push_back(text.substr(start));
  if (parts.size() < 3 || std::find(parts.begin(), parts.end(), "") != parts.end())
    throw ConfigKeyError(path, expected_problem("TASK.METRIC[.SPLIT].FIELD, e.g. lm.ppl.brown.val.loss", Json(text)));
  MetricRef m{parts[0], parts[1], "", parts.back(), text};
  for (size_t i = 2; i + 1 < parts.size(); ++i) m.split += (m.split.empty() ? "" : ".") + parts[i];
  return m;
}

std::vector<Override> parse_overrides(const Json& set, const std::string& path, const std::set<std::string>& tasks) {
  std::vector<Override> out;
  for (const auto& [key, value] : set.items()) {
    Override o;
    o.path = key;
    const size_t colon = key.find(':');
    if (colon != std::string::npos) {
      o.task = key.substr(0, colon);
      o.path = key.substr(colon + 1);
      if (!tasks.count(o.task))
        throw ConfigKeyError(join_path(path, key), cannot_be_used_problem(str_cat("\"", o.task, "\" is not a task of the suite")));
    }
    if (!parse_config_path(o.path)) throw ConfigKeyError(join_path(path, key), expected_problem("a config path (config.md 4.1)", Json(o.path)));
    o.value = value;
    out.push_back(std::move(o));
  }
  return out;
}

// The element whose `key` member is `name`, or null.
template <class T>
const T* find_by(const std::vector<T>& v, std::string T::*key, const std::string& name) {
  for (const T& x : v)
    if (x.*key == name) return &x;
  return nullptr;
}

template <class T>
const T& named(const std::vector<T>& v, std::string T::*key, const std::string& name, const char* what) {
  if (const T* x = find_by(v, key, name)) return *x;
  throw Error(str_cat("ablate: no ", what, " named \"", name, "\""));
}

void parse_into(AblateSuite& s, const Json& written) {
  require_object(written, "");
  const Json top = apply_key_table(kSuiteKeys, written, "");
  s.name = top["suite"].get<std::string>();
  s.paper = top["paper"];
  s.budget_s = top["budget_s"].get<double>();
  s.seeds = top["seeds"].get<std::vector<int64_t>>();
  if (s.seeds.empty()) throw ConfigKeyError("seeds", expected_problem("at least one seed", top["seeds"]));
  s.deviations = top["deviations"].get<std::vector<std::string>>();
  s.calibration = top["calibration"];

  std::set<std::string> task_names;
  for (const auto& [name, t] : top["tasks"].items()) {
    const std::string at = join_path("tasks", name);
    require_object(t, at);
    const Json tj = apply_key_table(kTaskKeys, t, at);
    AblateTask task;
    task.name = name;
    if (tj["config"].is_string()) {
      task.config_source = tj["config"].get<std::string>();
      task.config = read_config_file(task.config_source);
    } else {
      task.config_source = str_cat(s.file, " (", at, ".config)");
      task.config = tj["config"];
    }
    for (const Json& e : object_list(kEvalEntryKeys, tj["eval"], join_path(at, "eval"), true)) {
      AblateEval ev{e["metric"].get<std::string>(), opt_string(e.value("split", Json())), opt_string(e.value("data", Json())),
                    opt_string(e.value("preset", Json()))};
      if (ev.metric == "ppl" && ev.split.empty())
        throw ConfigKeyError(join_path(at, "eval"), missing_key_problem("a ppl evaluation names its split"));
      if (ev.metric == "ppl" && ev.data.empty()) ev.data = split_shard(ev.split);
      task.evals.push_back(ev);
    }
    task_names.insert(name);
    s.tasks.push_back(std::move(task));
  }
  if (s.tasks.empty()) throw ConfigKeyError("tasks", expected_problem("at least one task", top["tasks"]));

  const std::vector<Json> columns = object_list(kColumnKeys, top["columns"], "columns", true);
  for (size_t i = 0; i < columns.size(); ++i) {
    const Json& c = columns[i];
    const std::string at = str_cat("columns[", i, "]");
    AblateColumn col;
    col.id = c["id"].get<std::string>();
    col.paper = c["paper"].get<std::string>();
    col.paper_better = c["paper_better"].get<std::string>();
    col.ours_better = opt_string(c["ours_better"]);
    if (find_by(s.columns, &AblateColumn::id, col.id))
      throw ConfigKeyError(at + ".id", cannot_be_used_problem(str_cat("a second column named \"", col.id, "\"")));
    if (c["ours"].is_null()) {  // ablations.md 2.3: a paper column with no counterpart, shown as printed
      s.columns.push_back(std::move(col));
      continue;
    }
    if (col.ours_better.empty()) throw ConfigKeyError(at + ".ours_better", missing_key_problem("a column with `ours` says which way is better"));
    col.ours = parse_metric_ref(c["ours"].get<std::string>(), at + ".ours");
    if (!task_names.count(col.ours.task))
      throw ConfigKeyError(at + ".ours", cannot_be_used_problem(str_cat("\"", col.ours.task, "\" is not a task of the suite")));
    const AblateTask& task = named(s.tasks, &AblateTask::name, col.ours.task, "task");
    bool evaluated = false;
    for (const AblateEval& e : task.evals) evaluated = evaluated || (e.metric == col.ours.metric && e.split == col.ours.split);
    if (!evaluated)
      throw ConfigKeyError(at + ".ours", cannot_be_used_problem(str_cat("task \"", task.name, "\" has no evaluation ", col.ours.metric,
                                                                        col.ours.split.empty() ? "" : " on " + col.ours.split)));
    // ablations.md 2.4 item 6: floors and tie margins of losses (nats) and of accuracies.
    const bool loss = col.ours.field.rfind("loss", 0) == 0;
    col.delta_min = c["delta_min"].is_null() ? (loss ? 0.003 : 0.01) : c["delta_min"].get<double>();
    col.eps = c["eps"].is_null() ? (loss ? 0.01 : 0.02) : c["eps"].get<double>();
    s.columns.push_back(std::move(col));
  }

  const std::vector<Json> rows = object_list(kRowKeys, top["rows"], "rows", true);
  std::set<std::string> slugs;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Json& r = rows[i];
    const std::string at = str_cat("rows[", i, "]");
    AblateRow row;
    row.name = r["name"].get<std::string>();
    row.slug = row_slug(row.name);
    if (row.slug.empty() || !slugs.insert(row.slug).second)
      throw ConfigKeyError(at + ".name", cannot_be_used_problem(str_cat("its directory name \"", row.slug, "\" is empty or taken by another row")));
    row.base = r["base"].get<bool>();
    row.set = parse_overrides(r["set"], at + ".set", task_names);
    row.eval_set = parse_overrides(r["eval_set"], at + ".eval_set", task_names);
    if (!r["eval_search"].is_null()) {
      const Json& e = r["eval_search"];
      row.eval_search = EvalSearch{e["start"].get<std::vector<int64_t>>(), e["add"].get<int64_t>(), e["search_test_seed"].get<int64_t>()};
    }
    if (!row.trains() && (!row.set.empty() || row.base))
      throw ConfigKeyError(at, cannot_be_used_problem("an inference-time row (eval_set, eval_search) evaluates the base row's weights: it has no set and is not the base"));
    if (r["tasks"].is_null()) {
      for (const AblateTask& t : s.tasks) row.tasks.push_back(t.name);
    } else {
      row.tasks = r["tasks"].get<std::vector<std::string>>();
      for (const std::string& t : row.tasks)
        if (!task_names.count(t)) throw ConfigKeyError(at + ".tasks", cannot_be_used_problem(str_cat("\"", t, "\" is not a task of the suite")));
    }
    for (const auto& [t, file] : r["config"].items()) {
      if (!task_names.count(t)) throw ConfigKeyError(join_path(at + ".config", t), cannot_be_used_problem("not a task of the suite"));
      if (!file.is_string()) throw ConfigKeyError(join_path(at + ".config", t), expected_problem("a config file path", file));
      row.config[t] = file.get<std::string>();
    }
    if (!r["match_params"].is_null()) {
      const Json& m = r["match_params"];
      MatchParams mp{m["key"].get<std::string>(), opt_string(m["target"]), m["mode"].get<std::string>(), m["from"].get<double>(),
                     m["to"].get<double>(), m["step"].get<double>(), m["tolerance"].get<double>()};
      mp.integer = mp.from == double(int64_t(mp.from)) && mp.step == double(int64_t(mp.step));
      if (mp.to < mp.from) throw ConfigKeyError(at + ".match_params.to", expected_problem(str_cat("at least from (", mp.from, ")"), m["to"]));
      if (!parse_config_path(mp.key)) throw ConfigKeyError(at + ".match_params.key", expected_problem("a config path", m["key"]));
      row.match_params = mp;
    }
    for (const auto& [col, v] : r["paper"].items()) {
      if (!find_by(s.columns, &AblateColumn::id, col))
        throw ConfigKeyError(join_path(at + ".paper", col), cannot_be_used_problem("not a column id of the suite"));
      row.paper[col] = v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
    }
    row.paper_note = r["paper_note"].get<std::string>();
    row.note = r["note"].get<std::string>();
    if (find_by(s.rows, &AblateRow::name, row.name)) throw ConfigKeyError(at + ".name", cannot_be_used_problem("a second row of that name"));
    s.rows.push_back(std::move(row));
  }
  int bases = 0;
  for (const AblateRow& r : s.rows) bases += r.base;
  if (bases != 1) throw ConfigKeyError("rows", expected_problem(str_cat("exactly one row with \"base\": true, found ", bases), Json(bases)));
  for (size_t i = 0; i < s.rows.size(); ++i)
    if (s.rows[i].match_params && !s.rows[i].match_params->target.empty()) {
      const std::string& target = s.rows[i].match_params->target;
      const AblateRow* t = find_by(s.rows, &AblateRow::name, target);
      if (!t || !t->trains()) throw ConfigKeyError(str_cat("rows[", i, "].match_params.target"), cannot_be_used_problem(str_cat("no trained row named \"", target, "\"")));
    }

  const std::vector<Json> claims = object_list(kClaimKeys, top["claims"], "claims", false);
  for (size_t i = 0; i < claims.size(); ++i) {
    const Json& c = claims[i];
    const std::string at = str_cat("claims[", i, "]");
    AblateClaim cl;
    cl.id = c["id"].get<std::string>();
    cl.column = c["column"].get<std::string>();
    cl.a = c["a"].get<std::string>();
    cl.b = c["b"].get<std::string>();
    cl.expect = c["expect"].get<std::string>();
    cl.strength = c["strength"].get<std::string>();
    if (!c["eps"].is_null()) cl.eps = c["eps"].get<double>();
    if (!c["paper_delta"].is_null()) cl.paper_delta = c["paper_delta"].get<double>();
    const AblateColumn* col = find_by(s.columns, &AblateColumn::id, cl.column);
    if (!col) throw ConfigKeyError(at + ".column", cannot_be_used_problem(str_cat("\"", cl.column, "\" is not a column id")));
    if (!col->measured()) throw ConfigKeyError(at + ".column", cannot_be_used_problem(str_cat("column \"", cl.column, "\" has no `ours` to decide it")));
    for (const char* side : {"a", "b"}) {
      const std::string& name = side[0] == 'a' ? cl.a : cl.b;
      if (!find_by(s.rows, &AblateRow::name, name)) throw ConfigKeyError(join_path(at, side), cannot_be_used_problem(str_cat("no row named \"", name, "\"")));
    }
    if (cl.a == cl.b) throw ConfigKeyError(at + ".b", cannot_be_used_problem("a claim compares two different rows"));
    s.claims.push_back(std::move(cl));
  }
}

}  // namespace

bool AblateRow::runs_task(const std::string& t) const {
  for (const std::string& x : tasks)
    if (x == t) return true;
  return false;
}

const AblateTask& AblateSuite::task(const std::string& name) const { return named(tasks, &AblateTask::name, name, "task"); }
const AblateRow& AblateSuite::row(const std::string& name) const { return named(rows, &AblateRow::name, name, "row"); }
const AblateColumn& AblateSuite::column(const std::string& id) const { return named(columns, &AblateColumn::id, id, "column"); }
const AblateRow& AblateSuite::base_row() const {
  for (const AblateRow& r : rows)
    if (r.base) return r;
  throw Error("ablate: the suite has no base row");
}

AblateSuite parse_suite(const Json& written, const std::string& file) {
  AblateSuite s;
  s.file = file;
  try {
    parse_into(s, written);
  } catch (const ConfigKeyError& e) {
    throw Error(format_config_error(file, e.path(), e));
  }
  return s;
}

AblateSuite load_suite(const std::string& file) { return parse_suite(read_config_file(file), file); }

std::string row_slug(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (std::isalnum(c)) out += char(std::tolower(c));
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string split_shard(const std::string& split) {
  const size_t dot = split.find('.');
  const std::string corpus = split.substr(0, dot);
  HYB_CHECK(dot != std::string::npos && (corpus == "brown" || corpus == "ts"), "ablate: unknown split \"", split,
            "\" (the canonical splits of eval.md 1.1 are brown.train, brown.val, brown.test, ts.train, ts.val; give `data` for another shard)");
  return str_cat(corpus == "brown" ? "data/brown_tok/" : "data/ts/", split, ".bin");
}

}  // namespace hyb
