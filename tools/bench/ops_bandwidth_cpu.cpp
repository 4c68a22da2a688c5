// How close the CPU pointwise ops come to memory bandwidth: silu forward on 16M f32 elements against
// a plain copy of the same size, both through the op API (fresh output, as in training) and into a
// buffer written once before (no page faults), so the kernel and the allocator can be told apart.
// Build and run:  cmake --build build --target ops_bandwidth_cpu && OMP_NUM_THREADS=2 build/ops_bandwidth_cpu
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops/unary.h"
#include "core/parallel.h"
#include "kernels/exp_cpu.h"

using namespace hyb;

namespace {

// Best of `reps` timed runs after 2 warm-ups, in seconds.
double best_time(int reps, const std::function<void()>& f) {
  for (int i = 0; i < 2; ++i) f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void report(const char* what, double seconds, double bytes, double anchor) {
  std::printf("%-44s %8.2f ms  %6.1f GB/s  %5.0f%% of the copy\n", what, seconds * 1e3, bytes / seconds / 1e9,
              100.0 * anchor / seconds);
}

}  // namespace

int main() {
  const int64_t n = int64_t(1) << 24;
  const double bytes = 2.0 * double(n) * sizeof(float);  // one read and one write per element
  Tensor x = random_tensor({n}, 1, DType::f32, 3.0);
  Tensor out = Tensor::empty({n}, DType::f32);
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  std::fill(op, op + n, 0.0f);
  std::printf("16M f32 elements, %d threads\n", num_threads());

  const double copy_pre = best_time(20, [&] {
    parallel_for(n, 1 << 15, [&](int64_t lo, int64_t hi) { std::copy(xp + lo, xp + hi, op + lo); });
  });
  const double silu_pre = best_time(20, [&] {
    parallel_for(n, 1 << 15, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) op[i] = xp[i] / (1.0f + exp_cpu(-xp[i]));
    });
  });
  const double silu_libm = best_time(20, [&] {
    parallel_for(n, 1 << 15, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) op[i] = xp[i] / (1.0f + std::exp(-xp[i]));
    });
  });
  const double copy_new = best_time(20, [&] { x.clone(); });
  const double silu_new = best_time(20, [&] { unary_forward(UnaryOp::silu, x); });
  const double sigmoid_new = best_time(20, [&] { unary_forward(UnaryOp::sigmoid, x); });
  const double gelu_new = best_time(20, [&] { unary_forward(UnaryOp::gelu_tanh, x); });
  const double gelu_erf_new = best_time(20, [&] { unary_forward(UnaryOp::gelu, x); });

  report("copy into an existing buffer", copy_pre, bytes, copy_pre);
  report("silu loop into an existing buffer", silu_pre, bytes, copy_pre);
  report("same loop with glibc expf (scalar)", silu_libm, bytes, copy_pre);
  report("clone (fresh output)", copy_new, bytes, copy_new);
  report("unary_forward silu (fresh output)", silu_new, bytes, copy_new);
  report("unary_forward sigmoid (fresh output)", sigmoid_new, bytes, copy_new);
  report("unary_forward gelu_tanh (fresh output)", gelu_new, bytes, copy_new);
  report("unary_forward gelu, erfc (fresh output)", gelu_erf_new, bytes, copy_new);
  return 0;
}
