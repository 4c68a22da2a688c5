// The statistics of ablations.md 2.4: Student's t quantiles against the spec's table, each verdict
// rule with its reason, and Holm-Bonferroni's step-down order.
#include <catch2/catch.hpp>

#include <cmath>

#include "eval/ablate/ablate_stats.h"

using hyb::decide_claim;

TEST_CASE("t_crit_95 reproduces ablations.md 2.4's one-sided 95% quantiles", "[ablate]") {
  const double table[] = {6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833};
  for (int dof = 1; dof <= 9; ++dof) CHECK(hyb::t_crit_95(dof) == Approx(table[dof - 1]).margin(6e-4));
  CHECK(hyb::t_crit_95(1000) == Approx(1.6464).margin(1e-3));  // near the normal's 1.645
  CHECK(hyb::t_upper_tail(0, 3) == Approx(0.5));
  CHECK(hyb::t_upper_tail(1.0, 1) == Approx(0.25).margin(1e-12));  // Cauchy: 1/2 - atan(1)/pi
  CHECK(hyb::t_upper_tail(-2.5, 4) == Approx(1 - hyb::t_upper_tail(2.5, 4)).margin(1e-12));
}

TEST_CASE("decide_claim: MATCH, MISMATCH and the reasons of NOT RESOLVED", "[ablate]") {
  // mean 0.02, sd 0.01, n 3: t = 3.46 >= 2.920.
  auto s = decide_claim({0.01, 0.02, 0.03}, "a_better", 0.003, 0.01);
  CHECK(s.verdict == "MATCH");
  CHECK(s.n == 3);
  CHECK(s.mean == Approx(0.02));
  CHECK(s.sd == Approx(0.01));
  CHECK(s.t == Approx(0.02 / (0.01 / std::sqrt(3.0))));
  CHECK(s.lo == Approx(0.02 - 2.920 * 0.01 / std::sqrt(3.0)).margin(1e-5));
  CHECK(s.p < 0.05);
  // The same differences under the opposite expectation are a resolved reversal.
  CHECK(decide_claim({0.01, 0.02, 0.03}, "b_better", 0.003, 0.01).verdict == "MISMATCH");
  CHECK(decide_claim({-0.01, -0.02, -0.03}, "b_better", 0.003, 0.01).verdict == "MATCH");
  // Resolved against noise but smaller than the column's floor.
  s = decide_claim({0.001, 0.0012, 0.0014}, "a_better", 0.003, 0.01);
  CHECK(s.verdict == "NOT RESOLVED");
  CHECK(s.reason == "below delta_min");
  s = decide_claim({0.05, -0.04, 0.02}, "a_better", 0.003, 0.01);
  CHECK(s.verdict == "NOT RESOLVED");
  CHECK(s.reason == "interval crosses 0");
  s = decide_claim({0.5}, "a_better", 0.003, 0.01);
  CHECK(s.verdict == "NOT RESOLVED");
  CHECK(s.reason == "n<2");
  // Equal differences in every seed: sd = 0 gives an infinite t (item 5).
  s = decide_claim({0.02, 0.02, 0.02}, "a_better", 0.003, 0.01);
  CHECK(std::isinf(s.t));
  CHECK(s.verdict == "MATCH");
  s = decide_claim({0.0, 0.0, 0.0}, "a_better", 0.003, 0.01);
  CHECK(s.t == 0);
  CHECK(s.verdict == "NOT RESOLVED");
}

TEST_CASE("decide_claim: a tie matches inside the margin and mismatches outside it", "[ablate]") {
  CHECK(decide_claim({0.001, -0.002, 0.0015}, "tie", 0.003, 0.01).verdict == "MATCH");
  const auto out = decide_claim({0.05, 0.051, 0.052}, "tie", 0.003, 0.01);
  CHECK(out.verdict == "MISMATCH");
  const auto wide = decide_claim({0.02, -0.02, 0.0}, "tie", 0.003, 0.01);
  CHECK(wide.verdict == "NOT RESOLVED");
  CHECK(wide.reason == "interval > margin");
}

TEST_CASE("holm_reject steps down from the smallest p value", "[ablate]") {
  // alpha 0.05 over 4: thresholds 0.0125, 0.0167, 0.025, 0.05.
  const auto r = hyb::holm_reject({0.01, 0.04, 0.012, 0.03}, 0.05);
  CHECK(r == std::vector<bool>{true, false, true, false});  // 0.03 > 0.025 stops the descent
  CHECK(hyb::holm_reject({0.2, 0.001}, 0.05) == std::vector<bool>{false, true});
}
