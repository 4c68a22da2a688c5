// Numbers follow eval.md 8.2: losses with 4 decimals, accuracies in percent with 1 decimal (their
// differences with 2, which the seed noise of MQAR needs), a missing value as "—".
#include "eval/ablate/ablate_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "eval/ablate/ablate_stats.h"
#include "train/config/config_hash.h"

namespace hyb {

namespace {

const char* kDash = "—";

bool is_accuracy(const AblateColumn& c) { return c.ours.field.rfind("loss", 0) != 0; }
double display_scale(const AblateColumn& c) { return is_accuracy(c) ? 100.0 : 1.0; }

std::string fixed(double v, int decimals, bool plus = false) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), plus ? "%+.*f" : "%.*f", decimals, v);
  return buf;
}

std::string ours_label(const AblateColumn& c) {
  if (c.ours.metric == "mqar" && c.ours.field == "recall_score") return "MQAR recall (%)";
  if (!c.measured()) return "(none)";
  std::string label = (c.ours.split.empty() ? c.ours.metric : c.ours.split) + " " + c.ours.field;
  return is_accuracy(c) ? label + " (%)" : label;
}

std::string paper_number(const std::optional<double>& v) {
  if (!v) return kDash;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", *v);
  return buf;
}

struct Series {
  std::vector<double> values;
  double mean() const { return sample_moments(values).mean; }
  double sd() const { return sample_moments(values).sd; }
};

class Results {
 public:
  Results(const AblatePlan& plan, const std::vector<UnitOutcome>& outcomes) : outcomes_(outcomes) {
    for (size_t i = 0; i < plan.units.size(); ++i) {
      const UnitSpec& s = plan.units[i].spec;
      index_[{s.row, s.task, s.seed}] = i;
    }
  }
  const UnitOutcome* outcome(const std::string& row, const std::string& task, int64_t seed) const {
    auto it = index_.find({row, task, seed});
    return it == index_.end() ? nullptr : &outcomes_[it->second];
  }
  std::optional<double> value(const std::string& row, const AblateColumn& c, int64_t seed) const {
    const UnitOutcome* o = outcome(row, c.ours.task, seed);
    if (!o || o->status != "done") return std::nullopt;
    const Json& m = o->result.at("metrics");
    const std::string k = metric_key(c.ours);
    if (!m.contains(k) || !m[k].is_number()) return std::nullopt;
    return m[k].get<double>();
  }
  // eval.md 4.3's flags of an MQAR column: saturated or at chance in this seed.
  bool uninformative(const std::string& row, const AblateColumn& c, int64_t seed) const {
    if (c.ours.metric != "mqar") return false;
    const UnitOutcome* o = outcome(row, c.ours.task, seed);
    if (!o || o->status != "done") return false;
    const Json& m = o->result.at("metrics");
    return m.value("mqar.saturated", 0) != 0 || m.value("mqar.at_chance", 0) != 0;
  }

 private:
  const std::vector<UnitOutcome>& outcomes_;
  std::map<std::tuple<std::string, std::string, int64_t>, size_t> index_;
};

std::string row_changes(const AblatePlan& plan, const AblateRow& r) {
  std::vector<std::string> seen;
  for (const PlannedRowTask& p : plan.row_tasks)
    if (p.row == r.name)
      for (const std::string& c : p.changes)
        if (std::find(seen.begin(), seen.end(), c) == seen.end()) seen.push_back(c);
  std::string out;
  for (const std::string& c : seen) out += (out.empty() ? "" : ", ") + c;
  return out.empty() ? kDash : out;
}

bool row_planned(const AblatePlan& plan, const AblateRow& r) {
  for (const PlannedRowTask& p : plan.row_tasks)
    if (p.row == r.name) return true;
  return false;
}

std::string cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}

}  // namespace

