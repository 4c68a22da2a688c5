// An ablation suite file (ablations.md 3): the paper, the tasks with their base configs and
// evaluations, the columns, the rows with their overrides, and the claims. Loading checks every
// key against the tables of ablate_suite.cpp and the cross references (a claim's rows and column,
// exactly one base row, a column's task and metric), so a typo fails before anything trains.
//   AblateSuite s = load_suite("configs/ablate/nha_t6.json");
//   for (const AblateRow& r : s.rows) ... r.set ...
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/config_error.h"

namespace hyb {

// One evaluation after training (ablations.md 3.1 `eval`): `ppl` on a named split (eval.md 1.1,
// "brown.val") or an explicit shard, or `mqar` on a preset (eval.md 4.4; "" = the run's own test set).
struct AblateEval {
  std::string metric;  // "ppl" or "mqar"
  std::string split;   // ppl: the split's name, the middle of a column's metric path
  std::string data;    // ppl: the shard file
  std::string preset;  // mqar
};

struct AblateTask {
  std::string name;
  Json config;               // the base training config as written
  std::string config_source;  // its file, or "SUITE (tasks.NAME.config)" when inline
  std::vector<AblateEval> evals;
};

// A column's `ours`, "task.metric[.split].field": lm.ppl.brown.val.loss, mqar.mqar.recall_score.
struct MetricRef {
  std::string task, metric, split, field;
  std::string text;
};

struct AblateColumn {
  std::string id, paper, paper_better, ours_better;
  MetricRef ours;
  double delta_min = 0, eps = 0;
  bool higher_better() const { return ours_better == "higher"; }
  bool measured() const { return !ours.text.empty(); }  // false: the paper's number only
};

struct Override {
  std::string task;  // "" for every task of the row
  std::string path;
  Json value;
};

struct MatchParams {
  std::string key, target, mode;  // mode "closest" or "at_least"
  double from = 0, to = 0, step = 1, tolerance = 0;
  bool integer = true;  // from, to and step are all integers
};

// NHA Table 5's "Optimized" row (ablations.md 5.5).
struct EvalSearch {
  std::vector<int64_t> start;
  int64_t add = 1;
  int64_t search_test_seed = 0;
};

struct AblateRow {
  std::string name, slug;
  bool base = false;
  std::vector<Override> set, eval_set;
  std::optional<EvalSearch> eval_search;
  std::vector<std::string> tasks;             // the suite's tasks this row runs
  std::map<std::string, std::string> config;  // task -> a config file replacing the suite's
  std::optional<MatchParams> match_params;
  std::map<std::string, std::optional<double>> paper;  // column id -> number (null: missing)
  std::string paper_note, note;
  bool trains() const { return eval_set.empty() && !eval_search; }
  bool runs_task(const std::string& t) const;
};

struct AblateClaim {
  std::string id, column, a, b, expect, strength;
  std::optional<double> eps;  // tie margin; the column's eps when absent
  std::optional<double> paper_delta;
};

struct AblateSuite {
  std::string file, name;
  Json paper;  // {name, arxiv, table, caption, setting}
  double budget_s = 600;
  std::vector<int64_t> seeds;
  std::vector<AblateTask> tasks;
  std::vector<AblateColumn> columns;
  std::vector<AblateRow> rows;
  std::vector<AblateClaim> claims;
  std::vector<std::string> deviations;
  Json calibration;
  const AblateTask& task(const std::string& name) const;
  const AblateRow& row(const std::string& name) const;
  const AblateRow& base_row() const;
  const AblateColumn& column(const std::string& id) const;
};

// Reads and checks FILE; errors are hyb::Error "FILE: PATH: PROBLEM" (config.md 8.2's form).
AblateSuite load_suite(const std::string& file);
AblateSuite parse_suite(const Json& written, const std::string& file);

// A row name as a directory name: lower case, runs of other characters as one '-'.
std::string row_slug(const std::string& name);
// The shard of a canonical split (eval.md 1.1) as `hybrid tokenize` writes it: brown.val ->
// data/brown_tok/brown.val.bin, ts.val -> data/ts/ts.val.bin (the directories of data/README.md).
std::string split_shard(const std::string& split);

}  // namespace hyb
