// ZeRO-1 AdamW: each rank keeps m and v only for its slice of every gradient bucket (GradSync in
// shard mode), updates the master weights of that slice from the reduce-scattered gradients, and
// all-gathers the updated weights into every rank's parameters (through the bucket buffer, which
// the gradients no longer need). The update of each element is AdamW's (optim/adamw.h), so ZeRO-1
// computes what the replicated optimizer does. Checkpoints hold the full state, gathered, so a run
// resumes on any number of ranks.
//   ZeroAdamW opt(params, sync, hyper);
//   sync.arm(); backward(loss); sync.finish(); opt.step(factor);
#pragma once
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "train/distributed/grad_sync.h"

namespace hyb {

class ZeroAdamW {
 public:
  ZeroAdamW(std::vector<OptimParam> params, GradSync& sync, AdamWHyper hyper);

  // Over this rank's slices only: the caller reduces across ranks.
  double local_grad_sum_squares() const;
  // The first parameter (in list order) with a non-finite gradient element in this rank's slices, or -1.
  int64_t local_first_nonfinite() const;
  void scale_grads(double f) const;
  // Collective: the global gradient norm over every rank's slices, and the slices scaled so that it
  // is at most max_norm (max_norm <= 0: no scaling), as clip_grad_norm does for whole gradients.
  double clip_grad_norm(double max_norm) const;

  void step(double factor);
  int64_t steps() const { return t_; }

  // Collective: every rank must call it; each gets the full state.
  AdamWState gather_state() const;
  void load_state(const AdamWState& state, const std::string& source);

 private:
  // Part of a parameter inside this rank's slice of a bucket.
  struct Piece {
    size_t param, bucket;
    int64_t param_offset;  // into the flattened parameter
    int64_t shard_offset;  // into the rank's slice of the bucket
    int64_t numel;
  };
  Tensor grad_of(const Piece& p) const;

  std::vector<OptimParam> params_;
  GradSync& sync_;
  AdamWHyper h_;
  std::vector<Piece> pieces_;
  std::vector<Tensor> m_, v_;  // per bucket, the rank's slice
  int64_t t_ = 0;
};

}  // namespace hyb
