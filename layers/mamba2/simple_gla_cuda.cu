// CUDA simple_gla (the SSD core) in the chunked form of mamba2.md 4 with chunks of kScanChunk = 64
// tokens, whatever SimpleGlaParams::chunk_size says (the chunk changes rounding only). The matrix
// products run through the batched chunk GEMM of kernels/chunk_cuda.h on fp32 scratch; this file
// holds the two state-passing scans and the dg kernel, the parts specific to the scalar decay.
// Forward (4.2): F1 gates, F2 local states into slots 1..NC of the state buffer, F3 the scan that
// turns them into chunk-start states in place, F4 O = scale (gam .* (Q @ S_c) + (L .* (Q @ K^T)) @ V).
// Backward (4.3): B1 = F1-F3 again; B2 the local gradients scale (gam .* Q)^T @ dO, then the reverse
// scan, in place, leaving D_c (the gradient at the end of chunk c) in slot c + 1 and dS0 in slot 0;
// B3 dQ, dK, dV as GEMMs and dG from the row-dot identity, then its reverse cumsum.
// Shared q/k groups: per-head dQ and dK are kept (the dG identity needs them) and summed over the
// heads of a group in head order when written out (no atomics).
#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/chunk_cuda.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/mamba2/simple_gla_op.h"

namespace hyb {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

// F3 in place on states (B, H, NC + 1, K V): slot 0 holds S0, slot c + 1 the local state of chunk c
// on entry and S_{c+1} = exp(Glast_c) S_c + local_c on exit. One thread per (b, h, e), sequential over
// chunks in fp32.
__global__ void simple_gla_forward_scan_kernel(float* __restrict__ states, const float* __restrict__ Glast, int64_t BH,
                                               int64_t NC, int64_t KV) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < BH * KV; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / KV, e = i % KV;
    float* s = states + bh * (NC + 1) * KV + e;
    float S = s[0];
    for (int64_t c = 0; c < NC; ++c) {
      S = expf(Glast[bh * NC + c]) * S + s[(c + 1) * KV];
      s[(c + 1) * KV] = S;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// B2 in place on D (B, H, NC + 1, K V): slot c + 1 holds scale (gam .* Q_c)^T @ dO_c on entry and
// D_c on exit; slot 0 gets dS0. D_{NC-1} = dfinal (or 0), D_{c-1} = exp(Glast_c) D_c + local_c.
__global__ void simple_gla_backward_scan_kernel(float* __restrict__ D, const float* __restrict__ dfinal,
                                                const float* __restrict__ Glast, int64_t BH, int64_t NC, int64_t KV) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < BH * KV; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / KV, e = i % KV;
    float* s = D + bh * (NC + 1) * KV + e;
    float acc = dfinal ? dfinal[i] : 0.f;
    for (int64_t c = NC - 1; c >= 0; --c) {
      const float local = s[(c + 1) * KV];
      s[(c + 1) * KV] = acc;
      acc = expf(Glast[bh * NC + c]) * acc + local;
    }
    s[0] = acc;
  }
}

// dG_r = q_r . dQ_r - k_r . dK_r (per head), plus <S_{c+1}, D_c> on the chunk's last valid row, then
// dg = the reverse cumsum within the chunk (mamba2.md 4.3 B3). Grid: one block per (b, h, c), 128
// threads; thread r < 64 owns row r. q, k (B, T, Gq, K); dQ, dK (B, H, NC, 64, K) f32; states and D
// (B, H, NC + 1, K V); dg (B, T, H) f32.
template <typename E>
__global__ void simple_gla_backward_dg_kernel(const E* __restrict__ q, const E* __restrict__ k,
                                              const float* __restrict__ dQ, const float* __restrict__ dK,
                                              const float* __restrict__ states, const float* __restrict__ D,
                                              float* __restrict__ dg, int64_t T, int64_t H, int64_t Gq, int64_t hpg,
                                              int64_t NC, int64_t K, int64_t KV) {
  __shared__ float s_dG[kScanChunk];
  const int64_t z = blockIdx.x, c = z % NC, h = (z / NC) % H, b = z / NC / H;
  const int n = int(std::min<int64_t>(kScanChunk, T - c * kScanChunk));
  const int64_t slot = (b * H + h) * (NC + 1) + c + 1;
  float inner = 0.f;
  for (int64_t e = threadIdx.x; e < KV; e += blockDim.x) inner += states[slot * KV + e] * D[slot * KV + e];
  inner = block_reduce_sum(inner);
  const int r = threadIdx.x;
  if (r < kScanChunk) {
    float acc = 0.f;
    if (r < n) {
      const int64_t t = c * kScanChunk + r, grp = h / hpg;
      const E* qr = q + ((b * T + t) * Gq + grp) * K;
      const E* kr = k + ((b * T + t) * Gq + grp) * K;
      const float* dqr = dQ + (z * kScanChunk + r) * K;
      const float* dkr = dK + (z * kScanChunk + r) * K;
      for (int64_t x = 0; x < K; ++x) acc += to_f32(qr[x]) * dqr[x] - to_f32(kr[x]) * dkr[x];
    }
    s_dG[r] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float run = inner;  // the <S_next, D> term enters at the last row and flows to every earlier one
    for (int i = n - 1; i >= 0; --i) {
      run += s_dG[i];
      dg[(b * T + c * kScanChunk + i) * H + h] = run;
    }
  }
}

