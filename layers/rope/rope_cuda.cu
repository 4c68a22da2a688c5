// CUDA RoPE (rope_op.h): one thread per rotated pair (i, i + R/2) of one head vector, reading the
// f32 cos/sin table; pass-through dims are copied. x (B, T, H, D) with any strides on B, T, H.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/rope/rope_op.h"

namespace hyb {
namespace {

struct RopeDims {
  int64_t B, T, H, D, R;
  int64_t sb, st, sh;  // input strides of B, T, H (elements)
  int64_t offset;
  float direction;     // +1 forward, -1 backward
};

template <typename T>
__global__ void rope_kernel(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ cos_t,
                            const float* __restrict__ sin_t, RopeDims d) {
  const int64_t half = d.R / 2, per_vec = half + (d.D - d.R);
  const int64_t total = d.B * d.T * d.H * per_vec;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % per_vec, vec = i / per_vec;
    const int64_t h = vec % d.H, t = (vec / d.H) % d.T, b = vec / (d.H * d.T);
    const T* xv = x + b * d.sb + t * d.st + h * d.sh;
    T* yv = y + vec * d.D;
    if (j < half) {
      const int64_t p = d.offset + t;
      const float c = cos_t[p * half + j], s = d.direction * sin_t[p * half + j];
      const float x1 = to_f32(xv[j]), x2 = to_f32(xv[j + half]);
      yv[j] = from_f32<T>(x1 * c - x2 * s);
      yv[j + half] = from_f32<T>(x1 * s + x2 * c);
    } else {
      const int64_t dd = d.R + (j - half);
      yv[dd] = xv[dd];
    }
  }
}

}  // namespace

Tensor rope_rotate_cuda(const Tensor& x, const RopeTable& table, int64_t offset, int direction) {
  HYB_CHECK(x.dim() == 4 && x.stride(3) == 1, "rope (cuda): x must be (B, T, H, D) with a contiguous last dimension, got ",
            x.str());
  const int64_t T = x.size(1);
  HYB_CHECK(table.cos.is_cuda() && table.cos.device() == x.device(), "rope (cuda): the table is on ",
            table.cos.device().str(), " but x is on ", x.device().str());
  HYB_CHECK(offset + T <= table.cos.size(0), "rope (cuda): positions up to ", offset + T - 1,
            " exceed the table of ", table.cos.size(0), " positions");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  RopeDims d{x.size(0), T, x.size(2), x.size(3), table.rope_dim, x.stride(0), x.stride(1), x.stride(2), offset, float(direction)};
  const int dev = x.device().index;
  const int64_t n = d.B * d.T * d.H * (d.R / 2 + d.D - d.R);
  const int grid = grid_blocks(n, 256, dev);
  visit_cuda_float("rope_rotate_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<grid, 256, 0, current_stream(dev)>>>(static_cast<const T*>(x.raw_data()), y.data<T>(),
                                                          table.cos.data<float>(), table.sin.data<float>(), d);
    HYB_CUDA_LAUNCH_CHECK("rope_kernel", grid, 256, 0);
  });
  return y;
}

}  // namespace hyb
