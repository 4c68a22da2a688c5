// CPU reference of softmax, log_softmax and logsumexp over the last dim (softmax.h has the
// equations). One row per task; row sums in f64. The shift is the row max when it is finite and 0
// otherwise, which makes an all -inf row give logsumexp -inf and a +inf entry give +inf.
#include <cmath>
#include <limits>

#include "autograd/ops/softmax.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/exp_cpu.h"

namespace hyb {
namespace {

struct Rows {
  int64_t rows, V;
};

Rows rows_of(const Tensor& x) {
  const int64_t V = x.size(-1);
  return {x.numel() / V, V};
}

int64_t row_grain(int64_t V) { return std::max<int64_t>(1, (1 << 14) / V); }

// max_j x_j if finite, else 0; NaN entries are skipped here and propagate through the sum.
template <typename T>
T row_shift(const T* x, int64_t V) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = std::max(m, x[j]);
  return std::isfinite(m) ? m : T(0);
}

// Writes e_j = exp(x_j - shift) to e and returns their sum.
template <typename T>
double exp_row(const T* x, T shift, T* e, int64_t V) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < V; ++j) {
    e[j] = exp_cpu(x[j] - shift);
    s += double(e[j]);
  }
  return s;
}

}  // namespace

Tensor softmax_forward_cpu(const Tensor& x0, bool log) {
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const auto [rows, V] = rows_of(x);
  visit_float(log ? "log_softmax" : "softmax", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_for(rows, row_grain(V), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = xp + r * V;
        T* yr = yp + r * V;
        const T shift = row_shift(xr, V);
        const double s = exp_row(xr, shift, yr, V);
        if (log) {
          const T lse = T(double(shift) + std::log(s));
#pragma omp simd
          for (int64_t j = 0; j < V; ++j) yr[j] = xr[j] - lse;
        } else {
          const T inv = T(1.0 / s);
#pragma omp simd
          for (int64_t j = 0; j < V; ++j) yr[j] *= inv;
        }
      }
    });
  });
  return y;
}

Tensor softmax_backward_cpu(const Tensor& y0, const Tensor& dy0, bool log) {
  Tensor y = y0.contiguous(), dy = dy0.contiguous();
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  const auto [rows, V] = rows_of(y);
  visit_float(log ? "log_softmax" : "softmax", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* yp = y.data<T>();
    const T* gp = dy.data<T>();
    T* dp = dx.data<T>();
    parallel_for(rows, row_grain(V), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* yr = yp + r * V;
        const T* gr = gp + r * V;
        T* dr = dp + r * V;
        double s = 0;  // softmax: sum_j dy_j y_j;  log_softmax: sum_j dy_j
        if (log) {
#pragma omp simd reduction(+ : s)
          for (int64_t j = 0; j < V; ++j) s += double(gr[j]);
          const T st = T(s);
#pragma omp simd
          for (int64_t j = 0; j < V; ++j) dr[j] = gr[j] - exp_cpu(yr[j]) * st;
        } else {
#pragma omp simd reduction(+ : s)
          for (int64_t j = 0; j < V; ++j) s += double(gr[j]) * double(yr[j]);
          const T st = T(s);
#pragma omp simd
          for (int64_t j = 0; j < V; ++j) dr[j] = yr[j] * (gr[j] - st);
        }
      }
    });
  });
  return dx;
}

Tensor logsumexp_forward_cpu(const Tensor& x0) {
  Tensor x = x0.contiguous();
  const auto [rows, V] = rows_of(x);
  Tensor lse = Tensor::empty(Shape(x.shape().begin(), x.shape().end() - 1), x.dtype());
  visit_float("logsumexp", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* lp = lse.data<T>();
    parallel_for(rows, row_grain(V), [&](int64_t lo, int64_t hi) {
      std::vector<T> scratch(static_cast<size_t>(V));
      for (int64_t r = lo; r < hi; ++r) {
        const T shift = row_shift(xp + r * V, V);
        lp[r] = T(double(shift) + std::log(exp_row(xp + r * V, shift, scratch.data(), V)));
      }
    });
  });
  return lse;
}

Tensor logsumexp_backward_cpu(const LogsumexpSaved& s, const Tensor& dlse0) {
  Tensor x = s.x.contiguous(), lse = s.lse.contiguous(), dlse = dlse0.contiguous();
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  const auto [rows, V] = rows_of(x);
  visit_float("logsumexp", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* lp = lse.data<T>();
    const T* gp = dlse.data<T>();
    T* dp = dx.data<T>();
    parallel_for(rows, row_grain(V), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = xp + r * V;
        T* dr = dp + r * V;
        const T l = lp[r], g = gp[r];
        // An all -inf row has no weight to give: its gradient is 0, not exp(-inf + inf) = NaN.
        if (l == -std::numeric_limits<T>::infinity()) {
          std::fill(dr, dr + V, T(0));
          continue;
        }
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) dr[j] = g * exp_cpu(xr[j] - l);
      }
    });
  });
  return dx;
}

}  // namespace hyb
