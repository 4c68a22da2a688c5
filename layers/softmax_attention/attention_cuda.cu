// CUDA side of the softmax-attention core op (attention_cuda.h): Tensor adapters around the
// flash-attention kernels of flash_attention.cuh. The kernels compute in bf16 with fp32
// accumulation (attention.md 4.4): f32 inputs are rounded to bf16 here and the results converted
// back, so the f32 CUDA path has bf16 accuracy (relative error ~1e-2), not f32's. f64 stays on the CPU.
#include <cstdint>
#include <limits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "layers/softmax_attention/attention_cuda.h"
#include "layers/softmax_attention/flash_attention.cuh"

namespace hyb {
namespace {

FlashStrides strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// x as the kernels read it: bf16 with 4-byte aligned rows (even B/T/H strides). A bf16 view that
// qualifies (a slice of a fused QKV buffer, say) is used in place; anything else is copied.
Tensor kernel_input(const Tensor& x) {
  Tensor y = x.dtype() == DType::bf16 ? x : x.to(DType::bf16);
  const bool aligned = reinterpret_cast<uintptr_t>(y.raw_data()) % 4 == 0 && y.stride(0) % 2 == 0 &&
                       y.stride(1) % 2 == 0 && y.stride(2) % 2 == 0;
  return aligned ? y : y.contiguous();
}

Tensor as_f32_contiguous(const Tensor& x) { return (x.dtype() == DType::f32 ? x : x.to(DType::f32)).contiguous(); }

void check_supported(const char* op, const AttentionDims& d, const Tensor& q) {
  HYB_CHECK(q.dtype() == DType::bf16 || q.dtype() == DType::f32, op, ": q is ", dtype_name(q.dtype()),
            "; the CUDA kernels take bf16 or f32 (computed in bf16), f64 runs on the CPU");
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  HYB_CHECK(d.B <= kMax && d.Tk <= kMax && d.Hq <= kMax, op, ": sizes B ", d.B, ", Tk ", d.Tk, ", Hq ", d.Hq,
            " exceed the kernels' 32-bit indices");
  HYB_CHECK(d.D % 2 == 0 && d.Dv % 2 == 0 && d.D <= 256 && d.Dv <= 256, op, ": head dims D = ", d.D, " and Dv = ",
            d.Dv, " must be even and at most 256 on CUDA");
}

FlashAttentionForwardParams forward_params(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& o, const Tensor& lse, const AttentionParams& p,
                                           const Tensor& scale_h) {
  FlashAttentionForwardParams f{};
  f.q = q.raw_data(), f.k = k.raw_data(), f.v = v.raw_data(), f.o = o.raw_data();
  f.lse = lse.data<float>();
  f.q_stride = strides_of(q), f.k_stride = strides_of(k), f.v_stride = strides_of(v), f.o_stride = strides_of(o);
  f.B = int(d.B), f.Tq = int(d.Tq), f.Tk = int(d.Tk), f.Hq = int(d.Hq), f.Hkv = int(d.Hkv), f.D = int(d.D);
  f.Dv = int(d.Dv);
  f.scale = float(attention_scale(p, d.D));
  f.scale_h = scale_h.defined() ? scale_h.data<float>() : nullptr;
  // A window or sink count past Tk means the same as Tk.
  f.window = int(std::min<int64_t>(p.window, d.Tk + 1));
  f.sinks = int(std::min<int64_t>(p.sinks, d.Tk + 1));
  return f;
}

}  // namespace

AttentionOutputs attention_forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  const AttentionDims d = attention_dims("attention_forward", q, k, v, p);
  check_supported("attention_forward", d, q);
  const Tensor q16 = kernel_input(q), k16 = kernel_input(k), v16 = kernel_input(v);
  const Tensor scale_h = p.scale_h.defined() ? as_f32_contiguous(p.scale_h) : Tensor();
  const Device dev = q.device();
  Tensor o = Tensor::empty({d.B, d.Tq, d.Hq, d.Dv}, DType::bf16, dev);
  Tensor lse = Tensor::empty({d.B, d.Hq, d.Tq}, DType::f32, dev);
  const FlashAttentionForwardParams f = forward_params(d, q16, k16, v16, o, lse, p, scale_h);
  const char* why = flash_attention_unsupported(f);
  HYB_CHECK(!why, "attention_forward: the CUDA kernels do not take q ", q.str(), ", k ", k.str(), ", v ", v.str(), ": ",
            why ? why : "");
  HYB_CUDA_CHECK(flash_attention_forward(f, current_stream(dev.index)));
  return {q.dtype() == DType::bf16 ? o : o.to(q.dtype()), lse};
}

