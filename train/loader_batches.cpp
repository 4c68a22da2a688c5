#include "train/loader_batches.h"

namespace hyb {

void LoaderBatches::next(Tensor* inputs, Tensor* targets) {
  if (micro_ == 0) step_ = loader_.next_batch();
  const int64_t rows = step_.inputs.size(0);
  HYB_CHECK(rows % grad_accum_ == 0, "train: ", rows, " sequences per rank and step do not split into grad_accum = ",
            grad_accum_, " micro-batches");
  const int64_t b = rows / grad_accum_;
  *inputs = step_.inputs.narrow(0, micro_ * b, b).contiguous();
  *targets = step_.targets.narrow(0, micro_ * b, b).contiguous();
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
