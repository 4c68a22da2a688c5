// Checks, the device branch and the tape record of the nha op.
#include "layers/nha/nha_op.h"

#include <cmath>

#if HYBRID_CUDA
#include "core/cuda/tensor_cuda.h"
#include "layers/gsa/slot_attention_cuda.h"
#include "layers/nha/nha_fused.h"
#include "layers/rope/rope_op.h"
#endif

namespace hyb {

NhaDims nha_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                 const Tensor& HK0, const Tensor& HV0, const Tensor& bias, const NhaParams& p) {
  HYB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q ", shape_str(q.shape()), ", k ",
            shape_str(k.shape()), " and v ", shape_str(v.shape()),
            " must be q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv)");
  NhaDims d;
  d.B = q.size(0), d.T = q.size(1), d.Hq = q.size(2), d.D = q.size(3);
  d.Hkv = k.size(2), d.Dv = v.size(3);
  HYB_CHECK(k.size(0) == d.B && k.size(1) == d.T && k.size(3) == d.D, op, ": k is ", shape_str(k.shape()),
            " but q is ", shape_str(q.shape()), "; k must be (B, T, Hkv, D) with B = ", d.B, ", T = ", d.T,
            ", D = ", d.D);
  HYB_CHECK(d.Hkv > 0 && d.Hq % d.Hkv == 0, op, ": q has Hq = ", d.Hq, " heads but k has Hkv = ", d.Hkv,
            "; Hq must be a multiple of Hkv");
  HYB_CHECK(v.shape() == Shape({d.B, d.T, d.Hkv, d.Dv}), op, ": v is ", shape_str(v.shape()), " but k is ",
            shape_str(k.shape()), "; v must be (B, T, Hkv, Dv)");
  HYB_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must share a dtype, got ",
            dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  HYB_CHECK(s.defined() == g.defined(), op, ": give both s and g (M slots) or neither (no slot memory)");
  const DType state = q.dtype() == DType::bf16 ? DType::f32 : q.dtype();
  d.M = s.defined() ? s.size(3) : 0;
  if (s.defined()) {
    HYB_CHECK(s.dim() == 4 && s.shape() == Shape({d.B, d.T, d.Hkv, d.M}) && g.shape() == s.shape() && d.M >= 1, op,
              ": s is ", shape_str(s.shape()), " and g is ", shape_str(g.shape()), " but k is ", shape_str(k.shape()),
              "; both must be (B, T, Hkv, M) with M >= 1");
    HYB_CHECK(s.dtype() == state && g.dtype() == state, op, ": s and g must be ", dtype_name(state), " with ",
              dtype_name(q.dtype()), " q, got ", dtype_name(s.dtype()), " and ", dtype_name(g.dtype()));
    check_same_device(op, q, s);
    check_same_device(op, q, g);
  }
  HYB_CHECK(HK0.defined() == HV0.defined(), op, ": give both initial memories or neither");
  if (HK0.defined()) {
    const Shape hk{d.B, d.Hkv, d.D, d.M}, hv{d.B, d.Hkv, d.M, d.Dv};
    HYB_CHECK(d.M > 0 && HK0.shape() == hk && HV0.shape() == hv, op, ": the initial memories are ",
              shape_str(HK0.shape()), " and ", shape_str(HV0.shape()), "; they must be HK (B, Hkv, D, M) = ",
              shape_str(hk), " and HV (B, Hkv, M, Dv) = ", shape_str(hv));
    HYB_CHECK(HK0.dtype() == state && HV0.dtype() == state, op, ": the initial memories must be ",
              dtype_name(state), ", got ", dtype_name(HK0.dtype()), " and ", dtype_name(HV0.dtype()));
    check_same_device(op, q, HK0);
    check_same_device(op, q, HV0);
  }
  HYB_CHECK(p.window >= -1, op, ": window must be >= 0 or -1 (unlimited), got ", p.window);
  HYB_CHECK(p.shift >= -1, op, ": shift must be >= 0 or -1 (no token enters the memory), got ", p.shift);
  d.window = p.window < 0 ? d.T : std::min(p.window, d.T);
  d.shift = p.shift < 0 ? d.T : std::min(p.shift, d.T);
  HYB_CHECK(d.M > 0 || p.window != 0, op, ": no slots (M = 0) and no window (window = 0) leave every query empty");
  if (p.rope && d.window > 0) HYB_CHECK(d.D % 2 == 0, op, ": RoPE needs an even head dim, got D = ", d.D);
  if (bias.defined()) {
    HYB_CHECK(bias.dim() == 2 && bias.size(0) == d.Hq && bias.size(1) >= d.window, op, ": the window bias is ",
              shape_str(bias.shape()), "; it must be (Hq, nb) with Hq = ", d.Hq, " and nb >= min(window, T) = ",
              d.window);
    HYB_CHECK(bias.dtype() == q.dtype(), op, ": the window bias must be ", dtype_name(q.dtype()), ", got ",
              dtype_name(bias.dtype()));
    check_same_device(op, q, bias);
  }
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  HYB_CHECK(!q.is_cuda() || q.dtype() != DType::f64, op, ": the CUDA path computes on f32 or bf16, got f64");
  d.group = d.Hq / d.Hkv;
  return d;
}

