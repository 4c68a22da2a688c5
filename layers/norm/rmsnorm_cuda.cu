// CUDA RMSNorm (rmsnorm_op.h has the math). One warp per row: rows are d_model wide (<= a few
// thousand), so 32 lanes striding the row keep loads coalesced and the reduction is shuffles only.
// Statistics in fp32. The weight gradient is reduced deterministically: each block sums its rows
// into one fp32 partial row, then a second kernel adds the partials in block order.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/norm/rmsnorm_op.h"

namespace hyb {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

template <typename T>
__global__ void rmsnorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                       float* __restrict__ rstd, int64_t rows, int C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const T* xr = x + row * C;
  float ss = 0;
  for (int c = lane; c < C; c += kWarpSize) {
    const float v = to_f32(xr[c]);
    ss += v * v;
  }
  ss = warp_reduce_sum(ss);
  const float rs = rsqrtf(ss / float(C) + eps);
  if (lane == 0 && rstd) rstd[row] = rs;
  for (int c = lane; c < C; c += kWarpSize) y[row * C + c] = from_f32<T>(to_f32(w[c]) * (to_f32(xr[c]) * rs));
}

// dx per row; dw: each block walks row groups grid-stride and sums dy * xhat of its rows into one
// shared fp32 row (warps take turns, a fixed order), written out as the block's partial.
template <typename T>
__global__ void rmsnorm_backward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,
                                        const float* __restrict__ rstd, T* __restrict__ dx,
                                        float* __restrict__ dw_partial, int64_t rows, int C) {
  extern __shared__ float s_dw[];  // (C,) this block's dw partial
  for (int c = threadIdx.x; c < C; c += blockDim.x) s_dw[c] = 0;
  __syncthreads();
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t base = int64_t(blockIdx.x) * kRowsPerBlock; base < rows; base += int64_t(gridDim.x) * kRowsPerBlock) {
    const int64_t row = base + warp;
    const bool valid = row < rows;
    const T* xr = x + row * C;
    const T* gr = dy + row * C;
    const float rs = valid ? rstd[row] : 0.f;
    if (valid && dx) {
      float m = 0;
      for (int c = lane; c < C; c += kWarpSize) m += to_f32(gr[c]) * to_f32(w[c]) * to_f32(xr[c]) * rs;
      m = warp_reduce_sum(m) / float(C);
      for (int c = lane; c < C; c += kWarpSize)
        dx[row * C + c] = from_f32<T>(rs * (to_f32(gr[c]) * to_f32(w[c]) - to_f32(xr[c]) * rs * m));
    }
    if (dw_partial) {
      for (int k = 0; k < kRowsPerBlock; ++k) {
        if (k == warp && valid)
          for (int c = lane; c < C; c += kWarpSize) s_dw[c] += to_f32(gr[c]) * to_f32(xr[c]) * rs;
        __syncthreads();
      }
    }
  }
  if (dw_partial)
    for (int c = threadIdx.x; c < C; c += blockDim.x) dw_partial[int64_t(blockIdx.x) * C + c] = s_dw[c];
}

template <typename T>
__global__ void rmsnorm_dw_reduce_kernel(const float* __restrict__ partial, T* __restrict__ dw, int blocks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int b = 0; b < blocks; ++b) s += partial[int64_t(b) * C + c];
  dw[c] = from_f32<T>(s);
}

}  // namespace

Tensor rmsnorm_forward_cuda(const Tensor& x0, const Tensor& w0, double eps, Tensor* rstd_out) {
  Tensor x = x0.contiguous(), w = w0.contiguous();
  HYB_CHECK(w.dtype() == x.dtype(), "rmsnorm_forward_cuda: x is ", dtype_name(x.dtype()), " but weight is ",
            dtype_name(w.dtype()));
  const int C = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(C, 1);
  const int dev = x.device().index;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, DType::f32, x.device());
  const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  visit_cuda_float("rmsnorm_forward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_forward_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
        x.data<T>(), w.data<T>(), y.data<T>(), rstd.data<float>(), rows, C, float(eps));
    HYB_CUDA_LAUNCH_CHECK("rmsnorm_forward_kernel", blocks, kRowsPerBlock * kWarpSize, 0);
  });
  if (rstd_out) *rstd_out = rstd;
  return y;
}

RmsNormGrads rmsnorm_backward_cuda(const RmsNormSaved& s, const Tensor& dy0, GradMask needed) {
  Tensor x = s.x.contiguous(), dy = dy0.contiguous(), w = s.w.contiguous();
  const int C = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(C, 1);
  const int dev = x.device().index;
  const int blocks = grid_blocks((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1, dev);
  RmsNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor partial;
  if (needed[1]) partial = Tensor::empty({blocks, C}, DType::f32, x.device());
  const size_t smem = size_t(C) * sizeof(float);
  HYB_CHECK(smem <= 48 * 1024, "rmsnorm_backward_cuda: rows of ", C, " exceed the 12288-wide shared-memory row");
  visit_cuda_float("rmsnorm_backward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_backward_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, smem, current_stream(dev)>>>(
        x.data<T>(), w.data<T>(), dy.data<T>(), s.rstd.data<float>(), needed[0] ? g.dx.data<T>() : nullptr,
        needed[1] ? partial.data<float>() : nullptr, rows, C);
    HYB_CUDA_LAUNCH_CHECK("rmsnorm_backward_kernel", blocks, kRowsPerBlock * kWarpSize, smem);
    if (needed[1]) {
      g.dw = Tensor::empty({C}, w.dtype(), x.device());
      rmsnorm_dw_reduce_kernel<T><<<(C + 255) / 256, 256, 0, current_stream(dev)>>>(partial.data<float>(),
                                                                                    g.dw.data<T>(), blocks, C);
      HYB_CUDA_LAUNCH_CHECK("rmsnorm_dw_reduce_kernel", (C + 255) / 256, 256, 0);
    }
  });
  return g;
}

}  // namespace hyb
