// CUDA mixing (pha_mix_op.h has the math). Elementwise grid-stride kernels that compute w from the
// k logits themselves, so the host never waits on the device. The backward writes dn_i and each
// block's sums of G n_i in one pass; a one-block kernel then adds the block sums in block order and
// forms dp: the same bits on every run for a given shape and device.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/pha/pha_mix_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct Branches {
  const T* n[kPhaMaxBranches];
  T* dn[kPhaMaxBranches];
};

__device__ __forceinline__ float softplus_f(float x) { return fmaxf(x, 0.f) + log1pf(__expf(-fabsf(x))); }

__device__ __forceinline__ void mix_weights(const float* p, int k, float* w, float* S) {
  float total = 0;
  for (int i = 0; i < k; ++i) {
    w[i] = softplus_f(p[i]);
    total += w[i];
  }
  for (int i = 0; i < k; ++i) w[i] /= total;
  if (S) *S = total;
}

template <typename T>
__global__ void pha_mix_forward_kernel(Branches<T> b, const float* __restrict__ p, int k, T* __restrict__ m, int64_t N) {
  float w[kPhaMaxBranches];
  mix_weights(p, k, w, nullptr);
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N; e += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0;
    for (int i = 0; i < k; ++i) acc += w[i] * to_f32(b.n[i][e]);
    m[e] = from_f32<T>(acc);
  }
}

// partial[block * k + i] = this block's sum of G n_i (when want_p).
template <typename T>
__global__ void pha_mix_backward_kernel(Branches<T> b, const float* __restrict__ p, int k, const T* __restrict__ g,
                                        int64_t N, bool want_p, float* __restrict__ partial) {
  float w[kPhaMaxBranches];
  mix_weights(p, k, w, nullptr);
  float acc[kPhaMaxBranches] = {0.f, 0.f, 0.f};
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N; e += int64_t(gridDim.x) * blockDim.x) {
    const float ge = to_f32(g[e]);
    for (int i = 0; i < k; ++i) {
      if (b.dn[i]) b.dn[i][e] = from_f32<T>(w[i] * ge);
      if (want_p) acc[i] += ge * to_f32(b.n[i][e]);
    }
  }
  if (!want_p) return;
  for (int i = 0; i < k; ++i) {
    const float s = block_reduce_sum(acc[i]);
    if (threadIdx.x == 0) partial[int64_t(blockIdx.x) * k + i] = s;
  }
}

__global__ void pha_mix_logits_kernel(const float* __restrict__ partial, int blocks, const float* __restrict__ p, int k,
                                      float* __restrict__ dp) {
  __shared__ float gi[kPhaMaxBranches];
  for (int i = 0; i < k; ++i) {
    float acc = 0;
    for (int r = threadIdx.x; r < blocks; r += blockDim.x) acc += partial[int64_t(r) * k + i];
    acc = block_reduce_sum(acc);
    if (threadIdx.x == 0) gi[i] = acc;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float w[kPhaMaxBranches], S;
  mix_weights(p, k, w, &S);
  float gbar = 0;
  for (int i = 0; i < k; ++i) gbar += w[i] * gi[i];
  for (int i = 0; i < k; ++i) dp[i] = (gi[i] - gbar) / (S * (1.f + __expf(-p[i])));
}

void check_logits(const Tensor& p) {
  HYB_CHECK(p.dtype() == DType::f32, "pha_mix: the CUDA path takes f32 logits, got ", dtype_name(p.dtype()));
}

}  // namespace

Tensor pha_mix_forward_cuda(const std::vector<Tensor>& n0, const Tensor& p0) {
  check_logits(p0);
  const Tensor p = p0.contiguous();
  std::vector<Tensor> n;
  for (const Tensor& t : n0) n.push_back(t.contiguous());
  const int dev = n[0].device().index;
  Tensor m = Tensor::empty(n[0].shape(), n[0].dtype(), n[0].device());
  const int64_t N = m.numel();
  if (N == 0) return m;
  visit_cuda_float("pha_mix_forward", m.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Branches<T> b{};
    for (size_t i = 0; i < n.size(); ++i) b.n[i] = n[i].data<T>();
    pha_mix_forward_kernel<T><<<grid_blocks(N, kThreads, dev), kThreads, 0, current_stream(dev)>>>(
        b, p.data<float>(), int(n.size()), m.data<T>(), N);
    HYB_CUDA_CHECK(cudaGetLastError());
  });
  return m;
}

PhaMixGrads pha_mix_backward_cuda(const PhaMixSaved& s, const Tensor& dm0, GradMask needed) {
  check_logits(s.p);
  const Tensor p = s.p.contiguous(), dm = dm0.contiguous();
  const int k = int(s.n.size());
  const int dev = dm.device().index;
  const int64_t N = dm.numel();
  const bool want_p = needed[size_t(k)];
  PhaMixGrads g;
  g.dn.resize(size_t(k));
  std::vector<Tensor> n;
  for (const Tensor& t : s.n) n.push_back(want_p ? t.contiguous() : t);
  const int blocks = std::max(1, grid_blocks(N, kThreads, dev));
  Tensor partial = want_p ? Tensor::empty({blocks, k}, DType::f32, dm.device()) : Tensor();
  visit_cuda_float("pha_mix_backward", dm.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Branches<T> b{};
    for (int i = 0; i < k; ++i) {
      if (want_p) b.n[i] = n[size_t(i)].data<T>();
      if (!needed[size_t(i)]) continue;
      g.dn[size_t(i)] = Tensor::empty(dm.shape(), dm.dtype(), dm.device());
      b.dn[i] = g.dn[size_t(i)].data<T>();
    }
    if (N > 0)
      pha_mix_backward_kernel<T><<<blocks, kThreads, 0, current_stream(dev)>>>(
          b, p.data<float>(), k, dm.data<T>(), N, want_p, want_p ? partial.data<float>() : nullptr);
    HYB_CUDA_CHECK(cudaGetLastError());
  });
  if (!want_p) return g;
  if (N == 0) partial.fill_(0.0);
  g.dp = Tensor::empty({k}, DType::f32, dm.device());
  pha_mix_logits_kernel<<<1, kThreads, 0, current_stream(dev)>>>(partial.data<float>(), blocks, p.data<float>(), k,
                                                                 g.dp.data<float>());
  HYB_CUDA_CHECK(cudaGetLastError());
  return g;
}

}  // namespace hyb
