// CPU reference of the softmax-attention core op: forward as attention.md 2.1 (each row in two
// passes over its scores, max then sum), backward as 3.1 (P rebuilt from lse, Di from the saved o,
// dS = P (dP - Di), kv gradients summed over the query heads of their group). Plain loops over
// named indices, f32 or f64 data, every dot product and sum accumulated in double.
// q, k, v, o and dout are read through their strides (views into a fused QKV buffer are fine).
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/softmax_attention/attention_op.h"

namespace hyb {
namespace {

// Strided (B, T, H, D) access; the last dimension is contiguous (checked by attention_dims).
template <typename T>
struct Bthd {
  T* base;
  int64_t sb, st, sh;
  explicit Bthd(const Tensor& x)
      : base(x.data<T>()), sb(x.stride(0)), st(x.stride(1)), sh(x.stride(2)) {}
  T* row(int64_t b, int64_t t, int64_t h) const { return base + b * sb + t * st + h * sh; }
};

template <typename F>
void for_each_visible_key(int64_t pos, const AttentionParams& p, F&& f) {
  const AttentionKeyRanges r = attention_key_ranges(pos, p.window, p.sinks);
  for (int64_t j = 0; j < r.sink_end; ++j) f(j);
  for (int64_t j = r.lo; j <= r.hi; ++j) f(j);
}

template <typename A, typename B>
double dot(const A* a, const B* b, int64_t n) {
  double s = 0;
  for (int64_t d = 0; d < n; ++d) s += double(a[d]) * double(b[d]);
  return s;
}

std::vector<double> head_scales(const AttentionParams& p, const AttentionDims& d) {
  if (p.scale_h.defined()) return p.scale_h.to_double_vector();
  return std::vector<double>(size_t(d.Hq), attention_scale(p, d.D));
}

}  // namespace

AttentionOutputs attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  const AttentionDims d = attention_dims("attention_forward", q, k, v, p);
  const std::vector<double> scale = head_scales(p, d);
  AttentionOutputs r;
  r.o = Tensor::empty({d.B, d.Tq, d.Hq, d.Dv}, q.dtype());
  r.lse = Tensor::empty({d.B, d.Hq, d.Tq}, q.dtype());
  visit_float("attention_forward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Bthd<T> Q(q), K(k), V(v), O(r.o);
    T* lse = r.lse.data<T>();
    const int64_t rows = d.B * d.Hq * d.Tq;
    parallel_for(rows, 4, [&](int64_t lo, int64_t hi) {
      std::vector<double> s(size_t(d.Tk)), acc(size_t(d.Dv));
      for (int64_t n = lo; n < hi; ++n) {
        const int64_t i = n % d.Tq, h = (n / d.Tq) % d.Hq, b = n / (d.Tq * d.Hq);
        const int64_t g = h / d.G, pos = i + d.Tk - d.Tq;
        const T* qi = Q.row(b, i, h);
        // Pass 1: the scaled logits of the visible keys and their maximum m_i.
        double m = -std::numeric_limits<double>::infinity();
        for_each_visible_key(pos, p, [&](int64_t j) {
          s[size_t(j)] = scale[size_t(h)] * dot(qi, K.row(b, j, g), d.D);
          m = std::max(m, s[size_t(j)]);
        });
        // Pass 2: l_i = sum exp(s - m), lse_i = m + log l_i; then o_i = sum P_ij v_j.
        double l = 0;
        for_each_visible_key(pos, p, [&](int64_t j) { l += std::exp(s[size_t(j)] - m); });
        const double lse_i = m + std::log(l);
        std::fill(acc.begin(), acc.end(), 0.0);
        for_each_visible_key(pos, p, [&](int64_t j) {
          const double pij = std::exp(s[size_t(j)] - lse_i);
          const T* vj = V.row(b, j, g);
          for (int64_t e = 0; e < d.Dv; ++e) acc[size_t(e)] += pij * double(vj[e]);
        });
        T* oi = O.row(b, i, h);
        for (int64_t e = 0; e < d.Dv; ++e) oi[e] = T(acc[size_t(e)]);
        lse[(b * d.Hq + h) * d.Tq + i] = T(lse_i);
      }
    });
  });
  return r;
}

