// The training loop of one rank: gradient accumulation, schedule, clipping, non-finite handling,
// periodic validation, checkpoints, a progress line and a JSONL metrics record every log_interval
// steps. With a communicator of several ranks it is data parallel (docs/distributed.md): gradients
// are reduced in buckets during the last micro-step's backward (GradSync), the optimizer is
// replicated or, with zero1, sharded (ZeroAdamW); losses and validation are averaged over ranks,
// and only rank 0 logs and writes.
//   Trainer t(model, batches, validate, options);
//   t.resume_from(ckpt_dir);   // optional
//   t.run();
#pragma once
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/records.h"
#include "layers/model/causal_lm.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train/distributed/communicator.h"
#include "train/distributed/grad_sync.h"
#include "train/distributed/zero_adamw.h"

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

// Sums over the windows a rank scored, so ranks add up.
struct ValidationResult {
  double nll_sum = 0;
  int64_t windows = 0, targets = 0, correct = 0;
  double loss() const { return targets ? nll_sum / double(targets) : 0.0; }
  // A task with a record of its own (MQAR, eval.md 4.3) adds its sums here, which ranks add up
  // too, and builds its record from the total in place of the `ppl` record.
  std::vector<double> task_sums;
  std::function<Record(const RecordEnvelope& env, const std::vector<double>& sums)> task_record;
};
// Scores this rank's share of the validation windows (rank of world).
using ValidateFn = std::function<ValidationResult(CausalLM& model, int rank, int world)>;

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
  Communicator* comm = nullptr;  // null: one rank, no data-parallel machinery
  double bucket_mb = 25;
  bool zero1 = false;
  // nha.md 8.1: each optimizer step, every layer with a window runs it unlimited with this probability.
  std::optional<double> window_p_full;
  std::vector<std::string> param_probes;  // eval.param_probes: logged at each validation (eval.md 6.3)
};

// A step whose loss or gradients were not finite, past what train.skip_nonfinite allows (config.md
// 6.7): the run diverged at `step`, which callers such as `hybrid ablate` report instead of failing.
class NonFiniteError : public Error {
 public:
  NonFiniteError(const std::string& what, int64_t step) : Error(what), step_(step) {}
  int64_t step() const { return step_; }

 private:
  int64_t step_;
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
  // The parameter probes of eval.md 6.3 at this step: pha.mix for a model with PHA blocks, and the
  // parameters eval.param_probes matches.
  void log_probes(const RecordEnvelope& env);
  void checkpoint();
  // The first parameter with a non-finite gradient, the same on every rank ("" when none).
  std::string first_nonfinite_gradient() const;
  double clip_gradients();
  // Draws this step's windows (the same on every rank: keyed by seed, step and layer), or restores
  // the configured ones.
  void randomize_windows(bool draw);
  int rank() const { return opt_.comm ? opt_.comm->rank() : 0; }
  int world() const { return opt_.comm ? opt_.comm->size() : 1; }
  bool main_rank() const { return rank() == 0; }

  CausalLM& model_;
  BatchSource& data_;
  ValidateFn validate_;
  TrainerOptions opt_;
  std::vector<OptimParam> params_;
  std::unique_ptr<GradSync> sync_;  // with several ranks
  std::unique_ptr<AdamW> adamw_;    // replicated optimizer (one rank, or data parallel without zero1)
  std::unique_ptr<ZeroAdamW> zero_;
  LrSchedule schedule_;
  int64_t step_ = 0;
  int64_t consecutive_skips_ = 0;
  double last_loss_ = 0, last_val_loss_ = 0;
  std::string metrics_path_;
};

std::string format_duration(double seconds);  // "1h02m", "3m07s", "12s"

}  // namespace hyb
