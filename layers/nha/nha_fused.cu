// The fused bf16 CUDA path of nha (nha_fused.h): the forward and the slot side of the backward. The token shift is a copy of k, v, s, g moved down
// by `shift` rows with zero gates in front (s = 0: nothing written, g = 0: no decay), so F1, the scan and
// F2's intra-chunk slot terms run unchanged on it; F2 reads the window from the unshifted kr and v.
// Extra cost over gsa (nha.md 6, B T = 32768, H 16, D = M = 64): the window products Qr Kr^T and Pw Vw
// over 128 keys per query (4 gsa.md 4.6 units per query head, of which half are masked for w = 32) and
// the shifted copies (~0.3 GB read and written: k, v bf16 and s, g f32).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "layers/gsa/gsa_fused.cuh"
#include "layers/nha/nha_fused.h"

namespace hyb {

using namespace gsa_fused;

namespace {

// x (B, T, H, D) moved down by `shift` rows along T, zeros in front.
Tensor shifted(const Tensor& x, int64_t shift) {
  if (shift == 0) return x;
  const int64_t T = x.size(1);
  Tensor y = Tensor::zeros(x.shape(), x.dtype(), x.device());
  if (shift < T) y.narrow(1, shift, T - shift).copy_(x.narrow(1, 0, T - shift));
  return y;
}

// The gradient of shifted(x) back to x: moved up by `shift` rows, zeros at the end.
Tensor unshifted(const Tensor& dy, int64_t shift) {
  if (shift == 0) return dy;
  const int64_t T = dy.size(1);
  Tensor dx = Tensor::zeros(dy.shape(), dy.dtype(), dy.device());
  if (shift < T) dx.narrow(1, 0, T - shift).copy_(dy.narrow(1, shift, T - shift));
  return dx;
}

// delta[row] = <dout[row], o[row]> over rows of V bf16 elements, one warp per row, fp32.
__global__ void __launch_bounds__(256) nha_row_dot_kernel(const bf16x* __restrict__ dout, const bf16x* __restrict__ o,
                                                          float* __restrict__ delta, int64_t rows, int V) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps
  float acc = 0.f;
  for (int c = lane; c < V; c += 32)
    acc += __bfloat162float(dout[row * V + c]) * __bfloat162float(o[row * V + c]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) delta[row] = acc;
}

}  // namespace

bool nha_fused_supported(const Tensor& q, const NhaDims& d) {
  // HYBRID_NHA_FUSED=0 keeps bf16 on the generic slot-attention kernels (A/B timing, bisecting a mismatch).
  static const bool enabled = [] {
    const char* e = std::getenv("HYBRID_NHA_FUSED");
    return !(e && std::string(e) == "0");
  }();
  if (!enabled || !q.is_cuda() || q.dtype() != DType::bf16 || d.T < 1) return false;
  if (d.window < 1 || d.window > kC || d.M < 1 || d.M > kMT) return false;
  if (d.D > 128 || d.Dv > 128 || d.D % 8 != 0 || d.Dv % 8 != 0) return false;
  if (d.B * d.Hq > 65535) return false;  // gridDim.y of F2
  const size_t need = std::max(forward_smem_bytes(d.D, d.Dv, true), backward_smem_bytes(d.D, d.Dv));
  return need <= size_t(chunk_mma::max_smem(q.device().index));
}

NhaFusedOut nha_forward_fused(const SlotAttentionArgs& a) {
  using chunk_mma::bp;
  using chunk_mma::rows16;
  const int64_t B = a.q.size(0), T = a.q.size(1), Hq = a.q.size(2), K = a.q.size(3);
  const int64_t Hkv = a.k.size(2), V = a.v.size(3), M = a.s.size(3);
  const Tensor q = rows16(a.q), v = rows16(a.v), qr = rows16(a.qr), kr = rows16(a.kr);
  const Tensor ks = rows16(shifted(a.k, a.shift)), vs = rows16(shifted(v, a.shift));
  const Tensor ss = shifted(a.s, a.shift).contiguous(), gs = shifted(a.g, a.shift).contiguous();
  const Tensor bias = a.bias.defined() ? a.bias.contiguous() : Tensor();
  const Device dev = q.device();
  const ChunkDims cd = chunk_dims(B, T, Hkv, dev);
  const Dims d{int(B), int(T), int(Hq), int(Hkv), int(Hq / Hkv), int(K), int(V), int(M), int(cd.NC)};
  cudaStream_t stream = current_stream(dev.index);
  NhaFusedOut r{Tensor::empty({B, T, Hq, V}, DType::bf16, dev), Tensor::empty({B, Hkv, K, M}, DType::f32, dev),
                Tensor::empty({B, Hkv, M, V}, DType::f32, dev), Tensor::empty({B, T, Hq}, DType::f32, dev)};
  const States st = forward_states(ks, vs, ss, gs, a.HK0, a.HV0, cd, d, stream);
  ForwardArgs fa{bp(q), bp(ks), bp(vs), ss.data<float>(), gs.data<float>(), st.Hk.data(), st.Hv.data(),
                 chunk_mma::bp_mut(r.o), r.lse.data<float>(), float(a.scale)};
  fa.qr = bp(qr), fa.kr = bp(kr), fa.vw = bp(v);
  fa.bias = bias.defined() ? bp(bias) : nullptr;
  fa.window = int(a.window), fa.nb = bias.defined() ? int(bias.size(1)) : 0;
  forward_output(fa, d, stream);
  chunk_slot_store(r.HK, st.Hk, cd.NC);
  chunk_slot_store(r.HV, st.Hv, cd.NC);
  return r;
}

GsaGrads nha_slot_backward_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& o0, const Tensor& dout0,
                                 const Tensor& dHK, const Tensor& dHV) {
  const Tensor o = o0.contiguous(), dout = dout0.contiguous();
  const int64_t rows = a.q.size(0) * a.q.size(1) * a.q.size(2), V = a.v.size(3);
  const Tensor delta = Tensor::empty({a.q.size(0), a.q.size(1), a.q.size(2)}, DType::f32, a.q.device());
  if (rows > 0) {
    constexpr int kDotThreads = 256;
    const unsigned blocks = unsigned((rows * 32 + kDotThreads - 1) / kDotThreads);
    nha_row_dot_kernel<<<blocks, kDotThreads, 0, current_stream(a.q.device().index)>>>(
        chunk_mma::bp(dout), chunk_mma::bp(o), delta.data<float>(), rows, int(V));
    HYB_CUDA_LAUNCH_CHECK("nha nha_row_dot_kernel", blocks, kDotThreads, 0);
  }
  GsaParams p;
  p.scale = a.scale;
  const GsaSaved sv{a.q, shifted(a.k, a.shift), shifted(a.v, a.shift), shifted(a.s, a.shift), shifted(a.g, a.shift),
                    a.HK0, a.HV0, p, lse};
  auto f32 = [](const Tensor& x) { return x.defined() ? x.to(DType::f32) : Tensor(); };
  GsaGrads g = gsa_backward_fused(sv, dout, f32(dHK), f32(dHV), GradMask{127}, delta);
  g.dk = unshifted(g.dk, a.shift), g.dv = unshifted(g.dv, a.shift);
  g.ds = unshifted(g.ds, a.shift), g.dg = unshifted(g.dg, a.shift);
  return g;
}

}  // namespace hyb
