// CUDA gated RMSNorm in both orders (gated_rmsnorm_op.h has the equations; mamba2.md 3.6 and
// gated_deltanet.md 3.7 the backward). One warp per row of Gs channels, as rmsnorm_cuda.cu: rows
// are a head (GDN, V <= 512) or d_ssm / G channels (Mamba2, a few thousand), so 32 lanes striding
// the row keep loads coalesced and the reductions are shuffles. Statistics in fp32; rstd is saved
// in fp32. The gain gradient is summed per block into one fp32 shared row (warps take turns, a fixed
// order) and the block partials are added in block order by a second kernel: no atomics.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/norm/gated_rmsnorm_op.h"

namespace hyb {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

__device__ __forceinline__ float sigmoidf_(float z) { return 1.f / (1.f + __expf(-z)); }

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

// x, z, y (rows, Gs); w (wrows, Gs), row r uses w row r % wrows; rstd (rows,) fp32.
template <typename T>
__global__ void gated_rmsnorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ z, const T* __restrict__ w,
                                             T* __restrict__ y, float* __restrict__ rstd, int64_t rows, int Gs,
                                             int64_t wrows, float eps, bool gate_first) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const T *xr = x + row * Gs, *zr = z + row * Gs, *wr = w + (row % wrows) * Gs;
  float ss = 0.f;
  for (int c = lane; c < Gs; c += kWarpSize) {
    const float zv = to_f32(zr[c]);
    const float a = gate_first ? to_f32(xr[c]) * zv * sigmoidf_(zv) : to_f32(xr[c]);
    ss += a * a;
  }
  ss = warp_reduce_sum(ss);
  const float rs = rsqrtf(ss / float(Gs) + eps);
  if (lane == 0) rstd[row] = rs;
  for (int c = lane; c < Gs; c += kWarpSize) {
    const float zv = to_f32(zr[c]), silu_z = zv * sigmoidf_(zv);
    const float out = gate_first ? to_f32(xr[c]) * silu_z * rs * to_f32(wr[c]) : to_f32(xr[c]) * rs * to_f32(wr[c]) * silu_z;
    y[row * Gs + c] = from_f32<T>(out);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// Per row, with nh the normalised row (a r or x r) and dnh = dL/dnh, m = mean(dnh nh):
//   dn = r (dnh - nh m) is dL/da (gate first) or dL/dx (norm first);
//   gate first: dx = dn silu(z), dz = dn x silu'(z), dw += dy nh
//   norm first: dx = dn, dz = dy nh w silu'(z), dw += dy silu(z) nh
// Each block walks row groups grid-stride; dw_partial (gridDim.x, wn) fp32, wn = wrows * Gs.
template <typename T>
__global__ void gated_rmsnorm_backward_kernel(const T* __restrict__ x, const T* __restrict__ z,
                                              const T* __restrict__ w, const T* __restrict__ dy,
                                              const float* __restrict__ rstd, T* __restrict__ dx, T* __restrict__ dz,
                                              float* __restrict__ dw_partial, int64_t rows, int Gs, int64_t wrows,
                                              bool gate_first) {
  extern __shared__ float s_dw[];  // (wrows * Gs,) this block's dw partial
  const int64_t wn = wrows * Gs;
  if (dw_partial) {
    for (int64_t c = threadIdx.x; c < wn; c += blockDim.x) s_dw[c] = 0.f;
    __syncthreads();
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t base = int64_t(blockIdx.x) * kRowsPerBlock; base < rows; base += int64_t(gridDim.x) * kRowsPerBlock) {
    const int64_t row = base + warp;
    const bool valid = row < rows;
    const int64_t woff = valid ? (row % wrows) * Gs : 0;
    if (valid && (dx || dz)) {
      const T *xr = x + row * Gs, *zr = z + row * Gs, *gr = dy + row * Gs, *wr = w + woff;
      const float rs = rstd[row];
      float m = 0.f;
      for (int c = lane; c < Gs; c += kWarpSize) {
        const float xv = to_f32(xr[c]), zv = to_f32(zr[c]), sg = sigmoidf_(zv), go = to_f32(gr[c]), wv = to_f32(wr[c]);
        const float nh = (gate_first ? xv * zv * sg : xv) * rs;
        const float dnh = gate_first ? go * wv : go * wv * zv * sg;
        m += dnh * nh;
      }
      m = warp_reduce_sum(m) / float(Gs);
      for (int c = lane; c < Gs; c += kWarpSize) {
        const float xv = to_f32(xr[c]), zv = to_f32(zr[c]), sg = sigmoidf_(zv), go = to_f32(gr[c]), wv = to_f32(wr[c]);
        const float dsilu = sg * (1.f + zv * (1.f - sg));
        const float nh = (gate_first ? xv * zv * sg : xv) * rs;
        const float dnh = gate_first ? go * wv : go * wv * zv * sg;
        const float dn = rs * (dnh - nh * m);
        if (gate_first) {
          if (dx) dx[row * Gs + c] = from_f32<T>(dn * zv * sg);
          if (dz) dz[row * Gs + c] = from_f32<T>(dn * xv * dsilu);
        } else {
          if (dx) dx[row * Gs + c] = from_f32<T>(dn);
          if (dz) dz[row * Gs + c] = from_f32<T>(go * nh * wv * dsilu);
        }
      }
    }
    if (dw_partial) {
      for (int k = 0; k < kRowsPerBlock; ++k) {
        if (k == warp && valid) {
          const T *xr = x + row * Gs, *zr = z + row * Gs, *gr = dy + row * Gs;
          const float rs = rstd[row];
          for (int c = lane; c < Gs; c += kWarpSize) {
            const float xv = to_f32(xr[c]), zv = to_f32(zr[c]), sg = sigmoidf_(zv), go = to_f32(gr[c]);
            s_dw[woff + c] += gate_first ? go * xv * zv * sg * rs : go * zv * sg * xv * rs;
          }
        }
        __syncthreads();
      }
    }
  }
  if (dw_partial)
    for (int64_t c = threadIdx.x; c < wn; c += blockDim.x) dw_partial[int64_t(blockIdx.x) * wn + c] = s_dw[c];
}

template <typename T>
__global__ void gated_rmsnorm_dw_reduce_kernel(const float* __restrict__ partial, T* __restrict__ dw, int blocks,
                                               int64_t wn) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= wn) return;
  float s = 0.f;
  for (int b = 0; b < blocks; ++b) s += partial[int64_t(b) * wn + c];
  dw[c] = from_f32<T>(s);
}

}  // namespace

