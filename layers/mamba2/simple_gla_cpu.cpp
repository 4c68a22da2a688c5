// CPU reference of simple_gla in the recurrent form: forward mamba2.md 3.1, backward the reverse-time
// recurrence of 3.2. States are K x V in double. The backward rebuilds the forward states from
// checkpoints (every kSimpleGlaCheckpoint tokens) one segment at a time, so its memory is
// (T / 64 + 64) K V per task instead of T K V. One backward task per (b, group) owns the group's dq
// and dk and sums its heads in order: no atomics, results independent of the thread count.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/mamba2/simple_gla_op.h"

namespace hyb {

namespace {

// Contiguous BTHD indexing of the op's tensors.
struct Index {
  int64_t T, Gq, H, K, V;
  int64_t qk(int64_t b, int64_t t, int64_t grp) const { return ((b * T + t) * Gq + grp) * K; }
  int64_t v(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * V; }
  int64_t g(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * H + h; }
  int64_t state(int64_t b, int64_t h) const { return (b * H + h) * K * V; }
};

// S <- exp(g) S + outer(k, v).
template <typename E>
void advance(double* S, double decay, const E* k, const E* v, int64_t K, int64_t V) {
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i * V + j] = decay * S[i * V + j] + double(k[i]) * double(v[j]);
}

}  // namespace

SimpleGlaOutputs simple_gla_forward_cpu(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0,
                                        const Tensor& S00, double scale) {
  const SimpleGlaDims d = simple_gla_dims("simple_gla_forward", q0, k0, v0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  const Index ix{d.T, d.Gq, d.H, d.K, d.V};
  SimpleGlaOutputs r{Tensor::empty({d.B, d.T, d.H, d.V}, q.dtype()), Tensor::empty({d.B, d.H, d.K, d.V}, g.dtype())};
  visit_float("simple_gla_forward", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E *qp = q.data<E>(), *kp = k.data<E>(), *vp = v.data<E>(), *gp = g.data<E>();
    const E* s0p = S0.defined() ? S0.data<E>() : nullptr;
    E *op = r.o.data<E>(), *fp = r.final_state.data<E>();
    parallel_for(d.B * d.H, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> S(size_t(d.K * d.V));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.H, h = task % d.H, grp = h / d.heads_per_group;
        for (int64_t e = 0; e < d.K * d.V; ++e) S[size_t(e)] = s0p ? double(s0p[ix.state(b, h) + e]) : 0.0;
        for (int64_t t = 0; t < d.T; ++t) {
          advance(S.data(), std::exp(double(gp[ix.g(b, t, h)])), kp + ix.qk(b, t, grp), vp + ix.v(b, t, h), d.K, d.V);
          // o_t = scale S_t^T q_t
          const E* qt = qp + ix.qk(b, t, grp);
          for (int64_t j = 0; j < d.V; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < d.K; ++i) acc += S[size_t(i * d.V + j)] * double(qt[i]);
            op[ix.v(b, t, h) + j] = E(scale * acc);
          }
        }
        for (int64_t e = 0; e < d.K * d.V; ++e) fp[ix.state(b, h) + e] = E(S[size_t(e)]);
      }
    });
  });
  return r;
}

