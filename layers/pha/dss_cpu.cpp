// CPU reference of the DSS convolution (dss_op.h; specs/pha.md 4.3-4.6, docs/layers/pha.md "DSS
// convolution"). Everything runs in f64 whatever the input dtype (f32 or f64): the kernel from its
// parameters (4.3), the direct causal sum (4.2), the two correlations of the backward and the
// kernel-parameter backward (4.6). Loops are parallel over channels or modes, each task owning its
// outputs, so every sum runs in one fixed order whatever the thread count.
// Layouts: v, y, dy (B, T, Hs); K and dK (T, Hs); S (Ns, T); C, C' (Hs, Ns); all row-major.
#include <algorithm>
#include <complex>
#include <vector>

#include "core/parallel.h"
#include "layers/pha/dss_mode.h"
#include "layers/pha/dss_op.h"

namespace hyb {

namespace {

using cplx = std::complex<double>;

cplx to_cplx(Cd z) { return {z.re, z.im}; }

Tensor from_doubles(const std::vector<double>& x, const Shape& shape, DType dtype) {
  return Tensor::from_vector(x, shape).to(dtype);
}

// The parameters of 4.3 in f64: modes, C, C' = C Bz and the basis S[n, l] = exp(l Lambda_n).
struct Kernel {
  int64_t Hs, Ns, T;
  std::vector<DssMode> modes;  // (Ns,)
  std::vector<cplx> c;         // (Hs, Ns)
  std::vector<cplx> cbar;      // (Hs, Ns)
  std::vector<cplx> s;         // (Ns, T)
  std::vector<double> k;       // (T, Hs): K[l, c] = Re sum_n C'[c, n] S[n, l]
};

Kernel build_kernel(const DssInputs& in, int64_t T) {
  Kernel K;
  K.Hs = in.c_re.size(0);
  K.Ns = in.c_re.size(1);
  K.T = T;
  const std::vector<double> lre = in.lambda_re.to_double_vector(), lim = in.lambda_im.to_double_vector();
  const std::vector<double> cre = in.c_re.to_double_vector(), cim = in.c_im.to_double_vector();
  for (int64_t n = 0; n < K.Ns; ++n) K.modes.push_back(dss_mode(lre[size_t(n)], lim[size_t(n)], in.lambda_imag_exp));
  K.c.resize(size_t(K.Hs * K.Ns));
  K.cbar.resize(K.c.size());
  for (int64_t c = 0; c < K.Hs; ++c)
    for (int64_t n = 0; n < K.Ns; ++n) {
      const size_t i = size_t(c * K.Ns + n);
      K.c[i] = {cre[i], cim[i]};
      K.cbar[i] = K.c[i] * to_cplx(K.modes[size_t(n)].bz);
    }
  K.s.resize(size_t(K.Ns * T));
  for (int64_t n = 0; n < K.Ns; ++n)
    for (int64_t l = 0; l < T; ++l) K.s[size_t(n * T + l)] = to_cplx(dss_power(K.modes[size_t(n)].lambda, l));
  K.k.assign(size_t(T * K.Hs), 0.0);
  parallel_for(K.Hs, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t l = 0; l < T; ++l) {
        double acc = 0;
        for (int64_t n = 0; n < K.Ns; ++n) acc += (K.cbar[size_t(c * K.Ns + n)] * K.s[size_t(n * T + l)]).real();
        K.k[size_t(l * K.Hs + c)] = acc;
      }
  });
  return K;
}

// 4.6, kernel parameters from G = dK (T, Hs), per mode n:
//   g_C'[c] = sum_l G[l, c] conj(S[n, l]),  M[c] = sum_l l G[l, c] conj(S[n, l])
//   g_LambdaS = sum_c conj(C'[c]) M[c],  g_Bz = sum_c conj(C[c]) g_C'[c],  g_C[c] = conj(Bz) g_C'[c]
//   g_Lambda = g_LambdaS + conj(Bz') g_Bz;  dl_re = -a Re g_Lambda,  dl_im = omega Im g_Lambda (exp) or Im g_Lambda
void kernel_parameter_backward(const Kernel& K, const std::vector<double>& G, bool lambda_imag_exp,
                               std::vector<double>& dlre, std::vector<double>& dlim, std::vector<double>& dcre,
                               std::vector<double>& dcim) {
  const int64_t Hs = K.Hs, Ns = K.Ns, T = K.T;
  dlre.assign(size_t(Ns), 0.0);
  dlim.assign(size_t(Ns), 0.0);
  dcre.assign(size_t(Hs * Ns), 0.0);
  dcim.assign(size_t(Hs * Ns), 0.0);
  parallel_for(Ns, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const DssMode& m = K.modes[size_t(n)];
      const cplx* s = K.s.data() + n * T;
      cplx g_lambda_s = 0, g_bz = 0;
      for (int64_t c = 0; c < Hs; ++c) {
        cplx g_cbar = 0, moment = 0;
        for (int64_t l = 0; l < T; ++l) {
          const cplx term = G[size_t(l * Hs + c)] * std::conj(s[l]);
          g_cbar += term;
          moment += double(l) * term;
        }
        const size_t i = size_t(c * Ns + n);
        g_lambda_s += std::conj(K.cbar[i]) * moment;
        g_bz += std::conj(K.c[i]) * g_cbar;
        const cplx g_c = std::conj(to_cplx(m.bz)) * g_cbar;
        dcre[i] = g_c.real();
        dcim[i] = g_c.imag();
      }
      const cplx g_lambda = g_lambda_s + std::conj(to_cplx(m.dbz)) * g_bz;
      dlre[size_t(n)] = -m.a * g_lambda.real();
      dlim[size_t(n)] = (lambda_imag_exp ? m.omega : 1.0) * g_lambda.imag();
    }
  });
}

}  // namespace

