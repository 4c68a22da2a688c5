#include "layers/mlp/swiglu_op.h"

namespace hyb {

Tensor swiglu_forward(const Tensor& a, const Tensor& b) {
  check_same_shape("swiglu", a, b, "gate", "up");
  check_same_device("swiglu", a, b);
#if HYBRID_CUDA
  if (a.is_cuda()) return swiglu_forward_cuda(a, b);
#endif
  return swiglu_forward_cpu(a, b);
}

std::pair<Tensor, Tensor> swiglu_backward(const SwigluSaved& s, const Tensor& dz, GradMask needed) {
#if HYBRID_CUDA
  if (dz.is_cuda()) return swiglu_backward_cuda(s, dz, needed);
#endif
  return swiglu_backward_cpu(s, dz, needed);
}

Var swiglu(const Var& a, const Var& b) {
  Tensor z = swiglu_forward(a.data(), b.data());
  SwigluSaved s{a.data(), b.data()};
  return record_op1(
      "swiglu", {a, b}, z,
      [s](const Tensor& dz, GradMask need) {
        auto [da, db] = swiglu_backward(s, dz, need);
        return Grads{da, db};
      },
      {{"a", s.a}, {"b", s.b}});
}

}  // namespace hyb
