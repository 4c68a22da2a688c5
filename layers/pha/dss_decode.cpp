// The start, the checks and the device branch of the DSS decode step (dss_decode.h).
#include "layers/pha/dss_decode.h"

namespace hyb {

DssDecodeState dss_decode_start(int64_t batch, const Tensor& lambda_re, const Tensor& lambda_im, const Tensor& c_re,
                                const Tensor& c_im, bool lambda_imag_exp, DType state_dtype, Device device) {
  HYB_CHECK(batch >= 1, "dss_decode_start: batch must be >= 1, got ", batch);
  HYB_CHECK(state_dtype == DType::f32 || (state_dtype == DType::f64 && !device.is_cuda()),
            "dss_decode_start: the state is f32 (or f64 on the CPU), got ", dtype_name(state_dtype), " on ",
            device.str());
  const DssModes m = dss_modes_cpu(lambda_re.to(DType::f64), lambda_im.to(DType::f64), c_re.to(DType::f64),
                                   c_im.to(DType::f64), lambda_imag_exp);
  auto place = [&](const Tensor& t, DType dt) { return t.to(dt).to(device).contiguous(); };
  const int64_t Hs = c_re.size(0), Ns = c_re.size(1);
  DssDecodeState st;
  st.s_re = Tensor::zeros({batch, Hs, Ns}, state_dtype, device);
  st.s_im = Tensor::zeros({batch, Hs, Ns}, state_dtype, device);
  st.modes = {place(m.decay_re, DType::f64), place(m.decay_im, DType::f64), place(m.cbar_re, state_dtype),
              place(m.cbar_im, state_dtype)};
  return st;
}

void check_dss_decode(const Tensor& v, const Tensor& d, const DssDecodeState& st) {
  const char* op = "dss_decode_step";
  HYB_CHECK(st.s_re.defined() && st.s_re.dim() == 3, op, ": the state is not started (dss_decode_start)");
  const int64_t B = st.s_re.size(0), Hs = st.s_re.size(1), Ns = st.s_re.size(2);
  HYB_CHECK(v.defined() && v.dim() == 3 && v.size(0) == B && v.size(1) >= 1 && v.size(2) == Hs, op, ": v is ",
            v.defined() ? shape_str(v.shape()) : "undefined", " but the state is ", shape_str(st.s_re.shape()),
            "; v must be (B, n, Hs) = (", B, ", n, ", Hs, ") with n >= 1");
  HYB_CHECK(d.defined() && d.dim() == 1 && d.size(0) == Hs, op, ": d is ",
            d.defined() ? shape_str(d.shape()) : "undefined", "; it must be (Hs,) = (", Hs, ",)");
  const DType dt = st.s_re.dtype();
  struct Part {
    const Tensor* t;
    Shape shape;
    DType dtype;
  };
  for (const Part& p : {Part{&st.s_re, {B, Hs, Ns}, dt}, Part{&st.s_im, {B, Hs, Ns}, dt},
                        Part{&st.modes.decay_re, {Ns}, DType::f64}, Part{&st.modes.decay_im, {Ns}, DType::f64},
                        Part{&st.modes.cbar_re, {Hs, Ns}, dt}, Part{&st.modes.cbar_im, {Hs, Ns}, dt}})
    HYB_ASSERT(p.t->defined() && p.t->shape() == p.shape && p.t->dtype() == p.dtype && p.t->is_contiguous() &&
                   p.t->device() == st.s_re.device(),
               op, ": the state's tensors disagree with s_re ", st.s_re.str());
  for (auto [t, name] : {std::pair{&v, "v"}, std::pair{&d, "d"}}) {
    HYB_CHECK(t->dtype() == dt, op, ": ", name, " is ", dtype_name(t->dtype()), " but the state is ", dtype_name(dt),
              "; give ", name, " in the state dtype");
    check_same_device(op, st.s_re, *t);
  }
}

Tensor dss_decode_step(const Tensor& v, const Tensor& d, DssDecodeState& st) {
#if HYBRID_CUDA
  if (v.is_cuda()) return dss_decode_step_cuda(v, d, st);
#endif
  return dss_decode_step_cpu(v, d, st);
}

}  // namespace hyb
