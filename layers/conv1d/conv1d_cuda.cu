// CUDA causal depthwise conv + SiLU (conv1d_op.h; mamba2.md 3.5 for the backward), channels-last.
// One thread per output element with the channel fastest, so every tap is a coalesced row read; the
// window is W (4) taps, so the backward recomputes pre-activations instead of saving them. dw and
// dbias are sums over (b, t): each block of the reduction kernel owns a fixed slice of rows and
// writes one fp32 partial, and a second kernel adds the partials in slice order (no atomics).
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/conv1d/conv1d_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr int kChannelsPerBlock = 32;    // reduction kernel: one warp-wide strip of channels
constexpr int kRowSlices = 64;           // reduction kernel: fixed row partition of dw / dbias
constexpr int kRowThreads = kThreads / kChannelsPerBlock;  // threads along rows inside a slice
constexpr int kMaxW = 16;

__device__ __forceinline__ float sigmoidf_(float z) { return 1.f / (1.f + __expf(-z)); }

// Channel c of the left-padded sequence of batch b: xp[s] = x0[s] for s < W-1, x[s - (W-1)] after.
template <typename T>
__device__ __forceinline__ float padded_at(const T* x, const T* x0, int64_t b, int64_t s, int64_t c, int64_t T_,
                                           int64_t C, int W) {
  if (s >= W - 1) return to_f32(x[(b * T_ + s - (W - 1)) * C + c]);
  return x0 ? to_f32(x0[(b * (W - 1) + s) * C + c]) : 0.f;
}

template <typename T>
__device__ __forceinline__ float pre_activation(const T* x, const T* x0, const T* w, const T* bias, int64_t b,
                                                int64_t t, int64_t c, int64_t T_, int64_t C, int W) {
  float acc = bias ? to_f32(bias[c]) : 0.f;
  for (int j = 0; j < W; ++j) acc += to_f32(w[c * W + j]) * padded_at(x, x0, b, t + j, c, T_, C, W);
  return acc;
}

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

// y (B, T, C) = silu(pre). Grid-stride over B*T*C, channel fastest.
template <typename T>
__global__ void conv1d_forward_kernel(const T* __restrict__ x, const T* __restrict__ x0, const T* __restrict__ w,
                                      const T* __restrict__ bias, T* __restrict__ y, int64_t B, int64_t T_, int64_t C,
                                      int W) {
  const int64_t n = B * T_ * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, bt = i / C, t = bt % T_, b = bt / T_;
    const float pre = pre_activation(x, x0, w, bias, b, t, c, T_, C, W);
    y[i] = from_f32<T>(pre * sigmoidf_(pre));
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// dpre (B, T, C) fp32 = dy silu'(pre), silu'(z) = sigma(z) (1 + z (1 - sigma(z))).
template <typename T>
__global__ void conv1d_backward_dpre_kernel(const T* __restrict__ x, const T* __restrict__ x0,
                                            const T* __restrict__ w, const T* __restrict__ bias,
                                            const T* __restrict__ dy, float* __restrict__ dpre, int64_t B, int64_t T_,
                                            int64_t C, int W) {
  const int64_t n = B * T_ * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, bt = i / C, t = bt % T_, b = bt / T_;
    const float pre = pre_activation(x, x0, w, bias, b, t, c, T_, C, W), sg = sigmoidf_(pre);
    dpre[i] = to_f32(dy[i]) * sg * (1.f + pre * (1.f - sg));
  }
}

// dxp[s] = sum_j w[j] dpre[s - j] over the padded time s in [0, T + W - 1): s >= W-1 is dx's row
// s - (W-1), s < W-1 is dx0's row s. Either output may be null (not wanted).
template <typename T>
__global__ void conv1d_backward_dx_kernel(const float* __restrict__ dpre, const T* __restrict__ w, T* __restrict__ dx,
                                          T* __restrict__ dx0, int64_t B, int64_t T_, int64_t C, int W) {
  const int64_t Tp = T_ + W - 1, n = B * Tp * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, bs = i / C, s = bs % Tp, b = bs / Tp;
    T* out = s >= W - 1 ? (dx ? dx + (b * T_ + s - (W - 1)) * C + c : nullptr)
                        : (dx0 ? dx0 + (b * (W - 1) + s) * C + c : nullptr);
    if (!out) continue;
    float acc = 0.f;
    for (int j = 0; j < W; ++j) {
      const int64_t t = s - j;
      if (t >= 0 && t < T_) acc += to_f32(w[c * W + j]) * dpre[(b * T_ + t) * C + c];
    }
    *out = from_f32<T>(acc);
  }
}

