// CUDA SwiGLU gate (swiglu_op.h has the math): elementwise, grid-stride, fp32 math.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/mlp/swiglu_op.h"

namespace hyb {
namespace {

template <typename T>
__global__ void swiglu_forward_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ z, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float av = to_f32(a[i]);
    z[i] = from_f32<T>(av / (1.f + __expf(-av)) * to_f32(b[i]));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ dz,
                                       T* __restrict__ da, T* __restrict__ db, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float av = to_f32(a[i]), g = to_f32(dz[i]);
    const float sg = 1.f / (1.f + __expf(-av));
    if (da) da[i] = from_f32<T>(g * to_f32(b[i]) * sg * (1.f + av * (1.f - sg)));
    if (db) db[i] = from_f32<T>(g * av * sg);
  }
}

constexpr int kThreads = 256;

}  // namespace

Tensor swiglu_forward_cuda(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0.contiguous(), b = b0.contiguous();
  Tensor z = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int dev = a.device().index;
  const int grid = grid_blocks(a.numel(), kThreads, dev);
  visit_cuda_float("swiglu_forward_cuda", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<grid, kThreads, 0, current_stream(dev)>>>(a.data<T>(), b.data<T>(), z.data<T>(), a.numel());
    HYB_CUDA_LAUNCH_CHECK("swiglu_forward_kernel", grid, kThreads, 0);
  });
  return z;
}

std::pair<Tensor, Tensor> swiglu_backward_cuda(const SwigluSaved& s, const Tensor& dz0, GradMask needed) {
  Tensor a = s.a.contiguous(), b = s.b.contiguous(), dz = dz0.contiguous();
  Tensor da = needed[0] ? Tensor::empty(a.shape(), a.dtype(), a.device()) : Tensor();
  Tensor db = needed[1] ? Tensor::empty(a.shape(), a.dtype(), a.device()) : Tensor();
  const int dev = a.device().index;
  const int grid = grid_blocks(a.numel(), kThreads, dev);
  visit_cuda_float("swiglu_backward_cuda", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<grid, kThreads, 0, current_stream(dev)>>>(
        a.data<T>(), b.data<T>(), dz.data<T>(), needed[0] ? da.data<T>() : nullptr, needed[1] ? db.data<T>() : nullptr,
        a.numel());
    HYB_CUDA_LAUNCH_CHECK("swiglu_backward_kernel", grid, kThreads, 0);
  });
  return {da, db};
}

}  // namespace hyb
