// simple_gla (the SSD core) as the sequence of chunk-toolkit primitives that is its CUDA path
// (kernels/chunk_ops.h; mamba2.md 4), chunks of kScanChunk = 64 tokens whatever
// SimpleGlaParams::chunk_size says (the chunk changes rounding only). On cuda tensors every step is a
// kernel; on CPU tensors the same steps run as loops, which is how the CPU tests check this sequence.
// Forward (4.2): F1 gates; F2 local states (kd .* K)^T @ V into slots 1..NC; F3 the scan to chunk-start
// states; F4 O = scale (gam .* (Q @ S_c) + (L .* (Q @ K^T)) @ V).
// Backward (4.3): B1 = F1-F3; B2 scale (gam .* Q)^T @ dO into slot c, dS_T into slot NC, the reverse
// scan leaving D_c (the gradient at the end of chunk c) in slot c + 1 and dS0 in slot 0; B3 dQ, dK,
// dV as products and dG = rowdot(dQ, Q) - rowdot(dK, K) + <S_{c+1}, D_c> on the last row, then its
// reverse cumsum. Shared q/k groups: per-head dQ and dK are kept (the dG identity needs them) and
// summed over the heads of a group in head order when written out (no atomics).
#include <cmath>

#include "kernels/chunk_ops.h"
#include "layers/mamba2/simple_gla_op.h"

