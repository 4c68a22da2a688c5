// One DSS eigenvalue and its zero-order-hold factor in fp64, compiled by the CPU reference and the CUDA
// kernels alike so both paths round the same way (specs/pha.md 4.3, "the CPU and CUDA paths must do
// exactly this"). A two-double complex instead of std::complex: this header is device code too.
//   const DssMode m = dss_mode(l_re, l_im, true);      // Lambda, Bz = (e^Lambda - 1) / Lambda, Bz'
//   const Cd s = dss_power(m.lambda, l);                // exp(l Lambda)
#pragma once
#include <math.h>

#include <cstdint>

#include "core/macros.h"

namespace hyb {

struct Cd {
  double re, im;
};

HYB_HD Cd cd_mul(Cd x, Cd y) { return {x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re}; }
HYB_HD Cd cd_conj_mul(Cd x, Cd y) { return {x.re * y.re + x.im * y.im, x.re * y.im - x.im * y.re}; }  // conj(x) y
HYB_HD Cd cd_div(Cd x, Cd y) {
  const double den = y.re * y.re + y.im * y.im;
  return {(x.re * y.re + x.im * y.im) / den, (x.im * y.re - x.re * y.im) / den};
}

// Below this |Lambda| Bz and Bz' come from their Taylor series: the closed forms divide a difference
// that cancels by Lambda (Bz) or Lambda^2 (Bz').
constexpr double kDssSeriesBelow = 1e-4;

struct DssMode {
  double a, omega;  // Lambda = -a + i omega, a = exp(l_re) > 0
  Cd lambda;
  Cd bz;   // (e^Lambda - 1) / Lambda
  Cd dbz;  // dBz/dLambda = (e^Lambda (Lambda - 1) + 1) / Lambda^2
};

HYB_HD Cd dss_lambda(double l_re, double l_im, bool lambda_imag_exp) {
  return {-::exp(l_re), lambda_imag_exp ? ::exp(l_im) : l_im};
}

HYB_HD DssMode dss_mode(double l_re, double l_im, bool lambda_imag_exp) {
  DssMode m;
  m.lambda = dss_lambda(l_re, l_im, lambda_imag_exp);
  m.a = -m.lambda.re;
  m.omega = m.lambda.im;
  const Cd& L = m.lambda;
  if (::hypot(L.re, L.im) < kDssSeriesBelow) {
    const Cd L2 = cd_mul(L, L);
    m.bz = {1.0 + L.re / 2 + L2.re / 6, L.im / 2 + L2.im / 6};
    m.dbz = {0.5 + L.re / 3, L.im / 3};
  } else {
    // e^Lambda - 1 through expm1 and cos w - 1 = -2 sin^2(w/2), exact to rounding down to the threshold.
    const double ea = ::exp(-m.a), half = ::sin(m.omega / 2);
    const Cd em1{::expm1(-m.a) * ::cos(m.omega) - 2 * half * half, ea * ::sin(m.omega)};
    const Cd e{ea * ::cos(m.omega), ea * ::sin(m.omega)};
    m.bz = cd_div(em1, L);
    // e^Lambda (Lambda - 1) + 1 = e^Lambda Lambda - (e^Lambda - 1).
    const Cd eL = cd_mul(e, L);
    m.dbz = cd_div({eL.re - em1.re, eL.im - em1.im}, cd_mul(L, L));
  }
  return m;
}

// exp(l Lambda) = e^{-a l} (cos(omega l) + i sin(omega l)); the angle stays fp64 (it reaches 1e5 rad).
HYB_HD Cd dss_power(Cd lambda, int64_t l) {
  const double r = ::exp(lambda.re * double(l)), ang = lambda.im * double(l);
  return {r * ::cos(ang), r * ::sin(ang)};
}

}  // namespace hyb
