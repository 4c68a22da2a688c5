// NCCL between processes, one GPU each: rank 0 makes the ncclUniqueId and serves it through the
// TCP rendezvous, every rank joins the communicator, and collectives run on the device's comm
// stream. before_compute() waits on the host for the collectives queued so far, polling NCCL's
// asynchronous error and a timeout, so a dead or stuck peer ends this rank with an error (the
// communicator is aborted) instead of a hang.
#pragma once
#include <memory>

#include "train/distributed/communicator.h"
#include "train/distributed/dist_env.h"

namespace hyb {

class NcclCommunicator : public Communicator {
 public:
  // Joins the job described by env on cuda:device. timeout_s bounds every wait for a collective.
  NcclCommunicator(const DistEnv& env, int device, double timeout_s);
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;
  void after_compute() override;
  void copy(Tensor& dst, const Tensor& src) override;
  void before_compute() override;

 private:
  struct State;
  std::unique_ptr<State> s_;
  int rank_, size_;
};

}  // namespace hyb
