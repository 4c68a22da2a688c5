// Checks, the form and device branch, and the tape record of the simple_gla (SSD core) op.
#include "layers/mamba2/simple_gla_op.h"

#include <cmath>

namespace hyb {

SimpleGlaDims simple_gla_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& S0) {
  HYB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && g.dim() == 3, op, ": q ", shape_str(q.shape()), ", k ",
            shape_str(k.shape()), ", v ", shape_str(v.shape()), " and g ", shape_str(g.shape()),
            " must be q, k (B, T, Gq, K), v (B, T, H, V) and g (B, T, H)");
  SimpleGlaDims d;
  d.B = q.size(0), d.T = q.size(1), d.Gq = q.size(2), d.K = q.size(3), d.H = v.size(2), d.V = v.size(3);
  HYB_CHECK(k.shape() == q.shape(), op, ": k is ", shape_str(k.shape()), " but q is ", shape_str(q.shape()),
            "; they must be equal");
  HYB_CHECK(v.size(0) == d.B && v.size(1) == d.T, op, ": v is ", shape_str(v.shape()), " but q is ",
            shape_str(q.shape()), "; v must be (B, T, H, V) with B = ", d.B, " and T = ", d.T);
  HYB_CHECK(d.Gq > 0 && d.H % d.Gq == 0, op, ": v has H = ", d.H, " heads but q and k have Gq = ", d.Gq,
            " groups; H must be a multiple of Gq");
  HYB_CHECK(g.size(0) == d.B && g.size(1) == d.T && g.size(2) == d.H, op, ": g is ", shape_str(g.shape()),
            " but v is ", shape_str(v.shape()), "; g must be (B, T, H) = (", d.B, ", ", d.T, ", ", d.H, ")");
  HYB_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must share a dtype, got ",
            dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  // Decays and states stay in f32 when the activations are bf16 (mamba2.md 2.4).
  const DType state = q.dtype() == DType::bf16 ? DType::f32 : q.dtype();
  HYB_CHECK(g.dtype() == state, op, ": g must be ", dtype_name(state), " with ", dtype_name(q.dtype()),
            " q, got ", dtype_name(g.dtype()));
  if (S0.defined()) {
    HYB_CHECK(S0.dim() == 4 && S0.size(0) == d.B && S0.size(1) == d.H && S0.size(2) == d.K && S0.size(3) == d.V, op,
              ": the initial state is ", shape_str(S0.shape()), "; it must be (B, H, K, V) = (", d.B, ", ", d.H, ", ",
              d.K, ", ", d.V, ")");
    HYB_CHECK(S0.dtype() == state, op, ": the initial state must be ", dtype_name(state), ", got ",
              dtype_name(S0.dtype()));
    check_same_device(op, q, S0);
  }
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  check_same_device(op, q, g);
  d.heads_per_group = d.H / d.Gq;
  return d;
}

SimpleGlaOutputs simple_gla_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                    const Tensor& S0, const SimpleGlaParams& p, SimpleGlaSaved* saved) {
  const SimpleGlaDims d = simple_gla_dims("simple_gla_forward", q, k, v, g, S0);
  HYB_CHECK(p.chunk_size >= 0, "simple_gla_forward: chunk_size must be >= 0 (0 = recurrent), got ", p.chunk_size);
  const double scale = p.scale ? *p.scale : 1.0 / std::sqrt(double(d.K));
  if (q.is_cuda()) {
    HYB_CHECK(q.dtype() != DType::f64, "simple_gla_forward: the CUDA path computes on f32 or bf16, got f64");
    Tensor kept;
#if HYBRID_CUDA
    SimpleGlaOutputs r = d.T == 1 ? simple_gla_decode_cuda(q, k, v, g, S0, scale)
                         : simple_gla_fused_supported(q, k, v, d.T, d.K, d.V, d.heads_per_group)
                             ? simple_gla_forward_fused(q, k, v, g, S0, scale,
                                                        saved && p.save_chunk_states ? &kept : nullptr)
                             : simple_gla_forward_kernels(q, k, v, g, S0, scale);
#else
    SimpleGlaOutputs r = simple_gla_forward_kernels(q, k, v, g, S0, scale);
#endif
    if (saved) *saved = {q, k, v, g, S0, p, kept};
    return r;
  }
  SimpleGlaOutputs r = p.chunk_size > 0 ? simple_gla_chunked_forward_cpu(q, k, v, g, S0, scale, p.chunk_size)
                                        : simple_gla_forward_cpu(q, k, v, g, S0, scale);
  if (saved) *saved = {q, k, v, g, S0, p, Tensor()};  // the CPU forms keep no chunk states
  return r;
}