// Partial sums of dw[c, j] = sum dpre_t xp[t + j] and dbias[c] = sum dpre_t over one slice of the
// B*T rows. Grid (ceil(C / 32), kRowSlices); block (32 channels, kRowThreads rows). The kRowThreads
// row-partials of a channel are combined through shared memory in thread order.
// partial: (kRowSlices, C, W + 1), the last entry of each (slice, c) being dbias.
template <typename T>
__global__ void conv1d_backward_dw_partial_kernel(const T* __restrict__ x, const T* __restrict__ x0,
                                                  const float* __restrict__ dpre, float* __restrict__ partial,
                                                  int64_t B, int64_t T_, int64_t C, int W) {
  __shared__ float s_acc[kRowThreads][kChannelsPerBlock][kMaxW + 1];
  const int lane = threadIdx.x % kChannelsPerBlock, rt = threadIdx.x / kChannelsPerBlock;
  const int64_t c = int64_t(blockIdx.x) * kChannelsPerBlock + lane;
  const int64_t rows = B * T_;
  const int64_t r0 = rows * blockIdx.y / kRowSlices, r1 = rows * (blockIdx.y + 1) / kRowSlices;
  float acc[kMaxW + 1];
  for (int j = 0; j <= W; ++j) acc[j] = 0.f;
  if (c < C)
    for (int64_t r = r0 + rt; r < r1; r += kRowThreads) {
      const int64_t b = r / T_, t = r % T_;
      const float d = dpre[r * C + c];
      for (int j = 0; j < W; ++j) acc[j] += d * padded_at(x, x0, b, t + j, c, T_, C, W);
      acc[W] += d;
    }
  for (int j = 0; j <= W; ++j) s_acc[rt][lane][j] = acc[j];
  __syncthreads();
  if (rt == 0 && c < C)
    for (int j = 0; j <= W; ++j) {
      float s = 0.f;
      for (int k = 0; k < kRowThreads; ++k) s += s_acc[k][lane][j];
      partial[(int64_t(blockIdx.y) * C + c) * (W + 1) + j] = s;
    }
}

// dw (C, W) and dbias (C,) from the partials, slices added in order. Either output may be null.
template <typename T>
__global__ void conv1d_backward_dw_reduce_kernel(const float* __restrict__ partial, T* __restrict__ dw,
                                                 T* __restrict__ dbias, int64_t C, int W) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // over C * (W + 1)
  if (i >= C * (W + 1)) return;
  float s = 0.f;
  for (int k = 0; k < kRowSlices; ++k) s += partial[int64_t(k) * C * (W + 1) + i];
  const int64_t c = i / (W + 1);
  const int j = int(i % (W + 1));
  if (j < W) {
    if (dw) dw[c * W + j] = from_f32<T>(s);
  } else if (dbias) {
    dbias[c] = from_f32<T>(s);
  }
}

}  // namespace

Tensor causal_conv1d_silu_forward_cuda(const Tensor& x0in, const Tensor& w0, const Tensor& bias0, const Tensor& init0) {
  const Tensor x = x0in.contiguous(), w = w0.contiguous();
  const Tensor bias = bias0.defined() ? bias0.contiguous() : Tensor();
  const Tensor init = init0.defined() ? init0.contiguous() : Tensor();
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), W = w.size(1);
  HYB_CHECK(W <= kMaxW, "causal_conv1d_silu_forward_cuda: kernel width ", W, " exceeds the compiled maximum ", kMaxW);
  Tensor y = Tensor::empty({B, T, C}, x.dtype(), x.device());
  const int64_t n = B * T * C;
  if (n == 0) return y;
  const int dev = x.device().index;
  const int blocks = grid_blocks(n, kThreads, dev);
  visit_cuda_float("causal_conv1d_silu_forward_cuda", x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    conv1d_forward_kernel<E><<<blocks, kThreads, 0, current_stream(dev)>>>(
        x.data<E>(), init.defined() ? init.data<E>() : nullptr, w.data<E>(), bias.defined() ? bias.data<E>() : nullptr,
        y.data<E>(), B, T, C, int(W));
    HYB_CUDA_LAUNCH_CHECK("conv1d_forward_kernel", blocks, kThreads, 0);
  });
  return y;
}

