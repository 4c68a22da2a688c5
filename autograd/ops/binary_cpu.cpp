// CPU reference of the broadcasting elementwise ops (binary.h has the equations). Both inputs are
// expanded to the output shape as stride-0 views and walked row by row (strided_loop_cpu.h); the
// inner loop has its own case for unit strides and for a broadcast scalar so those vectorise.
#include "autograd/ops/binary.h"
#include "autograd/ops/broadcast.h"
#include "autograd/ops/strided_loop_cpu.h"
#include "core/dispatch.h"

namespace hyb {
namespace {

template <typename T, typename F>
Tensor binary_map_cpu(const Tensor& a0, const Tensor& b0, F f) {
  const Shape shape = broadcast_shapes("binary_map", a0.shape(), b0.shape());
  Tensor y = Tensor::empty(shape, a0.dtype());
  Tensor a = expand_view(a0, shape), b = expand_view(b0, shape);
  for_each_row_cpu<T, 3>(shape, {y.strides(), a.strides(), b.strides()}, {y.data<T>(), a.data<T>(), b.data<T>()},
                         [&](const std::array<T*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                           T* yp = p[0];
                           const T* ap = p[1];
                           const T* bp = p[2];
                           const int64_t sa = s[1], sb = s[2];
                           if (sa == 1 && sb == 1) {
#pragma omp simd
                             for (int64_t i = 0; i < n; ++i) yp[i] = f(ap[i], bp[i]);
                           } else if (sa == 1 && sb == 0) {
                             const T bv = *bp;
#pragma omp simd
                             for (int64_t i = 0; i < n; ++i) yp[i] = f(ap[i], bv);
                           } else if (sa == 0 && sb == 1) {
                             const T av = *ap;
#pragma omp simd
                             for (int64_t i = 0; i < n; ++i) yp[i] = f(av, bp[i]);
                           } else {
                             for (int64_t i = 0; i < n; ++i) yp[i] = f(ap[i * sa], bp[i * sb]);
                           }
                         });
  return y;
}

// db = -dy a / b^2 at the output shape (div's second gradient reads three operands).
template <typename T>
Tensor div_grad_b_cpu(const Tensor& dy, const Tensor& a0, const Tensor& b0) {
  const Shape& shape = dy.shape();
  Tensor db = Tensor::empty(shape, dy.dtype());
  Tensor a = expand_view(a0, shape), b = expand_view(b0, shape);
  for_each_row_cpu<T, 4>(shape, {db.strides(), dy.strides(), a.strides(), b.strides()},
                         {db.data<T>(), dy.data<T>(), a.data<T>(), b.data<T>()},
                         [&](const std::array<T*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) {
                             const T bv = p[3][i * s[3]];
                             p[0][i] = -p[1][i * s[1]] * p[2][i * s[2]] / (bv * bv);
                           }
                         });
  return db;
}

}  // namespace

Tensor binary_forward_cpu(BinaryOp op, const Tensor& a, const Tensor& b) {
  return visit_float(binary_name(op), a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::add: return binary_map_cpu<T>(a, b, [](T x, T y) { return x + y; });
      case BinaryOp::sub: return binary_map_cpu<T>(a, b, [](T x, T y) { return x - y; });
      case BinaryOp::mul: return binary_map_cpu<T>(a, b, [](T x, T y) { return x * y; });
      case BinaryOp::div: return binary_map_cpu<T>(a, b, [](T x, T y) { return x / y; });
    }
    HYB_ASSERT(false, "bad BinaryOp");
  });
}

std::pair<Tensor, Tensor> binary_backward_cpu(const BinarySaved& s, const Tensor& dy, GradMask needed) {
  HYB_ASSERT(s.op == BinaryOp::mul || s.op == BinaryOp::div, "binary_backward_cpu is for mul and div");
  return visit_float(binary_name(s.op), dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto times = [](T x, T y) { return x * y; };
    Tensor da, db;
    if (s.op == BinaryOp::mul) {
      if (needed[0]) da = binary_map_cpu<T>(dy, s.b, times);
      if (needed[1]) db = binary_map_cpu<T>(dy, s.a, times);
    } else {
      if (needed[0]) da = binary_map_cpu<T>(dy, s.b, [](T x, T y) { return x / y; });
      if (needed[1]) db = div_grad_b_cpu<T>(dy, s.a, s.b);
    }
    return std::pair<Tensor, Tensor>{da, db};
  });
}

}  // namespace hyb
