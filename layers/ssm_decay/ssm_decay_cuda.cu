// CUDA per-head decay (ssm_decay_op.h has the equations). Elementwise over (rows, H) with fp32 math,
// head fastest. A thread takes V consecutive elements (a 16-byte pack where n and the pointers
// allow) and the grid stride is a multiple of H, so a thread meets the same V heads at every step:
// it reads their dt_bias and A_log once and needs no index division in the loop. The backward's
// per-head sums (ddt_bias = sum dzz, dA_log = sum dg g) ride along: each thread sums its elements,
// the block adds its threads' sums per head in a fixed order into one (H,) partial, and
// column_sum_kernel (kernels/reduce.cuh) adds the partials in a fixed order: reproducible without
// atomics.
#include <algorithm>
#include <numeric>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "kernels/vector_io.cuh"
#include "layers/ssm_decay/ssm_decay_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr float kSoftplusThreshold = 20.f;  // identity above, as the references' softplus

__device__ __forceinline__ float softplusf_(float z) { return z > kSoftplusThreshold ? z : log1pf(expf(z)); }
__device__ __forceinline__ float softplus_slope(float z) { return z > kSoftplusThreshold ? 1.f : 1.f / (1.f + expf(-z)); }

// The V heads of this thread's elements (constant over the grid stride) and their parameters.
template <typename T, int V>
__device__ __forceinline__ void head_params(int64_t i0, int H, const T* dt_bias, const T* A_log, float (&bias)[V],
                                            float (&A)[V]) {
  int h = int(i0 % H);
#pragma unroll
  for (int e = 0; e < V; ++e) {
    bias[e] = to_f32(dt_bias[h]);
    A[e] = -expf(to_f32(A_log[h]));
    h = h + 1 == H ? 0 : h + 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

// x, dt, g (n = rows * H); dt_bias, A_log (H,). gridDim.x * blockDim.x * V is a multiple of H.
template <typename T, int V>
__global__ void ssm_decay_forward_kernel(const T* __restrict__ x, const T* __restrict__ dt_bias,
                                         const T* __restrict__ A_log, T* __restrict__ dt_out, T* __restrict__ g_out,
                                         int64_t n, int H, float lo, float hi) {
  const int64_t i0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i0 >= n) return;
  float bias[V], A[V];
  head_params(i0, H, dt_bias, A_log, bias, A);
  for (int64_t i = i0; i < n; i += int64_t(gridDim.x) * blockDim.x * V) {
    float xv[V], dt[V], g[V];
    load_f32(x + i, xv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      dt[e] = fminf(fmaxf(softplusf_(xv[e] + bias[e]), lo), hi);
      g[e] = A[e] * dt[e];
    }
    store_f32(dt_out + i, dt);
    store_f32(g_out + i, g);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// dzz = (ddt + A dg) softplus'(x + dt_bias), zero where the clamp is active. ddt or dg may be null.
// head_partial (2, gridDim.x, H): this block's sums of dzz (as stored in T, so the sum is of the
// values returned as dx) and of dg g, or null when neither parameter gradient is wanted.
template <typename T, int V>
__global__ void ssm_decay_backward_kernel(const T* __restrict__ x, const T* __restrict__ dt_bias,
                                          const T* __restrict__ A_log, const T* __restrict__ ddt,
                                          const T* __restrict__ dg, const T* __restrict__ g, T* __restrict__ dzz,
                                          float* __restrict__ head_partial, int64_t n, int H, float lo, float hi) {
  __shared__ float s_sum[2][kThreads * V];  // by the element's place j = threadIdx.x * V + e in the block's stride
  const int64_t i0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  float sb[V], sa[V];
#pragma unroll
  for (int e = 0; e < V; ++e) sb[e] = sa[e] = 0.f;
  if (i0 < n) {
    float bias[V], A[V];
    head_params(i0, H, dt_bias, A_log, bias, A);
    for (int64_t i = i0; i < n; i += int64_t(gridDim.x) * blockDim.x * V) {
      float xv[V], d[V], gd[V], gv[V];
      load_f32(x + i, xv);
      if (ddt) load_f32(ddt + i, d);
      if (dg) load_f32(dg + i, gd);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float zz = xv[e] + bias[e], sp = softplusf_(zz);
        float v = (ddt ? d[e] : 0.f) + (dg ? A[e] * gd[e] : 0.f);
        v *= (sp >= lo && sp <= hi) ? softplus_slope(zz) : 0.f;
        d[e] = v;
      }
      const Pack<T, V> stored = pack_f32<T>(d);
      store_pack(dzz + i, stored);
      if (head_partial) {
        if (dg) load_f32(g + i, gv);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          sb[e] += to_f32(stored.v[e]);
          if (dg) sa[e] += gd[e] * gv[e];
        }
      }
    }
  }
  if (!head_partial) return;  // uniform over the grid
#pragma unroll
  for (int e = 0; e < V; ++e) {
    s_sum[0][threadIdx.x * V + e] = sb[e];
    s_sum[1][threadIdx.x * V + e] = sa[e];
  }
  __syncthreads();
  // Place j of this block holds head (base + j) % H; head h sums its places in increasing j.
  const int span = blockDim.x * V;
  const int base = int((int64_t(blockIdx.x) * span) % H);
  for (int h = threadIdx.x; h < H; h += blockDim.x) {
    float tb = 0.f, ta = 0.f;
    for (int j = ((h - base) % H + H) % H; j < span; j += H) {
      tb += s_sum[0][j];
      ta += s_sum[1][j];
    }
    head_partial[int64_t(blockIdx.x) * H + h] = tb;
    head_partial[(int64_t(gridDim.x) + blockIdx.x) * H + h] = ta;
  }
}

// Blocks for n elements in packs of V with a grid stride that is a multiple of H. The count comes from
// the shape alone (at most kMaxBlocks, then rounded up to the multiple), so the head sums add their
// partials in the same order on every GPU.
constexpr int64_t kMaxBlocks = 1024;

int decay_blocks(int64_t n, int64_t H, int V) {
  const int64_t per_block = int64_t(kThreads) * V;
  const int64_t unit = H / std::gcd(H, per_block);
  const int64_t want = std::clamp<int64_t>((n + per_block - 1) / per_block, 1, kMaxBlocks);
  return int((want + unit - 1) / unit * unit);
}

}  // namespace

