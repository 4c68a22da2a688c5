// CPU reference of the nha op: the forward loop of nha.md 2.8 and the backward of nha.md 4, line by
// line, in double. One task per (b, kv head) runs that head's memory once for its query heads and
// owns every gradient of that head: no atomics, results independent of the thread count. RoPE is
// the rope op's (layers/rope) applied to whole tensors before the loop; its transpose is applied to
// the window-branch gradients after it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/nha/nha_op.h"
#include "layers/rope/rope_op.h"

namespace hyb {

namespace {

// Contiguous BTHD indexing of the op's tensors.
struct Index {
  int64_t T, Hq, Hkv, D, Dv, M;
  int64_t q(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * Hq + h) * D; }
  int64_t o(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * Hq + h) * Dv; }
  int64_t row(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * Hq + h; }
  int64_t k(int64_t b, int64_t t, int64_t j) const { return ((b * T + t) * Hkv + j) * D; }
  int64_t v(int64_t b, int64_t t, int64_t j) const { return ((b * T + t) * Hkv + j) * Dv; }
  int64_t slot(int64_t b, int64_t t, int64_t j) const { return ((b * T + t) * Hkv + j) * M; }
  int64_t hk(int64_t b, int64_t j) const { return (b * Hkv + j) * D * M; }
  int64_t hv(int64_t b, int64_t j) const { return (b * Hkv + j) * M * Dv; }
};

// One token into the memory (gsa.md 2.1): HK <- HK .*c e^g + outer(k, s);  HV <- e^g .*r HV + outer(s, v).
template <typename E>
void absorb(double* HK, double* HV, const E* k, const E* v, const E* s, const E* g, int64_t D, int64_t Dv, int64_t M) {
  for (int64_t m = 0; m < M; ++m) {
    const double gam = std::exp(double(g[m])), sm = double(s[m]);
    for (int64_t i = 0; i < D; ++i) HK[i * M + m] = HK[i * M + m] * gam + double(k[i]) * sm;
    for (int64_t c = 0; c < Dv; ++c) HV[m * Dv + c] = gam * HV[m * Dv + c] + sm * double(v[c]);
  }
}

template <typename E>
void load_state(double* dst, const E* src, int64_t n) {
  for (int64_t e = 0; e < n; ++e) dst[e] = src ? double(src[e]) : 0.0;
}

// The probabilities of one query (nha.md 2.5): p over the M slots of memory HK, r over the window
// keys j0..t. Returns log Z.
template <typename E>
double joint_softmax(const NhaDims& d, const Index& ix, double scale, const double* HK, const E* qt, const E* qrt,
                     const E* krp, const E* bias_h, int64_t b, int64_t t, int64_t j, int64_t j0, double* p,
                     double* r) {
  double mx = -INFINITY;
  for (int64_t m = 0; m < d.M; ++m) {
    double z = 0;
    for (int64_t i = 0; i < d.D; ++i) z += HK[i * d.M + m] * double(qt[i]);
    p[m] = scale * z;
    mx = std::max(mx, p[m]);
  }
  for (int64_t u = j0; u <= t && d.window > 0; ++u) {
    const E* ku = krp + ix.k(b, u, j);
    double z = 0;
    for (int64_t i = 0; i < d.D; ++i) z += double(qrt[i]) * double(ku[i]);
    double& x = r[u - j0];
    x = scale * z + (bias_h ? double(bias_h[t - u]) : 0.0);
    mx = std::max(mx, x);
  }
  const int64_t nw = d.window > 0 ? t - j0 + 1 : 0;
  double Z = 0;
  for (int64_t m = 0; m < d.M; ++m) Z += (p[m] = std::exp(p[m] - mx));
  for (int64_t u = 0; u < nw; ++u) Z += (r[u] = std::exp(r[u] - mx));
  for (int64_t m = 0; m < d.M; ++m) p[m] /= Z;
  for (int64_t u = 0; u < nw; ++u) r[u] /= Z;
  return mx + std::log(Z);
}