namespace hyb {

namespace {

struct Scan {           // what F1-F3 produce
  ChunkGates gates;
  ChunkBuffer states;   // (K, V), NC + 1 slots: slot c = S at the start of chunk c, slot NC = S_T
};

Scan run_scan(const ChunkView& kv, const ChunkView& vv, const Tensor& g, const Tensor& S0, const ChunkDims& d,
              int64_t K, int64_t V) {
  Scan s{chunk_gates(g, Tensor(), d), ChunkBuffer(d, d.NC + 1, K, V)};
  chunk_slot_load(s.states, 0, S0);
  chunk_gemm(s.states.view(1), scale_by(kv.t(), s.gates.kd), vv, nullptr, Tensor(), 1.f, d);  // F2
  chunk_state_scan(s.states, s.gates.Glast, false, d);                                          // F3
  return s;
}

// P = L .* (Q @ K^T) for every chunk.
void masked_scores(const ChunkBuffer& p, const ChunkView& qv, const ChunkView& kv, const ChunkGates& gates,
                   const ChunkDims& d) {
  chunk_gemm(p.view(0, 1), qv, kv.t(), nullptr, Tensor(), 1.f, d);
  chunk_mask(p, &gates, nullptr, false, d);
}

}  // namespace

SimpleGlaOutputs simple_gla_forward_kernels(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0,
                                            const Tensor& S00, double scale) {
  const SimpleGlaDims sd = simple_gla_dims("simple_gla_forward", q0, k0, v0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  const Device dev = q.device();
  SimpleGlaOutputs r{Tensor::empty({sd.B, sd.T, sd.H, sd.V}, q.dtype(), dev),
                     Tensor::zeros({sd.B, sd.H, sd.K, sd.V}, g.dtype(), dev)};
  if (sd.T == 0) {
    if (S0.defined()) r.final_state.copy_(S0);
    return r;
  }
  const ChunkDims d = chunk_dims(sd.B, sd.T, sd.H, dev);
  const ChunkView qv = token_view(q, sd.heads_per_group), kv = token_view(k, sd.heads_per_group),
                  vv = token_view(v, 1);
  const Scan s = run_scan(kv, vv, g, S0, d, sd.K, sd.V);
  ChunkBuffer P(d, d.NC, kScanChunk, kScanChunk), O(d, d.NC, kScanChunk, sd.V);
  masked_scores(P, qv, kv, s.gates, d);
  const ChunkView ov = O.view(0, 1);
  chunk_gemm(ov, scale_by(qv, s.gates.gam), s.states.view(0), nullptr, Tensor(), float(scale), d);  // gam .* (Q @ S_c)
  chunk_gemm(ov, P.view(0, 1), vv, &ov, Tensor(), float(scale), d);                                  // + P @ V
  chunk_to_tokens(r.o, O, 1, nullptr, 1.f, d);
  chunk_slot_store(r.final_state, s.states, d.NC);
  return r;
}

SimpleGlaGrads simple_gla_backward_kernels(const SimpleGlaSaved& sv, const Tensor& dout0, const Tensor& dfinal0,
                                           GradMask needed) {
  const SimpleGlaDims sd = simple_gla_dims("simple_gla_backward", sv.q, sv.k, sv.v, sv.g, sv.S0);
  const Tensor q = sv.q.contiguous(), k = sv.k.contiguous(), v = sv.v.contiguous(), g = sv.g.contiguous();
  const Tensor S0 = sv.S0.defined() ? sv.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(sd.K));
  const Device dev = q.device();
  const DType dt = q.dtype(), st = g.dtype();
  SimpleGlaGrads out;
  if (needed[0]) out.dq = Tensor::zeros(q.shape(), dt, dev);
  if (needed[1]) out.dk = Tensor::zeros(k.shape(), dt, dev);
  if (needed[2]) out.dv = Tensor::zeros(v.shape(), dt, dev);
  if (needed[3]) out.dg = Tensor::zeros(g.shape(), st, dev);
  const bool want_dS0 = needed[4] && S0.defined();
  if (want_dS0) out.dS0 = Tensor::zeros(S0.shape(), st, dev);
  if (sd.T == 0) {
    if (want_dS0 && dfinal.defined()) out.dS0.copy_(dfinal);
    return out;
  }
  const ChunkDims d = chunk_dims(sd.B, sd.T, sd.H, dev);
  const int64_t hpg = sd.heads_per_group, K = sd.K, V = sd.V;
  const ChunkView qv = token_view(q, hpg), kv = token_view(k, hpg), vv = token_view(v, 1), dov = token_view(dout, 1);
  const Scan s = run_scan(kv, vv, g, S0, d, K, V);  // B1

  // B2: D (K, V), NC + 1 slots; afterwards slot c + 1 = D_c and slot 0 = dS0.
  ChunkBuffer D(d, d.NC + 1, K, V);
  chunk_gemm(D.view(0), scale_by(qv.t(), s.gates.gam), dov, nullptr, Tensor(), float(scale), d);
  chunk_slot_load(D, d.NC, dfinal);
  chunk_state_scan(D, s.gates.Glast, true, d);
  const ChunkView Dn = D.view(1);  // chunk c reads D_c

  // B3.
  ChunkBuffer P(d, d.NC, kScanChunk, kScanChunk);
  const ChunkView pv = P.view(0, 1);
  if (needed[0] || needed[1] || needed[3]) {
    // dP = scale (dO @ V^T) .* L
    chunk_gemm(pv, dov, vv.t(), nullptr, Tensor(), float(scale), d);
    chunk_mask(P, &s.gates, nullptr, false, d);
    ChunkBuffer dQ(d, d.NC, kScanChunk, K), dK(d, d.NC, kScanChunk, K);
    const ChunkView dqv = dQ.view(0, 1), dkv = dK.view(0, 1);
    // dQ = scale gam .* (dO @ S^T) + dP @ K
    chunk_gemm(dqv, scale_by(dov, s.gates.gam), s.states.view(0).t(), nullptr, Tensor(), float(scale), d);
    chunk_gemm(dqv, pv, kv, &dqv, Tensor(), 1.f, d);
    // dK = dP^T @ Q + kd .* (V @ D^T)
    chunk_gemm(dkv, pv.t(), qv, nullptr, Tensor(), 1.f, d);
    chunk_gemm(dkv, scale_by(vv, s.gates.kd), Dn.t(), &dkv, Tensor(), 1.f, d);
    if (needed[3]) {
      ChunkVec dG(d);
      chunk_rowdot(dG, dqv, qv, 1.f, d);
      chunk_rowdot(dG, dkv, kv, -1.f, d);
      chunk_inner_last(dG, s.states.view(1), Dn, d);
      chunk_vec_to_tokens(out.dg, dG, true, d);
    }
    if (needed[0]) chunk_to_tokens(out.dq, dQ, hpg, nullptr, 1.f, d);
    if (needed[1]) chunk_to_tokens(out.dk, dK, hpg, nullptr, 1.f, d);
  }
  if (needed[2]) {
    // dV = scale (L .* (Q @ K^T))^T @ dO + kd .* (K @ D)
    masked_scores(P, qv, kv, s.gates, d);
    ChunkBuffer dV(d, d.NC, kScanChunk, V);
    const ChunkView dvv = dV.view(0, 1);
    chunk_gemm(dvv, pv.t(), dov, nullptr, Tensor(), float(scale), d);
    chunk_gemm(dvv, scale_by(kv, s.gates.kd), Dn, &dvv, Tensor(), 1.f, d);
    chunk_to_tokens(out.dv, dV, 1, nullptr, 1.f, d);
  }
  if (want_dS0) chunk_slot_store(out.dS0, D, 0);
  return out;
}

}  // namespace hyb
