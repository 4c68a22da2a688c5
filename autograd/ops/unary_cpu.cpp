// CPU reference of the pointwise ops (unary.h has the equations). One flat loop per op over
// contiguous data with the formula inlined, so each loop vectorises; f32 uses exp_cpu (vectorisable),
// f64 std::exp. gelu_tanh is computed as x sigmoid(2u), the same value as x/2 (1 + tanh u) without
// the cancellation of 1 + tanh u for very negative x; gelu's Phi is erfc(-x/sqrt 2) / 2 for the same
// reason (1 + erf cancels there).
#include <cmath>

#include "autograd/ops/unary.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/exp_cpu.h"

namespace hyb {
namespace {

constexpr int64_t kGrain = 1 << 15;
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
constexpr double kSqrtHalf = 0.7071067811865476;    // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)
constexpr double kSoftplusThreshold = 20.0;

template <typename T>
T sigmoid_of(T x) {
  return T(1) / (T(1) + exp_cpu(-x));
}

template <typename T, typename F>
Tensor map_cpu(const Tensor& x0, F f) {
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  parallel_for(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) yp[i] = f(xp[i]);
  });
  return y;
}

// f(t, dy) elementwise, t and dy of one shape.
template <typename T, typename F>
Tensor map2_cpu(const Tensor& t0, const Tensor& dy0, F f) {
  Tensor t = t0.contiguous(), dy = dy0.contiguous();
  Tensor dx = Tensor::empty(t.shape(), t.dtype());
  const T* tp = t.data<T>();
  const T* gp = dy.data<T>();
  T* dp = dx.data<T>();
  parallel_for(t.numel(), kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) dp[i] = f(tp[i], gp[i]);
  });
  return dx;
}

}  // namespace

Tensor unary_forward_cpu(UnaryOp op, const Tensor& x) {
  return visit_float(unary_name(op), x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T c = T(kGeluC), a = T(kGeluA), threshold = T(kSoftplusThreshold), h = T(kSqrtHalf);
    switch (op) {
      case UnaryOp::silu: return map_cpu<T>(x, [](T v) { return v / (T(1) + exp_cpu(-v)); });
      case UnaryOp::gelu: return map_cpu<T>(x, [=](T v) { return v * (T(0.5) * std::erfc(-v * h)); });
      case UnaryOp::gelu_tanh:
        return map_cpu<T>(x, [=](T v) { return v * sigmoid_of(T(2) * c * (v + a * v * v * v)); });
      case UnaryOp::sigmoid: return map_cpu<T>(x, [](T v) { return sigmoid_of(v); });
      case UnaryOp::softplus:
        return map_cpu<T>(x, [=](T v) { return v > threshold ? v : std::log1p(exp_cpu(v)); });
      case UnaryOp::logsigmoid:
        return map_cpu<T>(x, [](T v) { return std::min(v, T(0)) - std::log1p(exp_cpu(-std::abs(v))); });
      case UnaryOp::exp: return map_cpu<T>(x, [](T v) { return exp_cpu(v); });
      case UnaryOp::log: return map_cpu<T>(x, [](T v) { return std::log(v); });
      case UnaryOp::relu: return map_cpu<T>(x, [](T v) { return v > T(0) ? v : T(0); });
    }
    HYB_ASSERT(false, "bad UnaryOp");
  });
}

Tensor unary_backward_cpu(const UnarySaved& s, const Tensor& dy) {
  return visit_float(unary_name(s.op), dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T c = T(kGeluC), a = T(kGeluA), threshold = T(kSoftplusThreshold);
    const T h = T(kSqrtHalf), inv_sqrt_2pi = T(kInvSqrt2Pi);
    switch (s.op) {
      case UnaryOp::silu:
        return map2_cpu<T>(s.t, dy, [](T x, T g) {
          const T sg = sigmoid_of(x);
          return g * sg * (T(1) + x * (T(1) - sg));
        });
      case UnaryOp::gelu:
        return map2_cpu<T>(s.t, dy, [=](T x, T g) {
          return g * (T(0.5) * std::erfc(-x * h) + x * inv_sqrt_2pi * exp_cpu(T(-0.5) * x * x));
        });
      case UnaryOp::gelu_tanh:
        // d/dx [x q], q = sigmoid(2u):  q + x q (1 - q) 2 du/dx,  du/dx = c (1 + 3 a x^2).
        return map2_cpu<T>(s.t, dy, [=](T x, T g) {
          const T q = sigmoid_of(T(2) * c * (x + a * x * x * x));
          return g * (q + x * q * (T(1) - q) * T(2) * c * (T(1) + T(3) * a * x * x));
        });
      case UnaryOp::sigmoid: return map2_cpu<T>(s.t, dy, [](T y, T g) { return g * y * (T(1) - y); });
      case UnaryOp::softplus:
        return map2_cpu<T>(s.t, dy, [=](T x, T g) { return x > threshold ? g : g * sigmoid_of(x); });
      case UnaryOp::logsigmoid:
        // sigmoid(-x) from e = exp(-|x|), which never overflows.
        return map2_cpu<T>(s.t, dy, [](T x, T g) {
          const T e = exp_cpu(-std::abs(x));
          return g * (x >= T(0) ? e : T(1)) / (T(1) + e);
        });
      case UnaryOp::exp: return map2_cpu<T>(s.t, dy, [](T y, T g) { return g * y; });
      case UnaryOp::log: return map2_cpu<T>(s.t, dy, [](T x, T g) { return g / x; });
      case UnaryOp::relu: return map2_cpu<T>(s.t, dy, [](T x, T g) { return x > T(0) ? g : T(0); });
    }
    HYB_ASSERT(false, "bad UnaryOp");
  });
}

Tensor affine_forward_cpu(const Tensor& x, double alpha, double beta) {
  return visit_float("affine", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T al = T(alpha), be = T(beta);
    return map_cpu<T>(x, [=](T v) { return al * v + be; });
  });
}

}  // namespace hyb
