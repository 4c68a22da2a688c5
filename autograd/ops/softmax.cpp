#include "autograd/ops/softmax.h"

#if HYBRID_CUDA
#include "autograd/ops/softmax_cuda.h"
#endif

namespace hyb {
namespace {

void check_rows(const char* op, const Tensor& x) {
  HYB_CHECK(x.defined() && x.dim() >= 1, op, ": needs at least one dimension, got ", x.str());
  HYB_CHECK(x.size(-1) > 0, op, ": the last dimension of ", shape_str(x.shape()), " is empty");
}

void check_grad(const char* op, const Tensor& saved, const Tensor& dy) {
  check_same_shape(op, saved, dy, "the saved tensor", "dy");
  HYB_CHECK(saved.dtype() == dy.dtype(), op, ": backward got dy of dtype ", dtype_name(dy.dtype()), " for a ",
            dtype_name(saved.dtype()), " op");
  check_same_device(op, saved, dy);
}

Tensor softmax_forward_any(const Tensor& x, bool log) {
  check_rows(log ? "log_softmax" : "softmax", x);
#if HYBRID_CUDA
  if (x.is_cuda()) return softmax_forward_cuda(x, log);
#endif
  return softmax_forward_cpu(x, log);
}

Tensor softmax_backward_any(const Tensor& y, const Tensor& dy, bool log) {
  check_grad(log ? "log_softmax" : "softmax", y, dy);
#if HYBRID_CUDA
  if (dy.is_cuda()) return softmax_backward_cuda(y, dy, log);
#endif
  return softmax_backward_cpu(y, dy, log);
}

Var softmax_any(const Var& x, bool log) {
  Tensor y = softmax_forward_any(x.data(), log);
  return record_op1(
      log ? "log_softmax" : "softmax", {x}, y,
      [y, log](const Tensor& dy, GradMask) { return Grads{softmax_backward_any(y, dy, log)}; }, {{"y", y}});
}

}  // namespace

Tensor softmax_forward(const Tensor& x) { return softmax_forward_any(x, false); }
Tensor softmax_backward(const Tensor& y, const Tensor& dy) { return softmax_backward_any(y, dy, false); }
Tensor log_softmax_forward(const Tensor& x) { return softmax_forward_any(x, true); }
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy) { return softmax_backward_any(y, dy, true); }
Var softmax(const Var& x) { return softmax_any(x, false); }
Var log_softmax(const Var& x) { return softmax_any(x, true); }

Tensor logsumexp_forward(const Tensor& x) {
  check_rows("logsumexp", x);
#if HYBRID_CUDA
  if (x.is_cuda()) return logsumexp_forward_cuda(x);
#endif
  return logsumexp_forward_cpu(x);
}

Tensor logsumexp_backward(const LogsumexpSaved& s, const Tensor& dlse) {
  check_grad("logsumexp", s.lse, dlse);
#if HYBRID_CUDA
  if (dlse.is_cuda()) return logsumexp_backward_cuda(s, dlse);
#endif
  return logsumexp_backward_cpu(s, dlse);
}

Var logsumexp(const Var& x, bool keepdim) {
  LogsumexpSaved s{x.data(), logsumexp_forward(x.data())};
  Shape out = s.lse.shape();
  if (keepdim) out.push_back(1);
  return record_op1(
      "logsumexp", {x}, s.lse.view(out),
      [s](const Tensor& dy, GradMask) { return Grads{logsumexp_backward(s, dy.reshape(s.lse.shape()))}; },
      {{"x", s.x}, {"lse", s.lse}});
}

}  // namespace hyb
