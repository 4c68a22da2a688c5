// The gated delta rule as the sequence of chunk-toolkit primitives that is its CUDA path
// (kernels/chunk_ops.h; gated_deltanet.md 4, the WY/UT form), chunks of kScanChunk = 64 tokens
// whatever GatedDeltaParams::chunk_size says. On cuda tensors every step is a kernel; on CPU tensors
// the same steps run as loops, which is how the CPU tests check this sequence.
// Every product is an fp32 GEMM on fp32 scratch, so no MMA accumulator is ever an operand (4.8 item
// 1) and the whole backward is 4.8 item 3's fp32 build; the triangular solve is fp32 forward
// substitution, recomputed in the backward (4.5, 4.6 item 3). F3 and stage 1 are chunk_delta_scan:
// one kernel each, a block per (b, value head, 64 state columns) walking the chunks.
// Shared q/k heads (GVA): per-value-head dQ and dK are kept and summed over the value heads of each
// q/k head in head order when written out (no atomics).
#include <cmath>

#include "kernels/chunk_ops.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb {

namespace {

struct Wy {            // what F1-F3 produce (4.2-4.3); the backward's stage 0
  ChunkGates gates;
  ChunkBuffer KK;      // (64, 64) raw K @ K^T
  ChunkBuffer M;       // (64, 64) tril(beta .* L .* KK, -1)
  ChunkBuffer Ainv;    // (64, 64) (I + M)^-1
  ChunkBuffer W;       // (64, K) Ainv @ (beta gam .* K)
  ChunkBuffer U;       // (64, V) U0 = Ainv @ (beta .* V), then in place U = U0 - W @ S_c
  ChunkBuffer states;  // (K, V), NC + 1 slots: slot c = S at the start of chunk c, slot NC = S_T
};

Wy run_wy(const ChunkView& kv, const ChunkView& vv, const Tensor& g, const Tensor& beta, const Tensor& S0,
          const ChunkDims& d, int64_t K, int64_t V) {
  const int64_t C = kScanChunk;
  Wy w{chunk_gates(g, beta, d),       ChunkBuffer(d, d.NC, C, C), ChunkBuffer(d, d.NC, C, C),
       ChunkBuffer(d, d.NC, C, C),    ChunkBuffer(d, d.NC, C, K), ChunkBuffer(d, d.NC, C, V),
       ChunkBuffer(d, d.NC + 1, K, V)};
  chunk_gemm(w.KK.view(0, 1), kv, kv.t(), nullptr, Tensor(), 1.f, d);
  chunk_mask(w.M, &w.gates, &w.gates.beta, true, d, &w.KK);
  chunk_unit_lower_inverse(w.Ainv, w.M, d);
  const ChunkView ainv = w.Ainv.view(0, 1), wv = w.W.view(0, 1), uv = w.U.view(0, 1);
  chunk_gemm(wv, ainv, scale_by(kv, w.gates.bg), nullptr, Tensor(), 1.f, d);
  chunk_gemm(uv, ainv, scale_by(vv, w.gates.beta), nullptr, Tensor(), 1.f, d);
  // F3: U_c = U0_c - W_c @ S_c, S_{c+1} = gam_n S_c + (kd .* K)^T @ U_c, sequential over chunks.
  chunk_slot_load(w.states, 0, S0);
  chunk_delta_scan(w.states, w.U, wv, -1.f, scale_by(kv.t(), w.gates.kd), 1.f, w.gates.Glast, false, d);
  return w;
}

// P = L .* (Q @ K^T) for every chunk.
void masked_scores(const ChunkBuffer& p, const ChunkView& qv, const ChunkView& kv, const ChunkGates& gates,
                   const ChunkDims& d) {
  chunk_gemm(p.view(0, 1), qv, kv.t(), nullptr, Tensor(), 1.f, d);
  chunk_mask(p, &gates, nullptr, false, d);
}

}  // namespace

