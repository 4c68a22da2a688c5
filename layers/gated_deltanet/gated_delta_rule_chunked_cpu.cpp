// CPU reference of the gated delta rule in the chunked WY/UT form the CUDA kernels implement:
// forward gated_deltanet.md 4.2-4.3 (M, Ainv = (I + M)^-1 by forward substitution, W, U0, then the
// inter-chunk recurrence U = U0 - W S, S <- gam_n S + (kd .* K)^T U, and the output), backward 4.4
// (stage 1 the reverse recurrence over chunks, stage 2 the output and state-update part, stage 3
// the WY backward, then the revcumsum of dG). Equal to the recurrent form up to rounding for any T;
// the last chunk may be short. Requires g <= 0, the op's domain: every exp argument is then <= 0.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/chunk_cpu.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb {

namespace {

// Everything of one chunk and value head that does not depend on the state (4.1, F2 of 4.3).
struct ChunkWy {
  ChunkDecay dec;
  ChunkMat Q, K, V;         // (n, K), (n, K), (n, V)
  std::vector<double> beta;
  ChunkMat M, Ainv;         // (n, n): strictly lower M, unit lower (I + M)^-1
  ChunkMat W, U0;           // (n, K), (n, V)
  ChunkMat QK;              // (n, n): L .* (Q @ K^T)
};

template <typename E>
struct HeadView {
  const E *q, *k, *v, *beta, *g;
  GatedDeltaDims d;
  int64_t b, j, i;  // batch, value head, its q/k head
  ChunkMat rows(const E* base, int64_t t0, int64_t n, int64_t heads, int64_t head, int64_t width) const {
    ChunkMat m(n, width);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t e = 0; e < width; ++e) m(r, e) = double(base[((b * d.T + t0 + r) * heads + head) * width + e]);
    return m;
  }
  std::vector<double> gate(const E* base, int64_t t0, int64_t n) const {
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) out[size_t(r)] = double(base[(b * d.T + t0 + r) * d.HV + j]);
    return out;
  }
  ChunkMat dO(const E* dout, int64_t t0, int64_t n) const { return rows(dout, t0, n, d.HV, j, d.V); }

  ChunkWy chunk(int64_t t0, int64_t n) const {
    ChunkWy c{ChunkDecay(gate(g, t0, n)), rows(q, t0, n, d.H, i, d.K), rows(k, t0, n, d.H, i, d.K),
              rows(v, t0, n, d.HV, j, d.V), gate(beta, t0, n), {}, {}, {}, {}, {}};
    const ChunkMat KK = chunk_matmul(c.K, false, c.K, true);
    // M[r, i] = beta_r L[r, i] (k_r . k_i) for i < r.
    c.M = ChunkMat(n, n);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i2 = 0; i2 < r; ++i2) c.M(r, i2) = c.beta[size_t(r)] * c.dec.L(r, i2) * KK(r, i2);
    // Ainv = (I + M)^-1 by rows: Ainv[r, j] = -sum_{i=j}^{r-1} M[r, i] Ainv[i, j] for j < r.
    c.Ainv = ChunkMat(n, n);
    for (int64_t r = 0; r < n; ++r) {
      c.Ainv(r, r) = 1.0;
      for (int64_t j2 = 0; j2 < r; ++j2) {
        double acc = 0;
        for (int64_t i2 = j2; i2 < r; ++i2) acc += c.M(r, i2) * c.Ainv(i2, j2);
        c.Ainv(r, j2) = -acc;
      }
    }
    std::vector<double> bg(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) bg[size_t(r)] = c.beta[size_t(r)] * c.dec.gam[size_t(r)];
    c.W = chunk_matmul(c.Ainv, false, chunk_scale_rows(bg, c.K), false);
    c.U0 = chunk_matmul(c.Ainv, false, chunk_scale_rows(c.beta, c.V), false);
    c.QK = chunk_matmul(c.Q, false, c.K, true);
    for (size_t e = 0; e < c.QK.a.size(); ++e) c.QK.a[e] *= c.dec.L.a[e];
    return c;
  }
};

ChunkMat load_state(const Tensor& S, int64_t b, int64_t j, const GatedDeltaDims& d) {
  ChunkMat m(d.K, d.V);
  if (!S.defined()) return m;
  visit_float("gated_delta_rule", S.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E* p = S.data<E>() + (b * d.HV + j) * d.K * d.V;
    for (int64_t e = 0; e < d.K * d.V; ++e) m.a[size_t(e)] = double(p[e]);
  });
  return m;
}

