#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hyb {

LrSchedule::LrSchedule(ScheduleConfig c) : c_(std::move(c)) {
  HYB_CHECK(c_.total_steps >= 1, "schedule: total steps must be >= 1, got ", c_.total_steps);
  HYB_CHECK(c_.warmup_steps >= 0 && c_.warmup_steps < c_.total_steps, "schedule: warmup steps ", c_.warmup_steps,
            " must be below the total ", c_.total_steps);
  HYB_CHECK(c_.type == "warmup_cosine" || c_.type == "constant" || c_.type == "warmup_stable_decay" || c_.type == "plateau",
            "schedule: unknown type \"", c_.type, "\"");
  if (c_.type == "warmup_stable_decay")
    HYB_CHECK(c_.decay_steps >= 1 && c_.total_steps - c_.decay_steps >= c_.warmup_steps, "schedule: decay starts at step ",
              c_.total_steps - c_.decay_steps, ", before the end of the warm-up (", c_.warmup_steps, ")");
}

double LrSchedule::factor(int64_t s) const {
  const int64_t W = c_.warmup_steps, S = c_.total_steps;
  if (s < W) return c_.start_ratio + (1 - c_.start_ratio) * double(s + 1) / double(W);
  auto progress = [&](int64_t s0) { return double(s - s0 + 1) / double(S - s0); };
  auto cosine = [&](double p) { return c_.final_ratio + (1 - c_.final_ratio) * (1 + std::cos(M_PI * p)) / 2; };
  if (c_.type == "constant") return 1.0;
  if (c_.type == "plateau") return p_.m;
  if (c_.type == "warmup_cosine") return cosine(progress(W));
  const int64_t s0 = S - c_.decay_steps;
  if (s < s0) return 1.0;
  const double p = progress(s0);
  return c_.decay_shape == "cosine" ? cosine(p) : 1 - (1 - c_.final_ratio) * p;
}

void LrSchedule::on_validation(double x) {
  if (c_.type != "plateau") return;
  const bool improved = c_.threshold_mode == "rel" ? x < p_.best * (1 - c_.threshold) : x < p_.best - c_.threshold;
  if (improved) {
    p_.best = x;
    p_.bad = 0;
  } else {
    ++p_.bad;
  }
  if (p_.cool > 0) {
    --p_.cool;
    p_.bad = 0;
  }
  if (p_.bad > c_.patience) {
    p_.m = std::max(p_.m * c_.factor, c_.min_ratio);
    p_.cool = c_.cooldown;
    p_.bad = 0;
  }
}

}  // namespace hyb