SimpleGlaGrads simple_gla_backward_cpu(const SimpleGlaSaved& s, const Tensor& dout0, const Tensor& dfinal0,
                                       GradMask needed) {
  const SimpleGlaDims d = simple_gla_dims("simple_gla_backward", s.q, s.k, s.v, s.g, s.S0);
  const Tensor q = s.q.contiguous(), k = s.k.contiguous(), v = s.v.contiguous(), g = s.g.contiguous();
  const Tensor S0 = s.S0.defined() ? s.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = s.params.scale ? *s.params.scale : 1.0 / std::sqrt(double(d.K));
  const Index ix{d.T, d.Gq, d.H, d.K, d.V};
  const int64_t KV = d.K * d.V, L = kSimpleGlaCheckpoint, segments = (d.T + L - 1) / L;
  SimpleGlaGrads out;
  const DType dt = q.dtype();
  if (needed[0]) out.dq = Tensor::empty(q.shape(), dt);
  if (needed[1]) out.dk = Tensor::empty(k.shape(), dt);
  if (needed[2]) out.dv = Tensor::empty(v.shape(), dt);
  if (needed[3]) out.dg = Tensor::empty(g.shape(), g.dtype());
  if (needed[4] && S0.defined()) out.dS0 = Tensor::empty(S0.shape(), g.dtype());
  visit_float("simple_gla_backward", dt, [&](auto tag) {
    using E = decltype(tag);
    const E *qp = q.data<E>(), *kp = k.data<E>(), *vp = v.data<E>(), *gp = g.data<E>(), *dop = dout.data<E>();
    const E* s0p = S0.defined() ? S0.data<E>() : nullptr;
    const E* dfp = dfinal.defined() ? dfinal.data<E>() : nullptr;
    parallel_for(d.B * d.Gq, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> ckpt(size_t(segments * KV)), seg(size_t((L + 1) * KV)), dS(static_cast<size_t>(KV));
      std::vector<double> dq(size_t(d.T * d.K)), dk(size_t(d.T * d.K));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.Gq, grp = task % d.Gq;
        std::fill(dq.begin(), dq.end(), 0.0);
        std::fill(dk.begin(), dk.end(), 0.0);
        for (int64_t h = grp * d.heads_per_group; h < (grp + 1) * d.heads_per_group; ++h) {
          // Checkpoints: ckpt[c] = S_{cL}, the state before token cL.
          std::vector<double> S(static_cast<size_t>(KV));
          for (int64_t e = 0; e < KV; ++e) S[size_t(e)] = s0p ? double(s0p[ix.state(b, h) + e]) : 0.0;
          for (int64_t t = 0; t < d.T; ++t) {
            if (t % L == 0) std::copy(S.begin(), S.end(), ckpt.begin() + (t / L) * KV);
            advance(S.data(), std::exp(double(gp[ix.g(b, t, h)])), kp + ix.qk(b, t, grp), vp + ix.v(b, t, h), d.K, d.V);
          }
          for (int64_t e = 0; e < KV; ++e) dS[size_t(e)] = dfp ? double(dfp[ix.state(b, h) + e]) : 0.0;
          for (int64_t c = segments - 1; c >= 0; --c) {
            const int64_t t0 = c * L, t1 = std::min(d.T, t0 + L);
            // seg[i] = the state before token t0 + i, for i = 0 .. t1 - t0.
            std::copy(ckpt.begin() + c * KV, ckpt.begin() + (c + 1) * KV, seg.begin());
            for (int64_t t = t0; t < t1; ++t) {
              double* next = seg.data() + (t - t0 + 1) * KV;
              std::copy(next - KV, next, next);
              advance(next, std::exp(double(gp[ix.g(b, t, h)])), kp + ix.qk(b, t, grp), vp + ix.v(b, t, h), d.K, d.V);
            }
            for (int64_t t = t1 - 1; t >= t0; --t) {
              const double* Sprev = seg.data() + (t - t0) * KV;  // S_{t-1}
              const double* St = seg.data() + (t - t0 + 1) * KV;  // S_t
              const E *qt = qp + ix.qk(b, t, grp), *kt = kp + ix.qk(b, t, grp), *vt = vp + ix.v(b, t, h);
              const E* dot = dop + ix.v(b, t, h);
              const double decay = std::exp(double(gp[ix.g(b, t, h)]));
              // dS += scale outer(q_t, do_t): now the total dL/dS_t.
              for (int64_t i = 0; i < d.K; ++i)
                for (int64_t j = 0; j < d.V; ++j) dS[size_t(i * d.V + j)] += scale * double(qt[i]) * double(dot[j]);
              double dg_t = 0;
              for (int64_t i = 0; i < d.K; ++i) {
                double dq_i = 0, dk_i = 0;
                for (int64_t j = 0; j < d.V; ++j) {
                  dq_i += St[i * d.V + j] * double(dot[j]);    // dq_t = scale S_t do_t
                  dk_i += dS[size_t(i * d.V + j)] * double(vt[j]);  // dk_t = dS v_t
                  dg_t += Sprev[i * d.V + j] * dS[size_t(i * d.V + j)];
                }
                dq[size_t(t * d.K + i)] += scale * dq_i;
                dk[size_t(t * d.K + i)] += dk_i;
              }
              if (needed[2]) {
                E* dvt = out.dv.template data<E>() + ix.v(b, t, h);
                for (int64_t j = 0; j < d.V; ++j) {  // dv_t = dS^T k_t
                  double acc = 0;
                  for (int64_t i = 0; i < d.K; ++i) acc += dS[size_t(i * d.V + j)] * double(kt[i]);
                  dvt[j] = E(acc);
                }
              }
              // dg_t = exp(g_t) <S_{t-1}, dS>; then dS becomes dL/dS_{t-1}.
              if (needed[3]) out.dg.template data<E>()[ix.g(b, t, h)] = E(decay * dg_t);
              for (double& x : dS) x *= decay;
            }
          }
          if (out.dS0.defined())
            for (int64_t e = 0; e < KV; ++e) out.dS0.template data<E>()[ix.state(b, h) + e] = E(dS[size_t(e)]);
        }
        for (int64_t t = 0; t < d.T; ++t)
          for (int64_t i = 0; i < d.K; ++i) {
            if (needed[0]) out.dq.template data<E>()[ix.qk(b, t, grp) + i] = E(dq[size_t(t * d.K + i)]);
            if (needed[1]) out.dk.template data<E>()[ix.qk(b, t, grp) + i] = E(dk[size_t(t * d.K + i)]);
          }
      }
    });
  });
  return out;
}

}  // namespace hyb
