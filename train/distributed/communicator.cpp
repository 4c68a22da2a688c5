#include "train/distributed/communicator.h"

#include <algorithm>
#include <cstdlib>

#include "core/dispatch.h"

namespace hyb {

void reduce_in_rank_order(const std::vector<Tensor>& ins, int64_t first, Tensor& out, ReduceOp op) {
  const int64_t n = out.numel();
  Tensor acc = Tensor::empty({n}, out.dtype());
  visit_float("reduce_in_rank_order", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* a = acc.data<T>();
    for (int64_t i = 0; i < n; ++i) a[i] = ins[0].data<T>()[first + i];
    for (size_t r = 1; r < ins.size(); ++r) {
      const T* x = ins[r].data<T>() + first;
      for (int64_t i = 0; i < n; ++i) a[i] = op == ReduceOp::max ? std::max(a[i], x[i]) : a[i] + x[i];
    }
    if (op == ReduceOp::mean)
      for (int64_t i = 0; i < n; ++i) a[i] /= T(ins.size());
  });
  out.copy_(acc.view(out.shape()));
}

double comm_timeout_s() {
  const char* v = std::getenv("HYBRID_COMM_TIMEOUT");
  if (!v) return 600;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  HYB_CHECK(end && *end == '\0' && s > 0, "environment variable HYBRID_COMM_TIMEOUT=\"", v,
            "\" is not a positive number of seconds");
  return s;
}

std::vector<double> Communicator::all_reduce_host(const std::vector<double>& values, ReduceOp op, Device device) {
  Tensor t = Tensor::from_vector(values, {int64_t(values.size())}).to(device);
  after_compute();
  all_reduce(t, op);
  before_compute();
  return t.to_double_vector();
}

}  // namespace hyb