Tensor gated_rmsnorm_forward_cuda(const Tensor& x0, const Tensor& z0, const Tensor& w0, double eps,
                                  GatedNormOrder order, Tensor* rstd_out) {
  const Tensor x = x0.contiguous(), z = z0.contiguous(), w = w0.contiguous();
  const int Gs = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(Gs, 1), wrows = w.numel() / std::max(Gs, 1);
  const int dev = x.device().index;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, DType::f32, x.device());
  if (rows > 0 && Gs > 0) {
    const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    visit_cuda_float("gated_rmsnorm_forward_cuda", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      gated_rmsnorm_forward_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
          x.data<T>(), z.data<T>(), w.data<T>(), y.data<T>(), rstd.data<float>(), rows, Gs, wrows, float(eps),
          order == GatedNormOrder::gate_then_norm);
      HYB_CUDA_LAUNCH_CHECK("gated_rmsnorm_forward_kernel", blocks, kRowsPerBlock * kWarpSize, 0);
    });
  }
  if (rstd_out) *rstd_out = rstd;
  return y;
}

GatedRmsNormGrads gated_rmsnorm_backward_cuda(const GatedRmsNormSaved& s, const Tensor& dy0, GradMask needed) {
  const Tensor x = s.x.contiguous(), z = s.z.contiguous(), w = s.w.contiguous(), dy = dy0.contiguous();
  const Tensor rstd = s.rstd.contiguous();
  HYB_CHECK(rstd.dtype() == DType::f32 && rstd.is_cuda(), "gated_rmsnorm_backward_cuda: the saved rstd is ",
            rstd.str(), "; it must come from the CUDA forward (f32 on the device)");
  const int Gs = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(Gs, 1), wn = w.numel(), wrows = wn / std::max(Gs, 1);
  const int dev = x.device().index;
  GatedRmsNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (needed[1]) g.dz = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0 || Gs == 0) {
    if (needed[2]) g.dw = Tensor::zeros(w.shape(), w.dtype(), w.device());
    return g;
  }
  const int blocks = grid_blocks((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1, dev);
  const size_t smem = needed[2] ? size_t(wn) * sizeof(float) : 0;
  HYB_CHECK(smem <= 48 * 1024, "gated_rmsnorm_backward_cuda: the weight has ", wn,
            " elements; the block's shared dw partial holds at most 12288");
  Tensor partial;
  if (needed[2]) partial = Tensor::empty({blocks, wn}, DType::f32, x.device());
  visit_cuda_float("gated_rmsnorm_backward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gated_rmsnorm_backward_kernel<T><<<blocks, kRowsPerBlock * kWarpSize, smem, current_stream(dev)>>>(
        x.data<T>(), z.data<T>(), w.data<T>(), dy.data<T>(), rstd.data<float>(), needed[0] ? g.dx.data<T>() : nullptr,
        needed[1] ? g.dz.data<T>() : nullptr, needed[2] ? partial.data<float>() : nullptr, rows, Gs, wrows,
        s.order == GatedNormOrder::gate_then_norm);
    HYB_CUDA_LAUNCH_CHECK("gated_rmsnorm_backward_kernel", blocks, kRowsPerBlock * kWarpSize, smem);
    if (needed[2]) {
      g.dw = Tensor::empty(w.shape(), w.dtype(), w.device());
      const int br = int((wn + 255) / 256);
      gated_rmsnorm_dw_reduce_kernel<T><<<br, 256, 0, current_stream(dev)>>>(partial.data<float>(), g.dw.data<T>(),
                                                                            blocks, wn);
      HYB_CUDA_LAUNCH_CHECK("gated_rmsnorm_dw_reduce_kernel", br, 256, 0);
    }
  });
  return g;
}

}  // namespace hyb
