// CPU reference of the gated RMSNorm (gated_rmsnorm_op.h has the equations). Row-parallel, every
// sum in double. The gain gradient is summed per fixed block of rows and the blocks are added in
// order, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/norm/gated_rmsnorm_op.h"

namespace hyb {

namespace {

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

constexpr int64_t kRowBlocks = 64;  // partial sums of dw; fixed, unlike the thread count

}  // namespace

Tensor gated_rmsnorm_forward_cpu(const Tensor& x0, const Tensor& z0, const Tensor& w0, double eps, GatedNormOrder order,
                                 Tensor* rstd_out) {
  const Tensor x = x0.contiguous(), z = z0.contiguous(), w = w0.contiguous();
  const int64_t Gs = x.size(-1), rows = x.numel() / std::max<int64_t>(Gs, 1), wrows = w.numel() / std::max<int64_t>(Gs, 1);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  Tensor rstd = Tensor::empty({rows}, x.dtype());
  visit_float("gated_rmsnorm_forward", x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E *xp = x.data<E>(), *zp = z.data<E>(), *wp = w.data<E>();
    E* yp = y.data<E>();
    E* rp = rstd.data<E>();
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const E *xr = xp + r * Gs, *zr = zp + r * Gs, *wr = wp + (r % wrows) * Gs;
        // The normalised quantity: a = x silu(z) when gating first, x itself otherwise.
        auto normed = [&](int64_t c) {
          const double xv = double(xr[c]), zv = double(zr[c]);
          return order == GatedNormOrder::gate_then_norm ? xv * zv * sigmoid(zv) : xv;
        };
        double ss = 0;
        for (int64_t c = 0; c < Gs; ++c) ss += normed(c) * normed(c);
        const double rs = 1.0 / std::sqrt(ss / double(Gs) + eps);
        rp[r] = E(rs);
        for (int64_t c = 0; c < Gs; ++c) {
          const double zv = double(zr[c]);
          const double gate = order == GatedNormOrder::gate_then_norm ? 1.0 : zv * sigmoid(zv);
          yp[r * Gs + c] = E(normed(c) * rs * double(wr[c]) * gate);
        }
      }
    });
  });
  if (rstd_out) *rstd_out = rstd;
  return y;
}

GatedRmsNormGrads gated_rmsnorm_backward_cpu(const GatedRmsNormSaved& s, const Tensor& dy0, GradMask needed) {
  const Tensor x = s.x.contiguous(), z = s.z.contiguous(), w = s.w.contiguous(), dy = dy0.contiguous();
  const Tensor rstd = s.rstd.contiguous();
  const int64_t Gs = x.size(-1), rows = x.numel() / std::max<int64_t>(Gs, 1), wn = w.numel(),
                wrows = wn / std::max<int64_t>(Gs, 1);
  const bool gate_first = s.order == GatedNormOrder::gate_then_norm;
  GatedRmsNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype());
  if (needed[1]) g.dz = Tensor::empty(x.shape(), x.dtype());
  const int64_t blocks = std::min(kRowBlocks, std::max<int64_t>(rows, 1));
  std::vector<double> dw_part(needed[2] ? size_t(blocks * wn) : 0, 0.0);
  visit_float("gated_rmsnorm_backward", x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E *xp = x.data<E>(), *zp = z.data<E>(), *wp = w.data<E>(), *gp = dy.data<E>(), *rp = rstd.data<E>();
    E* dxp = needed[0] ? g.dx.data<E>() : nullptr;
    E* dzp = needed[1] ? g.dz.data<E>() : nullptr;
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<double> nh(static_cast<size_t>(Gs)), dnh(static_cast<size_t>(Gs));
      for (int64_t blk = b0; blk < b1; ++blk) {
        double* dwb = dw_part.empty() ? nullptr : dw_part.data() + blk * wn;
        for (int64_t r = rows * blk / blocks; r < rows * (blk + 1) / blocks; ++r) {
          const E *xr = xp + r * Gs, *zr = zp + r * Gs, *gr = gp + r * Gs;
          const int64_t woff = (r % wrows) * Gs;
          const double rs = double(rp[r]);
          // nh = the normalised row (a r or x r); dnh = dL/dnh; m = mean(dnh nh).
          double m = 0;
          for (int64_t c = 0; c < Gs; ++c) {
            const double xv = double(xr[c]), zv = double(zr[c]), sg = sigmoid(zv), wv = double(wp[woff + c]);
            const double go = double(gr[c]);
            nh[size_t(c)] = (gate_first ? xv * zv * sg : xv) * rs;
            dnh[size_t(c)] = gate_first ? go * wv : go * wv * zv * sg;
            m += dnh[size_t(c)] * nh[size_t(c)];
            if (dwb) dwb[woff + c] += gate_first ? go * nh[size_t(c)] : go * zv * sg * nh[size_t(c)];
          }
          m /= double(Gs);
          for (int64_t c = 0; c < Gs; ++c) {
            const double xv = double(xr[c]), zv = double(zr[c]), sg = sigmoid(zv);
            const double dsilu = sg * (1.0 + zv * (1.0 - sg));
            // dL/d(normalised input): da (gate first) or dx (norm first) = r (dnh - nh m).
            const double dn = rs * (dnh[size_t(c)] - nh[size_t(c)] * m);
            if (gate_first) {
              if (dxp) dxp[r * Gs + c] = E(dn * zv * sg);
              if (dzp) dzp[r * Gs + c] = E(dn * xv * dsilu);
            } else {
              if (dxp) dxp[r * Gs + c] = E(dn);
              if (dzp) dzp[r * Gs + c] = E(double(gr[c]) * nh[size_t(c)] * double(wp[woff + c]) * dsilu);
            }
          }
        }
      }
    });
  });
  if (needed[2]) {
    Tensor dw = Tensor::zeros({wn}, DType::f64);
    double* out = dw.data<double>();
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t i = 0; i < wn; ++i) out[i] += dw_part[size_t(blk * wn + i)];
    g.dw = dw.to(w.dtype()).reshape(w.shape());
  }
  return g;
}

}  // namespace hyb
