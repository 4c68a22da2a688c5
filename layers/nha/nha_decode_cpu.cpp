// CPU reference of the nha decode step (nha_decode.h, nha.md 9): one task per (b, kv head) walks the
// new tokens in order through steps 1-4, sums in double, the state stored in its dtype after every
// update (as the CUDA kernel does). RoPE turns by fp64 angles P * inv_freq, the rope op's f64 rule,
// so an f64 decode reproduces the f64 parallel forward to rounding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/nha/nha_decode.h"

namespace hyb {

namespace {

// x turned to position P (rotate-half, nha.md 2.4); identity without a table.
template <typename E>
void rotate(const E* x, int64_t D, int64_t P, const RopeTable* rope, double* y) {
  for (int64_t i = 0; i < D; ++i) y[i] = double(x[i]);
  if (!rope) return;
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = double(P) * rope->inv_freq[size_t(i)], c = std::cos(a), s = std::sin(a);
    const double x1 = y[i], x2 = y[i + half];
    y[i] = x1 * c - x2 * s;
    y[i + half] = x1 * s + x2 * c;
  }
}

// e^{x - max} / sum in place; returns the sum before normalising (0 for an empty list).
double softmax_in_place(std::vector<double>& x, double mx) {
  double Z = 0;
  for (double& e : x) Z += (e = std::exp(e - mx));
  for (double& e : x) e /= Z;
  return Z;
}

double max_of(const std::vector<double>& x, double init) {
  for (double e : x) init = std::max(init, e);
  return init;
}

// The slots' feature map: silu under slot_silu, else the identity.
double slot_feature(double x, bool silu) { return silu ? x / (1.0 + std::exp(-x)) : x; }

}  // namespace