Conv1dGrads causal_conv1d_silu_backward_cuda(const Conv1dSaved& s, const Tensor& dy0, GradMask needed) {
  const Tensor x = s.x.contiguous(), w = s.w.contiguous(), dy = dy0.contiguous();
  const Tensor bias = s.bias.defined() ? s.bias.contiguous() : Tensor();
  const Tensor init = s.x0.defined() ? s.x0.contiguous() : Tensor();
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), W = w.size(1);
  HYB_CHECK(W <= kMaxW, "causal_conv1d_silu_backward_cuda: kernel width ", W, " exceeds the compiled maximum ", kMaxW);
  const DType dt = x.dtype();
  const Device devc = x.device();
  const int dev = devc.index;
  const bool need_dx = needed[0], need_dw = needed[1], need_db = needed[2] && bias.defined(),
             need_dx0 = needed[3] && init.defined();
  Conv1dGrads g;
  if (need_dx) g.dx = Tensor::empty({B, T, C}, dt, devc);
  if (need_dw) g.dw = Tensor::zeros({C, W}, dt, devc);
  if (need_db) g.dbias = Tensor::zeros({C}, dt, devc);
  if (need_dx0) g.dx0 = Tensor::zeros({B, W - 1, C}, dt, devc);
  const int64_t n = B * T * C;
  if (n == 0 || !(need_dx || need_dw || need_db || need_dx0)) return g;
  Tensor dpre = Tensor::empty({B, T, C}, DType::f32, devc);
  cudaStream_t stream = current_stream(dev);
  visit_cuda_float("causal_conv1d_silu_backward_cuda", dt, [&](auto tag) {
    using E = decltype(tag);
    const E* x0p = init.defined() ? init.data<E>() : nullptr;
    const int blocks = grid_blocks(n, kThreads, dev);
    conv1d_backward_dpre_kernel<E><<<blocks, kThreads, 0, stream>>>(
        x.data<E>(), x0p, w.data<E>(), bias.defined() ? bias.data<E>() : nullptr, dy.data<E>(), dpre.data<float>(), B,
        T, C, int(W));
    HYB_CUDA_LAUNCH_CHECK("conv1d_backward_dpre_kernel", blocks, kThreads, 0);
    if (need_dx || need_dx0) {
      const int bx = grid_blocks(B * (T + W - 1) * C, kThreads, dev);
      conv1d_backward_dx_kernel<E><<<bx, kThreads, 0, stream>>>(dpre.data<float>(), w.data<E>(),
                                                                need_dx ? g.dx.data<E>() : nullptr,
                                                                need_dx0 ? g.dx0.data<E>() : nullptr, B, T, C, int(W));
      HYB_CUDA_LAUNCH_CHECK("conv1d_backward_dx_kernel", bx, kThreads, 0);
    }
    if (need_dw || need_db) {
      Tensor partial = Tensor::empty({kRowSlices, C, W + 1}, DType::f32, devc);
      const dim3 grid(unsigned((C + kChannelsPerBlock - 1) / kChannelsPerBlock), kRowSlices);
      conv1d_backward_dw_partial_kernel<E><<<grid, kThreads, 0, stream>>>(x.data<E>(), x0p, dpre.data<float>(),
                                                                           partial.data<float>(), B, T, C, int(W));
      HYB_CUDA_LAUNCH_CHECK("conv1d_backward_dw_partial_kernel", grid, kThreads, 0);
      const int br = int((C * (W + 1) + kThreads - 1) / kThreads);
      conv1d_backward_dw_reduce_kernel<E><<<br, kThreads, 0, stream>>>(
          partial.data<float>(), need_dw ? g.dw.data<E>() : nullptr, need_db ? g.dbias.data<E>() : nullptr, C, int(W));
      HYB_CUDA_LAUNCH_CHECK("conv1d_backward_dw_reduce_kernel", br, kThreads, 0);
    }
  });
  return g;
}

}  // namespace hyb
