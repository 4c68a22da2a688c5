// CPU reference of the cross-entropy loss (cross_entropy_op.h has the equations).
#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/exp_cpu.h"
#include "layers/loss/cross_entropy_op.h"

namespace hyb {

CrossEntropyResult cross_entropy_forward_cpu(const Tensor& logits0, const Tensor& targets0, int64_t vocab,
                                             int32_t ignore_index) {
  Tensor logits = logits0.contiguous(), targets = targets0.contiguous();
  const int64_t N = logits.size(0), Vp = logits.size(1);
  const DType stat = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  CrossEntropyResult r;
  r.nll = Tensor::empty({N}, stat);
  r.lse = Tensor::empty({N}, stat);
  r.argmax = Tensor::empty({N}, DType::i32);
  r.vocab = vocab;
  const int32_t* tp = targets.data<int32_t>();
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (tp[n] == ignore_index) continue;
    HYB_CHECK(tp[n] >= 0 && tp[n] < vocab, "cross_entropy: target ", tp[n], " at row ", n, " is outside [0, ", vocab, ")");
    ++count;
  }
  r.tally = Tensor::from_vector(std::vector<int64_t>{count, 0}, {2});
  visit_float("cross_entropy_forward", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* zp = logits.data<T>();
    int32_t* ap = r.argmax.data<int32_t>();
    visit_float("cross_entropy_forward", stat, [&](auto stag) {
      using S = decltype(stag);
      S* nll = r.nll.data<S>();
      S* lse = r.lse.data<S>();
      parallel_for(N, 8, [&](int64_t lo, int64_t hi) {
        for (int64_t n = lo; n < hi; ++n) {
          const T* z = zp + n * Vp;
          int64_t best = 0;
          for (int64_t v = 1; v < vocab; ++v)
            if (z[v] > z[best]) best = v;
          const T m = z[best];
          T sum = 0;  // fp32 math on the f32 path (vectorised exp), fp64 on the f64 path
          for (int64_t v = 0; v < vocab; ++v) sum += exp_cpu(z[v] - m);
          const double l = double(m) + std::log(double(sum));
          lse[n] = S(l);
          ap[n] = int32_t(best);
          nll[n] = tp[n] == ignore_index ? S(0) : S(l - double(z[tp[n]]));
        }
      });
    });
  });
  return r;
}

Tensor cross_entropy_backward_cpu(const CrossEntropySaved& s, double dloss) {
  Tensor logits = s.logits.contiguous(), targets = s.targets.contiguous();
  const int64_t N = logits.size(0), Vp = logits.size(1);
  Tensor dz = Tensor::empty(logits.shape(), logits.dtype());
  const int32_t* tp = targets.data<int32_t>();
  const double scale = dloss / double(s.count);
  visit_float("cross_entropy_backward", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* zp = logits.data<T>();
    T* dp = dz.data<T>();
    Tensor lse_t = s.lse.to(logits.dtype());
    const T* lse = lse_t.data<T>();
    const T sc = T(scale);
    parallel_for(N, 8, [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) {
        T* d = dp + n * Vp;
        const T* z = zp + n * Vp;
        if (tp[n] == s.ignore_index) {
          std::fill(d, d + Vp, T(0));
          continue;
        }
        for (int64_t v = 0; v < s.vocab; ++v) d[v] = sc * exp_cpu(z[v] - lse[n]);
        std::fill(d + s.vocab, d + Vp, T(0));
        d[tp[n]] -= sc;
      }
    });
  });
  return dz;
}

}  // namespace hyb
