// CUDA L2 normalization per vector (l2norm_op.h): one warp per row, fp32 statistics.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/norm/l2norm_op.h"

namespace hyb {
namespace {

constexpr int kRowsPerBlock = 8;

template <typename T>
__global__ void l2norm_forward_kernel(const T* __restrict__ x, T* __restrict__ y, float* __restrict__ norm, int64_t rows,
                                      int C, float eps, bool in_sqrt) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  float ss = 0;
  for (int c = lane; c < C; c += kWarpSize) {
    const float v = to_f32(x[row * C + c]);
    ss += v * v;
  }
  ss = warp_reduce_sum(ss);
  const float n = in_sqrt ? sqrtf(ss + eps) : fmaxf(sqrtf(ss), eps);
  if (lane == 0) norm[row] = n;
  for (int c = lane; c < C; c += kWarpSize) y[row * C + c] = from_f32<T>(to_f32(x[row * C + c]) / n);
}

// dx = (dy - y <y, dy>) / n, or dy / eps on a clamped row.
template <typename T>
__global__ void l2norm_backward_kernel(const T* __restrict__ y, const T* __restrict__ dy, const float* __restrict__ norm,
                                       T* __restrict__ dx, int64_t rows, int C, float eps, bool in_sqrt) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const float n = norm[row];
  const bool clamped = !in_sqrt && n <= eps;
  float dot = 0;
  for (int c = lane; c < C; c += kWarpSize) dot += to_f32(y[row * C + c]) * to_f32(dy[row * C + c]);
  dot = warp_reduce_sum(dot);
  for (int c = lane; c < C; c += kWarpSize) {
    const float g = to_f32(dy[row * C + c]);
    dx[row * C + c] = from_f32<T>(clamped ? g / eps : (g - to_f32(y[row * C + c]) * dot) / n);
  }
}

}  // namespace

Tensor l2norm_forward_cuda(const Tensor& x0, double eps, L2NormEps mode, Tensor* norm_out) {
  Tensor x = x0.contiguous();
  const int C = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(C, 1);
  const int dev = x.device().index;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor norm = Tensor::empty({rows}, DType::f32, x.device());
  const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  visit_cuda_float("l2norm_forward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    l2norm_forward_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
        x.data<T>(), y.data<T>(), norm.data<float>(), rows, C, float(eps), mode == L2NormEps::in_sqrt);
    HYB_CUDA_LAUNCH_CHECK("l2norm_forward_kernel", blocks, kRowsPerBlock * kWarpSize, 0);
  });
  if (norm_out) *norm_out = norm;
  return y;
}

Tensor l2norm_backward_cuda(const L2NormSaved& s, const Tensor& dy0) {
  Tensor y = s.y.contiguous(), dy = dy0.contiguous();
  const int C = int(y.size(-1));
  const int64_t rows = y.numel() / std::max(C, 1);
  const int dev = y.device().index;
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  Tensor norm = s.norm.to(DType::f32);
  const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  visit_cuda_float("l2norm_backward_cuda", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    l2norm_backward_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
        y.data<T>(), dy.data<T>(), norm.data<float>(), dx.data<T>(), rows, C, float(s.eps), s.mode == L2NormEps::in_sqrt);
    HYB_CUDA_LAUNCH_CHECK("l2norm_backward_kernel", blocks, kRowsPerBlock * kWarpSize, 0);
  });
  return dx;
}

}  // namespace hyb
