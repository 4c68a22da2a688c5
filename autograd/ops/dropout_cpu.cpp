// CPU reference of dropout (dropout.h). Philox blocks give four words each, so the loop walks the
// stream a block at a time instead of calling dropout_keep per element (a quarter of the rounds).
#include "autograd/ops/dropout.h"
#include "core/dispatch.h"
#include "core/parallel.h"

namespace hyb {

Tensor dropout_forward_cpu(const Tensor& x0, const DropoutParams& d) {
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  visit_float("dropout", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T scale = T(d.scale);
    parallel_for(x.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      int64_t i = lo;
      while (i < hi) {
        const uint64_t k = d.offset + uint64_t(i);
        uint32_t c[4] = {uint32_t(k >> 2), uint32_t(k >> 34), 0u, 0u};
        philox4x32_10(c, d.key);
        for (int lane = int(k & 3); lane < 4 && i < hi; ++lane, ++i)
          yp[i] = xp[i] * (uint64_t(c[lane]) >= d.threshold ? scale : T(0));  // NaN stays NaN, as in x * mask
      }
    });
  });
  return y;
}

}  // namespace hyb
