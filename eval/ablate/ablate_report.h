// What `hybrid ablate` prints and writes after its units ran (ablations.md 4): the main table (the
// paper's number, ours as mean ± sd (n) and the difference to the base row per column), the claims
// with their statistics and verdicts, the summary, the deviations, the flags and the per-row cost;
// and the records of results.jsonl (ablate.run, ablate.row, ablate.claim, ablate.summary).
//   AblateReport r = build_report(suite, plan, outcomes, seeds, seconds, holm, "2026-12-03T16:00:00Z");
//   std::cout << r.text;
#pragma once
#include <string>
#include <vector>

#include "eval/ablate/ablate_plan.h"
#include "eval/records.h"

namespace hyb {

struct UnitOutcome {
  std::string status = "not run";  // "done", "diverged", "failed", "not run"
  std::string why;                  // failed, not run: the reason
  Json result = Json::object();     // DIR/result.json when the unit finished
};

struct AblateReport {
  std::string text;
  std::vector<Record> records;
  int primary_mismatches = 0;
};

AblateReport build_report(const AblateSuite& suite, const AblatePlan& plan, const std::vector<UnitOutcome>& outcomes,
                          const std::vector<int64_t>& seeds, double seconds, bool holm, const std::string& run);

}  // namespace hyb