AblateReport build_report(const AblateSuite& suite, const AblatePlan& plan, const std::vector<UnitOutcome>& outcomes,
                          const std::vector<int64_t>& seeds, double seconds, bool holm, const std::string& run) {
  AblateReport rep;
  const Results res(plan, outcomes);
  const AblateRow& base = suite.base_row();
  std::string& t = rep.text;
  std::string seed_list;
  for (int64_t s : seeds) seed_list += (seed_list.empty() ? "" : ",") + std::to_string(s);
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.0f s", seconds);
  t += str_cat(suite.paper.value("name", suite.name), " Table ", suite.paper.value("table", "?"), " — ", suite.paper.value("caption", ""),
               " (arXiv ", suite.paper.value("arxiv", "?"), ")   seeds ", seed_list, "   ", secs, "\n\n");

  // The main table.
  t += "| Row | Change |";
  for (const AblateColumn& c : suite.columns) t += str_cat(" Paper ", cell(c.paper.empty() ? c.id : c.paper), " | Ours ", cell(ours_label(c)), " | Δ |");
  t += "\n| --- | --- |";
  for (size_t i = 0; i < suite.columns.size(); ++i) t += " --- | --- | --- |";
  t += "\n";
  for (const AblateRow& r : suite.rows) {
    if (!row_planned(plan, r)) continue;
    t += str_cat("| ", cell(r.name), " | ", cell(row_changes(plan, r)), " |");
    for (const AblateColumn& c : suite.columns) {
      const double k = display_scale(c);
      const int dec = is_accuracy(c) ? 1 : 4;
      const auto pv = r.paper.find(c.id);
      t += " " + paper_number(pv == r.paper.end() ? std::nullopt : pv->second) + " |";
      Series s, diff;
      for (int64_t seed : seeds) {
        const auto v = res.value(r.name, c, seed);
        if (!v) continue;
        s.values.push_back(*v);
        const auto b = res.value(base.name, c, seed);
        if (b) diff.values.push_back(*v - *b);
      }
      if (!c.measured() || !r.runs_task(c.ours.task) || s.values.empty()) t += str_cat(" ", kDash, " |");
      else t += str_cat(" ", fixed(k * s.mean(), dec), " ± ", fixed(k * s.sd(), dec), " (", s.values.size(), ") |");
      if (r.base || diff.values.empty()) t += str_cat(" ", kDash, " |");
      else t += str_cat(" ", fixed(k * diff.mean(), is_accuracy(c) ? 2 : 4, true), " |");
      Record rec("ablate.row", {run, "", 0, 0});
      rec.add("row", r.name).add("column", c.id).add("n", int64_t(s.values.size()));
      if (!s.values.empty()) rec.add("mean", s.mean()).add("sd", s.sd());
      if (!r.base && !diff.values.empty()) rec.add("delta_base", diff.mean());
      if (pv != r.paper.end() && pv->second) rec.add("paper", *pv->second);
      rep.records.push_back(rec);
    }
    t += "\n";
  }
  std::string notes;
  for (const AblateRow& r : suite.rows) {
    if (!row_planned(plan, r)) continue;
    if (!r.paper_note.empty()) notes += str_cat("- ", r.name, ", paper: ", r.paper_note, "\n");
    if (!r.note.empty()) notes += str_cat("- ", r.name, ": ", r.note, "\n");
    for (const PlannedRowTask& p : plan.row_tasks)
      if (p.row == r.name && !p.match_note.empty()) notes += str_cat("- ", r.name, " (", p.task, "): match_params ", p.match_note, "\n");
  }
  if (!notes.empty()) t += "\n" + notes;

  // The claims.
  t += "\n| Claim | Strength | Paper Δ | Ours Δ (mean, 90% CI, n) | t | Verdict |\n| --- | --- | --- | --- | --- | --- |\n";
  struct Counted {
    int match = 0, mismatch = 0, unresolved = 0;
  };
  std::map<std::string, Counted> counts;
  std::vector<double> primary_p;
  std::vector<size_t> primary_at;
  std::vector<std::string> lines;
  std::vector<ClaimStats> stats;
  for (const AblateClaim& cl : suite.claims) {
    const AblateColumn& c = suite.column(cl.column);
    const double sign = c.higher_better() ? 1.0 : -1.0;
    std::vector<double> d;
    bool all_flagged = true;
    for (int64_t seed : seeds) {
      const auto a = res.value(cl.a, c, seed), b = res.value(cl.b, c, seed);
      if (!a || !b) continue;
      d.push_back(sign * (*a - *b));
      all_flagged = all_flagged && res.uninformative(cl.a, c, seed) && res.uninformative(cl.b, c, seed);
    }
    ClaimStats s = decide_claim(d, cl.expect, c.delta_min, cl.eps.value_or(c.eps));
    if (!d.empty() && all_flagged && c.ours.metric == "mqar") {
      s.verdict = "NOT RESOLVED";
      s.reason = "saturated";
    }
    if (cl.strength == "primary" && cl.expect != "tie") {
      primary_p.push_back(s.p);
      primary_at.push_back(stats.size());
    }
    stats.push_back(s);
  }
  std::vector<bool> holm_kept(stats.size(), true);
  if (holm) {
    const std::vector<bool> reject = holm_reject(primary_p, 0.05);
    for (size_t i = 0; i < primary_at.size(); ++i) holm_kept[primary_at[i]] = reject[i];
  }
  for (size_t i = 0; i < suite.claims.size(); ++i) {
    const AblateClaim& cl = suite.claims[i];
    const AblateColumn& c = suite.column(cl.column);
    ClaimStats& s = stats[i];
    if (holm && s.verdict == "MATCH" && !holm_kept[i]) {
      s.verdict = "NOT RESOLVED";
      s.reason = "Holm";
    }
    const double k = display_scale(c), sign = c.higher_better() ? 1.0 : -1.0;
    const int dec = is_accuracy(c) ? 2 : 4;
    // The record and the table give a - b in our column (as the paper's delta is a - b in its column);
    // t is oriented so that t > 0 means a did better.
    const double lo = std::min(sign * s.lo, sign * s.hi), hi = std::max(sign * s.lo, sign * s.hi);
    std::string ours = s.n == 0 ? str_cat(kDash, " (0)")
                                : str_cat(fixed(k * sign * s.mean, dec, true), " [", fixed(k * lo, dec), ", ", fixed(k * hi, dec), "] (", s.n, ")");
    const std::string verdict = s.verdict == "NOT RESOLVED" ? str_cat("NOT RESOLVED (", s.reason, ")") : s.verdict;
    t += str_cat("| ", cell(cl.id), " | ", cl.strength, " | ", cl.paper_delta ? fixed(*cl.paper_delta, 2, true) : kDash, " | ", ours, " | ",
                 s.n >= 2 ? fixed(s.t, 2) : kDash, " | ", verdict, " |\n");
    if (cl.strength != "informational") {
      Counted& n = counts[cl.strength];
      (s.verdict == "MATCH" ? n.match : s.verdict == "MISMATCH" ? n.mismatch : n.unresolved)++;
    }
    if (cl.strength == "primary" && s.verdict == "MISMATCH") ++rep.primary_mismatches;
    Record rec("ablate.claim", {run, "", 0, 0});
    rec.add("id", cl.id).add("column", cl.column).add("a", cl.a).add("b", cl.b).add("expect", cl.expect).add("strength", cl.strength)
        .add("n", int64_t(s.n)).add("mean", sign * s.mean).add("se", s.se).add("t", s.t).add("lo", lo).add("hi", hi)
        .add("verdict", s.verdict).add("reason", s.reason);
    if (cl.paper_delta) rec.add("paper_delta", *cl.paper_delta);
    rep.records.push_back(rec);
  }
  std::string summary;
  Record sum("ablate.summary", {run, "", 0, 0});
  for (const char* strength : {"primary", "secondary"}) {
    const Counted& n = counts[strength];
    summary += str_cat(summary.empty() ? "" : "; ", strength, ": ", n.match, " MATCH, ", n.mismatch, " MISMATCH, ", n.unresolved, " NOT RESOLVED");
    sum.add(str_cat(strength, "_match"), int64_t(n.match))
        .add(str_cat(strength, "_mismatch"), int64_t(n.mismatch))
        .add(str_cat(strength, "_not_resolved"), int64_t(n.unresolved));
  }
  if (holm) summary += " (primary claims under Holm-Bonferroni at 0.05)";
  t += "\n" + summary + "\n";
  sum.add("seconds", seconds).add("holm", holm);

  if (!suite.calibration.is_null()) t += "\nCalibration (ablations.md 2.5, chosen on the base row before the others ran): " + suite.calibration.dump() + "\n";
  if (!suite.deviations.empty()) {
    t += "\nDeviations from the paper's setup:\n";
    for (const std::string& d : suite.deviations) t += "- " + d + "\n";
  }

  // Flags: runs that did not finish, and columns that cannot decide.
  std::string flags;
  int64_t not_finished = 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const UnitSpec& s = plan.units[i].spec;
    const UnitOutcome& o = outcomes[i];
    const std::string what = str_cat("\"", s.row, "\" ", s.task, " seed ", s.seed);
    if (o.status == "diverged") flags += str_cat("- diverged: ", what, " at step ", o.result.value("step", int64_t(0)), "\n");
    else if (o.status == "failed") flags += str_cat("- failed: ", what, ": ", o.why, "\n");
    else if (o.status == "not run") flags += str_cat("- not run: ", what, ": ", o.why, "\n");
    not_finished += o.status != "done";
    if (o.status == "done" && o.result.contains("detail") && o.result.at("detail").contains("chosen_layer"))
      flags += str_cat("- ", what, ": the search chose layer ", o.result.at("detail").at("chosen_layer").dump(), "\n");
  }
  for (const AblateRow& r : suite.rows)
    for (const AblateColumn& c : suite.columns) {
      if (c.ours.metric != "mqar" || !r.runs_task(c.ours.task) || !row_planned(plan, r)) continue;
      int64_t sat = 0, chance = 0, n = 0;
      for (int64_t seed : seeds) {
        const UnitOutcome* o = res.outcome(r.name, c.ours.task, seed);
        if (!o || o->status != "done") continue;
        ++n;
        sat += o->result.at("metrics").value("mqar.saturated", 0);
        chance += o->result.at("metrics").value("mqar.at_chance", 0);
      }
      if (sat) flags += str_cat("- saturated: \"", r.name, "\" ", c.id, " in ", sat, " of ", n, " seeds\n");
      if (chance) flags += str_cat("- at chance: \"", r.name, "\" ", c.id, " in ", chance, " of ", n, " seeds\n");
    }
  if (!flags.empty()) t += "\nFlags:\n" + flags;
  sum.add("units", int64_t(plan.units.size())).add("units_not_finished", not_finished);
  rep.records.push_back(sum);

  // Cost per row and task.
  t += "\n| Row | Task | Parameters | Non-embedding | tokens/s | Peak memory | Seconds per run |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const PlannedRowTask& p : plan.row_tasks) {
    Series tps, secs;
    double peak = 0;
    for (int64_t seed : seeds) {
      const UnitOutcome* o = res.outcome(p.row, p.task, seed);
      if (!o || o->status != "done") continue;
      secs.values.push_back(o->result.value("seconds", 0.0));
      if (o->result.value("tokens_per_s", 0.0) > 0) tps.values.push_back(o->result.at("tokens_per_s").get<double>());
      peak = std::max(peak, o->result.value("peak_bytes", 0.0));
    }
    t += str_cat("| ", cell(p.row), " | ", p.task, " | ", p.params, " | ", p.non_embedding, " | ",
                 tps.values.empty() ? std::string(kDash) : fixed(tps.mean(), 0), " | ", peak > 0 ? format_bytes(uint64_t(peak)) : std::string(kDash),
                 " | ", secs.values.empty() ? std::string(kDash) : fixed(secs.mean(), 1), " |\n");
  }

  for (size_t i = 0; i < plan.units.size(); ++i) {
    const PlannedUnit& u = plan.units[i];
    const UnitOutcome& o = outcomes[i];
    Record rec("ablate.run", {run, u.spec.kind == "train" ? config_sha256(u.spec.config) : u.spec.key, o.result.value("steps", int64_t(0)),
                              uint64_t(u.spec.seed)});
    rec.add("row", u.spec.row).add("task", u.spec.task).add("unit", u.spec.kind).add("status", o.status)
        .add("seconds", o.result.value("seconds", 0.0)).add_raw("metrics", o.result.value("metrics", Json::object()).dump());
    if (!o.why.empty()) rec.add("why", o.why);
    rep.records.push_back(rec);
  }
  return rep;
}

}  // namespace hyb
