#include "train/mqar_batches.h"

#include <algorithm>

#include "core/error.h"
#include "train/loader_batches.h"

namespace hyb {

MqarBatches::MqarBatches(const MqarConfig& c, int64_t batch_size, int64_t grad_accum, uint64_t seed, int rank, int world)
    : batch_size_(batch_size), grad_accum_(grad_accum), rank_(rank), world_(world), rng_(seed, "mqar.train") {
  for (const MqarSegment& seg : c.segments) {
    specs_.push_back({.vocab = c.vocab, .seq_len = seg.seq_len, .n_kv = seg.n_kv, .power_a = c.power_a,
                      .random_fill = c.random_fill});
    const std::optional<int64_t> k = seg.train_examples ? seg.train_examples : c.train_examples;
    fixed_.push_back(k ? std::optional<Batch>(mqar_batch(specs_.back(), rng_, *k)) : std::nullopt);
  }
}

Batch MqarBatches::step_batch(int64_t step) {
  const size_t seg = size_t(step % int64_t(specs_.size()));
  if (!fixed_[seg]) return mqar_batch(specs_[seg], rng_, batch_size_);
  // Segment seg served step / n_segments earlier steps: the set continues where they stopped.
  const Batch& set = *fixed_[seg];
  const int64_t k = set.inputs.size(0), T = set.inputs.size(1), first = (step / int64_t(specs_.size())) * batch_size_;
  std::vector<int32_t> in(size_t(batch_size_ * T)), tg(size_t(batch_size_ * T));
  for (int64_t i = 0; i < batch_size_; ++i) {
    const int64_t r = (first + i) % k;
    std::copy_n(set.inputs.data<int32_t>() + r * T, T, in.begin() + i * T);
    std::copy_n(set.targets.data<int32_t>() + r * T, T, tg.begin() + i * T);
  }
  return {Tensor::from_vector(in, {batch_size_, T}), Tensor::from_vector(tg, {batch_size_, T})};
}

void MqarBatches::next(Tensor* inputs, Tensor* targets) {
  if (micro_ == 0) {
    const Batch all = step_batch(step_++);
    const auto [lo, hi] = rank_share(batch_size_, rank_, world_);
    share_ = {all.inputs.narrow(0, lo, hi - lo).contiguous(), all.targets.narrow(0, lo, hi - lo).contiguous()};
  }
  take_micro_batch(share_, grad_accum_, micro_, inputs, targets);
  micro_ = (micro_ + 1) % grad_accum_;
}

nlohmann::json MqarBatches::cursor() const {
  HYB_ASSERT(micro_ == 0, "the data cursor is only exact between optimizer steps");
  return {{"task", "mqar"}, {"step", step_}, {"position", rng_.position()}};
}

void MqarBatches::restore(const nlohmann::json& c) {
  HYB_CHECK(c.value("task", "") == "mqar", "resume: the checkpoint's data cursor is not an MQAR cursor: ", c.dump());
  step_ = c.at("step").get<int64_t>();
  rng_.set_position(c.at("position").get<uint64_t>());
  micro_ = 0;
}

}  // namespace hyb