// U = U0 - W @ S: the true u_t of the chunk's tokens.
ChunkMat chunk_u(const ChunkWy& c, const ChunkMat& S) {
  ChunkMat U = c.U0;
  chunk_axpy(U, -1.0, chunk_matmul(c.W, false, S, false));
  return U;
}

// S_next = gam_n S + (kd .* K)^T @ U.
ChunkMat chunk_next_state(const ChunkWy& c, const ChunkMat& S, const ChunkMat& U) {
  ChunkMat next = chunk_matmul(chunk_scale_rows(c.dec.kd, c.K), true, U, false);
  chunk_axpy(next, c.dec.gam.back(), S);
  return next;
}

}  // namespace

GatedDeltaOutputs gated_delta_rule_chunked_forward_cpu(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                                       const Tensor& beta0, const Tensor& g0, const Tensor& S00,
                                                       double scale, int64_t C) {
  const GatedDeltaDims d = gated_delta_rule_dims("gated_delta_rule_forward", q0, k0, v0, beta0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), beta = beta0.contiguous(),
               g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  GatedDeltaOutputs r{Tensor::empty({d.B, d.T, d.HV, d.V}, q.dtype()),
                      Tensor::empty({d.B, d.HV, d.K, d.V}, g.dtype())};
  visit_float("gated_delta_rule_forward", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    E *op = r.o.data<E>(), *fp = r.final_state.data<E>();
    parallel_for(d.B * d.HV, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.HV, j = task % d.HV;
        const HeadView<E> hv{q.data<E>(), k.data<E>(), v.data<E>(), beta.data<E>(), g.data<E>(), d, b, j, j / d.v_per_qk};
        ChunkMat S = load_state(S0, b, j, d);
        for (int64_t t0 = 0; t0 < d.T; t0 += C) {
          const int64_t n = std::min(C, d.T - t0);
          const ChunkWy c = hv.chunk(t0, n);
          const ChunkMat U = chunk_u(c, S);  // F3
          // F4: O = scale (gam .* (Q @ S) + (L .* (Q @ K^T)) @ U).
          ChunkMat O = chunk_scale_rows(c.dec.gam, chunk_matmul(c.Q, false, S, false));
          chunk_axpy(O, 1.0, chunk_matmul(c.QK, false, U, false));
          for (int64_t rr = 0; rr < n; ++rr)
            for (int64_t e = 0; e < d.V; ++e) op[((b * d.T + t0 + rr) * d.HV + j) * d.V + e] = E(scale * O(rr, e));
          S = chunk_next_state(c, S, U);
        }
        for (int64_t e = 0; e < d.K * d.V; ++e) fp[(b * d.HV + j) * d.K * d.V + e] = E(S.a[size_t(e)]);
      }
    });
  });
  return r;
}

