// Student's t from the regularized incomplete beta function (a continued fraction evaluated by the
// modified Lentz method), so every degree of freedom has its quantile, not only the nine of the
// spec's table, which the tests check these values against.
#include "eval/ablate/ablate_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace hyb {

namespace {

// The continued fraction of I_x(a, b), valid for x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::fabs(d) < tiny ? tiny : d);
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    for (int odd = 0; odd < 2; ++odd) {
      const double num = odd ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
                             : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
      d = 1 + num * d;
      d = 1 / (std::fabs(d) < tiny ? tiny : d);
      c = 1 + num / c;
      if (std::fabs(c) < tiny) c = tiny;
      h *= d * c;
      if (odd && std::fabs(d * c - 1) < 1e-15) return h;
    }
  }
  return h;
}

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
  return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

}  // namespace

double t_upper_tail(double t, int dof) {
  HYB_CHECK(dof >= 1, "t_upper_tail: degrees of freedom must be >= 1, got ", dof);
  if (std::isinf(t)) return t > 0 ? 0.0 : 1.0;
  const double half = 0.5 * incomplete_beta(0.5 * dof, 0.5, dof / (dof + t * t));
  return t >= 0 ? half : 1 - half;
}

double t_crit_95(int dof) {
  double lo = 0, hi = 1000;  // P(T >= 1000) < 0.05 already at one degree of freedom
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (t_upper_tail(mid, dof) > 0.05 ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Moments sample_moments(const std::vector<double>& x) {
  Moments m;
  if (x.empty()) return m;
  m.mean = std::accumulate(x.begin(), x.end(), 0.0) / double(x.size());
  if (x.size() < 2) return m;
  double ss = 0;
  for (double v : x) ss += (v - m.mean) * (v - m.mean);
  m.sd = std::sqrt(ss / double(x.size() - 1));
  return m;
}

ClaimStats decide_claim(const std::vector<double>& d, const std::string& expect, double delta_min, double eps) {
  ClaimStats s;
  s.n = int(d.size());
  if (s.n == 0) {
    s.verdict = "NOT RESOLVED";
    s.reason = "n<2";
    return s;
  }
  const Moments moments = sample_moments(d);
  s.mean = moments.mean;
  if (s.n < 2) {
    s.lo = s.hi = s.mean;
    s.verdict = "NOT RESOLVED";
    s.reason = "n<2";
    return s;
  }
  s.sd = moments.sd;
  s.se = s.sd / std::sqrt(double(s.n));
  s.crit = t_crit_95(s.n - 1);
  const double inf = std::numeric_limits<double>::infinity();
  s.t = s.se > 0 ? s.mean / s.se : (s.mean > 0 ? inf : s.mean < 0 ? -inf : 0.0);
  s.lo = s.mean - s.crit * s.se;
  s.hi = s.mean + s.crit * s.se;
  if (expect == "tie") {
    s.p = 1;
    if (std::fabs(s.mean) + s.crit * s.se <= eps) {
      s.verdict = "MATCH";
      s.reason = "interval inside the margin";
    } else if (std::fabs(s.mean) - s.crit * s.se > eps) {
      s.verdict = "MISMATCH";
      s.reason = "interval outside the margin";
    } else {
      s.verdict = "NOT RESOLVED";
      s.reason = "interval > margin";
    }
    return s;
  }
  HYB_CHECK(expect == "a_better" || expect == "b_better", "decide_claim: expect must be a_better, b_better or tie, got \"", expect, "\"");
  const double sign = expect == "a_better" ? 1 : -1;  // the expected direction as positive
  const double m = sign * s.mean, t = sign * s.t;
  s.p = t_upper_tail(t, s.n - 1);
  if (t >= s.crit && m >= delta_min) {
    s.verdict = "MATCH";
  } else if (t <= -s.crit && m <= -delta_min) {
    s.verdict = "MISMATCH";
  } else {
    s.verdict = "NOT RESOLVED";
    s.reason = std::fabs(t) >= s.crit ? "below delta_min" : "interval crosses 0";
  }
  return s;
}

std::vector<bool> holm_reject(const std::vector<double>& p, double alpha) {
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<bool> reject(p.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    if (p[order[i]] > alpha / double(order.size() - i)) break;
    reject[order[i]] = true;
  }
  return reject;
}

}  // namespace hyb
