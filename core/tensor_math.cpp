#include "core/tensor_math.h"

#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#if HYBRID_CUDA
#include "core/cuda/tensor_cuda.h"
#endif

namespace hyb {

static void check_math_args(const char* op, const Tensor& t) {
  HYB_CHECK(t.defined(), op, ": undefined tensor");
  HYB_CHECK(t.is_contiguous(), op, ": tensor ", t.str(), " must be contiguous");
}

void add_(const Tensor& dst, const Tensor& src, double alpha) {
  check_math_args("add_", dst);
  check_math_args("add_", src);
  check_same_shape("add_", dst, src, "destination", "source");
  check_same_device("add_", dst, src);
  dst.bump_version();
#if HYBRID_CUDA
  if (dst.is_cuda()) return cuda_add_(dst, src, alpha);
#endif
  visit_dtype(dst.dtype(), [&](auto dt) {
    using D = decltype(dt);
    visit_dtype(src.dtype(), [&](auto st) {
      using S = decltype(st);
      D* d = static_cast<D*>(dst.raw_data());
      const S* s = static_cast<const S*>(src.raw_data());
      parallel_for(dst.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) d[i] = convert<D>(convert<double>(d[i]) + alpha * convert<double>(s[i]));
      });
    });
  });
}

void scale_(const Tensor& t, double s) {
  check_math_args("scale_", t);
  t.bump_version();
#if HYBRID_CUDA
  if (t.is_cuda()) return cuda_scale_(t, s);
#endif
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    parallel_for(t.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) p[i] = convert<T>(convert<double>(p[i]) * s);
    });
  });
}

static double cpu_sum_squares(const Tensor& t) {
  // Fixed chunks summed in order: the result does not depend on the thread count, so a resumed run
  // clips exactly as the original did.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(chunks), 0.0);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.raw_data());
    parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double acc = 0;
        for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
          const double v = convert<double>(p[i]);
          acc += v * v;
        }
        partial[size_t(c)] = acc;
      }
    });
  });
  double total = 0;
  for (double x : partial) total += x;
  return total;
}

double sum_squares(const Tensor& t) { return sum_squares_each({t})[0]; }

std::vector<double> sum_squares_each(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) {
    check_math_args("sum_squares", t);
    HYB_CHECK(t.device() == ts[0].device(), "sum_squares: one list holds tensors on ", ts[0].device().str(), " and ",
              t.device().str());
  }
#if HYBRID_CUDA
  if (!ts.empty() && ts[0].is_cuda()) return cuda_sum_squares_each(ts);
#endif
  std::vector<double> sums;
  for (const Tensor& t : ts) sums.push_back(cpu_sum_squares(t));
  return sums;
}

bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  if (std::isfinite(sum_squares(t))) return true;
  // Finite values can still overflow the sum of squares; only then look element by element.
  for (double v : t.to_double_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace hyb