GatedDeltaGrads gated_delta_rule_chunked_backward_cpu(const GatedDeltaSaved& s, const Tensor& dout0,
                                                      const Tensor& dfinal0, GradMask needed) {
  const GatedDeltaDims d = gated_delta_rule_dims("gated_delta_rule_backward", s.q, s.k, s.v, s.beta, s.g, s.S0);
  const Tensor q = s.q.contiguous(), k = s.k.contiguous(), v = s.v.contiguous(), beta = s.beta.contiguous(),
               g = s.g.contiguous();
  const Tensor S0 = s.S0.defined() ? s.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = s.params.scale ? *s.params.scale : 1.0 / std::sqrt(double(d.K));
  const int64_t C = s.params.chunk_size, chunks = (d.T + C - 1) / C;
  GatedDeltaGrads out;
  const DType dt = q.dtype();
  if (needed[0]) out.dq = Tensor::empty(q.shape(), dt);
  if (needed[1]) out.dk = Tensor::empty(k.shape(), dt);
  if (needed[2]) out.dv = Tensor::empty(v.shape(), dt);
  if (needed[3]) out.dbeta = Tensor::empty(beta.shape(), beta.dtype());
  if (needed[4]) out.dg = Tensor::empty(g.shape(), g.dtype());
  if (needed[5] && S0.defined()) out.dS0 = Tensor::empty(S0.shape(), g.dtype());
  visit_float("gated_delta_rule_backward", dt, [&](auto tag) {
    using E = decltype(tag);
    const E* dop = dout.data<E>();
    parallel_for(d.B * d.H, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.H, i = task % d.H;
        ChunkMat dq_head(d.T, d.K), dk_head(d.T, d.K);
        for (int64_t j = i * d.v_per_qk; j < (i + 1) * d.v_per_qk; ++j) {
          const HeadView<E> hv{q.data<E>(), k.data<E>(), v.data<E>(), beta.data<E>(), g.data<E>(), d, b, j, i};
          // Stage 0: the chunk-start states, states[c] (states[chunks] = S_T).
          std::vector<ChunkMat> states(size_t(chunks + 1));
          states[0] = load_state(S0, b, j, d);
          for (int64_t c = 0; c < chunks; ++c) {
            const int64_t t0 = c * C, n = std::min(C, d.T - t0);
            const ChunkWy wy = hv.chunk(t0, n);
            states[size_t(c + 1)] = chunk_next_state(wy, states[size_t(c)], chunk_u(wy, states[size_t(c)]));
          }
          // Stage 1: D[c + 1] = dL/d(state at the end of chunk c), dU[c]; D[0] is dS0.
          std::vector<ChunkMat> D(size_t(chunks + 1)), dU(static_cast<size_t>(chunks));
          D[size_t(chunks)] = dfinal.defined() ? load_state(dfinal, b, j, d) : ChunkMat(d.K, d.V);
          for (int64_t c = chunks - 1; c >= 0; --c) {
            const int64_t t0 = c * C, n = std::min(C, d.T - t0);
            const ChunkWy wy = hv.chunk(t0, n);
            const ChunkMat dO = hv.dO(dop, t0, n);
            const ChunkMat& Dn = D[size_t(c + 1)];
            // dU = scale (L .* (Q K^T))^T @ dO + kd .* (K @ D)
            dU[size_t(c)] = chunk_matmul(wy.QK, true, dO, false);
            for (double& x : dU[size_t(c)].a) x *= scale;
            chunk_axpy(dU[size_t(c)], 1.0, chunk_scale_rows(wy.dec.kd, chunk_matmul(wy.K, false, Dn, false)));
            // D_prev = gam_n D + scale (gam .* Q)^T @ dO - W^T @ dU
            ChunkMat Dp = chunk_matmul(chunk_scale_rows(wy.dec.gam, wy.Q), true, dO, false);
            for (double& x : Dp.a) x *= scale;
            chunk_axpy(Dp, wy.dec.gam.back(), Dn);
            chunk_axpy(Dp, -1.0, chunk_matmul(wy.W, true, dU[size_t(c)], false));
            D[size_t(c)] = std::move(Dp);
          }
          for (int64_t c = 0; c < chunks; ++c) {
            const int64_t t0 = c * C, n = std::min(C, d.T - t0);
            const ChunkWy wy = hv.chunk(t0, n);
            const ChunkMat dO = hv.dO(dop, t0, n);
            const ChunkMat &S = states[size_t(c)], &Dn = D[size_t(c + 1)], &dUc = dU[size_t(c)];
            const ChunkMat U = chunk_u(wy, S);
            const std::vector<double>& gam = wy.dec.gam;
            // Stage 2: output and state-update part.
            ChunkMat dP = chunk_matmul(dO, false, U, true);  // scale (dO @ U^T) .* L
            for (size_t e = 0; e < dP.a.size(); ++e) dP.a[e] *= scale * wy.dec.L.a[e];
            ChunkMat dQ = chunk_scale_rows(gam, chunk_matmul(dO, false, S, true));
            for (double& x : dQ.a) x *= scale;
            chunk_axpy(dQ, 1.0, chunk_matmul(dP, false, wy.K, false));
            ChunkMat dK = chunk_matmul(dP, true, wy.Q, false);
            chunk_axpy(dK, 1.0, chunk_scale_rows(wy.dec.kd, chunk_matmul(U, false, Dn, true)));
            ChunkMat dW = chunk_matmul(dUc, false, S, true);  // dW = -dU @ S^T
            for (double& x : dW.a) x = -x;
            std::vector<double> dG = chunk_rowdot(dQ, wy.Q);
            const std::vector<double> kdk = chunk_rowdot(dK, wy.K);
            for (int64_t r = 0; r < n; ++r) dG[size_t(r)] -= kdk[size_t(r)];
            dG[size_t(n - 1)] += chunk_inner(states[size_t(c + 1)], Dn);
            // Stage 3: the WY backward. Kb = beta .* gam .* K, Vb = beta .* V.
            std::vector<double> bg(static_cast<size_t>(n));
            for (int64_t r = 0; r < n; ++r) bg[size_t(r)] = wy.beta[size_t(r)] * gam[size_t(r)];
            ChunkMat dA = chunk_matmul(dW, false, chunk_scale_rows(bg, wy.K), true);
            chunk_axpy(dA, 1.0, chunk_matmul(dUc, false, chunk_scale_rows(wy.beta, wy.V), true));
            for (int64_t r = 0; r < n; ++r)
              for (int64_t c2 = r; c2 < n; ++c2) dA(r, c2) = 0.0;  // tril(., -1)
            const ChunkMat X1 = chunk_matmul(wy.Ainv, true, dW, false), X2 = chunk_matmul(wy.Ainv, true, dUc, false);
            chunk_axpy(dK, 1.0, chunk_scale_rows(bg, X1));
            const ChunkMat dV = chunk_scale_rows(wy.beta, X2);
            const std::vector<double> kx1 = chunk_rowdot(wy.K, X1), vx2 = chunk_rowdot(wy.V, X2);
            std::vector<double> dbeta(static_cast<size_t>(n));
            for (int64_t r = 0; r < n; ++r) {
              dbeta[size_t(r)] = gam[size_t(r)] * kx1[size_t(r)] + vx2[size_t(r)];
              dG[size_t(r)] += bg[size_t(r)] * kx1[size_t(r)];
            }
            // dM = tril(-Ainv^T dA Ainv^T, -1), the derivative through the inverse.
            ChunkMat dM = chunk_matmul(chunk_matmul(wy.Ainv, true, dA, false), false, wy.Ainv, true);
            for (int64_t r = 0; r < n; ++r)
              for (int64_t c2 = 0; c2 < n; ++c2) dM(r, c2) = c2 < r ? -dM(r, c2) : 0.0;
            // M[r, i] = beta_r L[r, i] (k_r . k_i): R = beta .* (dM .* L) feeds both k_r and k_i.
            ChunkMat R(n, n);
            const ChunkMat KK = chunk_matmul(wy.K, false, wy.K, true);
            for (int64_t r = 0; r < n; ++r)
              for (int64_t c2 = 0; c2 < r; ++c2) {
                R(r, c2) = wy.beta[size_t(r)] * dM(r, c2) * wy.dec.L(r, c2);
                dbeta[size_t(r)] += dM(r, c2) * wy.dec.L(r, c2) * KK(r, c2);
                // Z = dM .* M: L[r, i] = exp(G_r - G_i) sends Z to G_r and -Z to G_i.
                const double z = dM(r, c2) * wy.M(r, c2);
                dG[size_t(r)] += z;
                dG[size_t(c2)] -= z;
              }
            chunk_axpy(dK, 1.0, chunk_matmul(R, false, wy.K, false));
            chunk_axpy(dK, 1.0, chunk_matmul(R, true, wy.K, false));
            const std::vector<double> dg = chunk_revcumsum(dG);
            for (int64_t r = 0; r < n; ++r) {
              const int64_t t = t0 + r, at = (b * d.T + t) * d.HV + j;
              for (int64_t e = 0; e < d.K; ++e) {
                dq_head(t, e) += dQ(r, e);
                dk_head(t, e) += dK(r, e);
              }
              if (needed[2])
                for (int64_t e = 0; e < d.V; ++e) out.dv.template data<E>()[at * d.V + e] = E(dV(r, e));
              if (needed[3]) out.dbeta.template data<E>()[at] = E(dbeta[size_t(r)]);
              if (needed[4]) out.dg.template data<E>()[at] = E(dg[size_t(r)]);
            }
          }
          if (out.dS0.defined())
            for (int64_t e = 0; e < d.K * d.V; ++e)
              out.dS0.template data<E>()[(b * d.HV + j) * d.K * d.V + e] = E(D[0].a[size_t(e)]);
        }
        for (int64_t t = 0; t < d.T; ++t)
          for (int64_t e = 0; e < d.K; ++e) {
            const int64_t at = ((b * d.T + t) * d.H + i) * d.K + e;
            if (needed[0]) out.dq.template data<E>()[at] = E(dq_head(t, e));
            if (needed[1]) out.dk.template data<E>()[at] = E(dk_head(t, e));
          }
      }
    });
  });
  return out;
}

}  // namespace hyb