Tensor rotated(const Tensor& x, const NhaParams& p, int64_t T, int64_t window) {
  if (!p.rope || window == 0) return x;
  return rope_forward(x, rope_table(p.rope_theta, x.size(3), p.rope_offset + T, std::nullopt, Device::cpu()),
                      p.rope_offset);
}

}  // namespace

NhaOutputs nha_forward_cpu(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& s0, const Tensor& g0,
                           const Tensor& HK00, const Tensor& HV00, const Tensor& bias0, const NhaParams& p,
                           const Tensor& q_window, const Tensor& k_window) {
  const NhaDims d = nha_dims("nha_forward", q0, k0, v0, s0, g0, HK00, HV00, bias0, p);
  const NhaWindowSide win = nha_window_side("nha_forward", q0, k0, q_window, k_window);
  auto cont = [](const Tensor& x) { return x.defined() ? x.contiguous() : Tensor(); };
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), s = cont(s0), g = cont(g0),
               HK0 = cont(HK00), HV0 = cont(HV00), bias = cont(bias0);
  const Tensor qr = rotated(win.q.contiguous(), p, d.T, d.window).contiguous(),
               kr = rotated(win.k.contiguous(), p, d.T, d.window).contiguous();
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(double(d.D));
  const Index ix{d.T, d.Hq, d.Hkv, d.D, d.Dv, d.M};
  const int64_t D = d.D, Dv = d.Dv, M = d.M, W = d.window;
  const DType st = q.dtype() == DType::bf16 ? DType::f32 : q.dtype();
  NhaOutputs out;
  out.o = Tensor::empty({d.B, d.T, d.Hq, Dv}, q.dtype());
  if (M > 0) {
    out.HK = Tensor::empty({d.B, d.Hkv, D, M}, st);
    out.HV = Tensor::empty({d.B, d.Hkv, M, Dv}, st);
  }
  if (p.long_ratio) out.long_ratio = Tensor::empty({d.B, d.T, d.Hq}, st);
  visit_float("nha_forward", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const E *qp = q.data<E>(), *vp = v.data<E>(), *qrp = qr.data<E>(), *krp = kr.data<E>(), *kp = k.data<E>();
    const E* sp = M > 0 ? s.data<E>() : nullptr;
    const E* gp = M > 0 ? g.data<E>() : nullptr;
    const E* hk0 = HK0.defined() ? HK0.data<E>() : nullptr;
    const E* hv0 = HV0.defined() ? HV0.data<E>() : nullptr;
    const E* bp = bias.defined() ? bias.data<E>() : nullptr;
    E* op = out.o.data<E>();
    E* lr = p.long_ratio ? out.long_ratio.data<E>() : nullptr;
    parallel_for(d.B * d.Hkv, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> HK(static_cast<size_t>(D * M)), HV(static_cast<size_t>(M * Dv)), pr(static_cast<size_t>(M)), rr(static_cast<size_t>(std::max<int64_t>(W, 1)));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.Hkv, j = task % d.Hkv;
        load_state(HK.data(), hk0 ? hk0 + ix.hk(b, j) : nullptr, D * M);
        load_state(HV.data(), hv0 ? hv0 + ix.hv(b, j) : nullptr, M * Dv);
        for (int64_t t = 0; t < d.T; ++t) {
          // Token t - shift leaves the window and enters the memory before query t reads it (2.2).
          const int64_t u = t - d.shift;
          if (M > 0 && u >= 0)
            absorb(HK.data(), HV.data(), kp + ix.k(b, u, j), vp + ix.v(b, u, j), sp + ix.slot(b, u, j),
                   gp + ix.slot(b, u, j), D, Dv, M);
          const int64_t j0 = std::max<int64_t>(0, t - W + 1);
          for (int64_t h = j * d.group; h < (j + 1) * d.group; ++h) {
            joint_softmax(d, ix, scale, HK.data(), qp + ix.q(b, t, h), qrp + ix.q(b, t, h), krp,
                          bp ? bp + h * bias.size(1) : static_cast<const E*>(nullptr), b, t, j, j0, pr.data(), rr.data());
            double omega = 0;
            for (int64_t m = 0; m < M; ++m) omega += pr[size_t(m)];
            if (lr) lr[ix.row(b, t, h)] = E(omega);
            for (int64_t c = 0; c < Dv; ++c) {  // o_t = p^T MV_t + sum_j r_j v_j
              double acc = 0;
              for (int64_t m = 0; m < M; ++m) acc += pr[size_t(m)] * HV[size_t(m * Dv + c)];
              for (int64_t w = j0; w <= t && W > 0; ++w) acc += rr[size_t(w - j0)] * double(vp[ix.v(b, w, j) + c]);
              op[ix.o(b, t, h) + c] = E(acc);
            }
          }
        }
        if (M > 0) {
          for (int64_t e = 0; e < D * M; ++e) out.HK.template data<E>()[ix.hk(b, j) + e] = E(HK[size_t(e)]);
          for (int64_t e = 0; e < M * Dv; ++e) out.HV.template data<E>()[ix.hv(b, j) + e] = E(HV[size_t(e)]);
        }
      }
    });
  });
  return out;
}

