// Row configs go through resolve_run_config exactly as `hybrid train --config FILE --set ...` would,
// so a row's model is the model its overrides describe in every other command too.
#include "eval/ablate/ablate_plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "train/config/config_hash.h"
#include "train/config/config_json.h"
#include "train/config/config_path.h"
#include "train/config/config_resolve.h"
#include "train/model_from_config.h"

namespace hyb {

namespace fs = std::filesystem;

namespace {

Assignment make_assignment(const std::string& path, const Json& value) {
  std::optional<ConfigPath> p = parse_config_path(path);
  HYB_CHECK(p, "ablate: \"", path, "\" is not a config path (config.md 4.1)");
  return {*p, value};
}

std::string change_text(const Override& o) {
  std::string key = o.path;
  const size_t dot = key.rfind('.');
  if (dot != std::string::npos) key = key.substr(dot + 1);
  return str_cat(o.task.empty() ? "" : o.task + ":", key, "=", compact_value(o.value));
}

RunConfig resolve(const PlannedRowTask& p, const std::vector<Assignment>& extra, const std::string& suite_file) {
  std::vector<Assignment> sets = p.sets;
  sets.insert(sets.end(), extra.begin(), extra.end());
  // The resolver names the config file, or --set for a key the row's overrides wrote: the suite,
  // the row and the task go in front.
  try {
    return resolve_run_config(p.written, p.source, sets);
  } catch (const Error& e) {
    throw Error(str_cat(suite_file, ": row \"", p.row, "\", task ", p.task, ": ", e.what()));
  }
}

void count_params(PlannedRowTask& p, const RunConfig& rc) {
  const ParamCounts c = parameter_counts(rc);
  p.params = c.total;
  p.non_embedding = c.non_embedding;
  p.steps = rc.train->steps;
}

std::string format_value(double v, bool integer) { return integer ? std::to_string(int64_t(std::llround(v))) : compact_value(Json(v)); }

// ablations.md 3.2 match_params: try from, from + step, ..., to at `key` and keep the value whose
// non-embedding count is closest to the target's (or, at_least, the smallest not below it).
void match_params(PlannedRowTask& p, const MatchParams& m, const PlannedRowTask& target, const std::string& suite_file) {
  std::optional<double> kept;
  int64_t kept_count = 0;
  const int64_t goal = target.non_embedding;
  const int64_t n = int64_t(std::floor((m.to - m.from) / m.step + 1e-9)) + 1;
  for (int64_t i = 0; i < n; ++i) {
    const double v = m.from + double(i) * m.step;
    const Json value = m.integer ? Json(int64_t(std::llround(v))) : Json(v);
    PlannedRowTask trial = p;
    trial.sets.push_back(make_assignment(m.key, value));
    count_params(trial, resolve(trial, {}, suite_file));
    const int64_t c = trial.non_embedding;
    const bool better = m.mode == "at_least" ? (c >= goal && !kept)
                                              : (!kept || std::llabs(c - goal) < std::llabs(kept_count - goal));
    if (better) kept = v, kept_count = c;
  }
  HYB_CHECK(kept, suite_file, ": row \"", p.row, "\", task ", p.task, ": match_params found no value of ", m.key, " in [",
            m.from, ", ", m.to, "] with at least ", goal, " non-embedding parameters (row \"", target.row, "\")");
  const double off = goal ? std::fabs(double(kept_count - goal)) / double(goal) : 0.0;
  p.match_note = str_cat(m.key, "=", format_value(*kept, m.integer), ": ", kept_count, " non-embedding parameters against ", goal,
                         " of \"", target.row, "\" (", off * 100, "% off)");
  HYB_CHECK(off <= m.tolerance, suite_file, ": row \"", p.row, "\", task ", p.task, ": match_params kept ", p.match_note,
            ", more than the tolerance ", m.tolerance * 100, "%");
  const Json value = m.integer ? Json(int64_t(std::llround(*kept))) : Json(*kept);
  p.sets.push_back(make_assignment(m.key, value));
  p.changes.push_back(str_cat(last_key(m.key), "=", compact_value(value)));
  count_params(p, resolve(p, {}, suite_file));
}

}  // namespace

const PlannedRowTask& AblatePlan::row_task(const std::string& row, const std::string& task) const {
  for (const PlannedRowTask& p : row_tasks)
    if (p.row == row && p.task == task) return p;
  throw Error(str_cat("ablate: row \"", row, "\" does not run task ", task));
}

Json probe_config(const Json& resolved, int64_t steps, const std::string& dir) {
  Json c = resolved;
  Json& t = c["train"];
  t["steps"] = std::min<int64_t>(steps, t["steps"].get<int64_t>());
  t["tokens"] = nullptr;
  t["schedule"] = {{"type", "constant"}};
  // Two train records: the second times steps the first step's one-off costs do not slow.
  t["log_interval"] = std::max<int64_t>(1, t["steps"].get<int64_t>() / 2);
  t["eval_interval"] = 0;
  t["checkpoint_interval"] = 0;
  t["keep_last"] = 1;
  t["out_dir"] = dir;
  c["name"] = fs::path(dir).filename().string();
  return c;
}

AblatePlan plan_suite(const AblateSuite& suite, const std::vector<int64_t>& seeds, const std::vector<std::string>& only,
                      const std::string& out) {
  std::set<std::string> wanted(only.begin(), only.end());
  for (const std::string& r : only) suite.row(r);  // an unknown name fails here
  // A --rows selection also runs the rows the selected ones are measured against; without one every
  // row runs (inserting targets then would narrow the empty "all" to the targets alone).
  if (!wanted.empty()) {
    wanted.insert(suite.base_row().name);
    for (const AblateRow& r : suite.rows)
      if (r.match_params && wanted.count(r.name))
        wanted.insert(r.match_params->target.empty() ? suite.base_row().name : r.match_params->target);
  }
  auto runs = [&](const AblateRow& r) { return wanted.empty() || wanted.count(r.name) > 0; };

  AblatePlan plan;
  // Rows without match_params first: they are the targets of those with it.
  for (int pass = 0; pass < 2; ++pass)
    for (const AblateRow& r : suite.rows) {
      if (!runs(r) || bool(r.match_params) != (pass == 1)) continue;
      for (const std::string& task : r.tasks) {
        PlannedRowTask p;
        p.row = r.name;
        p.task = task;
        p.trains = r.trains();
        const AblateTask& t = suite.task(task);
        const auto cfg = r.config.find(task);
        if (cfg != r.config.end()) {
          p.written = read_config_file(cfg->second);
          p.source = cfg->second;
          p.changes.push_back("config: " + cfg->second);
        } else {
          p.written = t.config;
          p.source = t.config_source;
        }
        for (const Override& o : r.trains() ? r.set : r.eval_set) {
          if (!o.task.empty() && o.task != task) continue;
          p.sets.push_back(make_assignment(o.path, o.value));
          p.changes.push_back(change_text(o));
        }
        if (r.eval_search)
          p.changes.push_back(str_cat("search: layers ", Json(r.eval_search->start).dump(), " + the best ", r.eval_search->add));
        if (r.trains()) {
          count_params(p, resolve(p, {}, suite.file));
        } else {
          // An inference-time row evaluates the base row's weights; its eval_set must still resolve.
          const PlannedRowTask& base = plan.row_task(suite.base_row().name, task);
          PlannedRowTask check = base;
          check.sets.insert(check.sets.end(), p.sets.begin(), p.sets.end());
          check.row = r.name;
          resolve(check, {}, suite.file);
          p.written = base.written;
          p.params = base.params;
          p.non_embedding = base.non_embedding;
        }
        if (r.match_params) {
          const std::string target = r.match_params->target.empty() ? suite.base_row().name : r.match_params->target;
          match_params(p, *r.match_params, plan.row_task(target, task), suite.file);
        }
        plan.row_tasks.push_back(std::move(p));
      }
    }

  for (int64_t seed : seeds)
    for (const AblateRow& r : suite.rows) {
      if (!runs(r)) continue;
      for (const std::string& task : r.tasks) {
        const PlannedRowTask& p = plan.row_task(r.name, task);
        PlannedUnit u;
        u.dir = (fs::path(out) / "rows" / r.slug / task / ("seed" + std::to_string(seed))).string();
        u.spec.row = r.name;
        u.spec.task = task;
        u.spec.seed = seed;
        u.spec.evals = suite.task(task).evals;
        if (r.trains()) {
          const RunConfig rc = resolve(p, {make_assignment("train.seed", seed), make_assignment("train.out_dir", u.dir),
                                           make_assignment("name", str_cat(r.slug, "-", task, "-seed", seed))},
                                       suite.file);
          u.spec.kind = "train";
          u.spec.config = rc.resolved;
          u.spec.key = rc.sha256;
          u.probe = str_cat(task, " ", config_sha256(Json{{"model", rc.resolved["model"]}, {"data", rc.resolved["data"]}}));
        } else {
          const AblateRow& base = suite.base_row();
          int dep = -1;
          for (size_t i = 0; i < plan.units.size(); ++i)
            if (plan.units[i].spec.row == base.name && plan.units[i].spec.task == task && plan.units[i].spec.seed == seed) dep = int(i);
          HYB_CHECK(dep >= 0, suite.file, ": row \"", r.name, "\" evaluates the base row \"", base.name,
                    "\", which must come before it in the suite's rows");
          u.depends_on = dep;
          u.spec.checkpoint = plan.units[size_t(dep)].dir;
          u.spec.kind = r.eval_search ? "search" : "eval";
          u.spec.search = r.eval_search;
          for (const Assignment& a : p.sets) u.spec.eval_sets.push_back(a.path.text + "=" + a.value.dump());
          Json key_parts{{"base", plan.units[size_t(dep)].spec.key}, {"sets", u.spec.eval_sets}, {"kind", u.spec.kind}};
          if (r.eval_search) key_parts["search"] = {r.eval_search->start, r.eval_search->search_test_seed};
          u.spec.key = config_sha256(key_parts);
        }
        Json evals = Json::array();
        for (const AblateEval& e : u.spec.evals) evals.push_back({e.metric, e.split, e.data, e.preset});
        u.spec.key = config_sha256(Json{{"unit", u.spec.key}, {"evals", evals}});
        plan.units.push_back(std::move(u));
      }
    }
  return plan;
}

}  // namespace hyb
