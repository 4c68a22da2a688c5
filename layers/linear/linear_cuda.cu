// CUDA bias helpers of the linear op: y += b over rows, and db = column sums of dy in a fixed order
// (one thread per column walks the rows: deterministic, and dy is read once, coalesced across columns).
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/linear/linear_cuda.h"

namespace hyb {
namespace {

template <typename T>
__global__ void add_bias_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t n, int64_t cols) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(b[i % cols]));
}

template <typename T>
__global__ void bias_grad_kernel(const T* __restrict__ dy, T* __restrict__ db, int64_t rows, int64_t cols) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0;
  for (int64_t r = 0; r < rows; ++r) s += to_f32(dy[r * cols + c]);
  db[c] = from_f32<T>(s);
}

}  // namespace

void add_bias_cuda(const Tensor& y, const Tensor& b0) {
  Tensor b = b0.contiguous();
  const int dev = y.device().index;
  const int grid = grid_blocks(y.numel(), 256, dev);
  visit_cuda_float("add_bias_cuda", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid, 256, 0, current_stream(dev)>>>(y.data<T>(), b.data<T>(), y.numel(), b.numel());
    HYB_CUDA_LAUNCH_CHECK("add_bias_kernel", grid, 256, 0);
  });
}

Tensor bias_grad_cuda(const Tensor& dy) {
  const int64_t cols = dy.size(-1), rows = dy.numel() / cols;
  Tensor db = Tensor::empty({cols}, dy.dtype(), dy.device());
  const int dev = dy.device().index;
  const int grid = int((cols + 127) / 128);
  visit_cuda_float("bias_grad_cuda", dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    bias_grad_kernel<T><<<grid, 128, 0, current_stream(dev)>>>(dy.data<T>(), db.data<T>(), rows, cols);
    HYB_CUDA_LAUNCH_CHECK("bias_grad_kernel", grid, 128, 0);
  });
  return db;
}

}  // namespace hyb
