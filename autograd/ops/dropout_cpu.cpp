// CPU reference of dropout (dropout.h). Philox blocks give four words each, so the loop walks the
// stream a block at a time with dropout_keep_block, the CUDA kernel's function too (a quarter of the
// rounds of calling dropout_keep per element).
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
        const unsigned keep = dropout_keep_block(d, k >> 2);
        for (int lane = int(k & 3); lane < 4 && i < hi; ++lane, ++i)
          yp[i] = xp[i] * ((keep >> lane) & 1u ? scale : T(0));  // NaN stays NaN, as in x * mask
      }
    });
  });
  return y;
}

}  // namespace hyb
