// Up to K units of a suite at a time, each `hybrid ablate --unit DIR` in a child process with its
// output in DIR/log.txt (ablations.md 1 step 3: tiny models leave most of a GPU idle). A unit starts
// once the unit it depends on has finished; a stop condition (the time budget) keeps new units from
// starting. SIGINT or SIGTERM to the runner stops every child, so a killed suite loses only the units
// in flight.
//   JobResults r = run_jobs(units, 4, [&] { return elapsed() > limit; }, on_finished);
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace hyb {

struct Job {
  std::string dir;
  int depends_on = -1;  // index into the same list
  bool finished = false;  // already done (reused from --resume): not started again
};

enum class JobState { pending, done, failed, skipped };

struct JobOutcome {
  JobState state = JobState::pending;
  std::string why;  // failed: the exit status and the log's last line; skipped: the reason
  double seconds = 0;
};

// on_done(i, outcome) is called in the runner's thread as each job ends. Returns the outcome of every
// job; `interrupted` is set when a signal stopped the run.
std::vector<JobOutcome> run_jobs(const std::vector<Job>& jobs, int max_parallel, const std::function<bool()>& stop_starting,
                                 const std::function<void(size_t, const JobOutcome&)>& on_done, bool* interrupted);

}  // namespace hyb