SsmDecayOutputs ssm_decay_forward_cuda(const Tensor& x0, const Tensor& dt_bias0, const Tensor& A_log0, double lo,
                                       double hi) {
  const Tensor x = x0.contiguous(), bias = dt_bias0.contiguous(), A_log = A_log0.contiguous();
  const int64_t H = x.size(-1), n = x.numel();
  SsmDecayOutputs r{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), x.dtype(), x.device())};
  if (n == 0) return r;
  const int dev = x.device().index;
  visit_cuda_float("ssm_decay_forward_cuda", x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    auto launch = [&](auto kernel, int V) {
      const int blocks = decay_blocks(n, H, V);
      kernel<<<blocks, kThreads, 0, current_stream(dev)>>>(x.data<E>(), bias.data<E>(), A_log.data<E>(), r.dt.data<E>(),
                                                           r.g.data<E>(), n, int(H), float(lo), float(hi));
      HYB_CUDA_LAUNCH_CHECK("ssm_decay_forward_kernel", blocks, kThreads, 0);
    };
    if (pack_width<E>(n, {x.data<E>(), r.dt.data<E>(), r.g.data<E>()}) > 1)
      launch(ssm_decay_forward_kernel<E, kPack16<E>>, kPack16<E>);
    else
      launch(ssm_decay_forward_kernel<E, 1>, 1);
  });
  return r;
}

SsmDecayGrads ssm_decay_backward_cuda(const SsmDecaySaved& s, const Tensor& ddt0, const Tensor& dg0, GradMask needed) {
  const Tensor x = s.x.contiguous(), bias = s.dt_bias.contiguous(), A_log = s.A_log.contiguous(), g = s.g.contiguous();
  const Tensor ddt = ddt0.defined() ? ddt0.contiguous() : Tensor(), dg = dg0.defined() ? dg0.contiguous() : Tensor();
  const int64_t H = x.size(-1), n = x.numel();
  const int dev = x.device().index;
  SsmDecayGrads out;
  Tensor dzz = Tensor::empty(x.shape(), x.dtype(), x.device());
  // Every head's sum is written by the kernels when there are elements; zeros otherwise.
  auto head_grad = [&] { return n > 0 ? Tensor::empty({H}, x.dtype(), x.device()) : Tensor::zeros({H}, x.dtype(), x.device()); };
  if (needed[1]) out.ddt_bias = head_grad();
  if (needed[2]) out.dA_log = head_grad();
  if (n > 0)
    visit_cuda_float("ssm_decay_backward_cuda", x.dtype(), [&](auto tag) {
      using E = decltype(tag);
      const E* ddtp = ddt.defined() ? ddt.data<E>() : nullptr;
      const E* dgp = dg.defined() ? dg.data<E>() : nullptr;
      const bool sums = needed[1] || needed[2];
      auto launch = [&](auto kernel, int V) {
        const int blocks = decay_blocks(n, H, V);
        Tensor partial;
        if (sums) partial = Tensor::empty({2, blocks, H}, DType::f32, x.device());
        kernel<<<blocks, kThreads, 0, current_stream(dev)>>>(x.data<E>(), bias.data<E>(), A_log.data<E>(), ddtp, dgp,
                                                             g.data<E>(), dzz.data<E>(),
                                                             sums ? partial.data<float>() : nullptr, n, int(H),
                                                             float(s.lo), float(s.hi));
        HYB_CUDA_LAUNCH_CHECK("ssm_decay_backward_kernel", blocks, kThreads, 0);
        if (!sums) return;
        const int cb = column_sum_blocks(H);
        if (needed[1]) {
          column_sum_kernel<E><<<cb, column_sum_threads(blocks), 0, current_stream(dev)>>>(partial.data<float>(),
                                                                                 out.ddt_bias.data<E>(), blocks, H, 1.f);
          HYB_CUDA_LAUNCH_CHECK("column_sum_kernel (ssm_decay ddt_bias)", cb, column_sum_threads(blocks), 0);
        }
        if (needed[2]) {
          column_sum_kernel<E><<<cb, column_sum_threads(blocks), 0, current_stream(dev)>>>(
              partial.data<float>() + int64_t(blocks) * H, out.dA_log.data<E>(), blocks, H, 1.f);
          HYB_CUDA_LAUNCH_CHECK("column_sum_kernel (ssm_decay dA_log)", cb, column_sum_threads(blocks), 0);
        }
      };
      if (pack_width<E>(n, {x.data<E>(), ddtp, dgp, g.data<E>(), dzz.data<E>()}) > 1)
        launch(ssm_decay_backward_kernel<E, kPack16<E>>, kPack16<E>);
      else
        launch(ssm_decay_backward_kernel<E, 1>, 1);
    });
  if (needed[0]) out.dx = dzz;
  return out;
}

}  // namespace hyb