NhaWindowSide nha_window_side(const char* op, const Tensor& q, const Tensor& k, const Tensor& q_window,
                              const Tensor& k_window) {
  HYB_CHECK(q_window.defined() == k_window.defined(), op, ": give both window-side q and k or neither");
  if (!q_window.defined()) return {q, k, false};
  HYB_CHECK(q_window.shape() == q.shape() && k_window.shape() == k.shape(), op, ": the window-side q and k are ",
            shape_str(q_window.shape()), " and ", shape_str(k_window.shape()), "; they must be the shapes of q ",
            shape_str(q.shape()), " and k ", shape_str(k.shape()));
  HYB_CHECK(q_window.dtype() == q.dtype() && k_window.dtype() == q.dtype(), op, ": the window-side q and k must be ",
            dtype_name(q.dtype()), ", got ", dtype_name(q_window.dtype()), " and ", dtype_name(k_window.dtype()));
  check_same_device(op, q, q_window);
  check_same_device(op, q, k_window);
  return {q_window, k_window, true};
}

#if HYBRID_CUDA
namespace {

RopeTable rope_table_for(const Tensor& q, const NhaParams& p, const NhaDims& d) {
  const std::optional<RopeTable>& t = p.rope_table;
  if (t && t->rope_dim == d.D && t->cos.device() == q.device() && t->cos.size(0) >= p.rope_offset + d.T) return *t;
  return rope_table(p.rope_theta, d.D, p.rope_offset + d.T, std::nullopt, q.device());
}

// The resolved window and shift, and the window-side q and k rotated as the CPU reference does (or
// the forward's rotation, kept_qr and kept_kr, when defined).
SlotAttentionArgs cuda_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                            const Tensor& HK0, const Tensor& HV0, const Tensor& bias, const NhaParams& p,
                            const NhaDims& d, const NhaWindowSide& win, const Tensor& kept_qr = Tensor(),
                            const Tensor& kept_kr = Tensor()) {
  SlotAttentionArgs a;
  auto cont = [](const Tensor& x) { return x.defined() ? x.contiguous() : Tensor(); };
  a.q = q.contiguous(), a.k = k.contiguous(), a.v = v.contiguous();
  a.s = cont(s), a.g = cont(g), a.HK0 = cont(HK0), a.HV0 = cont(HV0), a.bias = cont(bias);
  a.scale = p.scale ? *p.scale : 1.0 / std::sqrt(double(d.D));
  a.window = d.window;
  a.shift = d.shift;
  if (d.window > 0 && kept_qr.defined() && kept_kr.defined()) {
    a.qr = kept_qr, a.kr = kept_kr;
  } else if (d.window > 0) {
    const Tensor qw = win.separate ? win.q.contiguous() : a.q, kw = win.separate ? win.k.contiguous() : a.k;
    if (p.rope) {
      const RopeTable tab = rope_table_for(q, p, d);
      a.qr = rope_forward(qw, tab, p.rope_offset).contiguous();
      a.kr = rope_forward(kw, tab, p.rope_offset).contiguous();
    } else {
      a.qr = qw, a.kr = kw;
    }
  }
  return a;
}

}  // namespace
#endif

NhaOutputs nha_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                       const Tensor& HK0, const Tensor& HV0, const Tensor& bias, const NhaParams& p, NhaSaved* saved,
                       const Tensor& q_window, const Tensor& k_window) {
  const NhaDims d = nha_dims("nha_forward", q, k, v, s, g, HK0, HV0, bias, p);
  const NhaWindowSide win = nha_window_side("nha_forward", q, k, q_window, k_window);
#if HYBRID_CUDA
  if (q.is_cuda() && !p.long_ratio && nha_fused_supported(q, d)) {
    // o and the joint lse are what the slot-attention backward reads (nha_backward below).
    const SlotAttentionArgs a = cuda_args(q, k, v, s, g, HK0, HV0, bias, p, d, win);
    NhaFusedOut y = nha_forward_fused(a, saved && p.save_chunk_states);
    if (saved) {
      *saved = {q, k, v, s, g, HK0, HV0, bias, q_window, k_window, p, y.lse, y.o, y.chunk_HK, y.chunk_HV, y.chunk_decay};
      if (p.save_window_qk) saved->window_qr = a.qr, saved->window_kr = a.kr;
    }
    return {y.o, y.HK, y.HV, Tensor()};
  }
  if (q.is_cuda()) {
    const SlotAttentionArgs a = cuda_args(q, k, v, s, g, HK0, HV0, bias, p, d, win);
    SlotAttentionOut y = slot_attention_forward_cuda(a, p.long_ratio);
    if (saved) {
      *saved = {q, k, v, s, g, HK0, HV0, bias, q_window, k_window, p, y.lse, y.o};
      if (p.save_window_qk) saved->window_qr = a.qr, saved->window_kr = a.kr;
    }
    return {y.o, y.HK, y.HV, y.long_ratio};
  }
#endif
  (void)d, (void)win;
  NhaOutputs r = nha_forward_cpu(q, k, v, s, g, HK0, HV0, bias, p, q_window, k_window);
  if (saved) *saved = {q, k, v, s, g, HK0, HV0, bias, q_window, k_window, p, Tensor(), Tensor()};
  return r;
}

