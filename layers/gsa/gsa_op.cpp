// Checks, the device branch and the tape record of the gsa op.
#include "layers/gsa/gsa_op.h"

#include <cmath>

#if HYBRID_CUDA
#include "layers/gsa/gsa_fused.h"
#include "layers/gsa/slot_attention_cuda.h"
#endif

namespace hyb {

GsaDims gsa_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                 const Tensor& Hk0, const Tensor& Hv0) {
  HYB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && s.dim() == 4 && g.dim() == 4, op, ": q ",
            shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()), ", s ",
            shape_str(s.shape()), " and g ", shape_str(g.shape()),
            " must be q (B, T, Hq, K), k (B, T, Hkv, K), v (B, T, Hkv, V), s and g (B, T, Hkv, M)");
  GsaDims d;
  d.B = q.size(0), d.T = q.size(1), d.Hq = q.size(2), d.K = q.size(3);
  d.Hkv = k.size(2), d.V = v.size(3), d.M = s.size(3);
  HYB_CHECK(k.size(0) == d.B && k.size(1) == d.T && k.size(3) == d.K, op, ": k is ", shape_str(k.shape()),
            " but q is ", shape_str(q.shape()), "; k must be (B, T, Hkv, K) with B = ", d.B, ", T = ", d.T,
            ", K = ", d.K);
  HYB_CHECK(d.Hkv > 0 && d.Hq % d.Hkv == 0, op, ": q has Hq = ", d.Hq, " heads but k has Hkv = ", d.Hkv,
            "; Hq must be a multiple of Hkv");
  HYB_CHECK(v.shape() == Shape({d.B, d.T, d.Hkv, d.V}), op, ": v is ", shape_str(v.shape()), " but k is ",
            shape_str(k.shape()), "; v must be (B, T, Hkv, V)");
  HYB_CHECK(d.M >= 1 && s.shape() == Shape({d.B, d.T, d.Hkv, d.M}) && g.shape() == s.shape(), op, ": s is ",
            shape_str(s.shape()), " and g is ", shape_str(g.shape()), " but k is ", shape_str(k.shape()),
            "; both must be (B, T, Hkv, M) with M >= 1");
  HYB_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must share a dtype, got ",
            dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  // Gates, write weights and memories stay in f32 under bf16 activations (gsa.md 4.5, 5.5).
  const DType state = q.dtype() == DType::bf16 ? DType::f32 : q.dtype();
  HYB_CHECK(s.dtype() == state && g.dtype() == state, op, ": s and g must be ", dtype_name(state), " with ",
            dtype_name(q.dtype()), " q, got ", dtype_name(s.dtype()), " and ", dtype_name(g.dtype()));
  const Shape hk{d.B, d.Hkv, d.K, d.M}, hv{d.B, d.Hkv, d.M, d.V};
  HYB_CHECK(Hk0.defined() == Hv0.defined(), op, ": give both initial memories or neither");
  if (Hk0.defined()) {
    HYB_CHECK(Hk0.shape() == hk && Hv0.shape() == hv, op, ": the initial memories are ", shape_str(Hk0.shape()),
              " and ", shape_str(Hv0.shape()), "; they must be Hk (B, Hkv, K, M) = ", shape_str(hk),
              " and Hv (B, Hkv, M, V) = ", shape_str(hv));
    HYB_CHECK(Hk0.dtype() == state && Hv0.dtype() == state, op, ": the initial memories must be ",
              dtype_name(state), ", got ", dtype_name(Hk0.dtype()), " and ", dtype_name(Hv0.dtype()));
    check_same_device(op, q, Hk0);
    check_same_device(op, q, Hv0);
  }
  for (const Tensor* t : {&k, &v, &s, &g}) check_same_device(op, q, *t);
  HYB_CHECK(!q.is_cuda() || q.dtype() != DType::f64, op, ": the CUDA path computes on f32 or bf16, got f64");
  d.group = d.Hq / d.Hkv;
  return d;
}

#if HYBRID_CUDA
namespace {

// GSA is the slot-attention kernel without a window and without a shift.
SlotAttentionArgs cuda_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                            const Tensor& Hk0, const Tensor& Hv0, double scale) {
  SlotAttentionArgs a;
  a.q = q.contiguous(), a.k = k.contiguous(), a.v = v.contiguous(), a.s = s.contiguous(), a.g = g.contiguous();
  if (Hk0.defined()) a.HK0 = Hk0.contiguous(), a.HV0 = Hv0.contiguous();
  a.scale = scale;
  return a;
}

}  // namespace
#endif

