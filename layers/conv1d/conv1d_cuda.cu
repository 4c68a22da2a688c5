// CUDA causal depthwise conv + SiLU (conv1d_op.h; mamba2.md 3.5 for the backward), channels-last.
// One thread per output element with the channel fastest, so every tap is a coalesced row read; the
// window is W (4) taps, so the backward recomputes pre-activations instead of saving them. dw and
// dbias are sums over (b, t): each block of the reduction kernel owns a fixed slice of rows and
// writes one fp32 partial, and a second kernel adds the partials in slice order (no atomics).
//
// Widths W <= 4 (the models' 4, and 2, 3) take streaming kernels instead: a thread owns V channels
// (a 16-byte pack where C and the pointers allow) and a run of kSteps time steps, keeps the last W
// input rows and (backward) the last W pre-activation gradients in registers, and so reads each x
// and dy element once (plus a W-1 row halo per run) and writes each output once. A thread loads its
// rows kLookahead steps ahead of the math, so several rows are in flight per thread. The backward
// fuses dpre, dx, dx0 and the dw / dbias partials in one pass: a thread sums its runs, the block
// adds its threads' sums in a fixed order into one partial per block row, and the reduction kernel
// adds those in order. The number of block rows depends on the shape only, not the device.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/vector_io.cuh"
#include "layers/conv1d/conv1d_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr int kChannelsPerBlock = 32;    // reduction kernel: one warp-wide strip of channels
constexpr int kRowSlices = 64;           // reduction kernel: fixed row partition of dw / dbias
constexpr int kRowThreads = kThreads / kChannelsPerBlock;  // threads along rows inside a slice
constexpr int kMaxW = 16;

// __fdividef: a reciprocal and a multiply instead of an IEEE division (about 1 ulp; 0 once 1 + e^-z
// passes 2^126, where the sigmoid is below 1e-38 anyway). Memory-bound kernels, but the backward
// evaluates it for every element of every pass.
__device__ __forceinline__ float sigmoidf_(float z) { return __fdividef(1.f, 1.f + __expf(-z)); }

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
                                                 T* __restrict__ dbias, int64_t C, int W, int slices) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // over C * (W + 1)
  if (i >= C * (W + 1)) return;
  float s = 0.f;
  for (int k = 0; k < slices; ++k) s += partial[int64_t(k) * C * (W + 1) + i];
  const int64_t c = i / (W + 1);
  const int j = int(i % (W + 1));
  if (j < W) {
    if (dw) dw[c * W + j] = from_f32<T>(s);
  } else if (dbias) {
    dbias[c] = from_f32<T>(s);
  }
}

// ---------------------------------------------------------------------------------------------
// Streaming kernels, W <= 4
// ---------------------------------------------------------------------------------------------

constexpr int kSteps = 16;            // time steps per run
constexpr int kPacksPerBlock = 32;    // blockDim.x: channel packs
constexpr int kRunThreads = 4;        // blockDim.y: runs
constexpr int kMaxRunGroups = 256;    // backward gridDim.y cap: the number of dw partials
// Steps whose rows a thread loads ahead (raw packs, converted when their step comes): the step loop's
// loads sit behind the run-end test, so without this each waits for the previous step's math and a
// thread has one row in flight.
constexpr int kLookahead = 4;
// Backward channels a thread (where C and the pointers allow 16-byte packs): 4, an 8-byte pack in
// bf16. The thread's registers scale with it (the W + 1 dw sums, W weights, W inputs and W dpre
// values of each channel): 8 bf16 channels took about 190 registers (two 128-thread blocks an SM);
// 4 take 119, 149 with the lookahead rows (three blocks an SM, ptxas sm_90, W = 4).
constexpr int kBackwardPack = 4;

struct ConvShape {
  int64_t B, T, C;
  int runs_per_b;  // ceil(T / kSteps)
  int64_t runs;    // B * runs_per_b
};

// Row tt of x for channels c..c+V-1; tt < 0 reads the cache x0 (B, W-1, C) row W-1+tt, or zeros.
template <typename T, int V>
__device__ __forceinline__ void load_xp(const T* x, const T* x0, int64_t b, int64_t tt, int64_t c, const ConvShape& s,
                                        int W, float (&v)[V]) {
  if (tt >= 0) {
    load_f32(x + (b * s.T + tt) * s.C + c, v);
  } else if (x0) {
    load_f32(x0 + (b * (W - 1) + (W - 1) + tt) * s.C + c, v);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = 0.f;
  }
}

template <typename T, int V, int KW>
__device__ __forceinline__ void load_weights(const T* w, const T* bias, int64_t c, float (&wr)[KW][V], float (&br)[V]) {
#pragma unroll
  for (int e = 0; e < V; ++e) {
    br[e] = bias ? to_f32(bias[c + e]) : 0.f;
#pragma unroll
    for (int j = 0; j < KW; ++j) wr[j][e] = to_f32(w[(c + e) * KW + j]);
  }
}