AttentionGrads attention_backward_cpu(const AttentionSaved& s, const Tensor& dout, const Tensor& dlse,
                                      GradMask needed) {
  const AttentionDims d = attention_dims("attention_backward", s.q, s.k, s.v, s.params);
  HYB_CHECK(dout.dtype() == s.q.dtype(), "attention_backward: dout is ", dtype_name(dout.dtype()), " but q is ",
            dtype_name(s.q.dtype()));
  HYB_CHECK(dout.stride(3) == 1, "attention_backward: dout ", shape_str(dout.shape()), " has strides ",
            shape_str(dout.strides()), "; its last dimension must be contiguous");
  const AttentionParams& p = s.params;
  const std::vector<double> scale = head_scales(p, d);
  const std::vector<double> lse = s.lse.to_double_vector();
  const std::vector<double> dl = dlse.defined() ? dlse.to_double_vector() : std::vector<double>();
  const bool need_dq = needed[0], need_dk = needed[1], need_dv = needed[2], need_ds = needed[3];
  AttentionGrads g;
  const DType dt = s.q.dtype();
  if (need_dq) g.dq = Tensor::empty({d.B, d.Tq, d.Hq, d.D}, dt);
  if (need_dk) g.dk = Tensor::empty({d.B, d.Tk, d.Hkv, d.D}, dt);
  if (need_dv) g.dv = Tensor::empty({d.B, d.Tk, d.Hkv, d.Dv}, dt);
  // dscale_h partial sums per (b, h), added over b in a fixed order at the end.
  std::vector<double> dscale_bh(need_ds ? size_t(d.B * d.Hq) : 0, 0.0);
  visit_float("attention_backward", dt, [&](auto tag) {
    using T = decltype(tag);
    const Bthd<T> Q(s.q), K(s.k), V(s.v), O(s.o), dO(dout);
    // One task per (b, kv head g): it owns dk and dv of g and the dq rows of g's query heads, so
    // the GQA sum needs no atomics and the result does not depend on the thread count.
    parallel_for(d.B * d.Hkv, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> dk_acc(size_t(d.Tk * d.D)), dv_acc(size_t(d.Tk * d.Dv)), dq_acc(size_t(d.D));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / d.Hkv, kv = task % d.Hkv;
        std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
        std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
        for (int64_t h = kv * d.G; h < (kv + 1) * d.G; ++h) {
          const double sc = scale[size_t(h)];
          double dscale = 0;
          for (int64_t i = 0; i < d.Tq; ++i) {
            const int64_t pos = i + d.Tk - d.Tq, row = (b * d.Hq + h) * d.Tq + i;
            const T* qi = Q.row(b, i, h);
            const T* doi = dO.row(b, i, h);
            // Di = rowsum(dO o) - dlse_i, from the o the forward stored.
            const double Di = dot(doi, O.row(b, i, h), d.Dv) - (dl.empty() ? 0.0 : dl[size_t(row)]);
            std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
            for_each_visible_key(pos, p, [&](int64_t j) {
              const T* kj = K.row(b, j, kv);
              const T* vj = V.row(b, j, kv);
              const double c = dot(qi, kj, d.D);
              const double pij = std::exp(sc * c - lse[size_t(row)]);
              const double dS = pij * (dot(doi, vj, d.Dv) - Di);
              if (need_dq)
                for (int64_t e = 0; e < d.D; ++e) dq_acc[size_t(e)] += sc * dS * double(kj[e]);
              if (need_dk)
                for (int64_t e = 0; e < d.D; ++e) dk_acc[size_t(j * d.D + e)] += sc * dS * double(qi[e]);
              if (need_dv)
                for (int64_t e = 0; e < d.Dv; ++e) dv_acc[size_t(j * d.Dv + e)] += pij * double(doi[e]);
              dscale += dS * c;
            });
            if (need_dq) {
              T* dqi = g.dq.data<T>() + ((b * d.Tq + i) * d.Hq + h) * d.D;
              for (int64_t e = 0; e < d.D; ++e) dqi[e] = T(dq_acc[size_t(e)]);
            }
          }
          if (need_ds) dscale_bh[size_t(b * d.Hq + h)] = dscale;
        }
        for (int64_t j = 0; j < d.Tk; ++j) {
          if (need_dk) {
            T* dkj = g.dk.data<T>() + ((b * d.Tk + j) * d.Hkv + kv) * d.D;
            for (int64_t e = 0; e < d.D; ++e) dkj[e] = T(dk_acc[size_t(j * d.D + e)]);
          }
          if (need_dv) {
            T* dvj = g.dv.data<T>() + ((b * d.Tk + j) * d.Hkv + kv) * d.Dv;
            for (int64_t e = 0; e < d.Dv; ++e) dvj[e] = T(dv_acc[size_t(j * d.Dv + e)]);
          }
        }
      }
    });
  });
  if (need_ds) {
    std::vector<double> total(size_t(d.Hq), 0.0);
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.Hq; ++h) total[size_t(h)] += dscale_bh[size_t(b * d.Hq + h)];
    g.dscale_h = Tensor::from_vector(total, {d.Hq}).to(p.scale_h.dtype());
  }
  return g;
}

}  // namespace hyb
