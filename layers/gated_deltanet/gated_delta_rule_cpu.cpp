// CPU reference of the gated delta rule in the recurrent form: forward gated_deltanet.md 3.1,
// backward the reverse-time recurrence of 3.2 (line by line, no division by beta). States are
// K x V in double. The backward rebuilds the forward states from checkpoints every
// kGatedDeltaCheckpoint tokens, one segment at a time. One backward task per (b, q/k head) owns
// that head's dq and dk and sums its value heads in order: no atomics, thread-count independent.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb {

namespace {

// Contiguous BTHD indexing of the op's tensors.
struct Index {
  int64_t T, H, HV, K, V;
  int64_t qk(int64_t b, int64_t t, int64_t i) const { return ((b * T + t) * H + i) * K; }
  int64_t v(int64_t b, int64_t t, int64_t j) const { return ((b * T + t) * HV + j) * V; }
  int64_t gate(int64_t b, int64_t t, int64_t j) const { return (b * T + t) * HV + j; }
  int64_t state(int64_t b, int64_t j) const { return (b * HV + j) * K * V; }
};

// One token: S <- S' + outer(k, u) with S' = exp(g) S, u = beta (v - S'^T k). Writes p = S'^T k.
template <typename E>
void advance(double* S, double decay, double beta, const E* k, const E* v, int64_t K, int64_t V, double* p) {
  for (int64_t e = 0; e < K * V; ++e) S[e] *= decay;
  for (int64_t j = 0; j < V; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * double(k[i]);
    p[j] = acc;
  }
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i * V + j] += double(k[i]) * beta * (double(v[j]) - p[j]);
}

}  // namespace

GatedDeltaOutputs gated_delta_rule_forward_cpu(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& beta0,
                                               const Tensor& g0, const Tensor& S00, double scale) {
  const GatedDeltaDims d = gated_delta_rule_dims("gated_delta_rule_forward", q0, k0, v0, beta0, g0, S00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), beta = beta0.contiguous(),
               g = g0.contiguous();
  const Tensor S0 = S00.defined() ? S00.contiguous() : Tensor();
  const Index ix{d.T, d.H, d.HV, d.K, d.V};
  GatedDeltaOutputs r{Tensor::empty({d.B, d.T, d.HV, d.V}, q.dtype()),
                      Tensor::empty({d.B, d.HV, d.K, d.V}, g.dtype())};
  visit_float("gated_delta_rule_forward", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E *qp = q.data<E>(), *kp = k.data<E>(), *vp = v.data<E>(), *bp = beta.data<E>(), *gp = g.data<E>();
    const E* s0p = S0.defined() ? S0.data<E>() : nullptr;
    E *op = r.o.data<E>(), *fp = r.final_state.data<E>();
    parallel_for(d.B * d.HV, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> S(size_t(d.K * d.V)), p(size_t(d.V));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.HV, j = task % d.HV, i = j / d.v_per_qk;
        for (int64_t e = 0; e < d.K * d.V; ++e) S[size_t(e)] = s0p ? double(s0p[ix.state(b, j) + e]) : 0.0;
        for (int64_t t = 0; t < d.T; ++t) {
          advance(S.data(), std::exp(double(gp[ix.gate(b, t, j)])), double(bp[ix.gate(b, t, j)]), kp + ix.qk(b, t, i),
                  vp + ix.v(b, t, j), d.K, d.V, p.data());
          const E* qt = qp + ix.qk(b, t, i);
          for (int64_t c = 0; c < d.V; ++c) {  // o_t = scale S_t^T q_t
            double acc = 0;
            for (int64_t e = 0; e < d.K; ++e) acc += S[size_t(e * d.V + c)] * double(qt[e]);
            op[ix.v(b, t, j) + c] = E(scale * acc);
          }
        }
        for (int64_t e = 0; e < d.K * d.V; ++e) fp[ix.state(b, j) + e] = E(S[size_t(e)]);
      }
    });
  });
  return r;
}