NhaDecodeOutputs nha_decode_step_cpu(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& s0,
                                     const Tensor& g0, const Tensor& bias0, const RopeTable* rope0, NhaDecodeState& st,
                                     const NhaDecodeParams& p) {
  const NhaDecodeDims d = nha_decode_dims(q0, k0, v0, s0, g0, bias0, rope0, st, p);
  auto cont = [](const Tensor& x) { return x.defined() ? x.contiguous() : Tensor(); };
  const Tensor q = q0.contiguous(), k = k0.contiguous(), v = v0.contiguous(), s = cont(s0), g = cont(g0),
               bias = cont(bias0);
  const RopeTable* rope = p.window != 0 ? rope0 : nullptr;
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(double(d.D));
  const int64_t D = d.D, Dv = d.Dv, M = d.M, R = d.R, Hkv = d.Hkv, nb = bias.defined() ? bias.size(1) : 0;
  NhaDecodeOutputs out;
  if (!p.split || M > 0) out.o = Tensor::empty({d.B, d.T, d.Hq, Dv}, q.dtype());
  if (p.split && p.window != 0) out.o_window = Tensor::empty({d.B, d.T, d.Hq, Dv}, q.dtype());
  if (p.long_ratio) out.long_ratio = Tensor::empty({d.B, d.T, d.Hq}, q.dtype());
  visit_float("nha_decode_step", q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<E>() : static_cast<E*>(nullptr); };
    parallel_for(d.B * Hkv, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> qr(static_cast<size_t>(D)), kr(static_cast<size_t>(D)), a, b, o(static_cast<size_t>(Dv)),
          ow(static_cast<size_t>(Dv));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t bi = task / Hkv, j = task % Hkv;
        E* HK = M > 0 ? ptr(st.HK) + task * D * M : nullptr;
        E* HV = M > 0 ? ptr(st.HV) + task * M * Dv : nullptr;
        // Row `slot` of a (B, rows, Hkv, width) tensor at kv head j.
        auto at = [&](const Tensor& t, int64_t rows, int64_t slot, int64_t width) {
          return ptr(t) + ((bi * rows + slot) * Hkv + j) * width;
        };
        for (int64_t t = 0; t < d.T; ++t) {
          const int64_t P = p.pos + t;
          // 1. The token leaving the window enters the memory (nha.md 2.1).
          if (M > 0 && p.shift >= 0 && P - p.shift >= 0) {
            const bool own = p.shift == 0;
            const int64_t slot = own ? t : (P - p.shift) % R, rows = own ? d.T : R;
            const E *ka = at(own ? k : st.ring_k, rows, slot, D), *va = at(own ? v : st.ring_v, rows, slot, Dv);
            const E *sa = at(own ? s : st.ring_s, rows, slot, M), *ga = at(own ? g : st.ring_g, rows, slot, M);
            for (int64_t m = 0; m < M; ++m) {
              const double gam = std::exp(double(ga[m])), sm = double(sa[m]);
              for (int64_t i = 0; i < D; ++i)
                HK[i * M + m] = E(double(HK[i * M + m]) * gam + slot_feature(double(ka[i]), p.slot_silu) * sm);
              for (int64_t c = 0; c < Dv; ++c) HV[m * Dv + c] = E(gam * double(HV[m * Dv + c]) + sm * double(va[c]));
            }
          }
          // 2. The token joins the ring.
          if (R > 0) {
            std::copy_n(at(k, d.T, t, D), D, at(st.ring_k, R, P % R, D));
            std::copy_n(at(v, d.T, t, Dv), Dv, at(st.ring_v, R, P % R, Dv));
            if (st.ring_s.defined()) {
              std::copy_n(at(s, d.T, t, M), M, at(st.ring_s, R, P % R, M));
              std::copy_n(at(g, d.T, t, M), M, at(st.ring_g, R, P % R, M));
            }
          }
          // 3. Slot and window logits of each query head of the group, 4. the softmax and the output.
          const int64_t j0 = p.window < 0 ? 0 : std::max<int64_t>(0, P - p.window + 1);
          const int64_t nw = p.window == 0 ? 0 : P - j0 + 1;
          for (int64_t h = j * d.group; h < (j + 1) * d.group; ++h) {
            const E* qt = ptr(q) + ((bi * d.T + t) * d.Hq + h) * D;
            a.assign(size_t(M), 0.0);
            for (int64_t m = 0; m < M; ++m) {
              for (int64_t i = 0; i < D; ++i)
                a[size_t(m)] += slot_feature(double(qt[i]), p.slot_silu) * double(HK[i * M + m]);
              a[size_t(m)] *= scale;
            }
            rotate(qt, D, P, rope, qr.data());
            b.assign(size_t(nw), 0.0);
            for (int64_t u = 0; u < nw; ++u) {
              const int64_t pj = j0 + u;
              rotate(at(st.ring_k, R, pj % R, D), D, pj, rope, kr.data());
              for (int64_t i = 0; i < D; ++i) b[size_t(u)] += qr[size_t(i)] * kr[size_t(i)];
              b[size_t(u)] = scale * b[size_t(u)] + (nb > 0 ? double(ptr(bias)[h * nb + P - pj]) : 0.0);
            }
            if (p.split) {
              softmax_in_place(a, max_of(a, -INFINITY));
              softmax_in_place(b, max_of(b, -INFINITY));
            } else {
              const double mx = max_of(b, max_of(a, -INFINITY));
              const double Za = softmax_in_place(a, mx), Zb = softmax_in_place(b, mx);
              for (double& e : a) e *= Za / (Za + Zb);
              for (double& e : b) e *= Zb / (Za + Zb);
              if (p.long_ratio) ptr(out.long_ratio)[(bi * d.T + t) * d.Hq + h] = E(Za / (Za + Zb));
            }
            std::fill(o.begin(), o.end(), 0.0);
            std::fill(ow.begin(), ow.end(), 0.0);
            for (int64_t m = 0; m < M; ++m)
              for (int64_t c = 0; c < Dv; ++c) o[size_t(c)] += a[size_t(m)] * double(HV[m * Dv + c]);
            std::vector<double>& win = p.split ? ow : o;
            for (int64_t u = 0; u < nw; ++u) {
              const E* vu = at(st.ring_v, R, (j0 + u) % R, Dv);
              for (int64_t c = 0; c < Dv; ++c) win[size_t(c)] += b[size_t(u)] * double(vu[c]);
            }
            const int64_t row = ((bi * d.T + t) * d.Hq + h) * Dv;
            for (int64_t c = 0; c < Dv; ++c) {
              if (out.o.defined()) ptr(out.o)[row + c] = E(o[size_t(c)]);
              if (out.o_window.defined()) ptr(out.o_window)[row + c] = E(ow[size_t(c)]);
            }
          }
        }
      }
    });
  });
  return out;
}

}  // namespace hyb