// 4.2: y[b, t, c] = sum_{j <= t} K[j, c] v[b, t - j, c] + D[c] v[b, t, c].
Tensor dss_forward_cpu(const DssInputs& in) {
  const int64_t B = in.v.size(0), T = in.v.size(1), Hs = in.v.size(2);
  const Kernel K = build_kernel(in, T);
  const std::vector<double> v = in.v.to_double_vector(), D = in.d.to_double_vector();
  std::vector<double> y(v.size());
  parallel_for(Hs, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
          const double* vb = v.data() + b * T * Hs;
          double acc = D[size_t(c)] * vb[t * Hs + c];
          for (int64_t j = 0; j <= t; ++j) acc += K.k[size_t(j * Hs + c)] * vb[(t - j) * Hs + c];
          y[size_t((b * T + t) * Hs + c)] = acc;
        }
  });
  return from_doubles(y, in.v.shape(), in.v.dtype());
}

DssGrads dss_backward_cpu(const DssSaved& s, const Tensor& dy_in, GradMask needed) {
  const DssInputs& in = s.in;
  const int64_t B = in.v.size(0), T = in.v.size(1), Hs = in.v.size(2), Ns = in.lambda_re.size(0);
  const DType dt = in.v.dtype();
  const bool need_kernel = needed[1] || needed[2] || needed[3] || needed[4];
  const Kernel K = build_kernel(in, T);
  const std::vector<double> v = in.v.to_double_vector(), dy = dy_in.to_double_vector(), D = in.d.to_double_vector();
  DssGrads g;

  // 4.6, the input: dv[b, tau, c] = sum_{t >= tau} K[t - tau, c] dy[b, t, c] + D[c] dy[b, tau, c].
  if (needed[0]) {
    std::vector<double> dv(v.size());
    parallel_for(Hs, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c)
        for (int64_t b = 0; b < B; ++b) {
          const double* dyb = dy.data() + b * T * Hs;
          for (int64_t tau = 0; tau < T; ++tau) {
            double acc = D[size_t(c)] * dyb[tau * Hs + c];
            for (int64_t t = tau; t < T; ++t) acc += K.k[size_t((t - tau) * Hs + c)] * dyb[t * Hs + c];
            dv[size_t((b * T + tau) * Hs + c)] = acc;
          }
        }
    });
    g.dv = from_doubles(dv, in.v.shape(), dt);
  }

  // dD[c] = sum_{b, t} dy v.
  if (needed[5]) {
    std::vector<double> dd(size_t(Hs), 0.0);
    for (int64_t c = 0; c < Hs; ++c)
      for (int64_t bt = 0; bt < B * T; ++bt) dd[size_t(c)] += dy[size_t(bt * Hs + c)] * v[size_t(bt * Hs + c)];
    g.dd = from_doubles(dd, {Hs}, dt);
  }

  if (!need_kernel) return g;
  // dK[l, c] = sum_b sum_{t >= l} dy[b, t, c] v[b, t - l, c].
  std::vector<double> dk(size_t(T * Hs), 0.0);
  parallel_for(Hs, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t l = 0; l < T; ++l) {
        double acc = 0;
        for (int64_t b = 0; b < B; ++b) {
          const double *dyb = dy.data() + b * T * Hs, *vb = v.data() + b * T * Hs;
          for (int64_t t = l; t < T; ++t) acc += dyb[t * Hs + c] * vb[(t - l) * Hs + c];
        }
        dk[size_t(l * Hs + c)] = acc;
      }
  });
  std::vector<double> dlre, dlim, dcre, dcim;
  kernel_parameter_backward(K, dk, in.lambda_imag_exp, dlre, dlim, dcre, dcim);
  if (needed[1]) g.dlambda_re = from_doubles(dlre, {Ns}, dt);
  if (needed[2]) g.dlambda_im = from_doubles(dlim, {Ns}, dt);
  if (needed[3]) g.dc_re = from_doubles(dcre, {Hs, Ns}, dt);
  if (needed[4]) g.dc_im = from_doubles(dcim, {Hs, Ns}, dt);
  return g;
}

