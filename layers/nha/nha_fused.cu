// The fused bf16 CUDA path of nha (nha_fused.h): the forward and the slot side of the backward. The token
// shift is gsa's kernels reading k, v, s, g `shift` rows up, in place (gsa_fused.cuh Dims::shift: the rows
// before token 0 are zero gates, s = 0 writes nothing and g = 0 does not decay), and the backward writing
// dk, dv, ds, dg at the tokens' rows; F2 reads the window from the unshifted kr and v.
// Extra cost over gsa (nha.md 6, B T = 32768, H 16, D = M = 64): the window products Qr Kr^T and Pw Vw
// over 128 keys per query (4 gsa.md 4.6 units per query head, of which half are masked for w = 32).
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
  const Tensor q = rows16(a.q), k = rows16(a.k), v = rows16(a.v), qr = rows16(a.qr), kr = rows16(a.kr);
  const Tensor s = a.s.contiguous(), g = a.g.contiguous();
  const Tensor bias = a.bias.defined() ? a.bias.contiguous() : Tensor();
  const Device dev = q.device();
  const ChunkDims cd = chunk_dims(B, T, Hkv, dev);
  const Dims d{int(B), int(T), int(Hq), int(Hkv), int(Hq / Hkv), int(K), int(V), int(M), int(cd.NC), int(a.shift)};
  cudaStream_t stream = current_stream(dev.index);
  NhaFusedOut r{Tensor::empty({B, T, Hq, V}, DType::bf16, dev), Tensor::empty({B, Hkv, K, M}, DType::f32, dev),
                Tensor::empty({B, Hkv, M, V}, DType::f32, dev), Tensor::empty({B, T, Hq}, DType::f32, dev)};
  const States st = forward_states(k, v, s, g, a.HK0, a.HV0, cd, d, stream);
  ForwardArgs fa{bp(q), bp(k), bp(v), s.data<float>(), g.data<float>(), st.Hk.data(), st.Hv.data(),
                 chunk_mma::bp_mut(r.o), r.lse.data<float>(), float(a.scale)};
  fa.qr = bp(qr), fa.kr = bp(kr), fa.vw = bp(v);
  fa.bias = bias.defined() ? bp(bias) : nullptr;
  fa.window = int(a.window), fa.nb = bias.defined() ? int(bias.size(1)) : 0;
  forward_output(fa, d, stream);
  chunk_slot_store(r.HK, st.Hk, cd.NC);
  chunk_slot_store(r.HV, st.Hv, cd.NC);
  return r;
}

bool nha_window_dq_fused(const SlotAttentionArgs& a) {
  // B3's scratch tiles hold the 128 window keys and values at D, Dv <= 64 only; the bias gradient stays
  // with the slot-attention kernels.
  return !a.bias.defined() && a.q.size(3) <= 64 && a.v.size(3) <= 64 &&
         backward_smem_bytes(a.q.size(3), a.v.size(3), true) <= size_t(chunk_mma::max_smem(a.q.device().index));
}

NhaSlotGrads nha_slot_backward_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& o0,
                                     const Tensor& dout0, const Tensor& dHK, const Tensor& dHV, bool window_dq) {
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
  const GsaSaved sv{a.q, a.k, a.v, a.s, a.g, a.HK0, a.HV0, p, lse};
  auto f32 = [](const Tensor& x) { return x.defined() ? x.to(DType::f32) : Tensor(); };
  GsaBackwardWindow w{a.qr, a.kr, a.window, Tensor()};
  NhaSlotGrads r;
  r.slot = gsa_backward_fused(sv, dout, f32(dHK), f32(dHV), GradMask{127}, delta, a.shift, window_dq ? &w : nullptr);
  r.dqr = w.dqr, r.delta = delta;
  return r;
}

}  // namespace hyb
