// CPU reference of simple_gla in the chunked (SSD) form the CUDA kernels implement: forward
// mamba2.md 4.2 (F1 chunk decays, F2 local chunk state, F3 state passing, F4 output), backward 4.3
// (B1 recompute the chunk-start states, B2 reverse state passing, B3 the per-chunk gradients with
// dg from the dG identity). Equal to the recurrent form (simple_gla_cpu.cpp) up to rounding for any T;
// the last chunk may be short. Requires g <= 0, the op's domain: every exp argument is then <= 0.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/chunk_cpu.h"
#include "layers/mamba2/simple_gla_op.h"

namespace hyb {

namespace {

// One head's view of the op's contiguous tensors, loading chunks of rows as double matrices.
template <typename E>
struct HeadView {
  const E *q, *k, *v, *g;
  SimpleGlaDims d;
  int64_t b, h, grp;
  ChunkMat rows(const E* base, int64_t t0, int64_t n, int64_t heads, int64_t head, int64_t width) const {
    ChunkMat m(n, width);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t e = 0; e < width; ++e) m(r, e) = double(base[((b * d.T + t0 + r) * heads + head) * width + e]);
    return m;
  }
  ChunkMat Q(int64_t t0, int64_t n) const { return rows(q, t0, n, d.Gq, grp, d.K); }
  ChunkMat K(int64_t t0, int64_t n) const { return rows(k, t0, n, d.Gq, grp, d.K); }
  ChunkMat V(int64_t t0, int64_t n) const { return rows(v, t0, n, d.H, h, d.V); }
  std::vector<double> gates(int64_t t0, int64_t n) const {
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) out[size_t(r)] = double(g[(b * d.T + t0 + r) * d.H + h]);
    return out;
  }
};

ChunkMat load_state(const Tensor& S, int64_t b, int64_t h, const SimpleGlaDims& d) {
  ChunkMat m(d.K, d.V);
  if (!S.defined()) return m;
  visit_float("simple_gla", S.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E* p = S.data<E>() + (b * d.H + h) * d.K * d.V;
    for (int64_t e = 0; e < d.K * d.V; ++e) m.a[size_t(e)] = double(p[e]);
  });
  return m;
}

// The L-masked score matrix L .* (Q @ K^T) of a chunk.
ChunkMat masked_scores(const ChunkMat& Q, const ChunkMat& K, const ChunkDecay& dec) {
  ChunkMat A = chunk_matmul(Q, false, K, true);
  for (size_t e = 0; e < A.a.size(); ++e) A.a[e] *= dec.L.a[e];
  return A;
}

}  // namespace

SimpleGlaOutputs simple_gla_chunked_forward_cpu(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0,
                                                const Tensor& S00, double scale, int64_t C) {
  const SimpleGlaDims d = simple_gla_dims("simple_gla_forward", q0, k0, v0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  SimpleGlaOutputs r{Tensor::empty({d.B, d.T, d.H, d.V}, q.dtype()), Tensor::empty({d.B, d.H, d.K, d.V}, g.dtype())};
  visit_float("simple_gla_forward", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    E *op = r.o.data<E>(), *fp = r.final_state.data<E>();
    parallel_for(d.B * d.H, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.H, h = task % d.H;
        const HeadView<E> hv{q.data<E>(), k.data<E>(), v.data<E>(), g.data<E>(), d, b, h, h / d.heads_per_group};
        ChunkMat S = load_state(S0, b, h, d);
        for (int64_t t0 = 0; t0 < d.T; t0 += C) {
          const int64_t n = std::min(C, d.T - t0);
          const ChunkDecay dec(hv.gates(t0, n));                               // F1
          const ChunkMat Q = hv.Q(t0, n), K = hv.K(t0, n), V = hv.V(t0, n);
          // F4 with the chunk-start state: O = scale (gam .* (Q @ S) + (L .* (Q @ K^T)) @ V).
          ChunkMat O = chunk_scale_rows(dec.gam, chunk_matmul(Q, false, S, false));
          chunk_axpy(O, 1.0, chunk_matmul(masked_scores(Q, K, dec), false, V, false));
          for (int64_t rr = 0; rr < n; ++rr)
            for (int64_t j = 0; j < d.V; ++j) op[((b * d.T + t0 + rr) * d.H + h) * d.V + j] = E(scale * O(rr, j));
          // F2 and F3: S <- gam_n S + (kd .* K)^T @ V.
          const ChunkMat local = chunk_matmul(chunk_scale_rows(dec.kd, K), true, V, false);
          for (size_t e = 0; e < S.a.size(); ++e) S.a[e] = dec.gam[size_t(n - 1)] * S.a[e] + local.a[e];
        }
        for (int64_t e = 0; e < d.K * d.V; ++e) fp[(b * d.H + h) * d.K * d.V + e] = E(S.a[size_t(e)]);
      }
    });
  });
  return r;
}

