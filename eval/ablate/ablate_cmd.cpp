// `hybrid ablate SUITE.json [--out DIR] [--seeds 0,1,2 | 0-9] [--rows NAME,...] [--resume RUNDIR]
// [--dry-run] [--jobs K] [--over-budget] [--strict] [--holm] [--keep-checkpoints]` (ablations.md 1):
// plan every (row, task, seed), time a probe of each architecture against the suite's budget, run
// the units as child processes, then print and write the tables. `hybrid ablate --unit DIR` is the
// child's side (eval/ablate/ablate_unit.h).
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "core/device.h"
#include "core/safetensors.h"
#include "eval/ablate/ablate_jobs.h"
#include "eval/ablate/ablate_plan.h"
#include "eval/ablate/ablate_report.h"
#include "eval/ablate/ablate_unit.h"
#include "eval/records.h"
#include "train/cli.h"
#include "train/config/config_json.h"

namespace hyb {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1) out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

std::vector<int64_t> parse_seeds(const std::string& text) {
  std::vector<int64_t> seeds;
  for (const std::string& part : split_list(text)) {
    const size_t dash = part.find('-', 1);
    try {
      if (dash == std::string::npos) {
        seeds.push_back(std::stoll(part));
      } else {
        const int64_t a = std::stoll(part.substr(0, dash)), b = std::stoll(part.substr(dash + 1));
        HYB_CHECK(a <= b, "ablate: --seeds range ", part, " runs backwards");
        for (int64_t s = a; s <= b; ++s) seeds.push_back(s);
      }
    } catch (const std::logic_error&) {
      throw Error(str_cat("ablate: --seeds expects integers or ranges like 0,1,2 or 0-9, got \"", text, "\""));
    }
  }
  for (int64_t s : seeds) HYB_CHECK(s >= 0, "ablate: --seeds must be >= 0, got ", s);
  return seeds;
}

// The canonical shards (data/brown_tok, data/ts) a suite reads are written on first use, with
// `hybrid tokenize` as data/README.md gives it, so a fresh clone runs a suite without a setup step.
void ensure_canonical_shards(const AblateSuite& suite) {
  std::set<std::string> files;
  for (const AblateTask& t : suite.tasks) {
    for (const AblateEval& e : t.evals)
      if (!e.data.empty()) files.insert(e.data);
    const Json& d = t.config.value("data", Json::object());
    for (const char* k : {"train", "val"}) {
      if (!d.contains(k)) continue;
      if (d[k].is_string()) files.insert(d[k].get<std::string>());
      if (d[k].is_array())
        for (const Json& f : d[k])
          if (f.is_string()) files.insert(f.get<std::string>());
    }
  }
  std::set<std::string> presets;
  for (const std::string& f : files) {
    if (fs::exists(f)) continue;
    if (f.rfind("data/brown_tok/", 0) == 0) presets.insert("brown");
    if (f.rfind("data/ts/", 0) == 0) presets.insert("tinyshakespeare");
  }
  for (const std::string& p : presets) {
    const std::string dir = p == "brown" ? "data/brown_tok" : "data/ts";
    std::printf("ablate: writing the %s shards to %s (hybrid tokenize --preset %s --tokenizer gpt2 --out %s)\n", p.c_str(), dir.c_str(),
                p.c_str(), dir.c_str());
    std::fflush(stdout);
    const std::string cmd = str_cat("'", hybrid_executable(), "' tokenize --preset ", p, " --tokenizer gpt2 --out ", dir);
    HYB_CHECK(std::system(cmd.c_str()) == 0, "ablate: tokenizing the ", p, " corpus failed (", cmd, ")");
  }
}

std::string headline_metrics(const Json& result) {
  std::string out;
  const Json metrics = result.value("metrics", Json::object());
  for (const auto& [k, v] : metrics.items()) {
    if (!v.is_number() || (k.find(".loss") == std::string::npos && k != "mqar.recall_score")) continue;
    char buf[96];
    std::snprintf(buf, sizeof(buf), " | %s %.4f", k.c_str(), v.get<double>());
    out += buf;
  }
  return out;
}

