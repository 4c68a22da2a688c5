// Gradient reduction of data parallelism, overlapped with the backward pass. Parameters are laid
// out, last first (the order backward completes them), in flat f32 buckets of about bucket_mb MiB,
// each padded to a multiple of the rank count. When every gradient of a bucket is complete (the
// tape's grad-ready hook), the bucket is copied together and its collective queued on the
// communication stream, while backward carries on; buckets launch in order, so every rank issues
// the same collectives in the same order. With gradient accumulation only the last micro-step's
// backward is armed: the earlier ones accumulate locally.
//   Plain:  all-reduce (mean); finish() makes each parameter's gradient its view in the bucket, which
//   holds the average (and, zeroed in place by zero_grad(), receives the next backward's sums).
//   Shard (ZeRO-1): reduce-scatter (mean); rank r keeps slice r of every bucket (shard(b)), which
//   train/distributed/zero_adamw.h updates. The parameters' gradients are views into the buckets as
//   well, so outside slice r they hold this rank's own sums, and after ZeroAdamW::step the gathered
//   weights: only the shards are the averaged gradient.
//   GradSync sync(params, comm, 25.0, false);
//   sync.arm(); backward(loss); sync.finish();
#pragma once
#include <unordered_map>
#include <vector>

#include "optim/adamw.h"
#include "train/distributed/communicator.h"

namespace hyb {

struct BucketSlot {
  size_t param;    // index into the parameter list
  int64_t offset;  // first element of the parameter in the bucket
  int64_t numel;
};

struct GradBucket {
  std::vector<BucketSlot> slots;
  int64_t numel = 0;   // sum of the slots
  int64_t padded = 0;  // numel rounded up to a multiple of the rank count
  Tensor buffer;       // (padded) f32 on the parameters' device
  int pending = 0;     // slots whose gradient is not complete yet in this backward
  bool launched = false;
};

class GradSync {
 public:
  GradSync(const std::vector<OptimParam>& params, Communicator& comm, double bucket_mb, bool shard);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // The next backward reduces its gradients as they complete.
  void arm();
  // After that backward: queues the buckets not launched yet, waits for all of them, disarms.
  void finish();

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  bool sharded() const { return shard_; }
  // Rank r's slice of bucket b: elements [r S, (r + 1) S) with S = padded / size.
  int64_t shard_size(size_t b) const { return buckets_[b].padded / comm_.size(); }
  Tensor shard(size_t b) const { return buckets_[b].buffer.narrow(0, comm_.rank() * shard_size(b), shard_size(b)); }
  Communicator& comm() const { return comm_; }

 private:
  void on_ready(GradCell& cell);
  void launch(size_t b);

  std::vector<OptimParam> params_;
  Communicator& comm_;
  bool shard_;
  std::vector<GradBucket> buckets_;
  std::unordered_map<const GradCell*, size_t> bucket_of_;  // grad cell -> bucket
  size_t next_launch_ = 0;
  bool armed_ = false;
};

}  // namespace hyb
