// Data parallelism between CPU processes: the collectives over the rendezvous' star of TCP
// connections. Rank 0 receives every rank's buffer, reduces in rank order (the rule of
// reduce_in_rank_order, so results are bit-identical on all ranks) and sends the results back.
// Slow next to NCCL, and meant for what CPU runs are for: small models, and testing the
// multi-process path (launcher, rendezvous, a dead rank) on machines without GPUs. A dead peer
// closes its connection, which the others notice at once; a stuck one hits HYBRID_COMM_TIMEOUT.
#pragma once
#include "train/distributed/communicator.h"
#include "train/distributed/rendezvous.h"

namespace hyb {

class TcpCommunicator : public Communicator {
 public:
  TcpCommunicator(const DistEnv& env, double timeout_s);
  int rank() const override { return star_.rank(); }
  int size() const override { return star_.world(); }
  void all_reduce(Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;

 private:
  void send(int peer, const Tensor& t) const;
  void recv(int peer, Tensor& t) const;
  // Rank 0: every rank's `in` in rank order (its own first).
  std::vector<Tensor> gather_at_root(const Tensor& in) const;

  Star star_;
  double timeout_s_;
};

}  // namespace hyb
