// CPU reference of the gsa op in the recurrent form: forward gsa.md 2.1 line by line, backward the
// reverse-time recurrences of 3.2 (softmax backward 3.4, gate gradient through exp 3.3, states 3.6).
// Memories in double. One task per (b, kv head) runs the memories once for its G query heads and
// owns every gradient of that head (dq of its query heads included): no atomics, results
// independent of the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/gsa/gsa_op.h"

namespace hyb {

namespace {

// Contiguous BTHD indexing of the op's tensors.
struct Index {
  int64_t T, Hq, Hkv, K, V, M;
  int64_t q(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * Hq + h) * K; }
  int64_t o(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * Hq + h) * V; }
  int64_t k(int64_t b, int64_t t, int64_t j) const { return ((b * T + t) * Hkv + j) * K; }
  int64_t v(int64_t b, int64_t t, int64_t j) const { return ((b * T + t) * Hkv + j) * V; }
  int64_t slot(int64_t b, int64_t t, int64_t j) const { return ((b * T + t) * Hkv + j) * M; }
  int64_t hk(int64_t b, int64_t j) const { return (b * Hkv + j) * K * M; }
  int64_t hv(int64_t b, int64_t j) const { return (b * Hkv + j) * M * V; }
};

// One token (2.1): Hk <- Hk .*c gam + outer(k, s);  Hv <- gam .*r Hv + outer(s, v).
template <typename E, typename S>
void absorb(double* Hk, double* Hv, const E* k, const E* v, const S* s, const S* g, int64_t K, int64_t V, int64_t M) {
  for (int64_t i = 0; i < K; ++i)
    for (int64_t m = 0; m < M; ++m) Hk[i * M + m] = Hk[i * M + m] * std::exp(double(g[m])) + double(k[i]) * double(s[m]);
  for (int64_t m = 0; m < M; ++m) {
    const double gam = std::exp(double(g[m]));
    for (int64_t c = 0; c < V; ++c) Hv[m * V + c] = gam * Hv[m * V + c] + double(s[m]) * double(v[c]);
  }
}

// a = softmax(scale Hk^T q) over the M slots, max-subtracted.
template <typename E>
void slot_weights(const double* Hk, const E* q, double scale, int64_t K, int64_t M, double* a) {
  double mx = -INFINITY;
  for (int64_t m = 0; m < M; ++m) {
    double z = 0;
    for (int64_t i = 0; i < K; ++i) z += Hk[i * M + m] * double(q[i]);
    a[m] = scale * z;
    mx = std::max(mx, a[m]);
  }
  double sum = 0;
  for (int64_t m = 0; m < M; ++m) sum += (a[m] = std::exp(a[m] - mx));
  for (int64_t m = 0; m < M; ++m) a[m] /= sum;
}

template <typename S>
void load_state(double* dst, const S* src, int64_t n) {
  for (int64_t e = 0; e < n; ++e) dst[e] = src ? double(src[e]) : 0.0;
}

}  // namespace

GsaOutputs gsa_forward_cpu(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& s0, const Tensor& g0,
                           const Tensor& Hk00, const Tensor& Hv00, double scale) {
  const GsaDims d = gsa_dims("gsa_forward", q0, k0, v0, s0, g0, Hk00, Hv00);
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), s = s0.contiguous(), g = g0.contiguous();
  const Tensor Hk0 = Hk00.defined() ? Hk00.contiguous() : Tensor(), Hv0 = Hv00.defined() ? Hv00.contiguous() : Tensor();
  const Index ix{d.T, d.Hq, d.Hkv, d.K, d.V, d.M};
  const int64_t K = d.K, V = d.V, M = d.M;
  GsaOutputs r{Tensor::empty({d.B, d.T, d.Hq, V}, q.dtype()), Tensor::empty({d.B, d.Hkv, K, M}, g.dtype()),
               Tensor::empty({d.B, d.Hkv, M, V}, g.dtype())};
  visit_float("gsa_forward", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E *qp = q.data<E>(), *kp = k.data<E>(), *vp = v.data<E>(), *sp = s.data<E>(), *gp = g.data<E>();
    const E* hk0 = Hk0.defined() ? Hk0.data<E>() : nullptr;
    const E* hv0 = Hv0.defined() ? Hv0.data<E>() : nullptr;
    E *op = r.o.data<E>(), *hkp = r.Hk.data<E>(), *hvp = r.Hv.data<E>();
    parallel_for(d.B * d.Hkv, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> Hk(static_cast<size_t>(K * M)), Hv(static_cast<size_t>(M * V)), a(static_cast<size_t>(M));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.Hkv, j = task % d.Hkv;
        load_state(Hk.data(), hk0 ? hk0 + ix.hk(b, j) : nullptr, K * M);
        load_state(Hv.data(), hv0 ? hv0 + ix.hv(b, j) : nullptr, M * V);
        for (int64_t t = 0; t < d.T; ++t) {
          absorb(Hk.data(), Hv.data(), kp + ix.k(b, t, j), vp + ix.v(b, t, j), sp + ix.slot(b, t, j),
                 gp + ix.slot(b, t, j), K, V, M);
          for (int64_t h = j * d.group; h < (j + 1) * d.group; ++h) {
            slot_weights(Hk.data(), qp + ix.q(b, t, h), scale, K, M, a.data());
            for (int64_t c = 0; c < V; ++c) {  // o_t = Hv_t^T a_t
              double acc = 0;
              for (int64_t m = 0; m < M; ++m) acc += Hv[size_t(m * V + c)] * a[size_t(m)];
              op[ix.o(b, t, h) + c] = E(acc);
            }
          }
        }
        for (int64_t e = 0; e < K * M; ++e) hkp[ix.hk(b, j) + e] = E(Hk[size_t(e)]);
        for (int64_t e = 0; e < M * V; ++e) hvp[ix.hv(b, j) + e] = E(Hv[size_t(e)]);
      }
    });
  });
  return r;
}

