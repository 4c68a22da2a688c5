// Checks and the device branch of the nha decode step (nha_decode.h).
#include "layers/nha/nha_decode.h"

namespace hyb {

namespace {

void check_state_tensor(const char* what, const Tensor& t, const Shape& want, DType dt, const Tensor& q) {
  HYB_CHECK(t.defined() && t.shape() == want, "nha_decode_step: ", what, " is ", t.str(), "; it must be ",
            shape_str(want));
  HYB_CHECK(t.dtype() == dt, "nha_decode_step: ", what, " must be ", dtype_name(dt), ", got ", dtype_name(t.dtype()));
  HYB_CHECK(t.is_contiguous(), "nha_decode_step: ", what, " is updated in place and must be contiguous");
  check_same_device("nha_decode_step", q, t);
}

}  // namespace

NhaDecodeDims nha_decode_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                              const Tensor& bias, const RopeTable* rope, const NhaDecodeState& st,
                              const NhaDecodeParams& p) {
  const char* op = "nha_decode_step";
  HYB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q ", shape_str(q.shape()), ", k ",
            shape_str(k.shape()), " and v ", shape_str(v.shape()),
            " must be q (B, T, Hq, D), k (B, T, Hkv, D), v (B, T, Hkv, Dv)");
  NhaDecodeDims d;
  d.B = q.size(0), d.T = q.size(1), d.Hq = q.size(2), d.D = q.size(3), d.Hkv = k.size(2), d.Dv = v.size(3);
  HYB_CHECK(d.T >= 1, op, ": no new token (T = 0)");
  HYB_CHECK(k.shape() == Shape({d.B, d.T, d.Hkv, d.D}) && d.Hkv > 0 && d.Hq % d.Hkv == 0, op, ": k is ",
            shape_str(k.shape()), " but q is ", shape_str(q.shape()),
            "; k must be (B, T, Hkv, D) with Hq a multiple of Hkv");
  HYB_CHECK(v.shape() == Shape({d.B, d.T, d.Hkv, d.Dv}), op, ": v is ", shape_str(v.shape()), " but k is ",
            shape_str(k.shape()), "; v must be (B, T, Hkv, Dv)");
  HYB_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must share a dtype, got ",
            dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  const DType state = q.dtype() == DType::bf16 ? DType::f32 : q.dtype();
  HYB_CHECK(s.defined() == g.defined(), op, ": give both s and g (M slots) or neither (no slot memory)");
  d.M = s.defined() ? s.size(3) : 0;
  if (s.defined()) {
    HYB_CHECK(s.shape() == Shape({d.B, d.T, d.Hkv, d.M}) && g.shape() == s.shape() && d.M >= 1, op, ": s is ",
              shape_str(s.shape()), " and g is ", shape_str(g.shape()), "; both must be (B, T, Hkv, M) with M >= 1");
    HYB_CHECK(s.dtype() == state && g.dtype() == state, op, ": s and g must be ", dtype_name(state), " with ",
              dtype_name(q.dtype()), " q, got ", dtype_name(s.dtype()), " and ", dtype_name(g.dtype()));
    check_same_device(op, q, s);
    check_same_device(op, q, g);
  }
  HYB_CHECK(p.window >= -1 && p.shift >= -1, op, ": window and shift must be >= 0 or -1, got window ", p.window,
            " and shift ", p.shift);
  HYB_CHECK(p.pos >= 0, op, ": pos must be >= 0, got ", p.pos);
  HYB_CHECK(d.M > 0 || p.window != 0, op, ": no slots (M = 0) and no window (window = 0) leave every query empty");
  HYB_CHECK(!p.long_ratio || !p.split, op, ": omega_L is a statistic of the joint softmax, not of split branches");
  if (d.M > 0) {
    check_state_tensor("HK", st.HK, {d.B, d.Hkv, d.D, d.M}, state, q);
    check_state_tensor("HV", st.HV, {d.B, d.Hkv, d.M, d.Dv}, state, q);
  }
  // The ring must hold every token a later step reads: the window's keys and the tokens not yet absorbed.
  const bool absorbs_from_ring = d.M > 0 && p.shift > 0;
  d.R = st.ring_k.defined() ? st.ring_k.size(1) : 0;
  const int64_t need = p.window < 0 ? p.pos + d.T : std::max(p.window, absorbs_from_ring ? p.shift : int64_t(0));
  HYB_CHECK(d.R >= need, op, ": the ring holds ", d.R, " tokens, but window ", p.window, " and shift ", p.shift,
            " at positions ", p.pos, "..", p.pos + d.T - 1, " need ", need);
  if (d.R > 0) {
    check_state_tensor("ring_k", st.ring_k, {d.B, d.R, d.Hkv, d.D}, q.dtype(), q);
    check_state_tensor("ring_v", st.ring_v, {d.B, d.R, d.Hkv, d.Dv}, q.dtype(), q);
  }
  if (absorbs_from_ring) {
    check_state_tensor("ring_s", st.ring_s, {d.B, d.R, d.Hkv, d.M}, state, q);
    check_state_tensor("ring_g", st.ring_g, {d.B, d.R, d.Hkv, d.M}, state, q);
  }
  if (bias.defined()) {
    const int64_t reach = p.window < 0 ? p.pos + d.T : std::min(p.window, p.pos + d.T);
    HYB_CHECK(bias.dim() == 2 && bias.size(0) == d.Hq && bias.size(1) >= reach, op, ": the window bias is ",
              shape_str(bias.shape()), "; it must be (Hq, nb) with Hq = ", d.Hq, " and nb >= ", reach,
              " (the farthest key of this step)");
    HYB_CHECK(bias.dtype() == q.dtype() && bias.is_contiguous(), op, ": the window bias must be contiguous ",
              dtype_name(q.dtype()), ", got ", dtype_name(bias.dtype()));
    check_same_device(op, q, bias);
  }
  if (rope && p.window != 0) {
    HYB_CHECK(d.D % 2 == 0 && rope->rope_dim == d.D, op, ": the RoPE table turns ", rope->rope_dim,
              " dims; it must turn all D = ", d.D, " dims of the head, an even number");
    if (q.is_cuda())
      HYB_CHECK(rope->cos.defined() && rope->cos.size(0) >= p.pos + d.T && rope->cos.device() == q.device(), op,
                ": the RoPE table must cover positions up to ", p.pos + d.T - 1, " on ", q.device().str());
  }
  HYB_CHECK(!q.is_cuda() || q.dtype() != DType::f64, op, ": the CUDA path computes on f32 or bf16, got f64");
  d.group = d.Hq / d.Hkv;
  return d;
}

NhaDecodeOutputs nha_decode_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g,
                                 const Tensor& bias, const RopeTable* rope, NhaDecodeState& st,
                                 const NhaDecodeParams& p) {
#if HYBRID_CUDA
  if (q.is_cuda()) return nha_decode_step_cuda(q, k, v, s, g, bias, rope, st, p);
#endif
  return nha_decode_step_cpu(q, k, v, s, g, bias, rope, st, p);
}

}  // namespace hyb
