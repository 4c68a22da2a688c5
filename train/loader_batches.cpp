#include "train/loader_batches.h"

namespace hyb {

void take_micro_batch(const Batch& step, int64_t grad_accum, int64_t micro, Tensor* inputs, Tensor* targets) {
  const int64_t rows = step.inputs.size(0);
  HYB_CHECK(rows % grad_accum == 0, "train: ", rows, " sequences per rank and step do not split into grad_accum = ",
            grad_accum, " micro-batches");
  const int64_t b = rows / grad_accum;
  *inputs = step.inputs.narrow(0, micro * b, b).contiguous();
  *targets = step.targets.narrow(0, micro * b, b).contiguous();
}

void LoaderBatches::next(Tensor* inputs, Tensor* targets) {
  if (micro_ == 0) step_ = loader_.next_batch();
  take_micro_batch(step_, grad_accum_, micro_, inputs, targets);
  micro_ = (micro_ + 1) % grad_accum_;
}

nlohmann::json LoaderBatches::cursor() const {
  HYB_ASSERT(micro_ == 0, "the data cursor is only exact between optimizer steps");
  return loader_.cursor();
}

void LoaderBatches::restore(const nlohmann::json& c) {
  loader_.restore(c);
  micro_ = 0;
}

}  // namespace hyb
