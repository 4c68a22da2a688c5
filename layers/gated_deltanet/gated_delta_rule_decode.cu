// One-token gated delta rule on CUDA (gated_deltanet.md 5, the step of decoding): for T = 1 the
// chunked sequence would run a few dozen launches on 64-token scratch; this is one kernel on the state.
//   S' = exp(g) S0,  u = beta (v - S'^T k),  S = S' + outer(k, u),  o = scale S^T q
// per batch element and value head j (q, k of head j / (HV / H)). Grid (B HV, ceil(V / 128)); 128
// threads, thread j owns column j of the state and reads it twice (for p_j = S'^T k, then for the
// update), coalesced along V; q and k are staged in shared memory (2 K floats). fp32 throughout.
// Forward only: a T = 1 backward goes through the chunked kernels (same math).
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 128;

// q, k (B, 1, H, K); v, o (B, 1, HV, V); beta, g (B, 1, HV) f32; S0 (B, HV, K, V) f32 or null;
// S (B, HV, K, V).
template <typename E>
__global__ void gated_delta_rule_decode_kernel(const E* __restrict__ q, const E* __restrict__ k,
                                               const E* __restrict__ v, const float* __restrict__ beta,
                                               const float* __restrict__ g, const float* __restrict__ S0,
                                               E* __restrict__ o, float* __restrict__ S, int64_t HV, int64_t H,
                                               int64_t vpq, int64_t K, int64_t V, float scale) {
  extern __shared__ float s_qk[];  // q then k of the q/k head, 2 K floats
  const int64_t bj = blockIdx.x, b = bj / HV, jh = bj % HV, i = jh / vpq;
  const E* qr = q + (b * H + i) * K;
  const E* kr = k + (b * H + i) * K;
  for (int64_t e = threadIdx.x; e < K; e += blockDim.x) {
    s_qk[e] = to_f32(qr[e]);
    s_qk[K + e] = to_f32(kr[e]);
  }
  __syncthreads();
  const int64_t col = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (col >= V) return;
  const float a = expf(g[bj]);
  const float* s0 = S0 ? S0 + bj * K * V + col : nullptr;
  float p = 0.f;  // (S'^T k)_col
  if (s0)
    for (int64_t e = 0; e < K; ++e) p += a * s0[e * V] * s_qk[K + e];
  const float u = beta[bj] * (to_f32(v[bj * V + col]) - p);
  float* s = S + bj * K * V + col;
  float acc = 0.f;
  for (int64_t e = 0; e < K; ++e) {
    const float se = (s0 ? a * s0[e * V] : 0.f) + s_qk[K + e] * u;
    s[e * V] = se;
    acc += se * s_qk[e];
  }
  o[bj * V + col] = from_f32<E>(scale * acc);
}

}  // namespace

GatedDeltaOutputs gated_delta_rule_decode_cuda(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                               const Tensor& beta0, const Tensor& g0, const Tensor& S00,
                                               double scale) {
  const GatedDeltaDims d = gated_delta_rule_dims("gated_delta_rule_forward", q0, k0, v0, beta0, g0, S00);
  HYB_ASSERT(d.T == 1, "gated_delta_rule_decode_cuda: one token, got T = ", d.T);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), beta = beta0.contiguous(),
               g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  HYB_CHECK(g.dtype() == DType::f32 && beta.dtype() == DType::f32,
            "gated_delta_rule_decode_cuda: beta, g and the state must be f32 on CUDA, got ", dtype_name(beta.dtype()),
            " and ", dtype_name(g.dtype()));
  const Device dev = q.device();
  GatedDeltaOutputs r{Tensor::empty({d.B, 1, d.HV, d.V}, q.dtype(), dev),
                      Tensor::empty({d.B, d.HV, d.K, d.V}, DType::f32, dev)};
  if (d.B * d.HV * d.V == 0) return r;
  const dim3 grid(unsigned(d.B * d.HV), unsigned((d.V + kThreads - 1) / kThreads));
  const size_t smem = size_t(2 * d.K) * sizeof(float);
  HYB_CHECK(smem <= 48 * 1024, "gated_delta_rule_decode_cuda: K = ", d.K, " exceeds the 6144 that shared memory stages");
  visit_cuda_float("gated_delta_rule_decode_cuda", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    gated_delta_rule_decode_kernel<E><<<grid, kThreads, smem, current_stream(dev.index)>>>(
        q.data<E>(), k.data<E>(), v.data<E>(), beta.data<float>(), g.data<float>(),
        S0.defined() ? S0.data<float>() : nullptr, r.o.data<E>(), r.final_state.data<float>(), d.HV, d.H, d.v_per_qk,
        d.K, d.V, float(scale));
    HYB_CUDA_LAUNCH_CHECK("gated_delta_rule_decode_kernel", grid, kThreads, smem);
  });
  return r;
}

}  // namespace hyb
