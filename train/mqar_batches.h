// The trainer's micro-batches for the MQAR task (eval.md 4.2): step s takes its whole batch from
// segment s mod n_segments, either fresh examples from stream mqar.train with the run's seed or,
// for a segment with train_examples K, the next rows of a fixed set of K examples, cycled. The fixed
// sets are drawn first, in segment order, from the same stream. Every rank draws the whole batch
// and keeps its contiguous share, so the data do not depend on the number of ranks. The cursor is
// the step and the stream position.
//   MqarBatches b(*rc.data.mqar, batch_size, grad_accum, seed, rank, world);
#pragma once
#include <optional>
#include <vector>

#include "data/mqar.h"
#include "train/config/run_config.h"
#include "train/trainer.h"

namespace hyb {

class MqarBatches : public BatchSource {
 public:
  MqarBatches(const MqarConfig& c, int64_t batch_size, int64_t grad_accum, uint64_t seed, int rank, int world);
  void next(Tensor* inputs, Tensor* targets) override;
  nlohmann::json cursor() const override;
  void restore(const nlohmann::json& cursor) override;

 private:
  Batch step_batch(int64_t step);

  std::vector<MqarSpec> specs_;
  std::vector<std::optional<Batch>> fixed_;  // per segment: its fixed set, or none for fresh examples
  int64_t batch_size_, grad_accum_;
  int rank_, world_;
  RngStream rng_;
  int64_t step_ = 0;
  Batch share_;
  int64_t micro_ = 0;  // micro-batches of share_ already handed out
};

}  // namespace hyb
