// Device pieces of the fused bf16 CUDA path of gsa (gsa.md 4.8) that the forward (gsa_fused_forward.cu)
// and the backward (gsa_fused_backward.cu) share: tile sizes, the chunk gates, state tiles, fragment
// stores, and the forward's state pass (F1 and the chunk scan), which the backward re-runs (B0).
// Layouts: states (B, Hkv, NC + 1, K, M) and (B, Hkv, NC + 1, M, V) fp32, slot c = the memory at the start
// of chunk c (slot NC the final one); decay (B, Hkv, NC, M) = exp(bl) of every chunk.
#pragma once
#include <cuda_runtime_api.h>

#include <type_traits>

#include "kernels/chunk_mma.cuh"
#include "kernels/chunk_ops.h"
#include "layers/gsa/gsa_fused.h"

namespace hyb::gsa_fused {

using chunk_mma::bf16x;
using chunk_mma::frag_col;
using chunk_mma::frag_row;
using chunk_mma::kC;
using chunk_mma::pack_bf16;
using chunk_mma::visit_tiles;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kMT = 64;              // slot tile: M <= 64, padded slots masked to -inf before the softmax
constexpr int kLdM = kMT + 8;        // row stride of the bf16 slot tiles
constexpr int kLdA = kC + 8;         // row stride of the 64 x 64 bf16 score tile
constexpr int kLdF = kMT + 4;        // row stride of the fp32 gate and write-weight tiles
constexpr int kSwRows = 16 * 6;      // the fallback's per-warp key-side tiles: 16 w rows for warp w
constexpr float kRefRange = 60.f;    // gsa.md 4.1 rule 3

// shift: the slot stream (k, v, s, g in, dk, dv, ds, dg out) is the token stream moved down by shift rows
// (nha's token shift): position u holds token u - shift, and positions u < shift read k = v = 0, s = 0
// (nothing written), g = 0 (no decay) without a memory access, so the memory after position u is the one
// after token u - shift. q, dO, o, lse, dq stay at their positions. gsa: 0.
struct Dims {
  int B, T, Hq, Hkv, G, K, V, M, NC;
  int shift = 0;
};

// Rows t0 .. t0 + 63 of one kv head of g and s (B, T, Hkv, M) f32 (g, s: the head's row 0) into fp32
// [64][kLdF] tiles, zeros (not read) for rows outside [0, T) and past the M slots; t0 may be negative
// (the shifted stream: t0 and T less the shift). Then sB holds b, the inclusive cumsum of g over the
// chunk's n = min(64, T - t0) rows (padded rows repeat the last valid one), and, for m < kMT: sLo[m],
// sHi[m] the least and largest of 0 and b over those rows (both optional). Ends with a barrier.
__device__ __forceinline__ void load_gates(const float* g, const float* s, int64_t row_stride, int t0, int T, int M,
                                           float* sB, float* sS, float* sLo, float* sHi) {
  const int n = min(kC, T - t0);
  for (int x = threadIdx.x; x < kC * kMT; x += kThreads) {
    const int r = x / kMT, m = x % kMT;
    const bool in = t0 + r >= 0 && r < n && m < M;
    sB[r * kLdF + m] = in ? g[int64_t(t0 + r) * row_stride + m] : 0.f;
    sS[r * kLdF + m] = in ? s[int64_t(t0 + r) * row_stride + m] : 0.f;
  }
  __syncthreads();
  if (threadIdx.x < kMT) {
    const int m = threadIdx.x;
    float acc = 0.f, lo = 0.f, hi = 0.f;
#pragma unroll 8
    for (int r = 0; r < kC; ++r) {
      acc += sB[r * kLdF + m];
      sB[r * kLdF + m] = acc;
      if (r < n) lo = fminf(lo, acc), hi = fmaxf(hi, acc);
    }
    if (sLo) sLo[m] = lo, sHi[m] = hi;
  }
  __syncthreads();
}

// An fp32 R x Cc matrix (row-major) into a bf16 [RT][CT] tile of row stride ld, times colscale[c] or
// rowscale[r] when given; zeros outside R x Cc.
template <int RT, int CT>
__device__ __forceinline__ void load_state(bf16x* s, int ld, const float* src, int R, int Cc, const float* rowscale,
                                           const float* colscale) {
  for (int x = threadIdx.x; x < RT * CT / 2; x += kThreads) {
    const int r = x / (CT / 2), c = (x % (CT / 2)) * 2;
    float v0 = 0.f, v1 = 0.f;
    if (r < R) {
      if (c < Cc) v0 = src[int64_t(r) * Cc + c] * (colscale ? colscale[c] : 1.f) * (rowscale ? rowscale[r] : 1.f);
      if (c + 1 < Cc)
        v1 = src[int64_t(r) * Cc + c + 1] * (colscale ? colscale[c + 1] : 1.f) * (rowscale ? rowscale[r] : 1.f);
    }
    *reinterpret_cast<uint32_t*>(s + r * ld + c) = pack_bf16(v0, v1);
  }
}

// The warp's 64 score columns of rows m0 .. m0 + 15 to a bf16 tile: f acc for col <= row, else 0.
__device__ __forceinline__ void store_tril(bf16x* s, int ld, const float (&acc)[1][kC / 8][4], float f, int m0,
                                           int lane) {
#pragma unroll
  for (int ni = 0; ni < kC / 8; ++ni) {
    const int r0 = m0 + frag_row(lane, 0), col = ni * 8 + frag_col(lane, 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      const float p0 = col <= r ? f * acc[0][ni][2 * h] : 0.f, p1 = col + 1 <= r ? f * acc[0][ni][2 * h + 1] : 0.f;
      *reinterpret_cast<uint32_t*>(s + r * ld + col) = pack_bf16(p0, p1);
    }
  }
}

// The warp's slot fragment times f(row, slot) to its rows of a bf16 tile.
template <class F>
__device__ __forceinline__ void store_slots(bf16x* s, int ld, const float (&acc)[1][kMT / 8][4], int m0, int lane,
                                            F f) {
#pragma unroll
  for (int ni = 0; ni < kMT / 8; ++ni)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + frag_row(lane, 2 * h), col = ni * 8 + frag_col(lane, 0);
      *reinterpret_cast<uint32_t*>(s + r * ld + col) =
          pack_bf16(acc[0][ni][2 * h] * f(r, col), acc[0][ni][2 * h + 1] * f(r, col + 1));
    }
}

