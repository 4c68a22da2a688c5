// Checks, the one CPU/CUDA branch, and the tape records of the softmax-attention core op.
#include "layers/softmax_attention/attention_op.h"

#include <cmath>

#if HYBRID_CUDA
#include "layers/softmax_attention/attention_cuda.h"
#endif

namespace hyb {

AttentionDims attention_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionParams& p) {
  HYB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q ", shape_str(q.shape()), ", k ",
            shape_str(k.shape()), " and v ", shape_str(v.shape()),
            " must be 4-D: q (B, Tq, Hq, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv)");
  AttentionDims d;
  d.B = q.size(0), d.Tq = q.size(1), d.Hq = q.size(2), d.D = q.size(3);
  d.Tk = k.size(1), d.Hkv = k.size(2), d.Dv = v.size(3);
  HYB_CHECK(k.size(0) == d.B && k.size(3) == d.D && d.Hkv > 0, op, ": k is ", shape_str(k.shape()), " but q is ",
            shape_str(q.shape()), "; k must be (B, Tk, Hkv, D) with B = ", d.B, " and D = ", d.D);
  HYB_CHECK(v.size(0) == d.B && v.size(1) == d.Tk && v.size(2) == d.Hkv, op, ": v is ", shape_str(v.shape()),
            " but k is ", shape_str(k.shape()), "; v must be (B, Tk, Hkv, Dv) with B = ", d.B, ", Tk = ", d.Tk,
            ", Hkv = ", d.Hkv);
  HYB_CHECK(d.Hq % d.Hkv == 0, op, ": q is ", shape_str(q.shape()), " with Hq = ", d.Hq, " heads but k is ",
            shape_str(k.shape()), " with Hkv = ", d.Hkv, "; Hq must be a multiple of Hkv");
  HYB_CHECK(d.Tq <= d.Tk, op, ": q is ", shape_str(q.shape()), " but k is ", shape_str(k.shape()),
            "; Tq = ", d.Tq, " > Tk = ", d.Tk, " leaves the first queries (aligned bottom-right) without keys");
  HYB_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, op,
            ": the last dimension must be contiguous; strides are q ", shape_str(q.strides()), ", k ",
            shape_str(k.strides()), ", v ", shape_str(v.strides()));
  HYB_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must share a dtype, got ",
            dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  HYB_CHECK(p.window >= 0 && p.sinks >= 0, op, ": window and sinks must be >= 0, got window ", p.window,
            " and sinks ", p.sinks);
  HYB_CHECK(!p.scale || *p.scale > 0, op, ": scale must be > 0, got ", p.scale.value_or(0.0));
  if (p.scale_h.defined()) {
    HYB_CHECK(p.scale_h.dim() == 1 && p.scale_h.size(0) == d.Hq, op, ": scale_h is ",
              shape_str(p.scale_h.shape()), " but q is ", shape_str(q.shape()), "; scale_h must be (Hq,) = (",
              d.Hq, ",)");
    check_dtype(op, p.scale_h, "scale_h", {DType::f32, DType::f64});
    check_same_device(op, q, p.scale_h);
  }
  d.G = d.Hq / d.Hkv;
  return d;
}

double attention_scale(const AttentionParams& p, int64_t D) { return p.scale ? *p.scale : 1.0 / std::sqrt(double(D)); }

AttentionOutputs attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                                   AttentionSaved* saved) {
  attention_dims("attention_forward", q, k, v, p);
  AttentionOutputs r;
#if HYBRID_CUDA
  if (q.is_cuda()) r = attention_forward_cuda(q, k, v, p);
#endif
  if (!r.o.defined()) r = attention_forward_cpu(q, k, v, p);
  if (saved) *saved = {q, k, v, r.o, r.lse, p};
  return r;
}

AttentionGrads attention_backward(const AttentionSaved& s, const Tensor& dout, const Tensor& dlse, GradMask needed) {
  attention_dims("attention_backward", s.q, s.k, s.v, s.params);
  check_same_shape("attention_backward", s.o, dout, "o", "dout");
  if (dlse.defined()) check_same_shape("attention_backward", s.lse, dlse, "lse", "dlse");
  HYB_CHECK(!needed[3] || s.params.scale_h.defined(),
            "attention_backward: the gradient of scale_h was asked for but the forward ran without scale_h");
#if HYBRID_CUDA
  if (dout.is_cuda()) return attention_backward_cuda(s, dout, dlse, needed);
#endif
  return attention_backward_cpu(s, dout, dlse, needed);
}

namespace {

AttentionVars record_attention(const Var& q, const Var& k, const Var& v, const Var& scale_h, AttentionParams p) {
  if (scale_h.defined()) p.scale_h = scale_h.data();
  const bool rec = will_record({q, k, v, scale_h});
  AttentionSaved s;
  AttentionOutputs r = attention_forward(q.data(), k.data(), v.data(), p, rec ? &s : nullptr);
  std::vector<Var> out = record_op(
      "attention", {q, k, v, scale_h}, {r.o, r.lse},
      [s](const Grads& douts, GradMask need) {
        // Only lse may carry a gradient (an lse merge whose o is discarded): dO is then zero.
        Tensor dout = douts[0].defined() ? douts[0] : Tensor::zeros(s.o.shape(), s.o.dtype(), s.o.device());
        AttentionGrads g = attention_backward(s, dout, douts[1], need);
        return Grads{g.dq, g.dk, g.dv, g.dscale_h};
      },
      {{"q", s.q}, {"k", s.k}, {"v", s.v}, {"scale_h", s.params.scale_h}});
  return {out[0], out[1]};
}

}  // namespace

Var attention(const Var& q, const Var& k, const Var& v, const AttentionParams& p) {
  return record_attention(q, k, v, Var(), p).o;
}

AttentionVars attention_with_lse(const Var& q, const Var& k, const Var& v, const AttentionParams& p) {
  return record_attention(q, k, v, Var(), p);
}

AttentionVars attention_with_lse(const Var& q, const Var& k, const Var& v, const Var& scale_h,
                                 const AttentionParams& p) {
  HYB_CHECK(scale_h.defined(), "attention: the scale_h input is undefined");
  return record_attention(q, k, v, scale_h, p);
}

}  // namespace hyb