struct Scan {  // everything B1 / F1-F3 produce
  ChunkDims d;
  ChunkGates gates;
  ChunkBuffer states;  // (B, H, NC + 1, K, V): slot c = S at the start of chunk c, slot NC = S_T
};

// F1-F3: the gates and the chunk-start states.
Scan run_scan(const ChunkView& kv, const ChunkView& vv, const Tensor& g, const Tensor& S0, const ChunkDims& d,
              int64_t K, int64_t V, Device dev) {
  Scan s{d, chunk_gates_cuda(g, Tensor(), d), ChunkBuffer(d.B, d.H, d.NC + 1, int(K), int(V), dev)};
  chunk_slot_load(s.states, 0, S0);
  chunk_gemm(s.states.view(1), scale_by(kv.t(), s.gates.kd), vv, nullptr, nullptr, 1.f, d);  // F2
  const int64_t n = d.B * d.H * K * V;
  if (n > 0) {
    const int blocks = grid_blocks(n, kThreads, dev.index);
    simple_gla_forward_scan_kernel<<<blocks, kThreads, 0, current_stream(dev.index)>>>(
        s.states.data(), s.gates.Glast.data<float>(), d.B * d.H, d.NC, K * V);
    HYB_CUDA_LAUNCH_CHECK("simple_gla_forward_scan_kernel", blocks, kThreads, 0);
  }
  return s;
}

// P = L .* (Q @ K^T) for every chunk, into p.
void masked_scores(const ChunkBuffer& p, const ChunkView& qv, const ChunkView& kv, const ChunkGates& gates,
                   const ChunkDims& d) {
  chunk_gemm(p.view(0, 1), qv, kv.t(), nullptr, nullptr, 1.f, d);
  chunk_mask(p, &gates, nullptr, false, d);
}

}  // namespace

