// Learning-rate schedules (config.md 6.4): f(s) multiplies the peak lr at optimizer step s in [0, S).
//   LrSchedule sch(cfg);  double f = sch.factor(step);  sch.on_validation(loss);   // plateau only
#pragma once
#include <cstdint>
#include <string>

namespace hyb {

struct ScheduleConfig {
  std::string type = "warmup_cosine";  // warmup_cosine | constant | warmup_stable_decay | plateau
  int64_t total_steps = 1;             // S
  int64_t warmup_steps = 0;            // W
  double start_ratio = 0.0;
  double final_ratio = 0.1;
  int64_t decay_steps = 1;             // D (warmup_stable_decay)
  std::string decay_shape = "linear";  // linear | cosine
  double factor = 0.1;                 // plateau
  int64_t patience = 10;
  double threshold = 1e-4;
  std::string threshold_mode = "rel";
  int64_t cooldown = 0;
  double min_ratio = 0.0;
};

class LrSchedule {
 public:
  explicit LrSchedule(ScheduleConfig c);
  double factor(int64_t step) const;
  // Plateau: feed every validation loss; the new multiplier applies from the next step.
  void on_validation(double loss);

  // Plateau state, for checkpoints.
  struct PlateauState {
    double m = 1, best = 1e308;
    int64_t bad = 0, cool = 0;
  };
  const PlateauState& plateau_state() const { return p_; }
  void set_plateau_state(const PlateauState& s) { p_ = s; }

 private:
  ScheduleConfig c_;
  PlateauState p_;
};

}  // namespace hyb
