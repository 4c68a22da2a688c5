// Checks, the form and device branch, and the tape record of the gated delta rule.
#include "layers/gated_deltanet/gated_delta_rule_op.h"

#include <cmath>

namespace hyb {

GatedDeltaDims gated_delta_rule_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& beta, const Tensor& g, const Tensor& S0) {
  HYB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && beta.dim() == 3 && g.dim() == 3, op, ": q ",
            shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()), ", beta ",
            shape_str(beta.shape()), " and g ", shape_str(g.shape()),
            " must be q, k (B, T, H, K), v (B, T, HV, V), beta and g (B, T, HV)");
  GatedDeltaDims d;
  d.B = q.size(0), d.T = q.size(1), d.H = q.size(2), d.K = q.size(3), d.HV = v.size(2), d.V = v.size(3);
  HYB_CHECK(k.shape() == q.shape(), op, ": k is ", shape_str(k.shape()), " but q is ", shape_str(q.shape()),
            "; they must be equal");
  HYB_CHECK(v.size(0) == d.B && v.size(1) == d.T, op, ": v is ", shape_str(v.shape()), " but q is ",
            shape_str(q.shape()), "; v must be (B, T, HV, V) with B = ", d.B, " and T = ", d.T);
  HYB_CHECK(d.H > 0 && d.HV % d.H == 0, op, ": v has HV = ", d.HV, " heads but q and k have H = ", d.H,
            "; HV must be a multiple of H");
  const Shape gate_shape{d.B, d.T, d.HV};
  HYB_CHECK(beta.shape() == gate_shape && g.shape() == gate_shape, op, ": beta is ", shape_str(beta.shape()),
            " and g is ", shape_str(g.shape()), " but v is ", shape_str(v.shape()), "; both must be (B, T, HV) = ",
            shape_str(gate_shape));
  HYB_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must share a dtype, got ",
            dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  // beta, decays and states stay in f32 when the activations are bf16 (gated_deltanet.md 2.5).
  const DType state = q.dtype() == DType::bf16 ? DType::f32 : q.dtype();
  HYB_CHECK(beta.dtype() == state && g.dtype() == state, op, ": beta and g must be ", dtype_name(state), " with ",
            dtype_name(q.dtype()), " q, got ", dtype_name(beta.dtype()), " and ", dtype_name(g.dtype()));
  if (S0.defined()) {
    const Shape state_shape{d.B, d.HV, d.K, d.V};
    HYB_CHECK(S0.shape() == state_shape, op, ": the initial state is ", shape_str(S0.shape()),
              "; it must be (B, HV, K, V) = ", shape_str(state_shape));
    HYB_CHECK(S0.dtype() == state, op, ": the initial state must be ", dtype_name(state), ", got ",
              dtype_name(S0.dtype()));
    check_same_device(op, q, S0);
  }
  for (const Tensor* t : {&k, &v, &beta, &g}) check_same_device(op, q, *t);
  d.v_per_qk = d.HV / d.H;
  return d;
}

GatedDeltaOutputs gated_delta_rule_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                           const Tensor& g, const Tensor& S0, const GatedDeltaParams& p,
                                           GatedDeltaSaved* saved) {
  const GatedDeltaDims d = gated_delta_rule_dims("gated_delta_rule_forward", q, k, v, beta, g, S0);
  HYB_CHECK(p.chunk_size >= 0, "gated_delta_rule_forward: chunk_size must be >= 0 (0 = recurrent), got ",
            p.chunk_size);
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(double(d.K));
  if (q.is_cuda()) {
    HYB_CHECK(q.dtype() != DType::f64, "gated_delta_rule_forward: the CUDA path computes on f32 or bf16, got f64");
#if HYBRID_CUDA
    GatedDeltaChunkScratch chunks;
    GatedDeltaOutputs r = d.T == 1 ? gated_delta_rule_decode_cuda(q, k, v, beta, g, S0, scale)
                          : gated_delta_rule_fused_supported(q, d)
                              ? gated_delta_rule_forward_fused(q, k, v, beta, g, S0, scale,
                                                               saved && p.save_chunk_states ? &chunks : nullptr)
                              : gated_delta_rule_forward_kernels(q, k, v, beta, g, S0, scale);
#else
    GatedDeltaChunkScratch chunks;
    GatedDeltaOutputs r = gated_delta_rule_forward_kernels(q, k, v, beta, g, S0, scale);
#endif
    if (saved) *saved = {q, k, v, beta, g, S0, p, chunks};
    return r;
  }
  GatedDeltaOutputs r = p.chunk_size > 0 ? gated_delta_rule_chunked_forward_cpu(q, k, v, beta, g, S0, scale, p.chunk_size)
                                         : gated_delta_rule_forward_cpu(q, k, v, beta, g, S0, scale);
  if (saved) *saved = {q, k, v, beta, g, S0, p, {}};
  return r;
}

