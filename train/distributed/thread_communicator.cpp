#include "train/distributed/thread_communicator.h"


namespace hyb {

ThreadGroup::ThreadGroup(int size) : size_(size), barrier_(size), slots_(size_t(size), nullptr) {
  HYB_CHECK(size >= 1, "ThreadGroup: size must be >= 1, got ", size);
}

ThreadCommunicator::ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {
  HYB_CHECK(rank >= 0 && rank < group.size(), "ThreadCommunicator: rank ", rank, " outside [0, ", group.size(), ")");
}

std::vector<Tensor> ThreadCommunicator::exchange(const Tensor& in, const char* op) {
  HYB_CHECK(!in.is_cuda() && in.is_contiguous() && (in.dtype() == DType::f32 || in.dtype() == DType::f64), op,
            ": the thread communicator takes contiguous f32 or f64 CPU tensors, got ", dtype_name(in.dtype()), " ",
            in.device().str());
  group_.slots_[size_t(rank_)] = &in;
  group_.barrier_.arrive_and_wait();
  std::vector<Tensor> ins;
  for (const Tensor* t : group_.slots_) ins.push_back(*t);
  // Every rank holds its own handles before any may leave (a rank that throws below destroys its
  // tensor on the way out).
  group_.barrier_.arrive_and_wait();
  for (const Tensor& t : ins)
    HYB_CHECK(t.numel() == in.numel() && t.dtype() == in.dtype(), op, ": rank ", rank_, " has ", in.numel(),
              " elements of ", dtype_name(in.dtype()), ", another rank ", t.numel(), " of ", dtype_name(t.dtype()));
  return ins;
}

void ThreadCommunicator::reduce_range(const std::vector<Tensor>& ins, int64_t first, Tensor& out, ReduceOp op) {
  Tensor acc = Tensor::empty(out.shape(), out.dtype());
  reduce_in_rank_order(ins, first, acc, op);
  // Everyone must have read the inputs before anyone writes an output (in-place collectives).
  release();
  out.copy_(acc);
}

void ThreadCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  std::vector<Tensor> ins = exchange(t, "all_reduce");
  reduce_range(ins, 0, t, op);
  release();
}

void ThreadCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  HYB_CHECK(in.numel() == out.numel() * size(), "reduce_scatter: input has ", in.numel(), " elements, output ",
            out.numel(), " on ", size(), " ranks");
  std::vector<Tensor> ins = exchange(in, "reduce_scatter");
  reduce_range(ins, int64_t(rank_) * out.numel(), out, op);
  release();
}

void ThreadCommunicator::all_gather(const Tensor& in, Tensor& out) {
  HYB_CHECK(out.numel() == in.numel() * size(), "all_gather: input has ", in.numel(), " elements, output ",
            out.numel(), " on ", size(), " ranks");
  std::vector<Tensor> ins = exchange(in, "all_gather");
  Tensor gathered = Tensor::empty({out.numel()}, out.dtype());
  for (int r = 0; r < size(); ++r) gathered.narrow(0, r * in.numel(), in.numel()).copy_(ins[size_t(r)].reshape({-1}));
  release();
  out.copy_(gathered.view(out.shape()));
  release();
}

void ThreadCommunicator::broadcast(Tensor& t, int root) {
  std::vector<Tensor> ins = exchange(t, "broadcast");
  Tensor copy = ins[size_t(root)].clone();
  release();
  t.copy_(copy);
  release();
}

}  // namespace hyb