struct ProbeEstimate {
  double step_s = 0, overhead_s = 0;
};

// ablations.md 1 step 4: ten steps of each distinct (architecture, task) that has units left to
// run, one at a time.
std::map<std::string, ProbeEstimate> run_probes(const AblatePlan& plan, const std::vector<Job>& units, const std::string& out) {
  std::set<std::string> needed;
  for (size_t i = 0; i < plan.units.size(); ++i)
    if (!units[i].finished) {
      const PlannedUnit& u = plan.units[i];
      needed.insert(u.depends_on >= 0 ? plan.units[size_t(u.depends_on)].probe : u.probe);
    }
  std::map<std::string, ProbeEstimate> est;
  std::vector<Job> jobs;
  std::vector<std::string> keys;
  for (const PlannedUnit& u : plan.units) {
    if (u.spec.kind != "train" || !needed.count(u.probe) || est.count(u.probe)) continue;
    est[u.probe] = {};
    const std::string dir = (fs::path(out) / "probe" / std::to_string(keys.size())).string();
    fs::remove_all(dir);
    UnitSpec p = u.spec;
    p.kind = "probe";
    p.config = probe_config(u.spec.config, 10, dir);
    p.evals.clear();
    write_unit(dir, p);
    jobs.push_back({dir});
    keys.push_back(u.probe);
  }
  if (jobs.empty()) return est;
  std::printf("ablate: timing %zu probe runs of 10 steps\n", jobs.size());
  std::fflush(stdout);
  bool interrupted = false;
  const std::vector<JobOutcome> done = run_jobs(jobs, 1, [] { return false; }, [](size_t, const JobOutcome&) {}, &interrupted);
  HYB_CHECK(!interrupted, "ablate: interrupted while timing the probes");
  for (size_t i = 0; i < jobs.size(); ++i) {
    HYB_CHECK(done[i].state == JobState::done, "ablate: the timing probe of ", keys[i], " failed: ", done[i].why);
    const Json r = read_result(jobs[i].dir);
    const Json& cfg = read_unit(jobs[i].dir).config;
    const double steps = r.at("metrics").at("probe.steps").get<double>();
    const double tokens = double(cfg["train"]["batch_size"].get<int64_t>() * cfg["data"]["seq_len"].get<int64_t>());
    const double tps = r.value("tokens_per_s", 0.0);
    ProbeEstimate& e = est[keys[i]];
    e.step_s = tps > 0 ? tokens / tps : r.at("metrics").at("probe.train_s").get<double>() / steps;
    // What the steady steps do not explain (process start, model build, the first step's one-off
    // costs, the final validation and checkpoint) is paid once per unit.
    e.overhead_s = std::max(0.0, r.at("seconds").get<double>() - steps * e.step_s);
  }
  return est;
}

}  // namespace

