// Checks, the device branch and the tape record of the DSS convolution (dss_op.h).
#include "layers/pha/dss_op.h"

namespace hyb {

namespace {

void check_dss(const char* op, const DssInputs& in) {
  const Tensor& v = in.v;
  HYB_CHECK(v.defined() && v.dim() == 3 && v.size(0) >= 1 && v.size(1) >= 1 && v.size(2) >= 1, op, ": v is ",
            v.defined() ? shape_str(v.shape()) : "undefined", "; expected (B, T, Hs) with B, T, Hs >= 1");
  const int64_t Hs = v.size(2);
  HYB_CHECK(in.lambda_re.defined() && in.lambda_re.dim() == 1 && in.lambda_re.size(0) >= 1, op, ": lambda_re is ",
            in.lambda_re.defined() ? shape_str(in.lambda_re.shape()) : "undefined", "; expected (Ns,) with Ns >= 1");
  const int64_t Ns = in.lambda_re.size(0);
  HYB_CHECK(in.lambda_im.defined() && in.lambda_im.shape() == in.lambda_re.shape(), op, ": lambda_im is ",
            in.lambda_im.defined() ? shape_str(in.lambda_im.shape()) : "undefined", " but lambda_re is (", Ns,
            ",); both must be (Ns,)");
  for (auto [t, name] : {std::pair{&in.c_re, "c_re"}, std::pair{&in.c_im, "c_im"}})
    HYB_CHECK(t->defined() && t->dim() == 2 && t->size(0) == Hs && t->size(1) == Ns, op, ": ", name, " is ",
              t->defined() ? shape_str(t->shape()) : "undefined", " but v is ", shape_str(v.shape()),
              " and lambda_re is (", Ns, ",); ", name, " must be (Hs, Ns) = (", Hs, ", ", Ns, ")");
  HYB_CHECK(in.d.defined() && in.d.dim() == 1 && in.d.size(0) == Hs, op, ": d is ",
            in.d.defined() ? shape_str(in.d.shape()) : "undefined", " but v is ", shape_str(v.shape()),
            "; d must be (Hs,) = (", Hs, ",)");
  check_dtype(op, v, "v", {DType::f32, DType::f64});
  for (auto [t, name] : {std::pair{&in.lambda_re, "lambda_re"}, std::pair{&in.lambda_im, "lambda_im"},
                         std::pair{&in.c_re, "c_re"}, std::pair{&in.c_im, "c_im"}, std::pair{&in.d, "d"}}) {
    HYB_CHECK(t->dtype() == v.dtype(), op, ": ", name, " is ", dtype_name(t->dtype()), " but v is ",
              dtype_name(v.dtype()), "; every input must have v's dtype");
    check_same_device(op, v, *t);
  }
}

}  // namespace

int64_t dss_fft_length(int64_t T) {
  HYB_CHECK(T >= 1, "dss_fft_length: T must be >= 1, got ", T);
  for (int64_t n = 2 * T - 1;; ++n) {
    int64_t r = n;
    for (int64_t p : {2, 3, 5, 7})
      while (r % p == 0) r /= p;
    if (r == 1) return n;
  }
}

Tensor dss_forward(const DssInputs& in, DssSaved* saved) {
  check_dss("dss_forward", in);
  Tensor y;
  DssSaved s{in, Tensor(), Tensor()};
#if HYBRID_CUDA
  if (in.v.is_cuda()) y = dss_forward_cuda(in, saved ? &s : nullptr);
#endif
  if (!y.defined()) y = dss_forward_cpu(in);
  if (saved) *saved = s;
  return y;
}

DssGrads dss_backward(const DssSaved& s, const Tensor& dy, GradMask needed) {
  check_dss("dss_backward", s.in);
  check_same_shape("dss_backward", s.in.v, dy, "v", "dy");
  check_same_device("dss_backward", s.in.v, dy);
  HYB_CHECK(dy.dtype() == s.in.v.dtype(), "dss_backward: dy is ", dtype_name(dy.dtype()), " but v is ",
            dtype_name(s.in.v.dtype()));
#if HYBRID_CUDA
  if (dy.is_cuda()) return dss_backward_cuda(s, dy, needed);
#endif
  return dss_backward_cpu(s, dy, needed);
}

Var dss_conv(const Var& v, const Var& lambda_re, const Var& lambda_im, const Var& c_re, const Var& c_im, const Var& d,
             bool lambda_imag_exp) {
  const bool rec = will_record({v, lambda_re, lambda_im, c_re, c_im, d});
  DssSaved s;
  const DssInputs in{v.data(), lambda_re.data(), lambda_im.data(), c_re.data(), c_im.data(), d.data(), lambda_imag_exp};
  Tensor y = dss_forward(in, rec ? &s : nullptr);
  return record_op1(
      "dss_conv", {v, lambda_re, lambda_im, c_re, c_im, d}, y,
      [s](const Tensor& dy, GradMask need) {
        DssGrads g = dss_backward(s, dy, need);
        return Grads{g.dv, g.dlambda_re, g.dlambda_im, g.dc_re, g.dc_im, g.dd};
      },
      {{"v", s.in.v},
       {"lambda_re", s.in.lambda_re},
       {"lambda_im", s.in.lambda_im},
       {"c_re", s.in.c_re},
       {"c_im", s.in.c_im},
       {"d", s.in.d}});
}

}  // namespace hyb
