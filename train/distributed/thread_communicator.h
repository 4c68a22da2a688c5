// Ranks as threads of one process, for the CPU tests of the data-parallel code: the same
// collectives as NCCL, computed at once on CPU tensors. Every reduction adds the ranks' values in
// rank order, so all ranks get bit-identical results (as NCCL's do).
//   ThreadGroup group(4);
//   std::thread([&]{ ThreadCommunicator comm(group, 2); ... });
#pragma once
#include <barrier>
#include <vector>

#include "train/distributed/communicator.h"

namespace hyb {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  int size() const { return size_; }

 private:
  friend class ThreadCommunicator;
  int size_;
  std::barrier<> barrier_;
  std::vector<const Tensor*> slots_;  // each rank's input of the collective in progress
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  void all_reduce(Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;

 private:
  // Publishes `in`, waits for every rank's, and returns them in rank order; call release() once
  // done reading them.
  std::vector<Tensor> exchange(const Tensor& in, const char* op);
  void release() { group_.barrier_.arrive_and_wait(); }
  void reduce_range(const std::vector<Tensor>& ins, int64_t first, Tensor& out, ReduceOp op);

  ThreadGroup& group_;
  int rank_;
};

}  // namespace hyb