GatedDeltaOutputs gated_delta_rule_forward_kernels(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                                   const Tensor& beta0, const Tensor& g0, const Tensor& S00,
                                                   double scale) {
  const GatedDeltaDims gd = gated_delta_rule_dims("gated_delta_rule_forward", q0, k0, v0, beta0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), beta = beta0.contiguous(),
               g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  const Device dev = q.device();
  GatedDeltaOutputs r{Tensor::empty({gd.B, gd.T, gd.HV, gd.V}, q.dtype(), dev),
                      Tensor::zeros({gd.B, gd.HV, gd.K, gd.V}, g.dtype(), dev)};
  if (gd.T == 0) {
    if (S0.defined()) r.final_state.copy_(S0);
    return r;
  }
  const ChunkDims d = chunk_dims(gd.B, gd.T, gd.HV, dev);
  const ChunkView qv = token_view(q, gd.v_per_qk), kv = token_view(k, gd.v_per_qk), vv = token_view(v, 1);
  const Wy w = run_wy(kv, vv, g, beta, S0, d, gd.K, gd.V);
  // F4: O = scale (gam .* (Q @ S_c) + (L .* (Q @ K^T)) @ U).
  ChunkBuffer P(d, d.NC, kScanChunk, kScanChunk), O(d, d.NC, kScanChunk, gd.V);
  masked_scores(P, qv, kv, w.gates, d);
  const ChunkView ov = O.view(0, 1);
  chunk_gemm(ov, scale_by(qv, w.gates.gam), w.states.view(0), nullptr, Tensor(), float(scale), d);
  chunk_gemm(ov, P.view(0, 1), w.U.view(0, 1), &ov, Tensor(), float(scale), d);
  chunk_to_tokens(r.o, O, 1, nullptr, 1.f, d);
  chunk_slot_store(r.final_state, w.states, d.NC);
  return r;
}