SimpleGlaGrads simple_gla_backward(const SimpleGlaSaved& s, const Tensor& dout, const Tensor& dfinal, GradMask needed) {
  const SimpleGlaDims d = simple_gla_dims("simple_gla_backward", s.q, s.k, s.v, s.g, s.S0);
  HYB_CHECK(dout.shape() == Shape({d.B, d.T, d.H, d.V}) && dout.dtype() == s.q.dtype(),
            "simple_gla_backward: dout is ", dout.str(), "; it must be (B, T, H, V) = (", d.B, ", ", d.T, ", ", d.H,
            ", ", d.V, ") in ", dtype_name(s.q.dtype()));
  HYB_CHECK(!dfinal.defined() || (dfinal.shape() == Shape({d.B, d.H, d.K, d.V}) && dfinal.dtype() == s.g.dtype()),
            "simple_gla_backward: the final-state gradient is ", dfinal.str(), "; it must be (B, H, K, V) = (", d.B,
            ", ", d.H, ", ", d.K, ", ", d.V, ") in ", dtype_name(s.g.dtype()));
  HYB_CHECK(dout.device() == s.q.device() && (!dfinal.defined() || dfinal.device() == s.q.device()),
            "simple_gla_backward: dout and the final-state gradient must be on the device of q (", s.q.device().str(), ")");
  if (s.q.is_cuda()) {
#if HYBRID_CUDA
    if (simple_gla_fused_supported(s.q, s.k, s.v, d.T, d.K, d.V, d.heads_per_group))
      return simple_gla_backward_fused(s, dout, dfinal, needed);
#endif
    return simple_gla_backward_kernels(s, dout, dfinal, needed);
  }
  return s.params.chunk_size > 0 ? simple_gla_chunked_backward_cpu(s, dout, dfinal, needed)
                                 : simple_gla_backward_cpu(s, dout, dfinal, needed);
}

SimpleGlaVars simple_gla(const Var& q, const Var& k, const Var& v, const Var& g, const Var& S0,
                         const SimpleGlaParams& p) {
  const bool rec = will_record({q, k, v, g, S0});
  SimpleGlaSaved s;
  SimpleGlaOutputs r =
      simple_gla_forward(q.data(), k.data(), v.data(), g.data(), S0.defined() ? S0.data() : Tensor(), p, rec ? &s : nullptr);
  std::vector<Var> out = record_op(
      "simple_gla", {q, k, v, g, S0}, {r.o, r.final_state},
      [s](const Grads& douts, GradMask need) {
        // Only the final state may carry a gradient (a prefill whose outputs are discarded).
        const Tensor dout = douts[0].defined() ? douts[0] : Tensor::zeros(s.v.shape(), s.v.dtype(), s.v.device());
        SimpleGlaGrads g = simple_gla_backward(s, dout, douts[1], need);
        return Grads{g.dq, g.dk, g.dv, g.dg, g.dS0};
      },
      {{"q", s.q}, {"k", s.k}, {"v", s.v}, {"g", s.g}, {"S0", s.S0}});
  return {out[0], out[1]};
}

}  // namespace hyb