// Run k of the (b, run) order: its batch and first time step, a 32-bit division per run.
__device__ __forceinline__ void run_start(int64_t k, const ConvShape& s, int64_t& b, int64_t& t0) {
  b = int64_t(unsigned(k) / unsigned(s.runs_per_b));
  t0 = (k - b * s.runs_per_b) * kSteps;
}

template <typename T, int V, int KW>
__global__ void conv1d_forward_stream_kernel(const T* __restrict__ x, const T* __restrict__ x0,
                                             const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y,
                                             ConvShape s) {
  using P = Pack<T, V>;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (c >= s.C) return;
  float wr[KW][V], br[V];
  load_weights(w, bias, c, wr, br);
  for (int64_t k = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; k < s.runs; k += int64_t(gridDim.y) * blockDim.y) {
    int64_t b, t0;
    run_start(k, s, b, t0);
    const int n = int(s.T - t0 < kSteps ? s.T - t0 : kSteps);
    P ahead[kLookahead];  // ahead[u % kLookahead]: raw x row t0 + u, loaded kLookahead steps early
#pragma unroll
    for (int a = 0; a < kLookahead; ++a)
      if (a < n) ahead[a] = load_pack<P>(x + (b * s.T + t0 + a) * s.C + c);
    float win[KW][V];  // win[j] = x row t - (KW-1) + j while producing row t
#pragma unroll
    for (int j = 0; j < KW - 1; ++j) load_xp(x, x0, b, t0 - (KW - 1) + j, c, s, KW, win[j]);
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int64_t t = t0 + u;
      if (u >= n) break;
      unpack_f32(ahead[u % kLookahead], win[KW - 1]);
      if (u + kLookahead < n) ahead[u % kLookahead] = load_pack<P>(x + (b * s.T + t + kLookahead) * s.C + c);
      float out[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float pre = br[e];
#pragma unroll
        for (int j = 0; j < KW; ++j) pre += wr[j][e] * win[j][e];
        out[e] = pre * sigmoidf_(pre);
      }
      store_f32(y + (b * s.T + t) * s.C + c, out);
#pragma unroll
      for (int j = 0; j < KW - 1; ++j)
#pragma unroll
        for (int e = 0; e < V; ++e) win[j][e] = win[j + 1][e];
    }
  }
}