GsaOutputs gsa_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                       const Tensor& Hk0, const Tensor& Hv0, const GsaParams& p, GsaSaved* saved) {
  const GsaDims d = gsa_dims("gsa_forward", q, k, v, s, g, Hk0, Hv0);
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(double(d.K));
#if HYBRID_CUDA
  if (q.is_cuda() && gsa_fused_supported(q, d)) {
    GsaFusedOut y = gsa_forward_fused(q, k, v, s, g, Hk0, Hv0, scale, saved && p.save_chunk_states);
    if (saved) *saved = {q, k, v, s, g, Hk0, Hv0, p, y.lse, y.chunk_Hk, y.chunk_Hv, y.chunk_decay};
    return {y.o, y.Hk, y.Hv};
  }
  if (q.is_cuda()) {
    SlotAttentionOut y = slot_attention_forward_cuda(cuda_args(q, k, v, s, g, Hk0, Hv0, scale), false);
    if (saved) *saved = {q, k, v, s, g, Hk0, Hv0, p, y.lse};
    return {y.o, y.HK, y.HV};
  }
#endif
  GsaOutputs r = gsa_forward_cpu(q, k, v, s, g, Hk0, Hv0, scale);
  if (saved) *saved = {q, k, v, s, g, Hk0, Hv0, p, Tensor()};
  return r;
}

GsaGrads gsa_backward(const GsaSaved& s, const Tensor& dout, const Tensor& dHk, const Tensor& dHv, GradMask needed) {
  const GsaDims d = gsa_dims("gsa_backward", s.q, s.k, s.v, s.s, s.g, s.Hk0, s.Hv0);
  HYB_CHECK(dout.shape() == Shape({d.B, d.T, d.Hq, d.V}) && dout.dtype() == s.q.dtype(), "gsa_backward: dout is ",
            dout.str(), "; it must be (B, T, Hq, V) = (", d.B, ", ", d.T, ", ", d.Hq, ", ", d.V, ") in ",
            dtype_name(s.q.dtype()));
  HYB_CHECK(!dHk.defined() || (dHk.shape() == Shape({d.B, d.Hkv, d.K, d.M}) && dHk.dtype() == s.g.dtype()),
            "gsa_backward: the final Hk gradient is ", dHk.str(), "; it must be (B, Hkv, K, M) in ",
            dtype_name(s.g.dtype()));
  HYB_CHECK(!dHv.defined() || (dHv.shape() == Shape({d.B, d.Hkv, d.M, d.V}) && dHv.dtype() == s.g.dtype()),
            "gsa_backward: the final Hv gradient is ", dHv.str(), "; it must be (B, Hkv, M, V) in ",
            dtype_name(s.g.dtype()));
#if HYBRID_CUDA
  if (s.q.is_cuda() && gsa_fused_supported(s.q, d)) return gsa_backward_fused(s, dout, dHk, dHv, needed);
  if (s.q.is_cuda()) {
    const double scale = s.params.scale ? *s.params.scale : 1.0 / std::sqrt(double(d.K));
    const SlotAttentionArgs a = cuda_args(s.q, s.k, s.v, s.s, s.g, s.Hk0, s.Hv0, scale);
    const Tensor lse = s.lse.defined() ? s.lse : slot_attention_forward_cuda(a, false).lse;
    SlotAttentionGrads g = slot_attention_backward_cuda(a, lse, Tensor(), dout, dHk, dHv);
    const DType dt = s.q.dtype();
    GsaGrads r;
    if (needed[0]) r.dq = g.dq.to(dt);
    if (needed[1]) r.dk = g.dk.to(dt);
    if (needed[2]) r.dv = g.dv.to(dt);
    if (needed[3]) r.ds = g.ds;
    if (needed[4]) r.dg = g.dg;
    if (needed[5]) r.dHk0 = g.dHK0;
    if (needed[6]) r.dHv0 = g.dHV0;
    return r;
  }
#endif
  return gsa_backward_cpu(s, dout, dHk, dHv, needed);
}

GsaVars gsa(const Var& q, const Var& k, const Var& v, const Var& s, const Var& g, const Var& Hk0, const Var& Hv0,
            const GsaParams& p) {
  const bool rec = will_record({q, k, v, s, g, Hk0, Hv0});
  GsaSaved sv;
  GsaOutputs r = gsa_forward(q.data(), k.data(), v.data(), s.data(), g.data(), Hk0.defined() ? Hk0.data() : Tensor(),
                             Hv0.defined() ? Hv0.data() : Tensor(), p, rec ? &sv : nullptr);
  std::vector<Var> out = record_op(
      "gsa", {q, k, v, s, g, Hk0, Hv0}, {r.o, r.Hk, r.Hv},
      [sv](const Grads& douts, GradMask need) {
        // Only a final state may carry a gradient (a prefill whose outputs are discarded).
        const Tensor dout = douts[0].defined() ? douts[0]
                                               : Tensor::zeros({sv.q.size(0), sv.q.size(1), sv.q.size(2), sv.v.size(3)},
                                                               sv.q.dtype(), sv.q.device());
        GsaGrads gr = gsa_backward(sv, dout, douts[1], douts[2], need);
        return Grads{gr.dq, gr.dk, gr.dv, gr.ds, gr.dg, gr.dHk0, gr.dHv0};
      },
      {{"q", sv.q}, {"k", sv.k}, {"v", sv.v}, {"s", sv.s}, {"g", sv.g}, {"Hk0", sv.Hk0}, {"Hv0", sv.Hv0}});
  return {out[0], out[1], out[2]};
}

}  // namespace hyb