AttentionGrads attention_backward_cuda(const AttentionSaved& s, const Tensor& dout, const Tensor& dlse,
                                       GradMask needed) {
  const AttentionDims d = attention_dims("attention_backward", s.q, s.k, s.v, s.params);
  check_supported("attention_backward", d, s.q);
  HYB_CHECK(dout.dtype() == s.q.dtype(), "attention_backward: dout is ", dtype_name(dout.dtype()), " but q is ",
            dtype_name(s.q.dtype()));
  HYB_CHECK(dout.stride(3) == 1, "attention_backward: dout ", shape_str(dout.shape()), " has strides ",
            shape_str(dout.strides()), "; its last dimension must be contiguous");
  const AttentionParams& p = s.params;
  const Tensor q16 = kernel_input(s.q), k16 = kernel_input(s.k), v16 = kernel_input(s.v);
  const Tensor o16 = kernel_input(s.o), do16 = kernel_input(dout);
  const Tensor lse = as_f32_contiguous(s.lse);
  const Tensor dlse32 = dlse.defined() ? as_f32_contiguous(dlse) : Tensor();
  const Tensor scale_h = p.scale_h.defined() ? as_f32_contiguous(p.scale_h) : Tensor();
  const Device dev = s.q.device();
  Tensor dq = Tensor::empty({d.B, d.Tq, d.Hq, d.D}, DType::bf16, dev);
  Tensor dk = Tensor::empty({d.B, d.Tk, d.Hkv, d.D}, DType::bf16, dev);
  Tensor dv = Tensor::empty({d.B, d.Tk, d.Hkv, d.Dv}, DType::bf16, dev);
  Tensor dscale = needed[3] ? Tensor::empty({d.Hq}, DType::f32, dev) : Tensor();

  FlashAttentionBackwardParams b{};
  b.fwd = forward_params(d, q16, k16, v16, o16, lse, p, scale_h);
  b.dout = do16.raw_data(), b.dout_stride = strides_of(do16);
  b.dlse = dlse32.defined() ? dlse32.data<float>() : nullptr;
  b.dq = dq.raw_data(), b.dk = dk.raw_data(), b.dv = dv.raw_data();
  b.dq_stride = strides_of(dq), b.dk_stride = strides_of(dk), b.dv_stride = strides_of(dv);
  b.dscale_h = dscale.defined() ? dscale.data<float>() : nullptr;
  b.deterministic = p.deterministic;
  b.tail_heads = p.tail_heads;
  const char* why = flash_attention_unsupported(b.fwd);
  HYB_CHECK(!why, "attention_backward: the CUDA kernels do not take q ", s.q.str(), ", k ", s.k.str(), ", v ",
            s.v.str(), ": ", why ? why : "");
  const size_t ws_bytes = flash_attention_backward_workspace_bytes(b);
  Tensor ws = Tensor::empty({int64_t((ws_bytes + 3) / 4)}, DType::f32, dev);
  HYB_CUDA_CHECK(flash_attention_backward(b, ws.raw_data(), current_stream(dev.index)));

  const DType dt = s.q.dtype();
  AttentionGrads g;
  if (needed[0]) g.dq = dt == DType::bf16 ? dq : dq.to(dt);
  if (needed[1]) g.dk = dt == DType::bf16 ? dk : dk.to(dt);
  if (needed[2]) g.dv = dt == DType::bf16 ? dv : dv.to(dt);
  if (needed[3]) g.dscale_h = dscale.to(p.scale_h.dtype());
  return g;
}

}  // namespace hyb