template <int NT>
__device__ __forceinline__ void scale_rows(float (&acc)[1][NT][4], int m0, int lane, const float* sB, const float* ref,
                                           float f) {
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + frag_row(lane, e), m = ni * 8 + frag_col(lane, e);
      acc[0][ni][e] *= f * __expf(sB[r * kLdF + m] - (ref ? ref[m] : 0.f));
    }
}

struct States {
  ChunkBuffer Hk, Hv;
  Tensor decay;
};
// F1 and the chunk scan: every chunk-start memory, the final ones in slot NC. k, v: rows16 bf16; s, g,
// Hk0, Hv0: contiguous f32 (the initial memories may be undefined: zeros).
States forward_states(const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g, const Tensor& Hk0,
                      const Tensor& Hv0, const ChunkDims& cd, const Dims& d, cudaStream_t stream);

// The inputs of the output kernel F2. With a window (nha, window >= 1): the slot side (k, v, s, g) is read
// as the stream shifted by Dims::shift, and the window keys of query t are t - window < j <= t, read from
// qr, kr (RoPE'd or not) and vw (the unshifted v), their logits scale <qr_t, kr_j> + bias[h, t - j] in the
// slots' softmax; window <= kC.
struct ForwardArgs {
  const bf16x *q, *k, *v;
  const float *s, *g;
  const float *Hk, *Hv;  // states (B Hkv, NC + 1, K, M), (B Hkv, NC + 1, M, V): slot c = the chunk start
  bf16x* o;
  float* lse;
  float scale;
  const bf16x *qr = nullptr, *kr = nullptr, *vw = nullptr, *bias = nullptr;  // bias (Hq, nb) or null
  int window = 0, nb = 0;
};
// F2 over every (chunk, query head); a.window > 0 takes the windowed instantiation.
void forward_output(const ForwardArgs& a, const Dims& d, cudaStream_t stream);
// Shared memory of F1 and of F2 without or with the window at these head dims.
size_t forward_smem_bytes(int64_t K, int64_t V, bool window);

// The chunk scan over states (B Hkv, NC + 1, ...) with slot-wise factors decay: forward, slot c + 1 +=
// decay_c slot c; reverse, slot c += decay_c slot c + 1. cols: K for Hk (decay along the columns), V for
// Hv (along the rows).
void state_scan(const ChunkBuffer& states, const Tensor& decay, const Dims& d, bool slot_rows, bool reverse,
                cudaStream_t stream);

// Shared memory of the backward kernel (gsa_fused_backward.cu) at these head dims, with nha's window dqr
// in B3 or not.
size_t backward_smem_bytes(int64_t K, int64_t V, bool window = false);

}  // namespace hyb::gsa_fused