NhaGrads nha_backward(const NhaSaved& s, const Tensor& dout, const Tensor& dHK, const Tensor& dHV, GradMask needed) {
  const NhaDims d = nha_dims("nha_backward", s.q, s.k, s.v, s.s, s.g, s.HK0, s.HV0, s.bias, s.params);
  HYB_CHECK(dout.shape() == Shape({d.B, d.T, d.Hq, d.Dv}) && dout.dtype() == s.q.dtype(), "nha_backward: dout is ",
            dout.str(), "; it must be (B, T, Hq, Dv) = (", d.B, ", ", d.T, ", ", d.Hq, ", ", d.Dv, ") in ",
            dtype_name(s.q.dtype()));
  HYB_CHECK(!dHK.defined() || (d.M > 0 && dHK.shape() == Shape({d.B, d.Hkv, d.D, d.M})), "nha_backward: the final HK "
            "gradient is ", dHK.str(), "; it must be (B, Hkv, D, M)");
  HYB_CHECK(!dHV.defined() || (d.M > 0 && dHV.shape() == Shape({d.B, d.Hkv, d.M, d.Dv})), "nha_backward: the final HV "
            "gradient is ", dHV.str(), "; it must be (B, Hkv, M, Dv)");
#if HYBRID_CUDA
  if (s.q.is_cuda()) {
    const NhaParams& p = s.params;
    const NhaWindowSide win = nha_window_side("nha_backward", s.q, s.k, s.q_window, s.k_window);
    const SlotAttentionArgs a =
        cuda_args(s.q, s.k, s.v, s.s, s.g, s.HK0, s.HV0, s.bias, p, d, win, s.window_qr, s.window_kr);
    Tensor lse = s.lse, o = s.o;
    if (!lse.defined()) {  // a record without them (from the CPU forward) reruns the forward
      if (nha_fused_supported(s.q, d)) {
        const NhaFusedOut y = nha_forward_fused(a);
        lse = y.lse, o = y.o;
      } else {
        const SlotAttentionOut y = slot_attention_forward_cuda(a, false);
        lse = y.lse, o = y.o;
      }
    }
    SlotAttentionGrads g;
    if (nha_fused_supported(s.q, d)) {
      // The joint softmax split by its logits: the slot side on gsa's fused backward, the window side
      // from the joint lse and o. Without a bias (at D, Dv <= 64) the window's gradients come from the
      // two window kernels; else the window side is the slot-attention backward without slots.
      const bool window_fused = nha_window_fused(a);
      const NhaSlotGrads ns = nha_slot_backward_fused(a, lse, o, dout, dHK, dHV, s);
      const GsaGrads& sg = ns.slot;
      if (window_fused && !win.separate) {
        // Each gradient in one pass: the slot side's bf16 plus the window side's f32 turned back
        // through RoPE, inside the window kernels where the rotation allows, else after them.
        const RopeTable tab = p.rope ? rope_table_for(s.q, p, d) : RopeTable();
        const RopeTable* rope = p.rope ? &tab : nullptr;
        NhaGrads r;
        if (nha_window_sum_fused_ok(a, rope)) {
          const NhaWindowSum w = nha_window_sum_fused(a, lse, ns.delta, dout, sg, rope, p.rope_offset);
          if (needed[0]) r.dq = w.dq;
          if (needed[1]) r.dk = w.dk;
          if (needed[2]) r.dv = w.dv;
        } else {
          const SlotAttentionGrads wk = nha_window_grads_fused(a, lse, ns.delta, dout);
          if (needed[0]) r.dq = nha_add_window_grad(sg.dq, wk.dqr, rope, p.rope_offset);
          if (needed[1]) r.dk = nha_add_window_grad(sg.dk, wk.dkr, rope, p.rope_offset);
          if (needed[2]) r.dv = nha_add_window_grad(sg.dv, wk.dv, nullptr, 0);
        }
        if (needed[3]) r.ds = sg.ds;
        if (needed[4]) r.dg = sg.dg;
        if (needed[5]) r.dHK0 = sg.dHk0;
        if (needed[6]) r.dHV0 = sg.dHv0;
        return r;
      }
      if (window_fused) {
        g = nha_window_grads_fused(a, lse, ns.delta, dout);
      } else {
        SlotAttentionArgs w = a;
        w.s = w.g = w.HK0 = w.HV0 = Tensor();
        g = slot_attention_backward_cuda(w, lse, o, dout, Tensor(), Tensor());
      }
      g.dq = sg.dq.to(DType::f32), g.dk = sg.dk.to(DType::f32);
      cuda_add_(g.dv, sg.dv.to(DType::f32), 1.0);
      g.ds = sg.ds, g.dg = sg.dg, g.dHK0 = sg.dHk0, g.dHV0 = sg.dHv0;
    } else {
      g = slot_attention_backward_cuda(a, lse, o, dout, dHK, dHV);
    }
    // The window side saw RoPE(q), RoPE(k): its gradients go back through the transposed rotation.
    auto unrotated = [&](const Tensor& w) { return p.rope ? rope_backward(w, rope_table_for(s.q, p, d), p.rope_offset) : w; };
    auto total = [&](Tensor mem, const Tensor& w) {
      if (w.defined()) cuda_add_(mem, unrotated(w), 1.0);
      return mem.to(s.q.dtype());
    };
    auto window_only = [&](const Tensor& w, const Tensor& like) {
      return w.defined() ? unrotated(w).to(s.q.dtype()) : Tensor::zeros(like.shape(), like.dtype(), like.device());
    };
    NhaGrads r;
    if (win.separate) {
      if (needed[0]) r.dq = g.dq.to(s.q.dtype());
      if (needed[1]) r.dk = g.dk.to(s.q.dtype());
      if (needed[8]) r.dq_window = window_only(g.dqr, s.q);
      if (needed[9]) r.dk_window = window_only(g.dkr, s.k);
    } else {
      if (needed[0]) r.dq = total(g.dq, g.dqr);
      if (needed[1]) r.dk = total(g.dk, g.dkr);
    }
    if (needed[2]) r.dv = g.dv.to(s.q.dtype());
    if (needed[3]) r.ds = g.ds;
    if (needed[4]) r.dg = g.dg;
    if (needed[5]) r.dHK0 = g.dHK0;
    if (needed[6]) r.dHV0 = g.dHV0;
    if (needed[7] && g.dbias.defined()) r.dbias = g.dbias.to(s.bias.dtype());
    return r;
  }
#endif
  return nha_backward_cpu(s, dout, dHK, dHV, needed);
}