// One pass per run: step i recomputes dpre at u = t0 + i (zero past T), adds it into the dw / dbias
// sums while u is inside the run, and emits dx at u - (KW-1) (which needs dpre up to u) and, on the
// first run of a batch row, dx0 rows u < KW-1. partial: (gridDim.y, C, KW + 1) or null.
template <typename T, int V, int KW>
__global__ void conv1d_backward_stream_kernel(const T* __restrict__ x, const T* __restrict__ x0,
                                              const T* __restrict__ w, const T* __restrict__ bias,
                                              const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ dx0,
                                              float* __restrict__ partial, ConvShape s) {
  using P = Pack<T, V>;
  __shared__ float s_acc[kRunThreads][kPacksPerBlock][(KW + 1) * V];
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const bool active = c < s.C;
  float acc[KW + 1][V];
#pragma unroll
  for (int j = 0; j <= KW; ++j)
#pragma unroll
    for (int e = 0; e < V; ++e) acc[j][e] = 0.f;
  if (active) {
    float wr[KW][V], br[V];
    load_weights(w, bias, c, wr, br);
    for (int64_t k = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; k < s.runs; k += int64_t(gridDim.y) * blockDim.y) {
      int64_t b, t0;
      run_start(k, s, b, t0);
      const int n = int(s.T - t0 < kSteps ? s.T - t0 : kSteps), steps = n + KW - 1;
      // ax / ag[i % kLookahead]: raw x and dy rows t0 + i (where below T), loaded kLookahead steps early.
      P ax[kLookahead], ag[kLookahead];
#pragma unroll
      for (int a = 0; a < kLookahead; ++a)
        if (a < steps && t0 + a < s.T) {
          ax[a] = load_pack<P>(x + (b * s.T + t0 + a) * s.C + c);
          ag[a] = load_pack<P>(dy + (b * s.T + t0 + a) * s.C + c);
        }
      float win[KW][V], dr[KW][V];  // dr[KW-1-j] = dpre at u - j
#pragma unroll
      for (int j = 0; j < KW - 1; ++j) load_xp(x, x0, b, t0 - (KW - 1) + j, c, s, KW, win[j]);
#pragma unroll
      for (int j = 0; j < KW; ++j)
#pragma unroll
        for (int e = 0; e < V; ++e) dr[j][e] = 0.f;
#pragma unroll
      for (int i = 0; i < kSteps + KW - 1; ++i) {
        if (i >= steps) break;
        const int64_t u = t0 + i;
#pragma unroll
        for (int j = 0; j < KW - 1; ++j)
#pragma unroll
          for (int e = 0; e < V; ++e) dr[j][e] = dr[j + 1][e];
        if (u < s.T) {
          float g[V];
          unpack_f32(ax[i % kLookahead], win[KW - 1]);
          unpack_f32(ag[i % kLookahead], g);
          if (i + kLookahead < steps && u + kLookahead < s.T) {
            ax[i % kLookahead] = load_pack<P>(x + (b * s.T + u + kLookahead) * s.C + c);
            ag[i % kLookahead] = load_pack<P>(dy + (b * s.T + u + kLookahead) * s.C + c);
          }
#pragma unroll
          for (int e = 0; e < V; ++e) {
            float pre = br[e];
#pragma unroll
            for (int j = 0; j < KW; ++j) pre += wr[j][e] * win[j][e];
            const float sg = sigmoidf_(pre);
            dr[KW - 1][e] = g[e] * sg * (1.f + pre * (1.f - sg));
          }
          if (i < n) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
#pragma unroll
              for (int j = 0; j < KW; ++j) acc[j][e] += dr[KW - 1][e] * win[j][e];
              acc[KW][e] += dr[KW - 1][e];
            }
          }
#pragma unroll
          for (int j = 0; j < KW - 1; ++j)
#pragma unroll
            for (int e = 0; e < V; ++e) win[j][e] = win[j + 1][e];
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) dr[KW - 1][e] = 0.f;
        }
        T* out = nullptr;
        if (i >= KW - 1) {
          if (dx) out = dx + (b * s.T + u - (KW - 1)) * s.C + c;
        } else if (t0 == 0 && dx0) {
          out = dx0 + (b * (KW - 1) + i) * s.C + c;
        }
        if (out) {
          float o[V];
#pragma unroll
          for (int e = 0; e < V; ++e) {
            float a = 0.f;
#pragma unroll
            for (int j = 0; j < KW; ++j) a += wr[j][e] * dr[KW - 1 - j][e];
            o[e] = a;
          }
          store_f32(out, o);
        }
      }
    }
  }
  if (!partial) return;  // uniform over the block
#pragma unroll
  for (int j = 0; j <= KW; ++j)
#pragma unroll
    for (int e = 0; e < V; ++e) s_acc[threadIdx.y][threadIdx.x][j * V + e] = acc[j][e];
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  for (int j = 0; j <= KW; ++j)
    for (int e = 0; e < V; ++e) {
      float sum = 0.f;
      for (int r = 0; r < kRunThreads; ++r) sum += s_acc[r][threadIdx.x][j * V + e];
      partial[(int64_t(blockIdx.y) * s.C + c + e) * (KW + 1) + j] = sum;
    }
}

}  // namespace

ConvShape conv_shape(int64_t B, int64_t T, int64_t C) {
  ConvShape s{B, T, C, int((T + kSteps - 1) / kSteps), 0};
  s.runs = B * s.runs_per_b;
  HYB_CHECK(s.runs < int64_t(UINT32_MAX), "causal_conv1d_silu (cuda): ", B, " x ", T, " steps exceed the 32-bit run index");
  return s;
}