SimpleGlaOutputs simple_gla_forward_cuda(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0,
                                         const Tensor& S00, double scale) {
  const SimpleGlaDims sd = simple_gla_dims("simple_gla_forward", q0, k0, v0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  HYB_CHECK(g.dtype() == DType::f32, "simple_gla_forward_cuda: g must be f32 on CUDA, got ", dtype_name(g.dtype()));
  const Device dev = q.device();
  CudaDeviceGuard guard(dev.index);
  SimpleGlaOutputs r{Tensor::empty({sd.B, sd.T, sd.H, sd.V}, q.dtype(), dev),
                     Tensor::zeros({sd.B, sd.H, sd.K, sd.V}, DType::f32, dev)};
  if (sd.T == 0) {
    if (S0.defined()) r.final_state.copy_(S0);
    return r;
  }
  const ChunkDims d{sd.B, sd.T, sd.H, (sd.T + kScanChunk - 1) / kScanChunk, dev.index};
  const ChunkView qv = token_view(q, sd.heads_per_group), kv = token_view(k, sd.heads_per_group),
                  vv = token_view(v, 1);
  const Scan s = run_scan(kv, vv, g, S0, d, sd.K, sd.V, dev);
  ChunkBuffer P(d.B, d.H, d.NC, kScanChunk, kScanChunk, dev), O(d.B, d.H, d.NC, kScanChunk, int(sd.V), dev);
  masked_scores(P, qv, kv, s.gates, d);
  const ChunkView ov = O.view(0, 1);
  chunk_gemm(ov, scale_by(qv, s.gates.gam), s.states.view(0), nullptr, nullptr, float(scale), d);  // gam .* (Q @ S_c)
  chunk_gemm(ov, P.view(0, 1), vv, &ov, nullptr, float(scale), d);                                  // + P @ V
  chunk_to_tokens(r.o, O, 1, nullptr, 1.f, d);
  chunk_slot_store(r.final_state, s.states, d.NC);
  return r;
}

SimpleGlaGrads simple_gla_backward_cuda(const SimpleGlaSaved& sv, const Tensor& dout0, const Tensor& dfinal0,
                                        GradMask needed) {
  const SimpleGlaDims sd = simple_gla_dims("simple_gla_backward", sv.q, sv.k, sv.v, sv.g, sv.S0);
  const Tensor q = sv.q.contiguous(), k = sv.k.contiguous(), v = sv.v.contiguous(), g = sv.g.contiguous();
  const Tensor S0 = sv.S0.defined() ? sv.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(sd.K));
  const Device dev = q.device();
  CudaDeviceGuard guard(dev.index);
  const DType dt = q.dtype();
  SimpleGlaGrads out;
  if (needed[0]) out.dq = Tensor::zeros(q.shape(), dt, dev);
  if (needed[1]) out.dk = Tensor::zeros(k.shape(), dt, dev);
  if (needed[2]) out.dv = Tensor::zeros(v.shape(), dt, dev);
  if (needed[3]) out.dg = Tensor::zeros(g.shape(), DType::f32, dev);
  const bool want_dS0 = needed[4] && S0.defined();
  if (want_dS0) out.dS0 = Tensor::zeros(S0.shape(), DType::f32, dev);
  if (sd.T == 0) {
    if (want_dS0 && dfinal.defined()) out.dS0.copy_(dfinal);
    return out;
  }
  const ChunkDims d{sd.B, sd.T, sd.H, (sd.T + kScanChunk - 1) / kScanChunk, dev.index};
  const int64_t hpg = sd.heads_per_group, K = sd.K, V = sd.V;
  const ChunkView qv = token_view(q, hpg), kv = token_view(k, hpg), vv = token_view(v, 1), dov = token_view(dout, 1);
  const Scan s = run_scan(kv, vv, g, S0, d, K, V, dev);  // B1

  // B2: D (B, H, NC + 1, K, V), slot c + 1 = D_c, slot 0 = dS0.
  ChunkBuffer D(d.B, d.H, d.NC + 1, int(K), int(V), dev);
  chunk_gemm(D.view(1), scale_by(qv.t(), s.gates.gam), dov, nullptr, nullptr, float(scale), d);
  {
    const int64_t n = d.B * d.H * K * V;
    const int blocks = grid_blocks(n, kThreads, dev.index);
    simple_gla_backward_scan_kernel<<<blocks, kThreads, 0, current_stream(dev.index)>>>(
        D.data(), dfinal.defined() ? dfinal.data<float>() : nullptr, s.gates.Glast.data<float>(), d.B * d.H, d.NC,
        K * V);
    HYB_CUDA_LAUNCH_CHECK("simple_gla_backward_scan_kernel", blocks, kThreads, 0);
  }
  const ChunkView Dn = D.view(1);  // chunk c reads D_c, the gradient at its end

  // B3.
  ChunkBuffer P(d.B, d.H, d.NC, kScanChunk, kScanChunk, dev);
  const ChunkView pv = P.view(0, 1);
  if (needed[0] || needed[1] || needed[3]) {
    // dP = scale (dO @ V^T) .* L
    chunk_gemm(pv, dov, vv.t(), nullptr, nullptr, float(scale), d);
    chunk_mask(P, &s.gates, nullptr, false, d);
    // dQ = scale gam .* (dO @ S^T) + dP @ K
    ChunkBuffer dQ(d.B, d.H, d.NC, kScanChunk, int(K), dev), dK(d.B, d.H, d.NC, kScanChunk, int(K), dev);
    const ChunkView dqv = dQ.view(0, 1), dkv = dK.view(0, 1);
    chunk_gemm(dqv, scale_by(dov, s.gates.gam), s.states.view(0).t(), nullptr, nullptr, float(scale), d);
    chunk_gemm(dqv, pv, kv, &dqv, nullptr, 1.f, d);
    // dK = dP^T @ Q + kd .* (V @ D^T)
    chunk_gemm(dkv, pv.t(), qv, nullptr, nullptr, 1.f, d);
    chunk_gemm(dkv, scale_by(vv, s.gates.kd), Dn.t(), &dkv, nullptr, 1.f, d);
    if (needed[3]) {
      const int64_t blocks = d.B * d.H * d.NC;
      visit_cuda_float("simple_gla_backward_cuda", dt, [&](auto tag) {
        using E = decltype(tag);
        simple_gla_backward_dg_kernel<E><<<unsigned(blocks), 128, 0, current_stream(dev.index)>>>(
            q.data<E>(), k.data<E>(), dQ.data(), dK.data(), s.states.data(), D.data(), out.dg.data<float>(), d.T, d.H,
            sd.Gq, hpg, d.NC, K, K * V);
        HYB_CUDA_LAUNCH_CHECK("simple_gla_backward_dg_kernel", blocks, 128, 0);
      });
    }
    if (needed[0]) chunk_to_tokens(out.dq, dQ, hpg, nullptr, 1.f, d);
    if (needed[1]) chunk_to_tokens(out.dk, dK, hpg, nullptr, 1.f, d);
  }
  if (needed[2]) {
    // dV = scale (L .* (Q @ K^T))^T @ dO + kd .* (K @ D)
    masked_scores(P, qv, kv, s.gates, d);
    ChunkBuffer dV(d.B, d.H, d.NC, kScanChunk, int(V), dev);
    const ChunkView dvv = dV.view(0, 1);
    chunk_gemm(dvv, pv.t(), dov, nullptr, nullptr, float(scale), d);
    chunk_gemm(dvv, scale_by(kv, s.gates.kd), Dn, &dvv, nullptr, 1.f, d);
    chunk_to_tokens(out.dv, dV, 1, nullptr, 1.f, d);
  }
  if (want_dS0) chunk_slot_store(out.dS0, D, 0);
  return out;
}

}  // namespace hyb
