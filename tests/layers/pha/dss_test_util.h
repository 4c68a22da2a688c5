// Inputs of the DSS convolution tests, shared by the CPU and CUDA files.
//   const std::vector<Tensor> x = dss_inputs({2, 37, 3, 4}, true, false, 20);   // v, l_re, l_im, C_re, C_im, D
//   Tensor y = dss_forward(as_inputs(x, true), nullptr);
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "layers/op_test_util.h"
#include "layers/pha/dss_decode.h"
#include "layers/pha/dss_op.h"

namespace hyb {

struct DssDims {
  int64_t B, T, Hs, Ns;
};

// f64, random and non-zero. l_re in [-4, 1] gives memories from under a token to about 50; with
// `series`, modes 0 and 1 get |Lambda| = 3.6e-5 (the series of Bz) and 2.2e-4 (the closed form near
// the switch), so both branches are exercised.
inline std::vector<Tensor> dss_inputs(const DssDims& d, bool imag_exp, bool series, uint64_t seed) {
  Tensor lre = uniform_tensor({d.Ns}, seed + 1, -4.0, 1.0);
  Tensor lim = imag_exp ? random_tensor({d.Ns}, seed + 2) : uniform_tensor({d.Ns}, seed + 2, -3.0, 3.0);
  if (series) {
    const double a[2] = {2e-5, 1.2e-4}, w[2] = {3e-5, -1.8e-4};
    for (int n = 0; n < 2 && n < d.Ns; ++n) {
      lre.data<double>()[n] = std::log(a[n]);
      lim.data<double>()[n] = imag_exp ? std::log(std::abs(w[n])) : w[n];
    }
  }
  return {random_tensor({d.B, d.T, d.Hs}, seed), lre, lim, random_tensor({d.Hs, d.Ns}, seed + 3),
          random_tensor({d.Hs, d.Ns}, seed + 4), random_tensor({d.Hs}, seed + 5)};
}

inline DssInputs as_inputs(const std::vector<Tensor>& x, bool imag_exp) {
  return {x[0], x[1], x[2], x[3], x[4], x[5], imag_exp};
}

// v through the decode step: `first` tokens in one call, then calls of `chunk` tokens (the last may
// be shorter); each call's y on the CPU in f64.
inline std::vector<Tensor> decode_in_chunks(const Tensor& v, const Tensor& d, DssDecodeState& st, int64_t first,
                                            int64_t chunk) {
  const int64_t T = v.size(1);
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < T;) {
    const int64_t n = std::min(t == 0 ? first : chunk, T - t);
    steps.push_back(dss_decode_step(v.narrow(1, t, n).contiguous(), d, st).to(Device::cpu()).to(DType::f64));
    t += n;
  }
  return steps;
}

}  // namespace hyb