NhaGrads nha_backward_cpu(const NhaSaved& sv, const Tensor& dout0, const Tensor& dHK0_, const Tensor& dHV0_,
                          GradMask needed) {
  const NhaParams& p = sv.params;
  const NhaDims d = nha_dims("nha_backward", sv.q, sv.k, sv.v, sv.s, sv.g, sv.HK0, sv.HV0, sv.bias, p);
  const NhaWindowSide win = nha_window_side("nha_backward", sv.q, sv.k, sv.q_window, sv.k_window);
  auto cont = [](const Tensor& x) { return x.defined() ? x.contiguous() : Tensor(); };
  const Tensor q = sv.q.contiguous(), k = sv.k.contiguous(), v = sv.v.contiguous(), s = cont(sv.s), g = cont(sv.g),
               HK0 = cont(sv.HK0), HV0 = cont(sv.HV0), bias = cont(sv.bias), dout = dout0.contiguous(),
               dHKT = cont(dHK0_), dHVT = cont(dHV0_);
  const Tensor qr = rotated(win.q.contiguous(), p, d.T, d.window).contiguous(),
               kr = rotated(win.k.contiguous(), p, d.T, d.window).contiguous();
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(double(d.D));
  const Index ix{d.T, d.Hq, d.Hkv, d.D, d.Dv, d.M};
  // Without slots no token enters a memory: every query takes the initial-memory path below.
  const int64_t D = d.D, Dv = d.Dv, M = d.M, W = d.window, DM = D * M, MV = M * Dv, T = d.T,
                shift = M > 0 ? d.shift : d.T;
  const int64_t nb = bias.defined() ? bias.size(1) : 0;
  const DType dt = q.dtype();
  // Window-branch gradients of the rotated q and k; the RoPE transpose maps them back after the loop.
  Tensor dq = Tensor::empty(q.shape(), dt), dqr = Tensor::empty(q.shape(), dt), dk = Tensor::empty(k.shape(), dt),
         dkr = Tensor::empty(k.shape(), dt), dv = Tensor::empty(v.shape(), dt);
  Tensor ds = M > 0 ? Tensor::empty(s.shape(), s.dtype()) : Tensor(), dg = M > 0 ? Tensor::empty(g.shape(), g.dtype()) : Tensor();
  Tensor dHK0 = HK0.defined() ? Tensor::empty(HK0.shape(), HK0.dtype()) : Tensor();
  Tensor dHV0 = HV0.defined() ? Tensor::empty(HV0.shape(), HV0.dtype()) : Tensor();
  std::vector<double> dbias_parts(size_t(d.B * d.Hq * nb), 0.0);  // per (b, h): summed over b afterwards
  visit_float("nha_backward", dt, [&](auto tag) {
    using E = decltype(tag);
    const E *qp = q.data<E>(), *kp = k.data<E>(), *vp = v.data<E>(), *qrp = qr.data<E>(), *krp = kr.data<E>();
    const E* sp = M > 0 ? s.data<E>() : nullptr;
    const E* gp = M > 0 ? g.data<E>() : nullptr;
    const E* hk0 = HK0.defined() ? HK0.data<E>() : nullptr;
    const E* hv0 = HV0.defined() ? HV0.data<E>() : nullptr;
    const E* bp = bias.defined() ? bias.data<E>() : nullptr;
    const E* dop = dout.data<E>();
    const E* dhkT = dHKT.defined() ? dHKT.data<E>() : nullptr;
    const E* dhvT = dHVT.defined() ? dHVT.data<E>() : nullptr;
    parallel_for(d.B * d.Hkv, 1, [&](int64_t lo, int64_t hi) {
      // SK[u] = GK_{u-1}: SK[0] the initial memory, SK[u+1] the memory after absorbing token u.
      std::vector<double> SK(static_cast<size_t>((T + 1) * DM)), SV(static_cast<size_t>((T + 1) * MV)), LK(static_cast<size_t>(DM)), LV(static_cast<size_t>(MV));
      std::vector<double> pr(static_cast<size_t>(M)), rr(static_cast<size_t>(std::max<int64_t>(W, 1))), dpv(static_cast<size_t>(M)), drv(static_cast<size_t>(std::max<int64_t>(W, 1)));
      std::vector<double> dq_l(static_cast<size_t>(T * d.group * D)), dqr_l(static_cast<size_t>(T * d.group * D)), dk_l(static_cast<size_t>(T * D)),
          dkr_l(static_cast<size_t>(T * D)), dv_l(static_cast<size_t>(T * Dv));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.Hkv, j = task % d.Hkv, h0 = j * d.group;
        std::fill(dq_l.begin(), dq_l.end(), 0.0);
        std::fill(dqr_l.begin(), dqr_l.end(), 0.0);
        std::fill(dk_l.begin(), dk_l.end(), 0.0);
        std::fill(dkr_l.begin(), dkr_l.end(), 0.0);
        std::fill(dv_l.begin(), dv_l.end(), 0.0);
        if (M > 0) {
          load_state(SK.data(), hk0 ? hk0 + ix.hk(b, j) : nullptr, DM);
          load_state(SV.data(), hv0 ? hv0 + ix.hv(b, j) : nullptr, MV);
          for (int64_t u = 0; u < T - shift; ++u) {
            std::copy(SK.begin() + u * DM, SK.begin() + (u + 1) * DM, SK.begin() + (u + 1) * DM);
            std::copy(SV.begin() + u * MV, SV.begin() + (u + 1) * MV, SV.begin() + (u + 1) * MV);
            absorb(SK.data() + (u + 1) * DM, SV.data() + (u + 1) * MV, kp + ix.k(b, u, j), vp + ix.v(b, u, j),
                   sp + ix.slot(b, u, j), gp + ix.slot(b, u, j), D, Dv, M);
          }
        }
        // Query t (all heads of the group): the softmax backward, dq, the window gradients, and the
        // adjoint of the memory it read added to (LK, LV).
        auto query = [&](int64_t t) {
          const int64_t mem = std::max<int64_t>(t - shift + 1, 0);
          const double *HK = SK.data() + mem * DM, *HV = SV.data() + mem * MV;
          const int64_t j0 = std::max<int64_t>(0, t - W + 1), nw = W > 0 ? t - j0 + 1 : 0;
          for (int64_t h = h0; h < h0 + d.group; ++h) {
            const E *qt = qp + ix.q(b, t, h), *qrt = qrp + ix.q(b, t, h), *dot = dop + ix.o(b, t, h);
            const E* bias_h = bp ? bp + h * nb : nullptr;
            joint_softmax(d, ix, scale, HK, qt, qrt, krp, bias_h, b, t, j, j0, pr.data(), rr.data());
            double delta = 0;
            for (int64_t m = 0; m < M; ++m) {
              double acc = 0;
              for (int64_t c = 0; c < Dv; ++c) acc += HV[m * Dv + c] * double(dot[c]);
              dpv[size_t(m)] = acc;
              delta += pr[size_t(m)] * acc;
            }
            for (int64_t w = 0; w < nw; ++w) {
              const E* vw = vp + ix.v(b, j0 + w, j);
              double acc = 0;
              for (int64_t c = 0; c < Dv; ++c) acc += double(vw[c]) * double(dot[c]);
              drv[size_t(w)] = acc;
              delta += rr[size_t(w)] * acc;
            }
            double* dqt = dq_l.data() + (t * d.group + h - h0) * D;
            double* dqrt = dqr_l.data() + (t * d.group + h - h0) * D;
            for (int64_t m = 0; m < M; ++m) {
              const double da = pr[size_t(m)] * (dpv[size_t(m)] - delta);
              for (int64_t i = 0; i < D; ++i) {
                dqt[i] += scale * HK[i * M + m] * da;
                LK[size_t(i * M + m)] += scale * double(qt[i]) * da;
              }
              for (int64_t c = 0; c < Dv; ++c) LV[size_t(m * Dv + c)] += pr[size_t(m)] * double(dot[c]);
            }
            for (int64_t w = 0; w < nw; ++w) {
              const int64_t u = j0 + w;
              const double db = rr[size_t(w)] * (drv[size_t(w)] - delta);
              const E* ku = krp + ix.k(b, u, j);
              for (int64_t i = 0; i < D; ++i) {
                dqrt[i] += scale * db * double(ku[i]);
                dkr_l[size_t(u * D + i)] += scale * db * double(qrt[i]);
              }
              for (int64_t c = 0; c < Dv; ++c) dv_l[size_t(u * Dv + c)] += rr[size_t(w)] * double(dot[c]);
              if (bias_h) dbias_parts[size_t((b * d.Hq + h) * nb + t - u)] += db;
            }
          }
        };
        std::fill(LK.begin(), LK.end(), 0.0);
        std::fill(LV.begin(), LV.end(), 0.0);
        // Reverse over the tokens u that enter the memory: LK, LV become the adjoints of GK_u, GV_u
        // (the carried part, the final-state gradient at u = T-1-shift, and query u + shift).
        for (int64_t u = T - shift - 1; u >= 0; --u) {
          if (u == T - shift - 1) {
            for (int64_t e = 0; e < DM && dhkT; ++e) LK[size_t(e)] += double(dhkT[ix.hk(b, j) + e]);
            for (int64_t e = 0; e < MV && dhvT; ++e) LV[size_t(e)] += double(dhvT[ix.hv(b, j) + e]);
          }
          query(u + shift);
          const E *ku = kp + ix.k(b, u, j), *vu = vp + ix.v(b, u, j), *su = sp + ix.slot(b, u, j), *gu = gp + ix.slot(b, u, j);
          const double *Kprev = SK.data() + u * DM, *Vprev = SV.data() + u * MV;
          for (int64_t m = 0; m < M; ++m) {
            const double sm = double(su[m]), gam = std::exp(double(gu[m]));
            double dsm = 0, dgam = 0;
            for (int64_t i = 0; i < D; ++i) {
              const double l = LK[size_t(i * M + m)];
              dk_l[size_t(u * D + i)] += l * sm;
              dsm += l * double(ku[i]);
              dgam += l * Kprev[i * M + m];
              LK[size_t(i * M + m)] = l * gam;
            }
            for (int64_t c = 0; c < Dv; ++c) {
              const double l = LV[size_t(m * Dv + c)];
              dv_l[size_t(u * Dv + c)] += l * sm;
              dsm += l * double(vu[c]);
              dgam += l * Vprev[m * Dv + c];
              LV[size_t(m * Dv + c)] = l * gam;
            }
            ds.template data<E>()[ix.slot(b, u, j) + m] = E(dsm);
            dg.template data<E>()[ix.slot(b, u, j) + m] = E(gam * dgam);
          }
        }
        // Tokens that never enter the memory: no gradient through s and g (nha.md 3).
        for (int64_t u = std::max<int64_t>(T - shift, 0); u < T && M > 0; ++u)
          for (int64_t m = 0; m < M; ++m) {
            ds.template data<E>()[ix.slot(b, u, j) + m] = E(0);
            dg.template data<E>()[ix.slot(b, u, j) + m] = E(0);
          }
        // Queries before the first absorbed token read the initial memory.
        if (M > 0 && T - shift - 1 < 0) {
          for (int64_t e = 0; e < DM && dhkT; ++e) LK[size_t(e)] += double(dhkT[ix.hk(b, j) + e]);
          for (int64_t e = 0; e < MV && dhvT; ++e) LV[size_t(e)] += double(dhvT[ix.hv(b, j) + e]);
        }
        for (int64_t t = std::min(shift, T) - 1; t >= 0; --t) query(t);
        if (dHK0.defined()) {
          for (int64_t e = 0; e < DM; ++e) dHK0.template data<E>()[ix.hk(b, j) + e] = E(LK[size_t(e)]);
          for (int64_t e = 0; e < MV; ++e) dHV0.template data<E>()[ix.hv(b, j) + e] = E(LV[size_t(e)]);
        }
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t h = h0; h < h0 + d.group; ++h)
            for (int64_t i = 0; i < D; ++i) {
              dq.template data<E>()[ix.q(b, t, h) + i] = E(dq_l[size_t((t * d.group + h - h0) * D + i)]);
              dqr.template data<E>()[ix.q(b, t, h) + i] = E(dqr_l[size_t((t * d.group + h - h0) * D + i)]);
            }
          for (int64_t i = 0; i < D; ++i) {
            dk.template data<E>()[ix.k(b, t, j) + i] = E(dk_l[size_t(t * D + i)]);
            dkr.template data<E>()[ix.k(b, t, j) + i] = E(dkr_l[size_t(t * D + i)]);
          }
          for (int64_t c = 0; c < Dv; ++c) dv.template data<E>()[ix.v(b, t, j) + c] = E(dv_l[size_t(t * Dv + c)]);
        }
      }
    });
  });
  // dq = memory part + RoPE^T(window part), likewise dk; the window part apart for a separate window q, k.
  auto unrotated = [&](const Tensor& win_rot) {
    if (!p.rope || d.window == 0) return win_rot;
    return rope_backward(win_rot, rope_table(p.rope_theta, d.D, p.rope_offset + d.T, std::nullopt, Device::cpu()),
                         p.rope_offset);
  };
  auto add_window = [&](Tensor& mem, const Tensor& win_rot) {
    const Tensor w = unrotated(win_rot).contiguous();
    visit_float("nha_backward", dt, [&](auto tag) {
      using E = decltype(tag);
      E* a = mem.data<E>();
      const E* b = w.data<E>();
      for (int64_t e = 0; e < mem.numel(); ++e) a[e] += b[e];
    });
  };
  NhaGrads out;
  if (needed[0]) {
    if (!win.separate) add_window(dq, dqr);
    out.dq = dq;
  }
  if (needed[1]) {
    if (!win.separate) add_window(dk, dkr);
    out.dk = dk;
  }
  if (win.separate && needed[8]) out.dq_window = unrotated(dqr);
  if (win.separate && needed[9]) out.dk_window = unrotated(dkr);
  if (needed[2]) out.dv = dv;
  if (needed[3]) out.ds = ds;
  if (needed[4]) out.dg = dg;
  if (needed[5]) out.dHK0 = dHK0;
  if (needed[6]) out.dHV0 = dHV0;
  if (needed[7] && bias.defined()) {
    out.dbias = Tensor::zeros(bias.shape(), dt);
    std::vector<double> sum(size_t(d.Hq * nb), 0.0);
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t e = 0; e < d.Hq * nb; ++e) sum[size_t(e)] += dbias_parts[size_t(b * d.Hq * nb + e)];
    out.dbias = Tensor::from_vector<double>(sum, bias.shape()).to(dt);
  }
  return out;
}

}  // namespace hyb
