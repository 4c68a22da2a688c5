// parallel_for over [0, n) in chunks of at least `grain` items, on OpenMP threads.
// Small ranges run inline: a thread team costs microseconds, more than a few thousand flops.
#pragma once
#include <cstdint>
#include <algorithm>

#include <omp.h>

namespace hyb {

int num_threads();

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int64_t chunks = std::min<int64_t>(num_threads(), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
    if (lo < hi) f(lo, hi);
  }
}

}  // namespace hyb