GatedDeltaGrads gated_delta_rule_backward_cpu(const GatedDeltaSaved& s, const Tensor& dout0, const Tensor& dfinal0,
                                              GradMask needed) {
  const GatedDeltaDims d = gated_delta_rule_dims("gated_delta_rule_backward", s.q, s.k, s.v, s.beta, s.g, s.S0);
  const Tensor q = s.q.contiguous(), k = s.k.contiguous(), v = s.v.contiguous(), beta = s.beta.contiguous(),
               g = s.g.contiguous();
  const Tensor S0 = s.S0.defined() ? s.S0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous(), dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = s.params.scale ? *s.params.scale : 1.0 / std::sqrt(double(d.K));
  const Index ix{d.T, d.H, d.HV, d.K, d.V};
  const int64_t K = d.K, V = d.V, KV = K * V, L = kGatedDeltaCheckpoint, segments = (d.T + L - 1) / L;
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
    const E *qp = q.data<E>(), *kp = k.data<E>(), *vp = v.data<E>(), *bp = beta.data<E>(), *gp = g.data<E>();
    const E* dop = dout.data<E>();
    const E* s0p = S0.defined() ? S0.data<E>() : nullptr;
    const E* dfp = dfinal.defined() ? dfinal.data<E>() : nullptr;
    parallel_for(d.B * d.H, 1, [&](int64_t lo, int64_t hi) {
      const size_t kv = size_t(KV), v_len = size_t(V);
      std::vector<double> ckpt(size_t(segments * KV)), seg(size_t((L + 1) * KV)), S(kv), dS(kv), Sp(kv);
      std::vector<double> p(v_len), u(v_len), du(v_len), dv(v_len);
      std::vector<double> dq(size_t(d.T * K)), dk(size_t(d.T * K));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.H, i = task % d.H;
        std::fill(dq.begin(), dq.end(), 0.0);
        std::fill(dk.begin(), dk.end(), 0.0);
        for (int64_t j = i * d.v_per_qk; j < (i + 1) * d.v_per_qk; ++j) {
          auto step = [&](double* state, int64_t t) {
            advance(state, std::exp(double(gp[ix.gate(b, t, j)])), double(bp[ix.gate(b, t, j)]), kp + ix.qk(b, t, i),
                    vp + ix.v(b, t, j), K, V, p.data());
          };
          // Checkpoints: ckpt[c] = the state before token cL.
          for (int64_t e = 0; e < KV; ++e) S[size_t(e)] = s0p ? double(s0p[ix.state(b, j) + e]) : 0.0;
          for (int64_t t = 0; t < d.T; ++t) {
            if (t % L == 0) std::copy(S.begin(), S.end(), ckpt.begin() + (t / L) * KV);
            step(S.data(), t);
          }
          for (int64_t e = 0; e < KV; ++e) dS[size_t(e)] = dfp ? double(dfp[ix.state(b, j) + e]) : 0.0;
          for (int64_t c = segments - 1; c >= 0; --c) {
            const int64_t t0 = c * L, t1 = std::min(d.T, t0 + L);
            std::copy(ckpt.begin() + c * KV, ckpt.begin() + (c + 1) * KV, seg.begin());
            for (int64_t t = t0; t < t1; ++t) {
              double* next = seg.data() + (t - t0 + 1) * KV;
              std::copy(next - KV, next, next);
              step(next, t);
            }
            for (int64_t t = t1 - 1; t >= t0; --t) {
              const double* Sprev = seg.data() + (t - t0) * KV;
              const double* St = seg.data() + (t - t0 + 1) * KV;
              const E *qt = qp + ix.qk(b, t, i), *kt = kp + ix.qk(b, t, i), *vt = vp + ix.v(b, t, j);
              const E* dot = dop + ix.v(b, t, j);
              const double decay = std::exp(double(gp[ix.gate(b, t, j)])), bt = double(bp[ix.gate(b, t, j)]);
              // Rebuild S'_t, p_t and u_t of this token.
              for (int64_t e = 0; e < KV; ++e) Sp[size_t(e)] = decay * Sprev[e];
              for (int64_t c2 = 0; c2 < V; ++c2) {
                double acc = 0;
                for (int64_t e = 0; e < K; ++e) acc += Sp[size_t(e * V + c2)] * double(kt[e]);
                p[size_t(c2)] = acc;
                u[size_t(c2)] = bt * (double(vt[c2]) - acc);
              }
              // dS += scale outer(q_t, do_t): the total dL/dS_t.  dq_t = scale S_t do_t.
              for (int64_t e = 0; e < K; ++e) {
                double acc = 0;
                for (int64_t c2 = 0; c2 < V; ++c2) {
                  dS[size_t(e * V + c2)] += scale * double(qt[e]) * double(dot[c2]);
                  acc += St[e * V + c2] * double(dot[c2]);
                }
                dq[size_t(t * K + e)] += scale * acc;
              }
              // du = dS^T k_t,  dv_t = beta_t du,  dbeta_t = du . (v_t - p_t).
              double dbeta = 0;
              for (int64_t c2 = 0; c2 < V; ++c2) {
                double acc = 0;
                for (int64_t e = 0; e < K; ++e) acc += dS[size_t(e * V + c2)] * double(kt[e]);
                du[size_t(c2)] = acc;
                dv[size_t(c2)] = bt * acc;
                dbeta += acc * (double(vt[c2]) - p[size_t(c2)]);
              }
              // dk_t = dS u_t - S'_t dv_t;  dSp = dS - outer(k_t, dv_t);  dg_t = <S'_t, dSp>.
              double dg = 0;
              for (int64_t e = 0; e < K; ++e) {
                double acc = 0;
                for (int64_t c2 = 0; c2 < V; ++c2) {
                  acc += dS[size_t(e * V + c2)] * u[size_t(c2)] - Sp[size_t(e * V + c2)] * dv[size_t(c2)];
                  dS[size_t(e * V + c2)] -= double(kt[e]) * dv[size_t(c2)];
                  dg += Sp[size_t(e * V + c2)] * dS[size_t(e * V + c2)];
                }
                dk[size_t(t * K + e)] += acc;
              }
              if (needed[2])
                for (int64_t c2 = 0; c2 < V; ++c2) out.dv.template data<E>()[ix.v(b, t, j) + c2] = E(dv[size_t(c2)]);
              if (needed[3]) out.dbeta.template data<E>()[ix.gate(b, t, j)] = E(dbeta);
              if (needed[4]) out.dg.template data<E>()[ix.gate(b, t, j)] = E(dg);
              for (double& x : dS) x *= decay;  // now dL/dS_{t-1}
            }
          }
          if (out.dS0.defined())
            for (int64_t e = 0; e < KV; ++e) out.dS0.template data<E>()[ix.state(b, j) + e] = E(dS[size_t(e)]);
        }
        for (int64_t t = 0; t < d.T; ++t)
          for (int64_t e = 0; e < K; ++e) {
            if (needed[0]) out.dq.template data<E>()[ix.qk(b, t, i) + e] = E(dq[size_t(t * K + e)]);
            if (needed[1]) out.dk.template data<E>()[ix.qk(b, t, i) + e] = E(dk[size_t(t * K + e)]);
          }
      }
    });
  });
  return out;
}

}  // namespace hyb
