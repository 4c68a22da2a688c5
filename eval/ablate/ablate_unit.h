// One unit of an ablation suite, run in a child process of `hybrid ablate` so that several share the
// GPU and a crash costs only itself: train a row's model and evaluate it, evaluate the base row's
// weights under a row's eval_set (an inference-time row), run NHA Table 5's layer search, or time a
// few steps (the budget probe). The parent writes DIR/unit.json; the child writes DIR/result.json
// last, atomically, so a unit without result.json is unfinished.
//   write_unit(dir, spec);   ...   `hybrid ablate --unit DIR`   ...   Json r = read_result(dir);
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "eval/ablate/ablate_suite.h"

namespace hyb {

struct UnitSpec {
  std::string kind;  // "train", "eval", "search", "probe"
  std::string row, task;
  int64_t seed = 0;
  Json config;                         // train, probe: the resolved run config (train.out_dir is the unit's dir)
  std::string checkpoint;              // eval, search: the base row's unit directory
  std::vector<std::string> eval_sets;  // eval: "PATH=VALUE" applied to the checkpoint's config
  std::vector<AblateEval> evals;
  std::optional<EvalSearch> search;
  std::string key;                     // what decides whether a finished result can be reused
};

void write_unit(const std::string& dir, const UnitSpec& spec);
UnitSpec read_unit(const std::string& dir);

// Does the unit's work and writes DIR/result.json: {"status": "done" | "diverged", "key", "seconds",
// "metrics": {"ppl.brown.val.loss": ..., "mqar.recall_score": ..., "mqar.saturated": 0 | 1, ...},
// "step" (diverged: the step that was not finite), "detail"}. Other errors propagate (the parent
// reports the unit as failed with the tail of its log).
void run_unit(const std::string& dir);

// DIR/result.json, or null when the unit has not finished.
Json read_result(const std::string& dir);

// The key of a result's metric for a column: the column's path without its task ("ppl.brown.val.loss").
std::string metric_key(const MetricRef& m);

}  // namespace hyb
