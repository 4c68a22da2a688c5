// From a suite to its units (ablations.md 1 steps 1 and 3): every (row, task) resolved to a run
// config through config.md's resolver with the row's overrides (so an unknown key fails here,
// naming the suite, the row and the key), parameter counts and match_params, then one unit per
// (row, task, seed) in seed-major order, with the units of inference-time rows depending on the
// base row's training unit of the same task and seed.
//   AblatePlan plan = plan_suite(suite, {0, 1, 2}, {}, "runs/ablate/x/2026-12-03T16:00:00Z");
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "eval/ablate/ablate_suite.h"
#include "eval/ablate/ablate_unit.h"
#include "train/config/config_assign.h"

namespace hyb {

struct PlannedRowTask {
  std::string row, task;
  bool trains = true;
  Json written;                       // the config as written, before the row's overrides
  std::string source;                 // where it was written, for messages
  std::vector<Assignment> sets;       // the row's overrides for this task, with match_params' value
  std::vector<std::string> changes;   // "key=value" as printed in the Change column
  int64_t params = 0, non_embedding = 0;  // of the model this row trains (the base's for inference rows)
  std::string match_note;             // match_params: the value kept and both counts
  int64_t steps = 0;
};

struct PlannedUnit {
  UnitSpec spec;
  std::string dir;
  int depends_on = -1;  // index of the unit whose checkpoint this one reads
  std::string probe;    // train units: the probe key (architecture and task)
};

struct AblatePlan {
  std::vector<PlannedRowTask> row_tasks;
  std::vector<PlannedUnit> units;
  const PlannedRowTask& row_task(const std::string& row, const std::string& task) const;
};

// rows: names to run (empty: all; the base row and the rows claims need are added). out: the run
// directory; unit directories are OUT/rows/<row-slug>/<task>/seed<k>.
AblatePlan plan_suite(const AblateSuite& suite, const std::vector<int64_t>& seeds, const std::vector<std::string>& rows,
                      const std::string& out);

// The resolved config of a probe: the unit's config cut to `steps` steps with a constant schedule, no
// validation until the end, a train record at half way and at the end, and its output in `dir`.
Json probe_config(const Json& resolved, int64_t steps, const std::string& dir);

}  // namespace hyb