GsaGrads gsa_backward_cpu(const GsaSaved& sv, const Tensor& dout0, const Tensor& dHk0_, const Tensor& dHv0_,
                          GradMask needed) {
  const GsaDims d = gsa_dims("gsa_backward", sv.q, sv.k, sv.v, sv.s, sv.g, sv.Hk0, sv.Hv0);
  const Tensor q = sv.q.contiguous(), k = sv.k.contiguous(), v = sv.v.contiguous(), s = sv.s.contiguous(),
               g = sv.g.contiguous();
  const Tensor Hk0 = sv.Hk0.defined() ? sv.Hk0.contiguous() : Tensor();
  const Tensor Hv0 = sv.Hv0.defined() ? sv.Hv0.contiguous() : Tensor();
  const Tensor dout = dout0.contiguous();
  const Tensor dHkT = dHk0_.defined() ? dHk0_.contiguous() : Tensor(), dHvT = dHv0_.defined() ? dHv0_.contiguous() : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(d.K));
  const Index ix{d.T, d.Hq, d.Hkv, d.K, d.V, d.M};
  const int64_t K = d.K, V = d.V, M = d.M, KM = K * M, MV = M * V;
  GsaGrads out;
  const DType dt = q.dtype(), st = g.dtype();
  // Every gradient buffer is written in full by its task, so empty() suffices.
  if (needed[0]) out.dq = Tensor::empty(q.shape(), dt);
  if (needed[1]) out.dk = Tensor::empty(k.shape(), dt);
  if (needed[2]) out.dv = Tensor::empty(v.shape(), dt);
  if (needed[3]) out.ds = Tensor::empty(s.shape(), st);
  if (needed[4]) out.dg = Tensor::empty(g.shape(), st);
  if (needed[5] && Hk0.defined()) out.dHk0 = Tensor::empty(Hk0.shape(), st);
  if (needed[6] && Hv0.defined()) out.dHv0 = Tensor::empty(Hv0.shape(), st);
  visit_float("gsa_backward", dt, [&](auto tag) {
    using E = decltype(tag);
    const E *qp = q.data<E>(), *kp = k.data<E>(), *vp = v.data<E>(), *sp = s.data<E>(), *gp = g.data<E>();
    const E* dop = dout.data<E>();
    const E* hk0 = Hk0.defined() ? Hk0.data<E>() : nullptr;
    const E* hv0 = Hv0.defined() ? Hv0.data<E>() : nullptr;
    const E* dhkT = dHkT.defined() ? dHkT.data<E>() : nullptr;
    const E* dhvT = dHvT.defined() ? dHvT.data<E>() : nullptr;
    parallel_for(d.B * d.Hkv, 1, [&](int64_t lo, int64_t hi) {
      // Hks[t] = Hk_t for t = 0..T (Hk_0 the initial memory); likewise Hvs.
      std::vector<double> Hks(static_cast<size_t>((d.T + 1) * KM)), Hvs(static_cast<size_t>((d.T + 1) * MV));
      std::vector<double> Gk(static_cast<size_t>(KM)), Gv(static_cast<size_t>(MV)), a(static_cast<size_t>(M)), da(static_cast<size_t>(M)), dz(static_cast<size_t>(M));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.Hkv, j = task % d.Hkv;
        load_state(Hks.data(), hk0 ? hk0 + ix.hk(b, j) : nullptr, KM);
        load_state(Hvs.data(), hv0 ? hv0 + ix.hv(b, j) : nullptr, MV);
        for (int64_t t = 0; t < d.T; ++t) {
          std::copy(Hks.begin() + t * KM, Hks.begin() + (t + 1) * KM, Hks.begin() + (t + 1) * KM);
          std::copy(Hvs.begin() + t * MV, Hvs.begin() + (t + 1) * MV, Hvs.begin() + (t + 1) * MV);
          absorb(Hks.data() + (t + 1) * KM, Hvs.data() + (t + 1) * MV, kp + ix.k(b, t, j), vp + ix.v(b, t, j),
                 sp + ix.slot(b, t, j), gp + ix.slot(b, t, j), K, V, M);
        }
        // Gk = dL/dHk_t, Gv = dL/dHv_t, seeded by the final-state gradients (added once per kv head).
        load_state(Gk.data(), dhkT ? dhkT + ix.hk(b, j) : nullptr, KM);
        load_state(Gv.data(), dhvT ? dhvT + ix.hv(b, j) : nullptr, MV);
        for (int64_t t = d.T - 1; t >= 0; --t) {
          const double *Hk = Hks.data() + (t + 1) * KM, *Hv = Hvs.data() + (t + 1) * MV;
          for (int64_t h = j * d.group; h < (j + 1) * d.group; ++h) {
            const E *qt = qp + ix.q(b, t, h), *dot = dop + ix.o(b, t, h);
            slot_weights(Hk, qt, scale, K, M, a.data());
            double ada = 0;
            for (int64_t m = 0; m < M; ++m) {  // da = Hv_t do_t
              double acc = 0;
              for (int64_t c = 0; c < V; ++c) acc += Hv[m * V + c] * double(dot[c]);
              da[size_t(m)] = acc;
              ada += a[size_t(m)] * acc;
            }
            for (int64_t m = 0; m < M; ++m) dz[size_t(m)] = a[size_t(m)] * (da[size_t(m)] - ada);  // 3.4
            if (needed[0])
              for (int64_t i = 0; i < K; ++i) {  // dq = scale Hk_t dz
                double acc = 0;
                for (int64_t m = 0; m < M; ++m) acc += Hk[i * M + m] * dz[size_t(m)];
                out.dq.template data<E>()[ix.q(b, t, h) + i] = E(scale * acc);
              }
            for (int64_t m = 0; m < M; ++m)
              for (int64_t c = 0; c < V; ++c) Gv[size_t(m * V + c)] += a[size_t(m)] * double(dot[c]);
            for (int64_t i = 0; i < K; ++i)
              for (int64_t m = 0; m < M; ++m) Gk[size_t(i * M + m)] += scale * double(qt[i]) * dz[size_t(m)];
          }
          // Through the write outer(k_t, s_t), outer(s_t, v_t) and the decay of Hk_{t-1}, Hv_{t-1}.
          const E *kt = kp + ix.k(b, t, j), *vt = vp + ix.v(b, t, j), *s_t = sp + ix.slot(b, t, j),
                  *g_t = gp + ix.slot(b, t, j);
          const double *Hkp = Hks.data() + t * KM, *Hvp = Hvs.data() + t * MV;
          if (needed[1])
            for (int64_t i = 0; i < K; ++i) {  // dk_t = Gk s_t
              double acc = 0;
              for (int64_t m = 0; m < M; ++m) acc += Gk[size_t(i * M + m)] * double(s_t[m]);
              out.dk.template data<E>()[ix.k(b, t, j) + i] = E(acc);
            }
          if (needed[2])
            for (int64_t c = 0; c < V; ++c) {  // dv_t = Gv^T s_t
              double acc = 0;
              for (int64_t m = 0; m < M; ++m) acc += Gv[size_t(m * V + c)] * double(s_t[m]);
              out.dv.template data<E>()[ix.v(b, t, j) + c] = E(acc);
            }
          for (int64_t m = 0; m < M; ++m) {
            double ds = 0, dgam = 0;
            for (int64_t i = 0; i < K; ++i) {
              ds += Gk[size_t(i * M + m)] * double(kt[i]);
              dgam += Gk[size_t(i * M + m)] * Hkp[i * M + m];
            }
            for (int64_t c = 0; c < V; ++c) {
              ds += Gv[size_t(m * V + c)] * double(vt[c]);
              dgam += Gv[size_t(m * V + c)] * Hvp[m * V + c];
            }
            const double gam = std::exp(double(g_t[m]));
            if (needed[3]) out.ds.template data<E>()[ix.slot(b, t, j) + m] = E(ds);
            if (needed[4]) out.dg.template data<E>()[ix.slot(b, t, j) + m] = E(gam * dgam);
            for (int64_t i = 0; i < K; ++i) Gk[size_t(i * M + m)] *= gam;  // now dL/dHk_{t-1}
            for (int64_t c = 0; c < V; ++c) Gv[size_t(m * V + c)] *= gam;
          }
        }
        if (out.dHk0.defined())
          for (int64_t e = 0; e < KM; ++e) out.dHk0.template data<E>()[ix.hk(b, j) + e] = E(Gk[size_t(e)]);
        if (out.dHv0.defined())
          for (int64_t e = 0; e < MV; ++e) out.dHv0.template data<E>()[ix.hv(b, j) + e] = E(Gv[size_t(e)]);
      }
    });
  });
  return out;
}

}  // namespace hyb