SimpleGlaGrads simple_gla_chunked_backward_cpu(const SimpleGlaSaved& s, const Tensor& dout0, const Tensor& dfinal0,
                                               GradMask needed) {
  const SimpleGlaDims d = simple_gla_dims("simple_gla_backward", s.q, s.k, s.v, s.g, s.S0);
  const Tensor q = s.q.contiguous(), k = s.k.contiguous(), v = s.v.contiguous(), g = s.g.contiguous();
  const Tensor S0 = s.S0.defined() ? s.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = s.params.scale ? *s.params.scale : 1.0 / std::sqrt(double(d.K));
  const int64_t C = s.params.chunk_size, chunks = (d.T + C - 1) / C;
  SimpleGlaGrads out;
  const DType dt = q.dtype();
  if (needed[0]) out.dq = Tensor::empty(q.shape(), dt);
  if (needed[1]) out.dk = Tensor::empty(k.shape(), dt);
  if (needed[2]) out.dv = Tensor::empty(v.shape(), dt);
  if (needed[3]) out.dg = Tensor::empty(g.shape(), g.dtype());
  if (needed[4] && S0.defined()) out.dS0 = Tensor::empty(S0.shape(), g.dtype());
  visit_float("simple_gla_backward", dt, [&](auto tag) {
    using E = decltype(tag);
    parallel_for(d.B * d.Gq, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.Gq, grp = task % d.Gq;
        ChunkMat dq_grp(d.T, d.K), dk_grp(d.T, d.K);
        for (int64_t h = grp * d.heads_per_group; h < (grp + 1) * d.heads_per_group; ++h) {
          const HeadView<E> hv{q.data<E>(), k.data<E>(), v.data<E>(), g.data<E>(), d, b, h, grp};
          const HeadView<E> dov{nullptr, nullptr, dout.data<E>(), nullptr, d, b, h, grp};
          // B1: chunk-start states, states[c] = S at the start of chunk c, states[chunks] = S_T.
          std::vector<ChunkMat> states(size_t(chunks + 1));
          states[0] = load_state(S0, b, h, d);
          for (int64_t c = 0; c < chunks; ++c) {
            const int64_t t0 = c * C, n = std::min(C, d.T - t0);
            const ChunkDecay dec(hv.gates(t0, n));
            states[size_t(c + 1)] = chunk_matmul(chunk_scale_rows(dec.kd, hv.K(t0, n)), true, hv.V(t0, n), false);
            chunk_axpy(states[size_t(c + 1)], dec.gam[size_t(n - 1)], states[size_t(c)]);
          }
          // B2: D[c] = dL/d(state at the end of chunk c); D[-1] is dS0.
          std::vector<ChunkMat> D(size_t(chunks + 1));
          D[size_t(chunks)] = dfinal.defined() ? load_state(dfinal, b, h, d) : ChunkMat(d.K, d.V);
          for (int64_t c = chunks - 1; c >= 0; --c) {
            const int64_t t0 = c * C, n = std::min(C, d.T - t0);
            const ChunkDecay dec(hv.gates(t0, n));
            D[size_t(c)] = chunk_matmul(chunk_scale_rows(dec.gam, hv.Q(t0, n)), true, dov.V(t0, n), false);
            for (size_t e = 0; e < D[size_t(c)].a.size(); ++e)
              D[size_t(c)].a[e] = dec.gam[size_t(n - 1)] * D[size_t(c + 1)].a[e] + scale * D[size_t(c)].a[e];
          }
          // B3: per chunk, with S = states[c] and Dc = D[c + 1] (the end-of-chunk gradient).
          for (int64_t c = 0; c < chunks; ++c) {
            const int64_t t0 = c * C, n = std::min(C, d.T - t0);
            const ChunkDecay dec(hv.gates(t0, n));
            const ChunkMat Q = hv.Q(t0, n), K = hv.K(t0, n), V = hv.V(t0, n), dO = dov.V(t0, n);
            const ChunkMat &S = states[size_t(c)], &Dc = D[size_t(c + 1)];
            ChunkMat dP = chunk_matmul(dO, false, V, true);  // scale (dO @ V^T) .* L
            for (size_t e = 0; e < dP.a.size(); ++e) dP.a[e] *= scale * dec.L.a[e];
            ChunkMat dQ = chunk_scale_rows(dec.gam, chunk_matmul(dO, false, S, true));
            for (double& x : dQ.a) x *= scale;
            chunk_axpy(dQ, 1.0, chunk_matmul(dP, false, K, false));
            ChunkMat dK = chunk_matmul(dP, true, Q, false);
            chunk_axpy(dK, 1.0, chunk_scale_rows(dec.kd, chunk_matmul(V, false, Dc, true)));
            ChunkMat dV = chunk_matmul(masked_scores(Q, K, dec), true, dO, false);
            for (double& x : dV.a) x *= scale;
            chunk_axpy(dV, 1.0, chunk_scale_rows(dec.kd, chunk_matmul(K, false, Dc, false)));
            // dG = rowdot(dQ, Q) - rowdot(dK, K), plus <S_next, D> on the last row; dg = revcumsum(dG).
            std::vector<double> dG = chunk_rowdot(dQ, Q);
            const std::vector<double> kdk = chunk_rowdot(dK, K);
            for (int64_t rr = 0; rr < n; ++rr) dG[size_t(rr)] -= kdk[size_t(rr)];
            dG[size_t(n - 1)] += chunk_inner(states[size_t(c + 1)], Dc);
            const std::vector<double> dg = chunk_revcumsum(dG);
            for (int64_t rr = 0; rr < n; ++rr) {
              const int64_t t = t0 + rr;
              for (int64_t i = 0; i < d.K; ++i) {
                dq_grp(t, i) += dQ(rr, i);
                dk_grp(t, i) += dK(rr, i);
              }
              if (needed[2])
                for (int64_t j = 0; j < d.V; ++j)
                  out.dv.template data<E>()[((b * d.T + t) * d.H + h) * d.V + j] = E(dV(rr, j));
              if (needed[3]) out.dg.template data<E>()[(b * d.T + t) * d.H + h] = E(dg[size_t(rr)]);
            }
          }
          if (out.dS0.defined())
            for (int64_t e = 0; e < d.K * d.V; ++e)
              out.dS0.template data<E>()[(b * d.H + h) * d.K * d.V + e] = E(D[0].a[size_t(e)]);
        }
        for (int64_t t = 0; t < d.T; ++t)
          for (int64_t i = 0; i < d.K; ++i) {
            const int64_t at = ((b * d.T + t) * d.Gq + grp) * d.K + i;
            if (needed[0]) out.dq.template data<E>()[at] = E(dq_grp(t, i));
            if (needed[1]) out.dk.template data<E>()[at] = E(dk_grp(t, i));
          }
      }
    });
  });
  return out;
}

}  // namespace hyb
