// CPU reference of rotate-half RoPE (rope_op.h, attention.md 5). cos/sin per (position, i) come
// from the f32 table on the f32 path (as on the GPU) and from fp64 angles on the f64 path and past
// the end of the table; the rotation itself is done in double.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/rope/rope_op.h"

namespace hyb {

Tensor rope_rotate_cpu(const Tensor& x0, const RopeTable& table, int64_t offset, int direction) {
  Tensor x = x0.contiguous();
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = table.rope_dim / 2;
  // cos and sin of a(offset + t, i) for every token, shared by all batches and heads.
  std::vector<double> cs(size_t(T * half)), sn(size_t(T * half));
  const bool f32_table = x.dtype() == DType::f32;
  const int64_t table_rows = table.cos.defined() ? table.cos.size(0) : 0;
  const Tensor tc = f32_table ? table.cos.to(Device::cpu()) : Tensor();
  const Tensor ts = f32_table ? table.sin.to(Device::cpu()) : Tensor();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = offset + t;
    for (int64_t i = 0; i < half; ++i) {
      const size_t at = size_t(t * half + i);
      if (f32_table && p < table_rows) {
        cs[at] = tc.data<float>()[p * half + i];
        sn[at] = ts.data<float>()[p * half + i];
      } else {
        const double a = double(p) * table.inv_freq[size_t(i)];
        cs[at] = std::cos(a);
        sn[at] = std::sin(a);
      }
      sn[at] *= direction;  // the backward turns by -a: cos is even, sin is odd
    }
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  visit_float("rope", x.dtype(), [&](auto tag) {
    using Tt = decltype(tag);
    const Tt* xp = x.data<Tt>();
    Tt* yp = y.data<Tt>();
    parallel_for(B * T * H, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) {
        const int64_t t = (n / H) % T;
        const Tt* xr = xp + n * D;
        Tt* yr = yp + n * D;
        for (int64_t i = 0; i < half; ++i) {
          const double c = cs[size_t(t * half + i)], s = sn[size_t(t * half + i)];
          const double x1 = double(xr[i]), x2 = double(xr[i + half]);
          yr[i] = Tt(x1 * c - x2 * s);
          yr[i + half] = Tt(x1 * s + x2 * c);
        }
        for (int64_t d = 2 * half; d < D; ++d) yr[d] = xr[d];
      }
    });
  });
  return y;
}

}  // namespace hyb
