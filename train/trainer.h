// The training loop of one process (data parallel ranks come later through the same loop):
// gradient accumulation, schedule, clipping, non-finite handling, periodic validation,
// checkpoints, a progress line and a JSONL metrics record every log_interval steps.
//   Trainer t(model, batches, validate, options);
//   t.resume_from(ckpt_dir);   // optional
//   t.run();
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "eval/records.h"
#include "layers/model/causal_lm.h"
#include "optim/adamw.h"
#include "optim/schedule.h"

namespace hyb {

// The training stream as the trainer sees it: micro-batches of this rank, and an exact cursor.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // inputs and targets (b, T) i32 on the cpu.
  virtual void next(Tensor* inputs, Tensor* targets) = 0;
  virtual nlohmann::json cursor() const = 0;
  virtual void restore(const nlohmann::json& cursor) = 0;
};

struct ValidationResult {
  double loss = 0;
  int64_t windows = 0, targets = 0;
  double token_acc = 0;
};
using ValidateFn = std::function<ValidationResult(CausalLM& model)>;

struct TrainerOptions {
  int64_t steps = 1;
  int64_t grad_accum = 1;
  int64_t micro_batch = 1;  // sequences per micro-step on this rank
  int64_t seq_len = 1;
  AdamWHyper adam;
  ScheduleConfig schedule;
  double grad_clip = 1.0;
  bool skip_nonfinite = false;
  int64_t nonfinite_max_skips = 10;
  int64_t log_interval = 10;
  int64_t eval_interval = 0;
  int64_t checkpoint_interval = 0;
  int keep_last = 3;
  std::string out_dir;
  Device device;
  DType compute = DType::f32;
  std::string config_text, config_sha256;
  RecordEnvelope envelope;  // run, config_sha256, seed (step is filled per record)
};

// Per-parameter optimizer settings come from the config (decay set, param_groups).
using ParamRule = std::function<void(const NamedParameter& p, double* weight_decay, double* lr_mult)>;

class Trainer {
 public:
  Trainer(CausalLM& model, BatchSource& data, ValidateFn validate, TrainerOptions options, const ParamRule& rule);
  void resume_from(const std::string& checkpoint_dir);
  void run();
  int64_t step() const { return step_; }
  double last_loss() const { return last_loss_; }
  double last_val_loss() const { return last_val_loss_; }

 private:
  // One optimizer step; returns false when it was skipped for a non-finite value.
  bool train_step(double* loss, double* grad_norm);
  void validate_and_log();
  void checkpoint();

  CausalLM& model_;
  BatchSource& data_;
  ValidateFn validate_;
  TrainerOptions opt_;
  std::vector<OptimParam> params_;
  AdamW adamw_;
  LrSchedule schedule_;
  int64_t step_ = 0;
  int64_t consecutive_skips_ = 0;
  double last_loss_ = 0, last_val_loss_ = 0;
  std::string metrics_path_;
};

std::string format_duration(double seconds);  // "1h02m", "3m07s", "12s"

}  // namespace hyb