GatedDeltaGrads gated_delta_rule_backward(const GatedDeltaSaved& s, const Tensor& dout, const Tensor& dfinal,
                                          GradMask needed) {
  const GatedDeltaDims d = gated_delta_rule_dims("gated_delta_rule_backward", s.q, s.k, s.v, s.beta, s.g, s.S0);
  HYB_CHECK(dout.shape() == Shape({d.B, d.T, d.HV, d.V}) && dout.dtype() == s.q.dtype(),
            "gated_delta_rule_backward: dout is ", dout.str(), "; it must be (B, T, HV, V) = (", d.B, ", ", d.T, ", ",
            d.HV, ", ", d.V, ") in ", dtype_name(s.q.dtype()));
  HYB_CHECK(!dfinal.defined() || (dfinal.shape() == Shape({d.B, d.HV, d.K, d.V}) && dfinal.dtype() == s.g.dtype()),
            "gated_delta_rule_backward: the final-state gradient is ", dfinal.str(), "; it must be (B, HV, K, V) = (",
            d.B, ", ", d.HV, ", ", d.K, ", ", d.V, ") in ", dtype_name(s.g.dtype()));
  HYB_CHECK(dout.device() == s.q.device() && (!dfinal.defined() || dfinal.device() == s.q.device()),
            "gated_delta_rule_backward: dout and the final-state gradient must be on the device of q (",
            s.q.device().str(), ")");
  if (s.q.is_cuda()) {
#if HYBRID_CUDA
    if (gated_delta_rule_fused_supported(s.q, d)) return gated_delta_rule_backward_fused(s, dout, dfinal, needed);
#endif
    return gated_delta_rule_backward_kernels(s, dout, dfinal, needed);
  }
  return s.params.chunk_size > 0 ? gated_delta_rule_chunked_backward_cpu(s, dout, dfinal, needed)
                                 : gated_delta_rule_backward_cpu(s, dout, dfinal, needed);
}

GatedDeltaVars gated_delta_rule(const Var& q, const Var& k, const Var& v, const Var& beta, const Var& g, const Var& S0,
                                const GatedDeltaParams& p) {
  const bool rec = will_record({q, k, v, beta, g, S0});
  GatedDeltaSaved s;
  GatedDeltaOutputs r = gated_delta_rule_forward(q.data(), k.data(), v.data(), beta.data(), g.data(),
                                                 S0.defined() ? S0.data() : Tensor(), p, rec ? &s : nullptr);
  std::vector<Var> out = record_op(
      "gated_delta_rule", {q, k, v, beta, g, S0}, {r.o, r.final_state},
      [s](const Grads& douts, GradMask need) {
        // Only the final state may carry a gradient (a prefill whose outputs are discarded).
        const Tensor dout = douts[0].defined() ? douts[0] : Tensor::zeros(s.v.shape(), s.v.dtype(), s.v.device());
        GatedDeltaGrads g = gated_delta_rule_backward(s, dout, douts[1], need);
        return Grads{g.dq, g.dk, g.dv, g.dbeta, g.dg, g.dS0};
      },
      {{"q", s.q}, {"k", s.k}, {"v", s.v}, {"beta", s.beta}, {"g", s.g}, {"S0", s.S0}});
  return {out[0], out[1]};
}

}  // namespace hyb