int cmd_ablate(Args& args) {
  if (auto unit = args.get("--unit")) {
    args.finish();
    run_unit(*unit);
    return 0;
  }
  const std::optional<std::string> out_opt = args.get("--out");
  const std::optional<std::string> seeds_opt = args.get("--seeds");
  const std::optional<std::string> rows_opt = args.get("--rows");
  const std::optional<std::string> resume = args.get("--resume");
  const bool dry_run = args.flag("--dry-run");
  const int64_t jobs_opt = args.integer("--jobs", 0);
  const bool over_budget = args.flag("--over-budget");
  const bool strict = args.flag("--strict");
  const bool holm = args.flag("--holm");
  const bool keep_ckpt = args.flag("--keep-checkpoints");
  const std::vector<std::string> pos = args.positional();
  args.finish();
  HYB_CHECK(pos.size() == 1, "ablate: expected one suite file (hybrid ablate SUITE.json [--out DIR] [--seeds 0,1,2] [--rows NAME,...] "
                             "[--resume RUNDIR] [--dry-run] [--jobs K] [--over-budget] [--strict] [--holm])");
  HYB_CHECK(jobs_opt >= 0, "ablate: --jobs must be >= 1, got ", jobs_opt);
  HYB_CHECK(!(resume && out_opt), "ablate: --resume RUNDIR continues in RUNDIR; it takes no --out");

  const AblateSuite suite = load_suite(pos[0]);
  const std::vector<int64_t> seeds = seeds_opt ? parse_seeds(*seeds_opt) : suite.seeds;
  const std::vector<std::string> rows = rows_opt ? split_list(*rows_opt) : std::vector<std::string>{};
  const int jobs = jobs_opt > 0 ? int(jobs_opt) : cuda_device_count() > 0 ? 4 : 1;
  std::string out;
  if (resume) {
    HYB_CHECK(fs::exists(fs::path(*resume) / "suite.json"), "ablate: --resume ", *resume, " is not a run directory of hybrid ablate (no suite.json)");
    out = *resume;
  } else {
    std::string stamp = utc_now_iso8601();
    for (char& c : stamp)
      if (c == ':') c = '-';
    out = out_opt ? *out_opt : (fs::path("runs/ablate") / suite.name / stamp).string();
    HYB_CHECK(!fs::exists(fs::path(out) / "suite.json"), "ablate: ", out, " already holds a suite run; continue it with --resume ", out);
  }

  ensure_canonical_shards(suite);
  const AblatePlan plan = plan_suite(suite, seeds, rows, out);
  std::printf("%s: %zu units (%zu row-task pairs x %zu seeds), --jobs %d, output %s\n", suite.file.c_str(), plan.units.size(),
              plan.row_tasks.size(), seeds.size(), jobs, out.c_str());
  for (const PlannedRowTask& p : plan.row_tasks) {
    std::string changes;
    for (const std::string& c : p.changes) changes += (changes.empty() ? "" : ", ") + c;
    std::printf("  %-28s %-6s %s parameters %lld (non-embedding %lld)%s%s\n", p.row.c_str(), p.task.c_str(),
                p.trains ? "trains," : "evaluates the base row's weights,", static_cast<long long>(p.params),
                static_cast<long long>(p.non_embedding), changes.empty() ? "" : " | ", changes.c_str());
    if (!p.match_note.empty()) std::printf("  %-28s %-6s match_params %s\n", "", "", p.match_note.c_str());
  }

  // The reusable results of an earlier run of the same units.
  std::vector<Job> jobs_list;
  int64_t reused = 0;
  for (const PlannedUnit& u : plan.units) {
    Job j{u.dir, u.depends_on, false};
    const Json r = resume ? read_result(u.dir) : Json();
    if (!r.is_null() && r.value("key", "") == u.spec.key) {
      j.finished = true;
      ++reused;
    }
    jobs_list.push_back(j);
  }
  // A finished base unit whose checkpoint is gone (deleted after a run without inference-time rows)
  // trains again when an unfinished unit still has to read it.
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const int dep = plan.units[i].depends_on;
    if (dep < 0 || jobs_list[i].finished || !jobs_list[size_t(dep)].finished) continue;
    if (fs::exists(fs::path(plan.units[size_t(dep)].dir) / "ckpt")) continue;
    jobs_list[size_t(dep)].finished = false;
    --reused;
  }
  if (resume) std::printf("ablate: %lld of %zu units finished earlier and are reused\n", static_cast<long long>(reused), plan.units.size());

  fs::create_directories(out);
  const std::map<std::string, ProbeEstimate> probes = run_probes(plan, jobs_list, out);
  double total = 0;
  std::map<std::string, double> by_row;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    if (jobs_list[i].finished) continue;
    const PlannedUnit& u = plan.units[i];
    const PlannedUnit& trained = u.depends_on >= 0 ? plan.units[size_t(u.depends_on)] : u;
    const ProbeEstimate& e = probes.at(trained.probe);
    const double s = u.spec.kind == "train" ? e.overhead_s + double(u.spec.config["train"]["steps"].get<int64_t>()) * e.step_s : e.overhead_s;
    total += s;
    by_row[u.spec.row] += s;
  }
  const double estimate = total / jobs;
  std::printf("ablate: estimate %.0f s for %zu units at --jobs %d (if the parallel runs do not slow each other), budget %.0f s\n", estimate,
              plan.units.size() - size_t(reused), jobs, suite.budget_s);
  for (const auto& [row, s] : by_row) std::printf("  %-28s %8.0f s of runs\n", row.c_str(), s);
  if (dry_run) return 0;
  if (estimate > 1.2 * suite.budget_s && !over_budget) {
    std::printf("ablate: the estimate is over 1.2 x budget_s (%.0f s); run with --over-budget to go ahead, or with fewer --seeds or --rows\n",
                1.2 * suite.budget_s);
    return 3;
  }

  write_file_atomic((fs::path(out) / "suite.json").string(), read_config_file(suite.file).dump(2) + "\n");
  for (size_t i = 0; i < plan.units.size(); ++i) {
    if (jobs_list[i].finished) continue;
    fs::remove_all(plan.units[i].dir);
    write_unit(plan.units[i].dir, plan.units[i].spec);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  size_t ended = size_t(reused);
  bool interrupted = false;
  const std::vector<JobOutcome> ran = run_jobs(
      jobs_list, jobs, [&] { return elapsed() > 1.5 * suite.budget_s; },
      [&](size_t i, const JobOutcome& o) {
        ++ended;
        const UnitSpec& s = plan.units[i].spec;
        const Json r = o.state == JobState::done ? read_result(plan.units[i].dir) : Json();
        const std::string what = o.state == JobState::done ? r.value("status", "done") : o.state == JobState::failed ? "FAILED" : "not run";
        std::printf("[%zu/%zu %.0f s] \"%s\" %s seed %lld: %s in %.1f s%s%s\n", ended, plan.units.size(), elapsed(), s.row.c_str(),
                    s.task.c_str(), static_cast<long long>(s.seed), what.c_str(), o.seconds, r.is_null() ? "" : headline_metrics(r).c_str(),
                    o.why.empty() ? "" : (" | " + o.why).c_str());
        std::fflush(stdout);
      },
      &interrupted);

  std::vector<UnitOutcome> outcomes(plan.units.size());
  bool has_inference_rows = false;
  for (const PlannedUnit& u : plan.units) has_inference_rows = has_inference_rows || u.depends_on >= 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    UnitOutcome& o = outcomes[i];
    if (ran[i].state == JobState::done) {
      o.result = read_result(plan.units[i].dir);
      o.status = o.result.value("status", "done");
    } else {
      o.status = ran[i].state == JobState::failed ? "failed" : "not run";
      o.why = ran[i].why.empty() ? "interrupted" : ran[i].why;
    }
    // The base row's weights stay while inference-time rows may still need them (--resume).
    const bool needed = has_inference_rows && plan.units[i].spec.row == suite.base_row().name;
    if (!keep_ckpt && !needed && plan.units[i].spec.kind == "train") fs::remove_all(fs::path(plan.units[i].dir) / "ckpt");
  }
  const AblateReport rep = build_report(suite, plan, outcomes, seeds, elapsed(), holm, fs::path(out).filename().string());
  std::fputs(("\n" + rep.text).c_str(), stdout);
  write_file_atomic((fs::path(out) / "table.md").string(), rep.text);
  std::string lines;
  for (const Record& r : rep.records) lines += r.line() + "\n";
  write_file_atomic((fs::path(out) / "results.jsonl").string(), lines);
  std::printf("\nablate: wrote %s/table.md and %s/results.jsonl\n", out.c_str(), out.c_str());
  if (interrupted) return 130;
  return strict && rep.primary_mismatches > 0 ? 1 : 0;
}

}  // namespace hyb
