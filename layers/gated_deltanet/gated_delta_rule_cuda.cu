// CUDA gated delta rule in the chunked WY/UT form of gated_deltanet.md 4, chunks of kScanChunk = 64
// tokens whatever GatedDeltaParams::chunk_size says. Matrix products go through the batched chunk
// GEMM of kernels/chunk_cuda.h on fp32 scratch (so no MMA accumulator is ever reused as an operand,
// 4.8 item 1); the triangular solve is fp32 forward substitution (4.6 item 3). The inter-chunk
// recurrences (F3 and backward stage 1) are host loops over chunks, two or three batched launches
// per chunk, each batched over (b, value head). This file holds the launch sequence and the two
// row kernels (dG1 of stage 2; dbeta, the WY part of dG and the reverse cumsum of stage 3).
// Shared q/k heads (GVA): per-value-head dQ and dK are kept and summed over the value heads of each
// q/k head in head order when written out (no atomics).
#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/chunk_cuda.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb {
namespace {

constexpr int kRowThreads = 128;  // row kernels: thread r < 64 owns row r of the chunk

// ---------------------------------------------------------------------------------------------
// Backward row kernels
// ---------------------------------------------------------------------------------------------

// Stage 2: dG1_r = q_r . dQ_r - k_r . dK1_r, plus <S_{c+1}, D_c> on the chunk's last valid row.
// Grid: one block per (b, j, c). q, k (B, T, H, K); dQ, dK1 (B, HV, NC, 64, K); states, D
// (B, HV, NC + 1, K V) with slot c + 1 = S_{c+1} and D_c; dG (B, HV, NC, 64) f32.
template <typename E>
__global__ void gated_delta_rule_backward_dg1_kernel(const E* __restrict__ q, const E* __restrict__ k,
                                                     const float* __restrict__ dQ, const float* __restrict__ dK,
                                                     const float* __restrict__ states, const float* __restrict__ D,
                                                     float* __restrict__ dG, int64_t T, int64_t HV, int64_t H,
                                                     int64_t vpq, int64_t NC, int64_t K, int64_t KV) {
  const int64_t z = blockIdx.x, c = z % NC, j = (z / NC) % HV, b = z / NC / HV;
  const int n = int(std::min<int64_t>(kScanChunk, T - c * kScanChunk));
  const int64_t slot = (b * HV + j) * (NC + 1) + c + 1;
  float inner = 0.f;
  for (int64_t e = threadIdx.x; e < KV; e += blockDim.x) inner += states[slot * KV + e] * D[slot * KV + e];
  inner = block_reduce_sum(inner);
  const int r = threadIdx.x;
  if (r >= kScanChunk) return;
  float acc = 0.f;
  if (r < n) {
    const int64_t t = c * kScanChunk + r, i = j / vpq;
    const E* qr = q + ((b * T + t) * H + i) * K;
    const E* kr = k + ((b * T + t) * H + i) * K;
    const float* dqr = dQ + (z * kScanChunk + r) * K;
    const float* dkr = dK + (z * kScanChunk + r) * K;
    for (int64_t x = 0; x < K; ++x) acc += to_f32(qr[x]) * dqr[x] - to_f32(kr[x]) * dkr[x];
    if (r == n - 1) acc += inner;
  }
  dG[z * kScanChunk + r] = acc;
}

// Stage 3 rows, then dg = revcumsum(dG) within the chunk. With X1 = Ainv^T dW, X2 = Ainv^T dU,
// dM = tril(-Ainv^T dA Ainv^T, -1), M = tril(beta .* L .* (K K^T), -1):
//   dbeta_r = gam_r (k_r . X1_r) + v_r . X2_r + sum_i dM[r, i] L[r, i] (k_r . k_i)
//   dG_r   += beta_r gam_r (k_r . X1_r) + sum_i Z[r, i] - sum_i Z[i, r],   Z = dM .* M
// Grid: one block per (b, j, c), kRowThreads threads. KK (raw K K^T), M, dM (B, HV, NC, 64, 64);
// X1 (.., 64, K), X2 (.., 64, V); G, gam, beta (B, HV, NC, 64); dbeta, dg (B, T, HV) f32.
template <typename E>
__global__ void gated_delta_rule_backward_wy_rows_kernel(
    const E* __restrict__ k, const E* __restrict__ v, const float* __restrict__ KK, const float* __restrict__ M,
    const float* __restrict__ dM, const float* __restrict__ X1, const float* __restrict__ X2,
    const float* __restrict__ G, const float* __restrict__ gam, const float* __restrict__ beta,
    const float* __restrict__ dG1, float* __restrict__ dbeta, float* __restrict__ dg, int64_t T, int64_t HV, int64_t H,
    int64_t vpq, int64_t NC, int64_t K, int64_t V) {
  __shared__ float s_dG[kScanChunk];
  const int64_t z = blockIdx.x, c = z % NC, j = (z / NC) % HV, b = z / NC / HV;
  const int n = int(std::min<int64_t>(kScanChunk, T - c * kScanChunk));
  const int r = threadIdx.x;
  if (r < kScanChunk) {
    float dGr = 0.f;
    if (r < n) {
      const int64_t t = c * kScanChunk + r, i = j / vpq;
      const E* kr = k + ((b * T + t) * H + i) * K;
      const E* vr = v + ((b * T + t) * HV + j) * V;
      const float* x1 = X1 + (z * kScanChunk + r) * K;
      const float* x2 = X2 + (z * kScanChunk + r) * V;
      float kx1 = 0.f, vx2 = 0.f;
      for (int64_t x = 0; x < K; ++x) kx1 += to_f32(kr[x]) * x1[x];
      for (int64_t x = 0; x < V; ++x) vx2 += to_f32(vr[x]) * x2[x];
      const float* Gz = G + z * kScanChunk;
      const int64_t base = z * kScanChunk * kScanChunk;
      float db = gam[z * kScanChunk + r] * kx1 + vx2;
      float zrow = 0.f, zcol = 0.f;
      for (int i2 = 0; i2 < r; ++i2) {
        const float dm = dM[base + r * kScanChunk + i2];
        db += dm * expf(fminf(Gz[r] - Gz[i2], 0.f)) * KK[base + r * kScanChunk + i2];
        zrow += dm * M[base + r * kScanChunk + i2];
      }
      for (int i2 = r + 1; i2 < n; ++i2) zcol += dM[base + i2 * kScanChunk + r] * M[base + i2 * kScanChunk + r];
      dGr = dG1[z * kScanChunk + r] + beta[z * kScanChunk + r] * gam[z * kScanChunk + r] * kx1 + zrow - zcol;
      dbeta[(b * T + t) * HV + j] = db;
    }
    s_dG[r] = dGr;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float run = 0.f;
    for (int i2 = n - 1; i2 >= 0; --i2) {
      run += s_dG[i2];
      dg[(b * T + c * kScanChunk + i2) * HV + j] = run;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Launch sequences
// ---------------------------------------------------------------------------------------------

struct Wy {  // everything F1-F3 produce (gated_deltanet.md 4.2-4.3); the backward's stage 0
  ChunkGates gates;
  ChunkBuffer KK;      // (64, 64) raw K @ K^T
  ChunkBuffer M;       // (64, 64) tril(beta .* L .* KK, -1)
  ChunkBuffer Ainv;    // (64, 64) (I + M)^-1
  ChunkBuffer W;       // (64, K) Ainv @ (beta gam .* K)
  ChunkBuffer U;       // (64, V) U0 = Ainv @ (beta .* V), then U = U0 - W @ S_c
  ChunkBuffer states;  // (K, V), NC + 1 slots: slot c = S at the start of chunk c, slot NC = S_T
};

Wy run_wy(const ChunkView& kv, const ChunkView& vv, const Tensor& g, const Tensor& beta, const Tensor& S0,
          const ChunkDims& d, int64_t K, int64_t V, Device dev) {
  const int C = kScanChunk;
  Wy w{chunk_gates_cuda(g, beta, d),
       ChunkBuffer(d.B, d.H, d.NC, C, C, dev),
       ChunkBuffer(d.B, d.H, d.NC, C, C, dev),
       ChunkBuffer(d.B, d.H, d.NC, C, C, dev),
       ChunkBuffer(d.B, d.H, d.NC, C, int(K), dev),
       ChunkBuffer(d.B, d.H, d.NC, C, int(V), dev),
       ChunkBuffer(d.B, d.H, d.NC + 1, int(K), int(V), dev)};
  chunk_gemm(w.KK.view(0, 1), kv, kv.t(), nullptr, nullptr, 1.f, d);
  chunk_gemm(w.M.view(0, 1), kv, kv.t(), nullptr, nullptr, 1.f, d);
  chunk_mask(w.M, &w.gates, &w.gates.beta, true, d);
  chunk_unit_lower_inverse(w.Ainv, w.M, d);
  const ChunkView ainv = w.Ainv.view(0, 1), wv = w.W.view(0, 1), uv = w.U.view(0, 1);
  chunk_gemm(wv, ainv, scale_by(kv, w.gates.bg), nullptr, nullptr, 1.f, d);
  chunk_gemm(uv, ainv, scale_by(vv, w.gates.beta), nullptr, nullptr, 1.f, d);
  // F3: U_c = U0_c - W_c @ S_c, S_{c+1} = gam_n S_c + (kd .* K)^T @ U_c, sequential over chunks.
  chunk_slot_load(w.states, 0, S0);
  const ChunkView s_c = w.states.view(0), s_next = w.states.view(1), kdk_t = scale_by(kv.t(), w.gates.kd);
  for (int64_t c = 0; c < d.NC; ++c) {
    const ChunkDims dc = d.at(c);
    chunk_gemm(uv, wv, s_c, &uv, nullptr, -1.f, dc);
    chunk_gemm(s_next, kdk_t, uv, &s_c, w.gates.Glast.data<float>(), 1.f, dc);
  }
  return w;
}

// P = L .* (Q @ K^T) for every chunk, into p.
void masked_scores(const ChunkBuffer& p, const ChunkView& qv, const ChunkView& kv, const ChunkGates& gates,
                   const ChunkDims& d) {
  chunk_gemm(p.view(0, 1), qv, kv.t(), nullptr, nullptr, 1.f, d);
  chunk_mask(p, &gates, nullptr, false, d);
}

}  // namespace

GatedDeltaOutputs gated_delta_rule_forward_cuda(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                                const Tensor& beta0, const Tensor& g0, const Tensor& S00,
                                                double scale) {
  const GatedDeltaDims gd = gated_delta_rule_dims("gated_delta_rule_forward", q0, k0, v0, beta0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), beta = beta0.contiguous(),
               g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  HYB_CHECK(g.dtype() == DType::f32 && beta.dtype() == DType::f32,
            "gated_delta_rule_forward_cuda: beta and g must be f32 on CUDA, got ", dtype_name(beta.dtype()), " and ",
            dtype_name(g.dtype()));
  const Device dev = q.device();
  CudaDeviceGuard guard(dev.index);
  GatedDeltaOutputs r{Tensor::empty({gd.B, gd.T, gd.HV, gd.V}, q.dtype(), dev),
                      Tensor::zeros({gd.B, gd.HV, gd.K, gd.V}, DType::f32, dev)};
  if (gd.T == 0) {
    if (S0.defined()) r.final_state.copy_(S0);
    return r;
  }
  const ChunkDims d{gd.B, gd.T, gd.HV, (gd.T + kScanChunk - 1) / kScanChunk, dev.index};
  const ChunkView qv = token_view(q, gd.v_per_qk), kv = token_view(k, gd.v_per_qk), vv = token_view(v, 1);
  const Wy w = run_wy(kv, vv, g, beta, S0, d, gd.K, gd.V, dev);
  // F4: O = scale (gam .* (Q @ S_c) + (L .* (Q @ K^T)) @ U).
  ChunkBuffer P(d.B, d.H, d.NC, kScanChunk, kScanChunk, dev), O(d.B, d.H, d.NC, kScanChunk, int(gd.V), dev);
  masked_scores(P, qv, kv, w.gates, d);
  const ChunkView ov = O.view(0, 1);
  chunk_gemm(ov, scale_by(qv, w.gates.gam), w.states.view(0), nullptr, nullptr, float(scale), d);
  chunk_gemm(ov, P.view(0, 1), w.U.view(0, 1), &ov, nullptr, float(scale), d);
  chunk_to_tokens(r.o, O, 1, nullptr, 1.f, d);
  chunk_slot_store(r.final_state, w.states, d.NC);
  return r;
}

GatedDeltaGrads gated_delta_rule_backward_cuda(const GatedDeltaSaved& sv, const Tensor& dout0, const Tensor& dfinal0,
                                               GradMask needed) {
  const GatedDeltaDims gd = gated_delta_rule_dims("gated_delta_rule_backward", sv.q, sv.k, sv.v, sv.beta, sv.g, sv.S0);
  const Tensor q = sv.q.contiguous(), k = sv.k.contiguous(), v = sv.v.contiguous(), beta = sv.beta.contiguous(),
               g = sv.g.contiguous();
  const Tensor S0 = sv.S0.defined() ? sv.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(gd.K));
  const Device dev = q.device();
  CudaDeviceGuard guard(dev.index);
  const DType dt = q.dtype();
  GatedDeltaGrads out;
  if (needed[0]) out.dq = Tensor::zeros(q.shape(), dt, dev);
  if (needed[1]) out.dk = Tensor::zeros(k.shape(), dt, dev);
  if (needed[2]) out.dv = Tensor::zeros(v.shape(), dt, dev);
  if (needed[3]) out.dbeta = Tensor::zeros(beta.shape(), DType::f32, dev);
  if (needed[4]) out.dg = Tensor::zeros(g.shape(), DType::f32, dev);
  const bool want_dS0 = needed[5] && S0.defined();
  if (want_dS0) out.dS0 = Tensor::zeros(S0.shape(), DType::f32, dev);
  if (gd.T == 0) {
    if (want_dS0 && dfinal.defined()) out.dS0.copy_(dfinal);
    return out;
  }
  const int C = kScanChunk;
  const ChunkDims d{gd.B, gd.T, gd.HV, (gd.T + C - 1) / C, dev.index};
  const int64_t vpq = gd.v_per_qk, K = gd.K, V = gd.V;
  const ChunkView qv = token_view(q, vpq), kv = token_view(k, vpq), vv = token_view(v, 1), dov = token_view(dout, 1);
  const Wy w = run_wy(kv, vv, g, beta, S0, d, K, V, dev);  // stage 0
  const ChunkGates& gt = w.gates;
  const float* Glast = gt.Glast.data<float>();
  const ChunkView uv = w.U.view(0, 1), wv = w.W.view(0, 1), ainv = w.Ainv.view(0, 1), s_c = w.states.view(0);

  // Stage 1. dU_c = scale (L .* (Q K^T))^T @ dO + kd .* (K @ D_c);
  //          D_{c-1} = gam_n D_c + scale (gam .* Q)^T @ dO - W^T @ dU_c.
  // D (NC + 1 slots): slot c holds the local term of chunk c, then D_{c-1}; slot NC = dfinal.
  ChunkBuffer P(d.B, d.H, d.NC, C, C, dev), dU(d.B, d.H, d.NC, C, int(V), dev);
  ChunkBuffer D(d.B, d.H, d.NC + 1, int(K), int(V), dev);
  const ChunkView pv = P.view(0, 1), duv = dU.view(0, 1), d_prev = D.view(0), d_end = D.view(1);
  masked_scores(P, qv, kv, gt, d);
  chunk_gemm(duv, pv.t(), dov, nullptr, nullptr, float(scale), d);
  chunk_gemm(d_prev, scale_by(qv.t(), gt.gam), dov, nullptr, nullptr, float(scale), d);
  chunk_slot_load(D, d.NC, dfinal);
  const ChunkView kd_k = scale_by(kv, gt.kd);
  for (int64_t c = d.NC - 1; c >= 0; --c) {
    const ChunkDims dc = d.at(c);
    chunk_gemm(duv, kd_k, d_end, &duv, nullptr, 1.f, dc);
    chunk_gemm(d_prev, wv.t(), duv, &d_prev, nullptr, -1.f, dc);
    chunk_axpy_cuda(d_prev, d_end, Glast, dc);
  }
  if (want_dS0) chunk_slot_store(out.dS0, D, 0);

  // Stage 2 (S = S_c, D = D_c = slot c + 1).
  ChunkBuffer dQ(d.B, d.H, d.NC, C, int(K), dev), dK(d.B, d.H, d.NC, C, int(K), dev),
      dW(d.B, d.H, d.NC, C, int(K), dev);
  const ChunkView dqv = dQ.view(0, 1), dkv = dK.view(0, 1), dwv = dW.view(0, 1);
  chunk_gemm(pv, dov, uv.t(), nullptr, nullptr, float(scale), d);  // dP = scale (dO @ U^T) .* L
  chunk_mask(P, &gt, nullptr, false, d);
  chunk_gemm(dqv, scale_by(dov, gt.gam), s_c.t(), nullptr, nullptr, float(scale), d);
  chunk_gemm(dqv, pv, kv, &dqv, nullptr, 1.f, d);                   // dQ
  chunk_gemm(dkv, pv.t(), qv, nullptr, nullptr, 1.f, d);
  chunk_gemm(dkv, scale_by(uv, gt.kd), d_end.t(), &dkv, nullptr, 1.f, d);  // dK1
  chunk_gemm(dwv, duv, s_c.t(), nullptr, nullptr, -1.f, d);         // dW = -dU @ S^T
  Tensor dG1 = Tensor::empty({d.B, d.H, d.NC, C}, DType::f32, dev);
  const unsigned row_blocks = unsigned(d.B * d.H * d.NC);
  visit_cuda_float("gated_delta_rule_backward_cuda", dt, [&](auto tag) {
    using E = decltype(tag);
    gated_delta_rule_backward_dg1_kernel<E><<<row_blocks, kRowThreads, 0, current_stream(dev.index)>>>(
        q.data<E>(), k.data<E>(), dQ.data(), dK.data(), w.states.data(), D.data(), dG1.data<float>(), d.T, d.H, gd.H,
        vpq, d.NC, K, K * V);
    HYB_CUDA_LAUNCH_CHECK("gated_delta_rule_backward_dg1_kernel", row_blocks, kRowThreads, 0);
  });

  // Stage 3, the WY backward. dA reuses P (dP is consumed).
  const ChunkView dav = pv;
  chunk_gemm(dav, dwv, scale_by(kv, gt.bg).t(), nullptr, nullptr, 1.f, d);  // dW @ Kb^T
  chunk_gemm(dav, duv, scale_by(vv, gt.beta).t(), &dav, nullptr, 1.f, d);   // + dU @ Vb^T
  chunk_mask(P, nullptr, nullptr, true, d);                                  // tril(., -1)
  ChunkBuffer X1(d.B, d.H, d.NC, C, int(K), dev), X2(d.B, d.H, d.NC, C, int(V), dev);
  chunk_gemm(X1.view(0, 1), ainv.t(), dwv, nullptr, nullptr, 1.f, d);
  chunk_gemm(X2.view(0, 1), ainv.t(), duv, nullptr, nullptr, 1.f, d);
  chunk_axpy_cuda(dkv, scale_by(X1.view(0, 1), gt.bg), nullptr, d);  // dK += beta gam .* X1
  // dM = tril(-Ainv^T @ dA @ Ainv^T, -1); R = beta .* (dM .* L).
  ChunkBuffer T1(d.B, d.H, d.NC, C, C, dev), dM(d.B, d.H, d.NC, C, C, dev);
  chunk_gemm(T1.view(0, 1), ainv.t(), dav, nullptr, nullptr, 1.f, d);
  chunk_gemm(dM.view(0, 1), T1.view(0, 1), ainv.t(), nullptr, nullptr, -1.f, d);
  chunk_mask(dM, nullptr, nullptr, true, d);
  ChunkBuffer& R = T1;  // T1 is consumed
  chunk_mask(R, &gt, &gt.beta, true, d, &dM);
  chunk_gemm(dkv, R.view(0, 1), kv, &dkv, nullptr, 1.f, d);        // dK += R @ K
  chunk_gemm(dkv, R.view(0, 1).t(), kv, &dkv, nullptr, 1.f, d);    // dK += R^T @ K
  Tensor dbeta = needed[3] ? out.dbeta : Tensor::empty(beta.shape(), DType::f32, dev);
  Tensor dg = needed[4] ? out.dg : Tensor::empty(g.shape(), DType::f32, dev);
  visit_cuda_float("gated_delta_rule_backward_cuda", dt, [&](auto tag) {
    using E = decltype(tag);
    gated_delta_rule_backward_wy_rows_kernel<E><<<row_blocks, kRowThreads, 0, current_stream(dev.index)>>>(
        k.data<E>(), v.data<E>(), w.KK.data(), w.M.data(), dM.data(), X1.data(), X2.data(), gt.G.p(), gt.gam.p(),
        gt.beta.p(), dG1.data<float>(), dbeta.data<float>(), dg.data<float>(), d.T, d.H, gd.H, vpq, d.NC, K, V);
    HYB_CUDA_LAUNCH_CHECK("gated_delta_rule_backward_wy_rows_kernel", row_blocks, kRowThreads, 0);
  });
  if (needed[0]) chunk_to_tokens(out.dq, dQ, vpq, nullptr, 1.f, d);
  if (needed[1]) chunk_to_tokens(out.dk, dK, vpq, nullptr, 1.f, d);
  if (needed[2]) chunk_to_tokens(out.dv, X2, 1, &gt.beta, 1.f, d);  // dV = beta .* X2
  return out;
}

}  // namespace hyb