// Calls f(std::integral_constant<int, W>) for the streamed widths; false for the others.
template <typename F>
bool with_stream_width(int64_t W, F&& f) {
  switch (W) {
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    default: return false;
  }
}

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
    const E* x0p = init.defined() ? init.data<E>() : nullptr;
    const bool streamed = with_stream_width(W, [&](auto kw) {
      constexpr int KW = decltype(kw)::value;
      const ConvShape cs = conv_shape(B, T, C);
      auto launch = [&](auto kernel, int V) {
        const int64_t packs = (C + V - 1) / V;
        const dim3 grid(unsigned((packs + kPacksPerBlock - 1) / kPacksPerBlock),
                        unsigned(std::min<int64_t>((cs.runs + kRunThreads - 1) / kRunThreads, 65535)));
        const dim3 block(kPacksPerBlock, kRunThreads);
        kernel<<<grid, block, 0, current_stream(dev)>>>(x.data<E>(), x0p, w.data<E>(),
                                                        bias.defined() ? bias.data<E>() : nullptr, y.data<E>(), cs);
        HYB_CUDA_LAUNCH_CHECK("conv1d_forward_stream_kernel", grid, block, 0);
      };
      if (pack_width<E>(C, {x.data<E>(), x0p, y.data<E>()}) > 1)
        launch(conv1d_forward_stream_kernel<E, kPack16<E>, KW>, kPack16<E>);
      else
        launch(conv1d_forward_stream_kernel<E, 1, KW>, 1);
    });
    if (streamed) return;
    conv1d_forward_kernel<E><<<blocks, kThreads, 0, current_stream(dev)>>>(
        x.data<E>(), x0p, w.data<E>(), bias.defined() ? bias.data<E>() : nullptr, y.data<E>(), B, T, C, int(W));
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
  const int64_t n = B * T * C;
  // The kernels write every element of each gradient when there is any input; zeros otherwise.
  auto grad = [&](const Shape& shape) { return n > 0 ? Tensor::empty(shape, dt, devc) : Tensor::zeros(shape, dt, devc); };
  Conv1dGrads g;
  if (need_dx) g.dx = Tensor::empty({B, T, C}, dt, devc);
  if (need_dw) g.dw = grad({C, W});
  if (need_db) g.dbias = grad({C});
  if (need_dx0) g.dx0 = grad({B, W - 1, C});
  if (n == 0 || !(need_dx || need_dw || need_db || need_dx0)) return g;
  cudaStream_t stream = current_stream(dev);
  visit_cuda_float("causal_conv1d_silu_backward_cuda", dt, [&](auto tag) {
    using E = decltype(tag);
    const E* x0p = init.defined() ? init.data<E>() : nullptr;
    E* dxp = need_dx ? g.dx.data<E>() : nullptr;
    E* dx0p = need_dx0 ? g.dx0.data<E>() : nullptr;
    const bool streamed = with_stream_width(W, [&](auto kw) {
      constexpr int KW = decltype(kw)::value;
      const ConvShape cs = conv_shape(B, T, C);
      const int groups = int(std::min<int64_t>((cs.runs + kRunThreads - 1) / kRunThreads, kMaxRunGroups));
      Tensor partial;
      if (need_dw || need_db) partial = Tensor::empty({groups, C, W + 1}, DType::f32, devc);
      auto launch = [&](auto kernel, int V) {
        const int64_t packs = (C + V - 1) / V;
        const dim3 grid(unsigned((packs + kPacksPerBlock - 1) / kPacksPerBlock), unsigned(groups));
        const dim3 block(kPacksPerBlock, kRunThreads);
        kernel<<<grid, block, 0, stream>>>(x.data<E>(), x0p, w.data<E>(), bias.defined() ? bias.data<E>() : nullptr,
                                           dy.data<E>(), dxp, dx0p, partial.defined() ? partial.data<float>() : nullptr,
                                           cs);
        HYB_CUDA_LAUNCH_CHECK("conv1d_backward_stream_kernel", grid, block, 0);
      };
      if (pack_width<E>(C, {x.data<E>(), x0p, dy.data<E>(), dxp, dx0p}) > 1)
        launch(conv1d_backward_stream_kernel<E, kBackwardPack, KW>, kBackwardPack);
      else
        launch(conv1d_backward_stream_kernel<E, 1, KW>, 1);
      if (partial.defined()) {
        const int br = int((C * (W + 1) + kThreads - 1) / kThreads);
        conv1d_backward_dw_reduce_kernel<E><<<br, kThreads, 0, stream>>>(
            partial.data<float>(), need_dw ? g.dw.data<E>() : nullptr, need_db ? g.dbias.data<E>() : nullptr, C,
            int(W), groups);
        HYB_CUDA_LAUNCH_CHECK("conv1d_backward_dw_reduce_kernel", br, kThreads, 0);
      }
    });
    if (streamed) return;
    Tensor dpre = Tensor::empty({B, T, C}, DType::f32, devc);
    const int blocks = grid_blocks(n, kThreads, dev);
    conv1d_backward_dpre_kernel<E><<<blocks, kThreads, 0, stream>>>(
        x.data<E>(), x0p, w.data<E>(), bias.defined() ? bias.data<E>() : nullptr, dy.data<E>(), dpre.data<float>(), B,
        T, C, int(W));
    HYB_CUDA_LAUNCH_CHECK("conv1d_backward_dpre_kernel", blocks, kThreads, 0);
    if (need_dx || need_dx0) {
      const int bx = grid_blocks(B * (T + W - 1) * C, kThreads, dev);
      conv1d_backward_dx_kernel<E><<<bx, kThreads, 0, stream>>>(dpre.data<float>(), w.data<E>(), dxp, dx0p, B, T, C,
                                                                int(W));
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
          partial.data<float>(), need_dw ? g.dw.data<E>() : nullptr, need_db ? g.dbias.data<E>() : nullptr, C, int(W),
          kRowSlices);
      HYB_CUDA_LAUNCH_CHECK("conv1d_backward_dw_reduce_kernel", br, kThreads, 0);
    }
  });
  return g;
}

}  // namespace hyb
