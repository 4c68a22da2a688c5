// The collectives data parallelism needs, behind one interface with two implementations: NCCL
// between processes (one GPU each) and threads inside one process (the CPU tests run the same
// bucketing and ZeRO-1 code through it). Tensors are f32 and contiguous; every rank calls the same
// collectives in the same order with the same sizes.
//
// Ordering. NCCL collectives run on a communication stream: `after_compute()` makes the next
// collective wait for everything queued so far on the compute stream, `before_compute()` makes
// compute queued later wait for every collective so far (and is where a dead peer is noticed).
// The thread communicator computes at once, so both are no-ops there.
//   comm.after_compute();  comm.all_reduce(bucket, ReduceOp::mean);  ...  comm.before_compute();
#pragma once
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace hyb {

enum class ReduceOp { sum, mean, max };

// out[i] = ins[0][first + i] op ins[1][first + i] op ... in rank order (mean: that sum over the
// count), i < out.numel(): the rule of the CPU communicators, so every rank gets the same bits.
// ins are contiguous CPU tensors of out's dtype (f32 or f64); out may alias one of them.
void reduce_in_rank_order(const std::vector<Tensor>& ins, int64_t first, Tensor& out, ReduceOp op);

// HYBRID_COMM_TIMEOUT (seconds, default 600): the longest wait for a collective or a peer.
double comm_timeout_s();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place on every rank.
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  // `in` holds size() * n elements; rank r receives the reduction of in[r n, (r + 1) n) in `out` (n).
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  // `in` holds n elements of this rank; `out` (size() * n) receives every rank's, in rank order.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;

  virtual void after_compute() {}
  virtual void before_compute() {}

  // dst = src in the collectives' order (NCCL: on the communication stream, so it waits for
  // after_compute() and the compute stream only sees it after before_compute()): gradients move in
  // and out of the buckets without taking the compute stream's time. Contiguous, same dtype and size.
  virtual void copy(Tensor& dst, const Tensor& src) { dst.copy_(src); }

  // A few host numbers through the same collective (losses, norms, flags); returns when done.
  std::vector<double> all_reduce_host(const std::vector<double>& values, ReduceOp op, Device device);
  double all_reduce_host(double value, ReduceOp op, Device device) {
    return all_reduce_host(std::vector<double>{value}, op, device)[0];
  }
};

}  // namespace hyb
