// Deciding a claim's sign against seed noise (ablations.md 2.4, 2.5): paired per-seed differences,
// a one-sided Student t test at 95%, a floor against differences too small to mean anything, the
// tie rule for claims of no difference, and Holm-Bonferroni over a family of claims.
//   ClaimStats s = decide_claim({0.02, 0.03, 0.025}, "a_better", 0.003, 0.01);   // s.verdict == "MATCH"
#pragma once
#include <string>
#include <vector>

namespace hyb {

// t_{0.95, dof}: the one-sided 95% quantile of Student's t with dof degrees of freedom (dof >= 1).
double t_crit_95(int dof);
// P(T >= t) for Student's t with dof degrees of freedom (the one-sided p value, for Holm).
double t_upper_tail(double t, int dof);

// Mean and sample standard deviation (n - 1; 0 below two values).
struct Moments {
  double mean = 0, sd = 0;
};
Moments sample_moments(const std::vector<double>& x);

struct ClaimStats {
  int n = 0;
  double mean = 0, sd = 0, se = 0, t = 0, crit = 0;
  double lo = 0, hi = 0;  // the 90% interval mean -/+ crit se
  double p = 1;           // one-sided p of the expected direction (ties: 1)
  std::string verdict;    // "MATCH", "MISMATCH", "NOT RESOLVED"
  std::string reason;     // why, for NOT RESOLVED and for the record
};

// d: per-seed differences oriented so that d > 0 means row a did better (section 2.4 item 1).
// expect: "a_better", "b_better" or "tie"; delta_min the column's floor, eps the tie margin.
ClaimStats decide_claim(const std::vector<double>& d, const std::string& expect, double delta_min, double eps);

// Holm-Bonferroni at family level alpha over one-sided p values: which hypotheses are rejected.
std::vector<bool> holm_reject(const std::vector<double>& p, double alpha);

}  // namespace hyb
