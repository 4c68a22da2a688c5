// CPU reference of sum/mean (reduce.h). The input's dims are grouped into alternating runs of kept
// and reduced dims; each reduced run is then a (outer, R, inner) sum, done one run at a time from
// the innermost, in f64 buffers. Every output element is summed in a fixed order (fixed chunks of R
// when inner = 1), so the result does not depend on the number of threads.
#include <algorithm>

#include "autograd/ops/reduce.h"
#include "core/dispatch.h"
#include "core/parallel.h"

namespace hyb {
namespace {

constexpr int64_t kChunk = 1 << 14;  // summands per task along R when the reduced dim is innermost
constexpr int64_t kBlock = 256;      // inner elements per task otherwise

struct Run {
  int64_t size;
  bool reduced;
};

// dst[o, i] = sum_r src[o, r, i]
template <typename S>
void reduce_middle(const S* src, double* dst, int64_t outer, int64_t R, int64_t inner) {
  if (inner == 1) {
    const int64_t chunks = (R + kChunk - 1) / kChunk;
    std::vector<double> partial(size_t(outer * chunks));
    parallel_for(outer * chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t o = t / chunks, r0 = (t % chunks) * kChunk, r1 = std::min(R, r0 + kChunk);
        const S* s = src + o * R;
        double acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t r = r0; r < r1; ++r) acc += double(s[r]);
        partial[size_t(t)] = acc;
      }
    });
    for (int64_t o = 0; o < outer; ++o) {
      double acc = 0;
      for (int64_t c = 0; c < chunks; ++c) acc += partial[size_t(o * chunks + c)];
      dst[o] = acc;
    }
    return;
  }
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * blocks, std::max<int64_t>(1, kChunk / (R * kBlock)), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / blocks, i0 = (t % blocks) * kBlock, i1 = std::min(inner, i0 + kBlock);
      double* d = dst + o * inner;
      std::fill(d + i0, d + i1, 0.0);
      for (int64_t r = 0; r < R; ++r) {
        const S* s = src + (o * R + r) * inner;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) d[i] += double(s[i]);
      }
    }
  });
}

}  // namespace

Tensor sum_forward_cpu(const Tensor& x0, const std::vector<int64_t>& dims, double scale) {
  Tensor x = x0.contiguous();
  Shape out_shape = x.shape();
  for (int64_t d : dims) out_shape[size_t(d)] = 1;
  Tensor y = Tensor::empty(out_shape, x.dtype());
  if (x.numel() == 0) {
    y.zero_();
    return y;
  }
  std::vector<Run> runs;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t n = x.size(d);
    if (n == 1) continue;
    const bool red = std::binary_search(dims.begin(), dims.end(), d);
    if (!runs.empty() && runs.back().reduced == red) {
      runs.back().size *= n;
    } else {
      runs.push_back({n, red});
    }
  }
  visit_float("sum", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    std::vector<double> cur;
    bool first = true;
    for (;;) {
      auto it = std::find_if(runs.rbegin(), runs.rend(), [](const Run& r) { return r.reduced; });
      if (it == runs.rend()) break;
      const size_t j = size_t(runs.rend() - it) - 1;
      int64_t outer = 1, inner = 1;
      for (size_t k = 0; k < j; ++k) outer *= runs[k].size;
      for (size_t k = j + 1; k < runs.size(); ++k) inner *= runs[k].size;
      std::vector<double> next(size_t(outer * inner));
      if (first) {
        reduce_middle(xp, next.data(), outer, runs[j].size, inner);
      } else {
        reduce_middle(cur.data(), next.data(), outer, runs[j].size, inner);
      }
      cur.swap(next);
      first = false;
      // The kept runs on either side of the reduced one are now adjacent: merge them.
      runs.erase(runs.begin() + int64_t(j));
      if (j > 0 && j < runs.size()) {
        runs[j - 1].size *= runs[j].size;
        runs.erase(runs.begin() + int64_t(j));
      }
    }
    T* yp = y.data<T>();
    const int64_t n = y.numel();
    parallel_for(n, 1 << 15, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) yp[i] = T((first ? double(xp[i]) : cur[size_t(i)]) * scale);
    });
  });
  return y;
}

}  // namespace hyb