GatedDeltaGrads gated_delta_rule_backward_kernels(const GatedDeltaSaved& sv, const Tensor& dout0,
                                                  const Tensor& dfinal0, GradMask needed) {
  const GatedDeltaDims gd = gated_delta_rule_dims("gated_delta_rule_backward", sv.q, sv.k, sv.v, sv.beta, sv.g, sv.S0);
  const Tensor q = sv.q.contiguous(), k = sv.k.contiguous(), v = sv.v.contiguous(), beta = sv.beta.contiguous(),
               g = sv.g.contiguous();
  const Tensor S0 = sv.S0.defined() ? sv.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(gd.K));
  const Device dev = q.device();
  const DType dt = q.dtype(), st = g.dtype();
  GatedDeltaGrads out;
  if (needed[0]) out.dq = Tensor::zeros(q.shape(), dt, dev);
  if (needed[1]) out.dk = Tensor::zeros(k.shape(), dt, dev);
  if (needed[2]) out.dv = Tensor::zeros(v.shape(), dt, dev);
  if (needed[3]) out.dbeta = Tensor::zeros(beta.shape(), st, dev);
  if (needed[4]) out.dg = Tensor::zeros(g.shape(), st, dev);
  const bool want_dS0 = needed[5] && S0.defined();
  if (want_dS0) out.dS0 = Tensor::zeros(S0.shape(), st, dev);
  if (gd.T == 0) {
    if (want_dS0 && dfinal.defined()) out.dS0.copy_(dfinal);
    return out;
  }
  const int64_t C = kScanChunk;
  const ChunkDims d = chunk_dims(gd.B, gd.T, gd.HV, dev);
  const int64_t vpq = gd.v_per_qk, K = gd.K, V = gd.V;
  const ChunkView qv = token_view(q, vpq), kv = token_view(k, vpq), vv = token_view(v, 1), dov = token_view(dout, 1);
  const Wy w = run_wy(kv, vv, g, beta, S0, d, K, V);  // stage 0
  const ChunkGates& gt = w.gates;
  const ChunkView uv = w.U.view(0, 1), wv = w.W.view(0, 1), ainv = w.Ainv.view(0, 1), s_c = w.states.view(0);

  // Stage 1. dU_c = scale (L .* (Q K^T))^T @ dO + kd .* (K @ D_c);
  //          D_{c-1} = gam_n D_c + scale (gam .* Q)^T @ dO - W^T @ dU_c.
  // D (K, V), NC + 1 slots: slot c holds chunk c's local term, then D_{c-1}; slot NC = dS_T. Afterwards
  // slot c + 1 = D_c and slot 0 = dS0.
  ChunkBuffer P(d, d.NC, C, C), dU(d, d.NC, C, V), D(d, d.NC + 1, K, V);
  const ChunkView pv = P.view(0, 1), duv = dU.view(0, 1), d_prev = D.view(0), d_end = D.view(1);
  masked_scores(P, qv, kv, gt, d);
  chunk_gemm(duv, pv.t(), dov, nullptr, Tensor(), float(scale), d);
  chunk_gemm(d_prev, scale_by(qv.t(), gt.gam), dov, nullptr, Tensor(), float(scale), d);
  chunk_slot_load(D, d.NC, dfinal);
  chunk_delta_scan(D, dU, scale_by(kv, gt.kd), 1.f, wv.t(), -1.f, gt.Glast, true, d);
  if (want_dS0) chunk_slot_store(out.dS0, D, 0);

  // Stage 2 (S = S_c, D = D_c = slot c + 1).
  ChunkBuffer dQ(d, d.NC, C, K), dK(d, d.NC, C, K), dW(d, d.NC, C, K);
  const ChunkView dqv = dQ.view(0, 1), dkv = dK.view(0, 1), dwv = dW.view(0, 1);
  chunk_gemm(pv, dov, uv.t(), nullptr, Tensor(), float(scale), d);  // dP = scale (dO @ U^T) .* L
  chunk_mask(P, &gt, nullptr, false, d);
  chunk_gemm(dqv, scale_by(dov, gt.gam), s_c.t(), nullptr, Tensor(), float(scale), d);
  chunk_gemm(dqv, pv, kv, &dqv, Tensor(), 1.f, d);  // dQ
  chunk_gemm(dkv, pv.t(), qv, nullptr, Tensor(), 1.f, d);
  chunk_gemm(dkv, scale_by(uv, gt.kd), d_end.t(), &dkv, Tensor(), 1.f, d);  // dK1
  chunk_gemm(dwv, duv, s_c.t(), nullptr, Tensor(), -1.f, d);                // dW = -dU @ S^T
  ChunkVec dG(d);  // dG1 = rowdot(dQ, Q) - rowdot(dK1, K) + <S_{c+1}, D_c> on the last row
  chunk_rowdot(dG, dqv, qv, 1.f, d);
  chunk_rowdot(dG, dkv, kv, -1.f, d);
  chunk_inner_last(dG, w.states.view(1), d_end, d);

  // Stage 3, the WY backward. dA reuses P (dP is consumed).
  const ChunkView dav = pv;
  chunk_gemm(dav, dwv, scale_by(kv, gt.bg).t(), nullptr, Tensor(), 1.f, d);  // dW @ Kb^T
  chunk_gemm(dav, duv, scale_by(vv, gt.beta).t(), &dav, Tensor(), 1.f, d);   // + dU @ Vb^T
  chunk_mask(P, nullptr, nullptr, true, d);                                   // tril(., -1)
  ChunkBuffer X1(d, d.NC, C, K), X2(d, d.NC, C, V);
  const ChunkView x1 = X1.view(0, 1), x2 = X2.view(0, 1);
  chunk_gemm(x1, ainv.t(), dwv, nullptr, Tensor(), 1.f, d);
  chunk_gemm(x2, ainv.t(), duv, nullptr, Tensor(), 1.f, d);
  chunk_axpy(dkv, scale_by(x1, gt.bg), Tensor(), d);  // dK += beta gam .* X1
  // dM = tril(-Ainv^T @ dA @ Ainv^T, -1)
  ChunkBuffer T1(d, d.NC, C, C), dM(d, d.NC, C, C);
  chunk_gemm(T1.view(0, 1), ainv.t(), dav, nullptr, Tensor(), 1.f, d);
  chunk_gemm(dM.view(0, 1), T1.view(0, 1), ainv.t(), nullptr, Tensor(), -1.f, d);
  chunk_mask(dM, nullptr, nullptr, true, d);
  // R = beta .* (dM .* L) feeds both k_r and k_i of M[r, i]; dM .* L (into P, dA is consumed) feeds dbeta.
  ChunkBuffer& R = T1;
  chunk_mask(R, &gt, &gt.beta, true, d, &dM);
  chunk_mask(P, &gt, nullptr, true, d, &dM);
  chunk_gemm(dkv, R.view(0, 1), kv, &dkv, Tensor(), 1.f, d);      // dK += R @ K
  chunk_gemm(dkv, R.view(0, 1).t(), kv, &dkv, Tensor(), 1.f, d);  // dK += R^T @ K
  // dbeta = gam .* rowdot(K, X1) + rowdot(V, X2) + rowsum(dM .* L .* (K K^T))
  ChunkVec dbeta(d);
  chunk_rowdot(dbeta, scale_by(kv, gt.gam), x1, 1.f, d);
  chunk_rowdot(dbeta, vv, x2, 1.f, d);
  chunk_rowdot(dbeta, pv, w.KK.view(0, 1), 1.f, d);
  // dG += beta gam .* rowdot(K, X1) + rowsum(Z) - colsum(Z), Z = dM .* M; then dg = revcumsum(dG).
  const ChunkView dmv = dM.view(0, 1), mv = w.M.view(0, 1);
  chunk_rowdot(dG, scale_by(kv, gt.bg), x1, 1.f, d);
  chunk_rowdot(dG, dmv, mv, 1.f, d);
  chunk_rowdot(dG, dmv.t(), mv.t(), -1.f, d);
  if (needed[3]) chunk_vec_to_tokens(out.dbeta, dbeta, false, d);
  if (needed[4]) chunk_vec_to_tokens(out.dg, dG, true, d);
  if (needed[0]) chunk_to_tokens(out.dq, dQ, vpq, nullptr, 1.f, d);
  if (needed[1]) chunk_to_tokens(out.dk, dK, vpq, nullptr, 1.f, d);
  if (needed[2]) chunk_to_tokens(out.dv, X2, 1, &gt.beta, 1.f, d);  // dV = beta .* X2
  return out;
}

}  // namespace hyb
