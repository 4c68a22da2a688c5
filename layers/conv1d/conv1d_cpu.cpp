// CPU reference of the causal depthwise conv + SiLU (conv1d_op.h; mamba2.md 3.5 for the backward).
// Time is padded on the left by the W-1 rows of x0 (or zeros): xp[s] = x0[s] for s < W-1 and
// x[s - (W-1)] after. The backward is parallel over channels, so each task owns its columns of dw
// and dbias and every sum runs over (b, t) in a fixed order, whatever the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/conv1d/conv1d_op.h"

namespace hyb {

namespace {

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

constexpr int64_t kChannelBlock = 16;  // channels per backward task

// Channel c of the padded sequence of batch b, in the input's element type.
template <typename T>
struct Padded {
  const T* x;
  const T* x0;  // nullptr: zeros
  int64_t T_, C, W;
  double at(int64_t b, int64_t s, int64_t c) const {
    if (s >= W - 1) return double(x[(b * T_ + s - (W - 1)) * C + c]);
    return x0 ? double(x0[(b * (W - 1) + s) * C + c]) : 0.0;
  }
};

template <typename T>
double pre_activation(const Padded<T>& xp, const T* w, const T* bias, int64_t b, int64_t t, int64_t c) {
  double acc = bias ? double(bias[c]) : 0.0;
  for (int64_t j = 0; j < xp.W; ++j) acc += double(w[c * xp.W + j]) * xp.at(b, t + j, c);
  return acc;
}

}  // namespace

Tensor causal_conv1d_silu_forward_cpu(const Tensor& x0in, const Tensor& w0, const Tensor& bias0, const Tensor& init0) {
  const Tensor x = x0in.contiguous(), w = w0.contiguous();
  const Tensor bias = bias0.defined() ? bias0.contiguous() : Tensor();
  const Tensor init = init0.defined() ? init0.contiguous() : Tensor();
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), W = w.size(1);
  Tensor y = Tensor::empty({B, T, C}, x.dtype());
  visit_float("causal_conv1d_silu_forward", x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const Padded<E> xp{x.data<E>(), init.defined() ? init.data<E>() : nullptr, T, C, W};
    const E* wp = w.data<E>();
    const E* bp = bias.defined() ? bias.data<E>() : nullptr;
    E* yp = y.data<E>();
    parallel_for(B * T, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t b = r / T, t = r % T;
        for (int64_t c = 0; c < C; ++c) {
          const double pre = pre_activation(xp, wp, bp, b, t, c);
          yp[r * C + c] = E(pre * sigmoid(pre));
        }
      }
    });
  });
  return y;
}

Conv1dGrads causal_conv1d_silu_backward_cpu(const Conv1dSaved& s, const Tensor& dy0, GradMask needed) {
  const Tensor x = s.x.contiguous(), w = s.w.contiguous(), dy = dy0.contiguous();
  const Tensor bias = s.bias.defined() ? s.bias.contiguous() : Tensor();
  const Tensor init = s.x0.defined() ? s.x0.contiguous() : Tensor();
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), W = w.size(1);
  const DType dt = x.dtype();
  Conv1dGrads g;
  const bool need_dx = needed[0], need_dw = needed[1], need_db = needed[2] && bias.defined(),
             need_dx0 = needed[3] && init.defined();
  if (need_dx) g.dx = Tensor::empty({B, T, C}, dt);
  if (need_dw) g.dw = Tensor::empty({C, W}, dt);
  if (need_db) g.dbias = Tensor::empty({C}, dt);
  if (need_dx0) g.dx0 = Tensor::empty({B, W - 1, C}, dt);
  visit_float("causal_conv1d_silu_backward", dt, [&](auto tag) {
    using E = decltype(tag);
    const Padded<E> xp{x.data<E>(), init.defined() ? init.data<E>() : nullptr, T, C, W};
    const E* wp = w.data<E>();
    const E* bp = bias.defined() ? bias.data<E>() : nullptr;
    const E* gp = dy.data<E>();
    // Blocks of kChannelBlock channels: the inner loops run along contiguous channels.
    const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
    parallel_for(blocks, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> dpre(size_t(T * kChannelBlock)), dw(size_t(kChannelBlock * W));
      std::vector<double> db(static_cast<size_t>(kChannelBlock));
      for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t c0 = blk * kChannelBlock, nc = std::min(kChannelBlock, C - c0);
        std::fill(dw.begin(), dw.end(), 0.0);
        std::fill(db.begin(), db.end(), 0.0);
        for (int64_t b = 0; b < B; ++b) {
          // dpre_t = dy_t silu'(pre_t), silu'(z) = sigma(z) (1 + z (1 - sigma(z))).
          for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < nc; ++i) {
              const int64_t c = c0 + i;
              const double pre = pre_activation(xp, wp, bp, b, t, c), sg = sigmoid(pre);
              const double d = double(gp[(b * T + t) * C + c]) * sg * (1.0 + pre * (1.0 - sg));
              dpre[size_t(t * kChannelBlock + i)] = d;
              db[size_t(i)] += d;
              for (int64_t j = 0; j < W; ++j) dw[size_t(i * W + j)] += d * xp.at(b, t + j, c);
            }
          // dxp[s] = sum_j w[j] dpre[s - j]; s >= W-1 is x's row s - (W-1), s < W-1 is x0's row s.
          for (int64_t s = 0; s < T + W - 1; ++s) {
            if (s < W - 1 ? !need_dx0 : !need_dx) continue;
            E* out = s >= W - 1 ? g.dx.template data<E>() + (b * T + s - (W - 1)) * C
                                : g.dx0.template data<E>() + (b * (W - 1) + s) * C;
            for (int64_t i = 0; i < nc; ++i) {
              double acc = 0;
              for (int64_t j = 0; j < W; ++j)
                if (s - j >= 0 && s - j < T) acc += double(wp[(c0 + i) * W + j]) * dpre[size_t((s - j) * kChannelBlock + i)];
              out[c0 + i] = E(acc);
            }
          }
        }
        for (int64_t i = 0; i < nc; ++i) {
          if (need_dw)
            for (int64_t j = 0; j < W; ++j) g.dw.template data<E>()[(c0 + i) * W + j] = E(dw[size_t(i * W + j)]);
          if (need_db) g.dbias.template data<E>()[c0 + i] = E(db[size_t(i)]);
        }
      }
    });
  });
  return g;
}

}  // namespace hyb
