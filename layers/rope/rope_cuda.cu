// CUDA RoPE (rope_op.h). x (B, T, H, D) with any strides on B, T, H. A block row (threadIdx.y) takes
// one token (b, t). The token's items are (j, hs): j is a pack position within a head vector (R/2V
// rotated pairs i..i+V-1 with i+R/2.., then (D-R)/V pass-through packs) and hs a head slice, the heads
// hs, hs + S, ... (kHeads of them, S = ceil(H / kHeads)). A thread loads the V cos/sin values of its
// pair once and applies them to all its heads, whose packs it loads before any math: kHeads x 2
// packs in flight a thread, the table read once per (token, pair) instead of once per head. b comes
// from blockIdx.y and t from the grid stride; the only division is a 32-bit one per item. V is a
// 16-byte pack when R/2, D-R, the strides and pointers allow, else 1.
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

// Heads a thread rotates with one load of its cos/sin values. Two keep a bf16 thread within 64
// registers (four blocks of 256 an SM, 64 KiB of loads in flight an SM); four would need 128.
constexpr int kHeads = 2;

template <typename T, int V>
__global__ void __launch_bounds__(256, 4) rope_kernel(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ cos_t,
                            const float* __restrict__ sin_t, RopeDims d) {
  using P = Pack<T, V>;
  const int half = int(d.R / 2);
  const int rot_items = half / V, per_vec = rot_items + int(d.D - d.R) / V;
  const int H = int(d.H), slices = (H + kHeads - 1) / kHeads;
  const int items = slices * per_vec;
  for (int64_t b = blockIdx.y; b < d.B; b += gridDim.y) {
    for (int64_t t = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; t < d.T; t += int64_t(gridDim.x) * blockDim.y) {
      const T* xt = x + b * d.sb + t * d.st;
      T* yt = y + (b * d.T + t) * d.H * d.D;
      for (int k = threadIdx.x; k < items; k += blockDim.x) {
        const int hs = k / per_vec, j = k - hs * per_vec;
        const bool rotated = j < rot_items;
        const int i = rotated ? j * V : int(d.R) + (j - rot_items) * V;
        // Head u of the thread: hs + u * slices; its input and output packs a fixed step apart.
        const T* xh = xt + hs * d.sh + i;
        T* yh = yt + int64_t(hs) * d.D + i;
        const int64_t xstep = slices * d.sh, ystep = int64_t(slices) * d.D;
        const int heads = min(kHeads, (H - hs + slices - 1) / slices);
        P x1[kHeads], x2[kHeads];
#pragma unroll
        for (int u = 0; u < kHeads; ++u)
          if (u < heads) {
            x1[u] = load_pack<P>(xh + u * xstep);
            if (rotated) x2[u] = load_pack<P>(xh + u * xstep + half);
          }
        if (!rotated) {
#pragma unroll
          for (int u = 0; u < kHeads; ++u)
            if (u < heads) store_pack(yh + u * ystep, x1[u]);
          continue;
        }
        float c[V], s[V];
        load_f32(cos_t + (d.offset + t) * half + i, c);
        load_f32(sin_t + (d.offset + t) * half + i, s);
#pragma unroll
        for (int e = 0; e < V; ++e) s[e] *= d.direction;
#pragma unroll
        for (int u = 0; u < kHeads; ++u) {
          if (u >= heads) continue;
          float a[V], bb[V], y1[V], y2[V];
          unpack_f32(x1[u], a);
          unpack_f32(x2[u], bb);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            y1[e] = a[e] * c[e] - bb[e] * s[e];
            y2[e] = a[e] * s[e] + bb[e] * c[e];
          }
          store_f32(yh + u * ystep, y1);
          store_f32(yh + u * ystep + half, y2);
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
    const int64_t items = (d.H + kHeads - 1) / kHeads * ((d.R / 2 + d.D - d.R) / V);
    const int tx = int(std::min<int64_t>(256, items));
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
