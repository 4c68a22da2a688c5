// The trainer's micro-batches from a DataLoader: one loader step (this rank's share of an optimizer
// step) cut into grad_accum micro-batches. The loader's cursor is exact at step boundaries, which
// is where checkpoints are taken, so the cursor is the loader's.
#pragma once
#include "data/loader.h"
#include "train/trainer.h"

namespace hyb {

// Micro-batch `micro` of one step's rows cut into grad_accum equal parts (an error when they do not split).
void take_micro_batch(const Batch& step, int64_t grad_accum, int64_t micro, Tensor* inputs, Tensor* targets);

class LoaderBatches : public BatchSource {
 public:
  LoaderBatches(DataLoader& loader, int64_t grad_accum) : loader_(loader), grad_accum_(grad_accum) {}
  void next(Tensor* inputs, Tensor* targets) override;
  nlohmann::json cursor() const override;
  void restore(const nlohmann::json& cursor) override;

 private:
  DataLoader& loader_;
  int64_t grad_accum_;
  Batch step_;
  int64_t micro_ = 0;  // micro-batches of step_ already handed out
};

}  // namespace hyb
