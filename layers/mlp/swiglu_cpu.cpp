// CPU reference of the SwiGLU gate (swiglu_op.h has the equations).
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/mlp/swiglu_op.h"

namespace hyb {

Tensor swiglu_forward_cpu(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0.contiguous(), b = b0.contiguous();
  Tensor z = Tensor::empty(a.shape(), a.dtype());
  visit_float("swiglu_forward", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* zp = z.data<T>();
    parallel_for(a.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) zp[i] = ap[i] / (T(1) + std::exp(-ap[i])) * bp[i];
    });
  });
  return z;
}

std::pair<Tensor, Tensor> swiglu_backward_cpu(const SwigluSaved& s, const Tensor& dz0, GradMask needed) {
  Tensor a = s.a.contiguous(), b = s.b.contiguous(), dz = dz0.contiguous();
  Tensor da = needed[0] ? Tensor::empty(a.shape(), a.dtype()) : Tensor();
  Tensor db = needed[1] ? Tensor::empty(a.shape(), a.dtype()) : Tensor();
  visit_float("swiglu_backward", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    const T* gp = dz.data<T>();
    T* dap = needed[0] ? da.data<T>() : nullptr;
    T* dbp = needed[1] ? db.data<T>() : nullptr;
    parallel_for(a.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T sg = T(1) / (T(1) + std::exp(-ap[i]));
        if (dap) dap[i] = gp[i] * bp[i] * sg * (T(1) + ap[i] * (T(1) - sg));
        if (dbp) dbp[i] = gp[i] * ap[i] * sg;
      }
    });
  });
  return {da, db};
}

}  // namespace hyb
