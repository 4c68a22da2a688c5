// CUDA dropout (dropout.h): y_i = x_i * (keep_i ? 1 / (1 - p) : 0) in fp32, over x's row-major order.
// A thread takes one Philox block at a time, the four elements whose stream words it holds, and gets
// their keep bits from dropout_keep_block, the function the CPU loop calls: one Philox evaluation per
// four elements, and the same mask on both devices. When the offset is a multiple of 4 and x is
// contiguous and aligned, the four elements move as one pack (16 bytes of f32, 8 of bf16); otherwise
// they are read one by one through the shared strided offsets (elementwise_cuda.cuh), so a
// non-contiguous x is read in place. The backward is this same map applied to dy.
#include "autograd/ops/dropout_cuda.h"
#include "autograd/ops/elementwise_cuda.cuh"

namespace hyb {
namespace {

constexpr int kThreads = 256;

// Grid-stride over the Philox blocks covering stream words offset .. offset + n - 1; word j of block
// b belongs to element 4 b + j - (offset % 4). kPacked: offset % 4 == 0, x contiguous, x and y aligned
// to 4 elements, so every full block is one pack.
template <typename T, bool kPacked, typename Index>
__global__ void dropout_forward_kernel(const T* __restrict__ x, T* __restrict__ y, StridedOffsets<1, Index> lx,
                                       int64_t n, DropoutParams d) {
  using P = Pack<T, 4>;
  const uint64_t first = d.offset >> 2;
  const int64_t lead = int64_t(d.offset & 3);
  const int64_t blocks = (lead + n + 3) / 4;
  const float scale = float(d.scale);
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const unsigned keep = dropout_keep_block(d, first + uint64_t(b));
    const int64_t i0 = 4 * b - lead;
    if (kPacked && i0 + 4 <= n) {
      P v = load_pack<P>(x + i0);
#pragma unroll
      for (int j = 0; j < 4; ++j) v.v[j] = from_f32<T>(to_f32(v.v[j]) * ((keep >> j) & 1u ? scale : 0.f));
      store_pack(y + i0, v);
      continue;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = i0 + j;
      if (i < 0 || i >= n) continue;
      int64_t off[1];
      lx.at(Index(i), off);
      y[i] = from_f32<T>(to_f32(x[off[0]]) * ((keep >> j) & 1u ? scale : 0.f));
    }
  }
}

template <typename T, typename Index>
void launch_dropout(const Tensor& x, const Tensor& y, const DropoutParams& d) {
  const int dev = x.device().index;
  const int64_t n = x.numel();
  const auto lx = merge_dims<1, Index>("dropout", x.shape(), {x.strides()});
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  const bool packed = x.is_contiguous() && d.offset % 4 == 0 && is_aligned(xp, sizeof(T) * 4) &&
                      is_aligned(yp, sizeof(T) * 4);
  const int grid = grid_blocks((int64_t(d.offset & 3) + n + 3) / 4, kThreads, dev);
  if (packed) {
    dropout_forward_kernel<T, true, Index><<<grid, kThreads, 0, current_stream(dev)>>>(xp, yp, lx, n, d);
  } else {
    dropout_forward_kernel<T, false, Index><<<grid, kThreads, 0, current_stream(dev)>>>(xp, yp, lx, n, d);
  }
  HYB_CUDA_LAUNCH_CHECK("dropout_forward_kernel", grid, kThreads, 0);
}

}  // namespace

Tensor dropout_forward_cuda(const Tensor& x, const DropoutParams& d) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  CudaDeviceGuard guard(x.device().index);
  visit_cuda_float("dropout", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() < (int64_t(1) << 31)) {
      launch_dropout<T, uint32_t>(x, y, d);
    } else {
      launch_dropout<T, uint64_t>(x, y, d);
    }
  });
  return y;
}

}  // namespace hyb