NhaVars nha(const Var& q, const Var& k, const Var& v, const Var& s, const Var& g, const Var& HK0, const Var& HV0,
            const Var& bias, const NhaParams& p, const Var& q_window, const Var& k_window) {
  const bool rec = will_record({q, k, v, s, g, HK0, HV0, bias, q_window, k_window});
  auto data = [](const Var& x) { return x.defined() ? x.data() : Tensor(); };
  NhaSaved sv;
  NhaOutputs r = nha_forward(q.data(), k.data(), v.data(), data(s), data(g), data(HK0), data(HV0), data(bias), p,
                             rec ? &sv : nullptr, data(q_window), data(k_window));
  const bool slots = r.HK.defined();
  std::vector<Tensor> outs{r.o};
  if (slots) {
    outs.push_back(r.HK);
    outs.push_back(r.HV);
  }
  std::vector<Var> out = record_op(
      "nha", {q, k, v, s, g, HK0, HV0, bias, q_window, k_window}, outs,
      [sv, slots](const Grads& douts, GradMask need) {
        // Only a final memory may carry a gradient (a prefill whose outputs are discarded).
        const Tensor dout = douts[0].defined() ? douts[0]
                                               : Tensor::zeros({sv.q.size(0), sv.q.size(1), sv.q.size(2), sv.v.size(3)},
                                                               sv.q.dtype(), sv.q.device());
        NhaGrads gr = nha_backward(sv, dout, slots ? douts[1] : Tensor(), slots ? douts[2] : Tensor(), need);
        return Grads{gr.dq, gr.dk, gr.dv, gr.ds, gr.dg, gr.dHK0, gr.dHV0, gr.dbias, gr.dq_window, gr.dk_window};
      },
      {{"q", sv.q}, {"k", sv.k}, {"v", sv.v}, {"s", sv.s}, {"g", sv.g}, {"HK0", sv.HK0}, {"HV0", sv.HV0},
       {"bias", sv.bias}, {"q_window", sv.q_window}, {"k_window", sv.k_window}, {"o", sv.o}});
  NhaVars y{out[0], slots ? out[1] : Var(), slots ? out[2] : Var(), r.long_ratio};
  return y;
}

}  // namespace hyb
