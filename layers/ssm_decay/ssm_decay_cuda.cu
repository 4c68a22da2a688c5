// CUDA per-head decay (ssm_decay_op.h has the equations). Elementwise over (rows, H) with fp32 math;
// the per-head sums of the backward (ddt_bias = sum dzz, dA_log = sum dg g) run one block per head
// over the rows in a fixed thread-and-shuffle order, so they are reproducible without atomics. H is
// small (<= a few dozen) and rows = B*T, so a block per head still has thousands of rows to walk.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/ssm_decay/ssm_decay_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr float kSoftplusThreshold = 20.f;  // identity above, as the references' softplus

__device__ __forceinline__ float softplusf_(float z) { return z > kSoftplusThreshold ? z : log1pf(expf(z)); }
__device__ __forceinline__ float softplus_slope(float z) { return z > kSoftplusThreshold ? 1.f : 1.f / (1.f + expf(-z)); }

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

// x, dt, g (n = rows * H), head fastest; dt_bias, A_log (H,).
template <typename T>
__global__ void ssm_decay_forward_kernel(const T* __restrict__ x, const T* __restrict__ dt_bias,
                                         const T* __restrict__ A_log, T* __restrict__ dt_out, T* __restrict__ g_out,
                                         int64_t n, int H, float lo, float hi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int h = int(i % H);
    const float dt = fminf(fmaxf(softplusf_(to_f32(x[i]) + to_f32(dt_bias[h])), lo), hi);
    dt_out[i] = from_f32<T>(dt);
    g_out[i] = from_f32<T>(-expf(to_f32(A_log[h])) * dt);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// dzz = (ddt + A dg) softplus'(x + dt_bias), zero where the clamp is active. ddt or dg may be null.
template <typename T>
__global__ void ssm_decay_backward_dx_kernel(const T* __restrict__ x, const T* __restrict__ dt_bias,
                                             const T* __restrict__ A_log, const T* __restrict__ ddt,
                                             const T* __restrict__ dg, T* __restrict__ dzz, int64_t n, int H, float lo,
                                             float hi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int h = int(i % H);
    const float zz = to_f32(x[i]) + to_f32(dt_bias[h]), sp = softplusf_(zz);
    float d = (ddt ? to_f32(ddt[i]) : 0.f) + (dg ? -expf(to_f32(A_log[h])) * to_f32(dg[i]) : 0.f);
    d *= (sp >= lo && sp <= hi) ? softplus_slope(zz) : 0.f;
    dzz[i] = from_f32<T>(d);
  }
}

// Grid H blocks, block kThreads: ddt_bias[h] = sum_r dzz[r, h], dA_log[h] = sum_r dg[r, h] g[r, h].
// dzz is read back as stored (in T), so the sum is of the values returned as dx. Outputs may be null.
template <typename T>
__global__ void ssm_decay_backward_head_sum_kernel(const T* __restrict__ dzz, const T* __restrict__ dg,
                                                   const T* __restrict__ g, T* __restrict__ ddt_bias,
                                                   T* __restrict__ dA_log, int64_t rows, int H) {
  const int h = blockIdx.x;
  float sb = 0.f, sa = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t i = r * H + h;
    sb += to_f32(dzz[i]);
    if (dg) sa += to_f32(dg[i]) * to_f32(g[i]);
  }
  sb = block_reduce_sum(sb);
  sa = block_reduce_sum(sa);
  if (threadIdx.x == 0) {
    if (ddt_bias) ddt_bias[h] = from_f32<T>(sb);
    if (dA_log) dA_log[h] = from_f32<T>(sa);
  }
}

}  // namespace

SsmDecayOutputs ssm_decay_forward_cuda(const Tensor& x0, const Tensor& dt_bias0, const Tensor& A_log0, double lo,
                                       double hi) {
  const Tensor x = x0.contiguous(), bias = dt_bias0.contiguous(), A_log = A_log0.contiguous();
  const int64_t H = x.size(-1), n = x.numel();
  SsmDecayOutputs r{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty(x.shape(), x.dtype(), x.device())};
  if (n == 0) return r;
  const int dev = x.device().index;
  const int blocks = grid_blocks(n, kThreads, dev);
  visit_cuda_float("ssm_decay_forward_cuda", x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    ssm_decay_forward_kernel<E><<<blocks, kThreads, 0, current_stream(dev)>>>(
        x.data<E>(), bias.data<E>(), A_log.data<E>(), r.dt.data<E>(), r.g.data<E>(), n, int(H), float(lo), float(hi));
    HYB_CUDA_LAUNCH_CHECK("ssm_decay_forward_kernel", blocks, kThreads, 0);
  });
  return r;
}

SsmDecayGrads ssm_decay_backward_cuda(const SsmDecaySaved& s, const Tensor& ddt0, const Tensor& dg0, GradMask needed) {
  const Tensor x = s.x.contiguous(), bias = s.dt_bias.contiguous(), A_log = s.A_log.contiguous(), g = s.g.contiguous();
  const Tensor ddt = ddt0.defined() ? ddt0.contiguous() : Tensor(), dg = dg0.defined() ? dg0.contiguous() : Tensor();
  const int64_t H = x.size(-1), n = x.numel(), rows = n / std::max<int64_t>(H, 1);
  const int dev = x.device().index;
  SsmDecayGrads out;
  Tensor dzz = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (needed[1]) out.ddt_bias = Tensor::zeros({H}, x.dtype(), x.device());
  if (needed[2]) out.dA_log = Tensor::zeros({H}, x.dtype(), x.device());
  if (n > 0)
    visit_cuda_float("ssm_decay_backward_cuda", x.dtype(), [&](auto tag) {
      using E = decltype(tag);
      const E* dgp = dg.defined() ? dg.data<E>() : nullptr;
      const int blocks = grid_blocks(n, kThreads, dev);
      ssm_decay_backward_dx_kernel<E><<<blocks, kThreads, 0, current_stream(dev)>>>(
          x.data<E>(), bias.data<E>(), A_log.data<E>(), ddt.defined() ? ddt.data<E>() : nullptr, dgp, dzz.data<E>(), n,
          int(H), float(s.lo), float(s.hi));
      HYB_CUDA_LAUNCH_CHECK("ssm_decay_backward_dx_kernel", blocks, kThreads, 0);
      if (needed[1] || needed[2]) {
        ssm_decay_backward_head_sum_kernel<E><<<int(H), kThreads, 0, current_stream(dev)>>>(
            dzz.data<E>(), needed[2] ? dgp : nullptr, g.data<E>(), needed[1] ? out.ddt_bias.data<E>() : nullptr,
            needed[2] ? out.dA_log.data<E>() : nullptr, rows, int(H));
        HYB_CUDA_LAUNCH_CHECK("ssm_decay_backward_head_sum_kernel", H, kThreads, 0);
      }
    });
  if (needed[0]) out.dx = dzz;
  return out;
}

}  // namespace hyb
