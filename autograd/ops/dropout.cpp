#include "autograd/ops/dropout.h"

#include <cmath>

#if HYBRID_CUDA
#include "autograd/ops/dropout_cuda.h"
#endif

namespace hyb {

DropoutParams dropout_params(double p, uint64_t seed, std::string_view name, uint64_t offset) {
  HYB_CHECK(p >= 0.0 && p < 1.0, "dropout ", name, ": p must be in [0, 1), got ", p);
  return {make_key(seed, name), offset, uint64_t(std::ceil(p * 4294967296.0)), 1.0 / (1.0 - p)};
}

Tensor dropout_forward(const Tensor& x, const DropoutParams& d) {
  HYB_CHECK(x.defined(), "dropout: undefined input");
#if HYBRID_CUDA
  if (x.is_cuda()) return dropout_forward_cuda(x, d);
#endif
  return dropout_forward_cpu(x, d);
}

// The same mask and scale as the forward: dx = keep dy / (1 - p).
Tensor dropout_backward(const DropoutParams& d, const Tensor& dy) { return dropout_forward(dy, d); }

Var dropout(const Var& x, double p, uint64_t seed, std::string_view name, uint64_t offset, bool train) {
  const DropoutParams d = dropout_params(p, seed, name, offset);
  if (!train || p == 0.0) return x;
  return record_op1("dropout", {x}, dropout_forward(x.data(), d),
                    [d](const Tensor& dy, GradMask) { return Grads{dropout_backward(d, dy)}; });
}

}  // namespace hyb
