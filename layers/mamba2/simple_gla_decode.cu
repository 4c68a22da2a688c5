// One-token simple_gla on CUDA (mamba2.md 5, the SSD step of decoding): for T = 1 the chunked
// sequence would run a dozen launches on 64-token scratch; this is one kernel on the state.
//   S = exp(g) S0 + outer(k, v),   o = scale S^T q      (per batch element and head)
// Grid (B H, ceil(V / 128)); 128 threads, thread j owns column j of the state (coalesced rows of
// S0 and S); q and k of the head's group are staged in shared memory (2 K floats). fp32 throughout.
// Forward only: a T = 1 backward goes through the chunked kernels (same math).
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/mamba2/simple_gla_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 128;

// q, k (B, 1, Gq, K); v, o (B, 1, H, V); g (B, 1, H) f32; S0 (B, H, K, V) f32 or null; S (B, H, K, V).
template <typename E>
__global__ void simple_gla_decode_kernel(const E* __restrict__ q, const E* __restrict__ k, const E* __restrict__ v,
                                         const float* __restrict__ g, const float* __restrict__ S0,
                                         E* __restrict__ o, float* __restrict__ S, int64_t H, int64_t Gq,
                                         int64_t hpg, int64_t K, int64_t V, float scale) {
  extern __shared__ float s_qk[];  // q then k of the group, 2 K floats
  const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, grp = h / hpg;
  const E* qr = q + (b * Gq + grp) * K;
  const E* kr = k + (b * Gq + grp) * K;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    s_qk[i] = to_f32(qr[i]);
    s_qk[K + i] = to_f32(kr[i]);
  }
  __syncthreads();
  const int64_t j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= V) return;
  const float a = expf(g[bh]), vj = to_f32(v[bh * V + j]);
  const float* s0 = S0 ? S0 + bh * K * V + j : nullptr;
  float* s = S + bh * K * V + j;
  float acc = 0.f;
  for (int64_t i = 0; i < K; ++i) {
    const float si = (s0 ? a * s0[i * V] : 0.f) + s_qk[K + i] * vj;
    s[i * V] = si;
    acc += si * s_qk[i];
  }
  o[bh * V + j] = from_f32<E>(scale * acc);
}

}  // namespace

SimpleGlaOutputs simple_gla_decode_cuda(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0,
                                        const Tensor& S00, double scale) {
  const SimpleGlaDims d = simple_gla_dims("simple_gla_forward", q0, k0, v0, g0, S00);
  HYB_ASSERT(d.T == 1, "simple_gla_decode_cuda: one token, got T = ", d.T);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  HYB_CHECK(g.dtype() == DType::f32, "simple_gla_decode_cuda: g and the state must be f32 on CUDA, got ",
            dtype_name(g.dtype()));
  const Device dev = q.device();
  SimpleGlaOutputs r{Tensor::empty({d.B, 1, d.H, d.V}, q.dtype(), dev), Tensor::empty({d.B, d.H, d.K, d.V}, DType::f32, dev)};
  if (d.B * d.H * d.V == 0) return r;
  const dim3 grid(unsigned(d.B * d.H), unsigned((d.V + kThreads - 1) / kThreads));
  const size_t smem = size_t(2 * d.K) * sizeof(float);
  HYB_CHECK(smem <= 48 * 1024, "simple_gla_decode_cuda: K = ", d.K, " exceeds the 6144 that shared memory stages");
  visit_cuda_float("simple_gla_decode_cuda", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    simple_gla_decode_kernel<E><<<grid, kThreads, smem, current_stream(dev.index)>>>(
        q.data<E>(), k.data<E>(), v.data<E>(), g.data<float>(), S0.defined() ? S0.data<float>() : nullptr,
        r.o.data<E>(), r.final_state.data<float>(), d.H, d.Gq, d.heads_per_group, d.K, d.V, float(scale));
    HYB_CUDA_LAUNCH_CHECK("simple_gla_decode_kernel", grid, kThreads, smem);
  });
  return r;
}

}  // namespace hyb
