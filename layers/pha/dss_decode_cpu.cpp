// CPU reference of the DSS decode step (dss_decode.h, specs/pha.md 4.4): one task per (b, channel)
// walks the new tokens in order. Each token's update and output sum run in double (the decay is f64
// on both paths); the state is stored back in its dtype after every token, as the CUDA kernel keeps
// it in fp32, so an f32 state here rounds where the kernel's does and an f64 state reproduces the f64
// convolution to rounding.
#include <complex>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "layers/pha/dss_decode.h"

namespace hyb {

Tensor dss_decode_step_cpu(const Tensor& v0, const Tensor& d0, DssDecodeState& st) {
  check_dss_decode(v0, d0, st);
  const Tensor v = v0.contiguous(), d = d0.contiguous();
  const int64_t B = v.size(0), n = v.size(1), Hs = v.size(2), Ns = st.s_re.size(2);
  Tensor y = Tensor::empty(v.shape(), v.dtype());
  visit_float("dss_decode_step", v.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const double *decay_re = st.modes.decay_re.data<double>(), *decay_im = st.modes.decay_im.data<double>();
    parallel_for(B * Hs, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t b = task / Hs, c = task % Hs;
        E *s_re = st.s_re.data<E>() + task * Ns, *s_im = st.s_im.data<E>() + task * Ns;
        const E *cbar_re = st.modes.cbar_re.data<E>() + c * Ns, *cbar_im = st.modes.cbar_im.data<E>() + c * Ns;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t at = (b * n + t) * Hs + c;
          const double vt = double(v.data<E>()[at]);
          double acc = double(d.data<E>()[c]) * vt;
          for (int64_t m = 0; m < Ns; ++m) {
            const std::complex<double> s =
                std::complex<double>(decay_re[m], decay_im[m]) *
                    std::complex<double>(double(s_re[m]), double(s_im[m])) +
                vt;
            s_re[m] = E(s.real());
            s_im[m] = E(s.imag());
            acc += double(cbar_re[m]) * double(s_re[m]) - double(cbar_im[m]) * double(s_im[m]);
          }
          y.data<E>()[at] = E(acc);
        }
      }
    });
  });
  return y;
}

}  // namespace hyb