DssModes dss_modes_cpu(const Tensor& lambda_re, const Tensor& lambda_im, const Tensor& c_re, const Tensor& c_im,
                       bool lambda_imag_exp) {
  HYB_CHECK(lambda_re.dim() == 1 && lambda_im.shape() == lambda_re.shape() && c_re.dim() == 2 &&
                c_re.size(1) == lambda_re.size(0) && c_im.shape() == c_re.shape(),
            "dss_modes_cpu: lambda_re ", shape_str(lambda_re.shape()), ", lambda_im ", shape_str(lambda_im.shape()),
            ", c_re ", shape_str(c_re.shape()), ", c_im ", shape_str(c_im.shape()),
            "; expected (Ns,), (Ns,), (Hs, Ns), (Hs, Ns)");
  const int64_t Hs = c_re.size(0), Ns = c_re.size(1);
  const std::vector<double> lre = lambda_re.to_double_vector(), lim = lambda_im.to_double_vector();
  const std::vector<double> cre = c_re.to_double_vector(), cim = c_im.to_double_vector();
  std::vector<double> decay_re, decay_im, cbar_re(cre.size()), cbar_im(cre.size());
  for (int64_t n = 0; n < Ns; ++n) {
    const DssMode m = dss_mode(lre[size_t(n)], lim[size_t(n)], lambda_imag_exp);
    const Cd decay = dss_power(m.lambda, 1);
    decay_re.push_back(decay.re);
    decay_im.push_back(decay.im);
    for (int64_t c = 0; c < Hs; ++c) {
      const size_t i = size_t(c * Ns + n);
      const Cd cbar = cd_mul({cre[i], cim[i]}, m.bz);
      cbar_re[i] = cbar.re;
      cbar_im[i] = cbar.im;
    }
  }
  const DType dt = lambda_re.dtype();
  return {from_doubles(decay_re, {Ns}, dt), from_doubles(decay_im, {Ns}, dt), from_doubles(cbar_re, {Hs, Ns}, dt),
          from_doubles(cbar_im, {Hs, Ns}, dt)};
}

// 4.4: s_t[c, n] = exp(Lambda_n) s_{t-1}[c, n] + v_t[c],  y_t[c] = Re sum_n C'[c, n] s_t[c, n] + D[c] v_t[c].
Tensor dss_recurrent_cpu(const DssInputs& in) {
  const int64_t B = in.v.size(0), T = in.v.size(1), Hs = in.v.size(2), Ns = in.lambda_re.size(0);
  const DssModes m = dss_modes_cpu(in.lambda_re.to(DType::f64), in.lambda_im.to(DType::f64), in.c_re.to(DType::f64),
                                   in.c_im.to(DType::f64), in.lambda_imag_exp);
  const std::vector<double> decay_re = m.decay_re.to_double_vector(), decay_im = m.decay_im.to_double_vector();
  const std::vector<double> cbar_re = m.cbar_re.to_double_vector(), cbar_im = m.cbar_im.to_double_vector();
  const std::vector<double> v = in.v.to_double_vector(), D = in.d.to_double_vector();
  std::vector<double> y(v.size());
  parallel_for(Hs, 1, [&](int64_t lo, int64_t hi) {
    std::vector<cplx> state(static_cast<size_t>(Ns));
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t b = 0; b < B; ++b) {
        std::fill(state.begin(), state.end(), cplx(0));
        for (int64_t t = 0; t < T; ++t) {
          const double vt = v[size_t((b * T + t) * Hs + c)];
          double acc = D[size_t(c)] * vt;
          for (int64_t n = 0; n < Ns; ++n) {
            const size_t i = size_t(c * Ns + n);
            state[size_t(n)] = cplx(decay_re[size_t(n)], decay_im[size_t(n)]) * state[size_t(n)] + vt;
            acc += (cplx(cbar_re[i], cbar_im[i]) * state[size_t(n)]).real();
          }
          y[size_t((b * T + t) * Hs + c)] = acc;
        }
      }
  });
  return from_doubles(y, in.v.shape(), in.v.dtype());
}

}  // namespace hyb
