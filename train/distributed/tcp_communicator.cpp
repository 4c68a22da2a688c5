#include "train/distributed/tcp_communicator.h"

namespace hyb {

static void check_tensor(const Tensor& t, const char* op) {
  HYB_CHECK(t.is_cpu() && t.is_contiguous() && (t.dtype() == DType::f32 || t.dtype() == DType::f64), op,
            ": the TCP communicator takes contiguous f32 or f64 CPU tensors, got ", dtype_name(t.dtype()), " on ",
            t.device().str());
}

TcpCommunicator::TcpCommunicator(const DistEnv& env, double timeout_s)
    : star_(rendezvous_star(env, rendezvous_timeout_s())), timeout_s_(timeout_s) {}

void TcpCommunicator::send(int peer, const Tensor& t) const { star_.send(peer, t.raw_data(), t.nbytes(), timeout_s_); }

void TcpCommunicator::recv(int peer, Tensor& t) const { star_.recv(peer, t.raw_data(), t.nbytes(), timeout_s_); }

std::vector<Tensor> TcpCommunicator::gather_at_root(const Tensor& in) const {
  std::vector<Tensor> all{in};
  for (int r = 1; r < size(); ++r) {
    all.push_back(Tensor::empty(in.shape(), in.dtype()));
    recv(r, all.back());
  }
  return all;
}

void TcpCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  if (rank() != 0) {
    send(0, t);
    recv(0, t);
    return;
  }
  Tensor result = Tensor::empty(t.shape(), t.dtype());
  reduce_in_rank_order(gather_at_root(t), 0, result, op);
  for (int r = 1; r < size(); ++r) send(r, result);
  t.copy_(result);
}

void TcpCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_tensor(in, "reduce_scatter");
  check_tensor(out, "reduce_scatter");
  HYB_CHECK(in.numel() == out.numel() * size(), "reduce_scatter: input has ", in.numel(), " elements, output ",
            out.numel(), " on ", size(), " ranks");
  if (rank() != 0) {
    send(0, in);
    recv(0, out);
    return;
  }
  const std::vector<Tensor> all = gather_at_root(in.clone());
  for (int r = 0; r < size(); ++r) {
    Tensor slice = Tensor::empty(out.shape(), out.dtype());
    reduce_in_rank_order(all, int64_t(r) * out.numel(), slice, op);
    if (r == 0) out.copy_(slice);
    else send(r, slice);
  }
}

void TcpCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_tensor(in, "all_gather");
  check_tensor(out, "all_gather");
  HYB_CHECK(out.numel() == in.numel() * size(), "all_gather: input has ", in.numel(), " elements, output ",
            out.numel(), " on ", size(), " ranks");
  if (rank() != 0) {
    send(0, in);
    recv(0, out);
    return;
  }
  const std::vector<Tensor> all = gather_at_root(in.clone());
  Tensor gathered = Tensor::empty({out.numel()}, out.dtype());
  for (int r = 0; r < size(); ++r) gathered.narrow(0, int64_t(r) * in.numel(), in.numel()).copy_(all[size_t(r)].reshape({-1}));
  for (int r = 1; r < size(); ++r) send(r, gathered);
  out.copy_(gathered.view(out.shape()));
}

void TcpCommunicator::broadcast(Tensor& t, int root) {
  check_tensor(t, "broadcast");
  HYB_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of ", size());
  if (rank() == 0) {
    if (root != 0) recv(root, t);
    for (int r = 1; r < size(); ++r)
      if (r != root) send(r, t);
  } else if (rank() == root) {
    send(0, t);
  } else {
    recv(0, t);
  }
}

}  // namespace hyb
