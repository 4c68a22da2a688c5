// CUDA RoPE (rope_op.h). x (B, T, H, D) with any strides on B, T, H. A block row (threadIdx.y) takes
// one token (b, t); its threads take the H * (R/2V + (D-R)/V) items of that token: V rotated pairs
// (i..i+V-1 with i+R/2..) read as packs with V cos/sin values of the f32 table, or a pack of
// pass-through dims copied bit for bit. V is a 16-byte pack when R/2, D-R, the strides and pointers
// allow, else 1. b comes from blockIdx.y and t from the grid stride, so the only division is a
// 32-bit one per pack (item -> head).
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/vector_io.cuh"
#include "layers/rope/rope_op.h"

namespace hyb {
namespace {

struct RopeDims {
  int64_t B, T, H, D, R;
  int64_t sb, st, sh;  // input strides of B, T, H (elements)
  int64_t offset;
  float direction;     // +1 forward, -1 backward
};

template <typename T, int V>
__global__ void rope_kernel(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ cos_t,
                            const float* __restrict__ sin_t, RopeDims d) {
  const int half = int(d.R / 2);
  const int rot_items = half / V, per_vec = rot_items + int(d.D - d.R) / V;
  const int items = int(d.H) * per_vec;
  for (int64_t b = blockIdx.y; b < d.B; b += gridDim.y) {
    for (int64_t t = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; t < d.T; t += int64_t(gridDim.x) * blockDim.y) {
      const T* xt = x + b * d.sb + t * d.st;
      T* yt = y + (b * d.T + t) * d.H * d.D;
      const float* ct = cos_t + (d.offset + t) * half;
      const float* st = sin_t + (d.offset + t) * half;
      for (int k = threadIdx.x; k < items; k += blockDim.x) {
        const int h = k / per_vec, j = k - h * per_vec;
        const T* xv = xt + h * d.sh;
        T* yv = yt + int64_t(h) * d.D;
        if (j < rot_items) {
          const int i = j * V;
          float x1[V], x2[V], c[V], s[V], y1[V], y2[V];
          load_f32(xv + i, x1);
          load_f32(xv + i + half, x2);
          load_f32(ct + i, c);
          load_f32(st + i, s);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const float sn = d.direction * s[e];
            y1[e] = x1[e] * c[e] - x2[e] * sn;
            y2[e] = x1[e] * sn + x2[e] * c[e];
          }
          store_f32(yv + i, y1);
          store_f32(yv + i + half, y2);
        } else {
          const int i = int(d.R) + (j - rot_items) * V;
          store_pack(yv + i, load_pack<Pack<T, V>>(xv + i));
        }
      }
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
  if (n == 0) return y;
  visit_cuda_float("rope_rotate_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.raw_data());
    constexpr int P = kPack16<T>;
    const bool packed = (d.R / 2) % P == 0 && (d.D - d.R) % P == 0 && d.sb % P == 0 && d.st % P == 0 &&
                        d.sh % P == 0 && pack_width<T>(d.D, {xp, y.data<T>()}) == P &&
                        pack_width<float>(d.R / 2, {table.cos.data<float>(), table.sin.data<float>()}) > 1;
    const int V = packed ? P : 1;
    const int64_t items = d.H * (d.R / 2 + d.D - d.R) / V;
    const int tx = int(std::min<int64_t>(256, (items + 31) / 32 * 32));
    const int ty = std::max(1, 256 / tx);
    auto launch = [&](auto kernel) {
      const int total = grid_blocks_for(kernel, n / V, tx * ty, 0, dev);
      const int gy = int(std::min<int64_t>(d.B, 65535));
      const int gx = int(std::clamp<int64_t>((total + gy - 1) / gy, 1, (d.T + ty - 1) / ty));
      const dim3 grid(gx, gy), block(tx, ty);
      kernel<<<grid, block, 0, current_stream(dev)>>>(xp, y.data<T>(), table.cos.data<float>(), table.sin.data<float>(), d);
      HYB_CUDA_LAUNCH_CHECK("rope_kernel", grid, block, 0);
    };
    if (packed)
      launch(rope_kernel<T, P>);
    else
      launch(rope_kernel<T, 1>);
  });
  return y;
}

}  // namespace hyb
