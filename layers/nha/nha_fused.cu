// The fused bf16 CUDA path of nha (nha_fused.h): the forward and the slot side of the backward. The token
// shift is gsa's kernels reading k, v, s, g `shift` rows up, in place (gsa_fused.cuh Dims::shift: the rows
// before token 0 are zero gates, s = 0 writes nothing and g = 0 does not decay), and the backward writing
// dk, dv, ds, dg at the tokens' rows; F2 reads the window from the unshifted kr and v.
// Extra cost over gsa (nha.md 6, B T = 32768, H 16, D = M = 64): the window products Qr Kr^T and Pw Vw
// over 128 keys per query (4 gsa.md 4.6 units per query head, of which half are masked for w = 32).
#include <cuda_bf16.h>

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/env_switch.h"
#include "kernels/bf16.cuh"
#include "layers/gsa/gsa_fused.cuh"
#include "layers/nha/nha_fused.h"

namespace hyb {

using namespace gsa_fused;

namespace {

using chunk_mma::load_rows_async;
using chunk_mma::warp_mma;
using chunk_mma::warp_mma_range;
using chunk_mma::zero;

// delta[row] = <dout[row], o[row]> over rows of V bf16 elements (V % 8 == 0, 16-byte aligned rows), fp32:
// L lanes a row (a power of two, L = 32 / rows a warp), 16 bytes of each tensor a lane a step, so that a
// warp moves whole rows of V = 64 in one load each.
__global__ void __launch_bounds__(256) nha_row_dot_kernel(const bf16x* __restrict__ dout, const bf16x* __restrict__ o,
                                                          float* __restrict__ delta, int64_t rows, int V, int L) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, row = t / L;
  const int sub = int(t % L);
  float acc = 0.f;
  if (row < rows)
    for (int c = 8 * sub; c < V; c += 8 * L) {
      const uint4 a = *reinterpret_cast<const uint4*>(dout + row * V + c);
      const uint4 b = *reinterpret_cast<const uint4*>(o + row * V + c);
      const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) acc += bf16x2_dot(aw[e], bw[e]);
    }
  for (int off = L / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);  // every lane
  if (row < rows && sub == 0) delta[row] = acc;
}

// out = base + R(-a) win, row by row (B T H rows of D): the slot side's bf16 gradient plus the window
// side's f32 one turned back through RoPE (rope_op.h: pairs (i, i + R/2) of the first R dims, the token
// of row r at position offset + (r / H) % T), rounded once to bf16. R = 0: no rotation. A thread takes
// kVec adjacent dims of a row: of the first R / 2 with their partners, or of the last D - R (kVec = 2,
// bf16x2 and float2 accesses, when both counts are even).
template <int kVec>
__global__ void __launch_bounds__(256) add_window_grad_kernel(const bf16x* __restrict__ base,
                                                             const float* __restrict__ win, bf16x* __restrict__ out,
                                                             const float* __restrict__ cos_t,
                                                             const float* __restrict__ sin_t, int64_t rows, int H,
                                                             int D, int R, int T, int64_t offset) {
  const int half = R / 2, pair_units = half / kVec, units = pair_units + (D - R) / kVec;
  auto load = [](const bf16x* p, float (&v)[kVec]) {
    if constexpr (kVec == 2) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
      v[0] = f.x, v[1] = f.y;
    } else {
      v[0] = __bfloat162float(*p);
    }
  };
  auto loadf = [](const float* p, float (&v)[kVec]) {
    if constexpr (kVec == 2) {
      const float2 f = *reinterpret_cast<const float2*>(p);
      v[0] = f.x, v[1] = f.y;
    } else {
      v[0] = *p;
    }
  };
  auto store = [](bf16x* p, const float (&v)[kVec]) {
    if constexpr (kVec == 2)
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v[0], v[1]);
    else
      *p = __float2bfloat16(v[0]);
  };
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < rows * units;
       x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = x / units;
    const int u = int(x - row * units);
    float b0[kVec], w0[kVec];
    if (u >= pair_units) {
      const int64_t at = row * D + R + (u - pair_units) * kVec;
      load(base + at, b0);
      loadf(win + at, w0);
#pragma unroll
      for (int e = 0; e < kVec; ++e) b0[e] += w0[e];
      store(out + at, b0);
      continue;
    }
    const int i = u * kVec;
    const int64_t at = row * D + i, pos = offset + (row / H) % T;
    float b1[kVec], w1[kVec], c[kVec], s[kVec];
    load(base + at, b0);
    load(base + at + half, b1);
    loadf(win + at, w0);
    loadf(win + at + half, w1);
    loadf(cos_t + pos * half + i, c);
    loadf(sin_t + pos * half + i, s);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float a = w0[e], b = w1[e];
      b0[e] = b0[e] + a * c[e] + b * s[e];
      b1[e] = b1[e] + b * c[e] - a * s[e];
    }
    store(out + at, b0);
    store(out + at + half, b1);
  }
}

// A window gradient's one-pass sum (nha_window_sum_fused): out = bf16(base + R^T win) row by row, win the
// kernel's f32 gradient (staged in shared memory) and R^T the transposed RoPE rotation of the dim pairs
// (i, i + D / 2) at position offset + t (cos, sin: (positions, D / 2); rope_dim = D = the tile width), or
// no rotation (cos null). add_window_grad_kernel above is the same sum from an f32 tensor in memory, for
// the rotations the kernels cannot do.
struct WindowSum {
  const bf16x* base = nullptr;  // the slot side's gradient, laid out as out
  bf16x* out = nullptr;         // null: the kernel writes its f32 gradient instead
  const float *cos = nullptr, *sin = nullptr;
  int64_t offset = 0;
};

struct WindowArgs {
  const bf16x *qr, *kr, *vw, *dout;  // (B, T, Hq, K), (B, T, Hkv, K), (B, T, Hkv, V), (B, T, Hq, V)
  const float *lse, *delta;          // (B, T, Hq): the joint softmax's log normaliser and rowsum(dO .* O)
  float *dqr, *dkr, *dv;             // (B, T, Hq, K), (B, T, Hkv, K), (B, T, Hkv, V): written whole
  float scale;
  int window;  // 1 .. kC
  WindowSum sq, sk, sv;  // with out set: dq, dk, dv summed in place of dqr, dkr, dv
};

// The warp's rows m0 .. m0 + 15 (those < n) of a window gradient, scale * acc over the columns < D, into
// the f32 dst. at: the element of row 0 (token t0) in the (B, T, H, D) tensor, stride: H D.
template <int NT>
__device__ __forceinline__ void store_window_grad(const float (&acc)[1][NT][4], float scale, float* dst, int64_t at,
                                                  int64_t stride, int n, int D, int m0, int lane) {
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + frag_row(lane, e), col = ni * 8 + frag_col(lane, e);
      if (r < n && col < D) dst[at + int64_t(r) * stride + col] = scale * acc[0][ni][e];
    }
}

// For the one-pass sum: the warp's 16 rows of scale * acc into the f32 tile st (row stride kStageLd),
// which sum_window_rows reads row by row after a barrier.
constexpr int kStageLd = 64 + 4;
template <int NT>
__device__ __forceinline__ void stage_window_grad(const float (&acc)[1][NT][4], float scale, float* st, int m0,
                                                  int lane) {
  static_assert(NT * 8 <= kStageLd, "the stage holds 64 columns");
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      *reinterpret_cast<float2*>(st + (m0 + frag_row(lane, 2 * hh)) * kStageLd + ni * 8 + frag_col(lane, 0)) =
          make_float2(scale * acc[0][ni][2 * hh], scale * acc[0][ni][2 * hh + 1]);
}

// out = bf16(base + R^T st) for the rows r < n of the staged tile, 8 columns (16 bytes) a thread, with RoPE
// each group of the first half with its partner D / 2 columns on; at, stride as store_window_grad.
__device__ __forceinline__ void sum_window_rows(const float* st, const WindowSum& sum, int64_t at, int64_t stride,
                                                int t0, int n, int D) {
  auto load8 = [](const float* p, float (&v)[8]) {  // 16-byte aligned: c8 and the row strides are multiples of 4
    const float4 lo = *reinterpret_cast<const float4*>(p), hi = *reinterpret_cast<const float4*>(p + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  };
  auto add8 = [](const uint4& b, const float (&x)[8]) {
    const uint32_t bw[4] = {b.x, b.y, b.z, b.w};
    uint32_t o[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] = pack_bf16(bf16x2_lo(bw[e]) + x[2 * e], bf16x2_hi(bw[e]) + x[2 * e + 1]);
    return make_uint4(o[0], o[1], o[2], o[3]);
  };
  const int half = D / 2, units = sum.cos ? half / 8 : D / 8;
  for (int x = threadIdx.x; x < n * units; x += blockDim.x) {
    const int r = x / units, c8 = (x % units) * 8;
    const int64_t row = at + int64_t(r) * stride;
    float w[8];
    load8(st + r * kStageLd + c8, w);
    const uint4 b = *reinterpret_cast<const uint4*>(sum.base + row + c8);
    if (!sum.cos) {
      *reinterpret_cast<uint4*>(sum.out + row + c8) = add8(b, w);
      continue;
    }
    const int64_t pos = sum.offset + t0 + r;
    float u[8], c[8], sn[8], lo[8], hi[8];
    load8(st + r * kStageLd + c8 + half, u);
    load8(sum.cos + pos * half + c8, c);
    load8(sum.sin + pos * half + c8, sn);
    const uint4 bh = *reinterpret_cast<const uint4*>(sum.base + row + c8 + half);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo[i] = w[i] * c[i] + u[i] * sn[i];
      hi[i] = u[i] * c[i] - w[i] * sn[i];
    }
    *reinterpret_cast<uint4*>(sum.out + row + c8) = add8(b, lo);
    *reinterpret_cast<uint4*>(sum.out + row + c8 + half) = add8(bh, hi);
  }
}

// One 16 x 16 block of the window's logits and of their gradient's dO V^T part: s = X Y^T over KT columns
// and dp = dX dY^T over VT, rows m0 of X, dX and n0 of Y, dY. Query-major (X = Qr, dX = dO, Y = Kr, dY = Vw)
// it gives S and dP, key-major (the roles swapped) S^T and dP^T.
template <int KT, int VT>
__device__ __forceinline__ void window_block(float (&s)[1][2][4], float (&dp)[1][2][4], const bf16x* X, const bf16x* Y,
                                             const bf16x* dX, const bf16x* dY, int m0, int n0, int lane) {
  zero(s);
  warp_mma<1, 2, KT, false, true>(s, X, KT + 8, m0, Y, KT + 8, n0, lane);
  zero(dp);
  warp_mma<1, 2, VT, false, true>(dp, dX, VT + 8, m0, dY, VT + 8, n0, lane);
}

template <int KT, int VT>
size_t window_dq_smem(int window) {
  const int R = window_rows(window);
  return size_t(R * (KT + 8) + R * (VT + 8) + kC * (KT + 8) + kC * (VT + 8) + kC * (R + 8)) * sizeof(bf16x) +
         2 * kC * sizeof(float);
}

// The window's query gradient (nha.md 5.3) query-major: one CTA per (chunk of 64 queries, b, kv head), each
// warp owning 16 queries. The window keys of the chunk's queries are in the previous chunk and this one
// (window <= 64), of which the tiles hold the R = window_rows rows from key t0 - kC + x0 on (x0 =
// window_first_key); a warp forms only the 16-key blocks that reach its queries (3 of 6 at w = 32):
// S = Qr Kr^T and dP = dO Vw^T on the tensor cores, P = exp(scale S - lse) inside the window, dS = P .*
// (dP - delta) through the warp's rows of a bf16 tile, then dqr = scale dS Kr. Kr and Vw are loaded once
// for the group's query heads. It was part of gsa's B3 until B3's code outgrew the instruction cache.
template <int KT, int VT>
__global__ void __launch_bounds__(kThreads) nha_window_dq_kernel(WindowArgs a, Dims d) {
  const int x0 = window_first_key(a.window), R = window_rows(a.window), kDqLd = R + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sKr = reinterpret_cast<bf16x*>(smem);  // [R][KT + 8] the previous chunk's keys, then this one's
  bf16x* sVw = sKr + R * (KT + 8);              // [R][VT + 8]
  bf16x* sQr = sVw + R * (VT + 8);              // [64][KT + 8]
  bf16x* sDO = sQr + kC * (KT + 8);             // [64][VT + 8]
  bf16x* sdS = sDO + kC * (VT + 8);             // [64][kDqLd], each warp its 16 rows
  float* sL = reinterpret_cast<float*>(sdS + kC * kDqLd);  // [64] lse of the query rows
  float* sD = sL + kC;                                     // [64] delta
  static_assert(kC * kStageLd * sizeof(float) <= kC * (KT + 8 + VT + 8) * sizeof(bf16x), "the stage fits sQr, sDO");
  const int c = blockIdx.x, b = blockIdx.y / d.Hkv, j = blockIdx.y % d.Hkv, t0 = c * kC, n = min(kC, d.T - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = warp * 16;
  const int64_t kv_k = (int64_t(b) * d.T * d.Hkv + j) * d.K, kv_v = (int64_t(b) * d.T * d.Hkv + j) * d.V;
  // Keys before token 0 load as zeros, so that the masked products stay 0 (not 0 * NaN).
  load_window_rows_async<KT>(sKr, a.kr + kv_k, int64_t(d.Hkv) * d.K, t0 - kC + x0, R, d.T, d.K);
  load_window_rows_async<VT>(sVw, a.vw + kv_v, int64_t(d.Hkv) * d.V, t0 - kC + x0, R, d.T, d.V);
  // Key column x (of the 128 from t0 - kC, tile row x - x0) is at distance r + kC - x from query row r:
  // the warp's rows see the 16-key blocks kb_lo .. kb_hi, kb_lo >= x0 / 16.
  const int kb_lo = max(c > 0 ? 0 : kC / 16, (m0 + kC + 1 - a.window) / 16), kb_hi = (m0 + kC + 15) / 16;
  for (int h = j * d.G; h < (j + 1) * d.G; ++h) {
    __syncthreads();  // the previous head's readers of sQr, sDO, sL, sD are done
    // The head's tiles go out with the window keys' (the first head) and are all waited for once; lse and
    // delta meanwhile.
    load_rows_async<kC, KT, kThreads>(sQr, a.qr + (int64_t(b) * d.T * d.Hq + h) * d.K, int64_t(d.Hq) * d.K, t0, d.T,
                                      d.K);
    load_rows_async<kC, VT, kThreads>(sDO, a.dout + (int64_t(b) * d.T * d.Hq + h) * d.V, int64_t(d.Hq) * d.V, t0, d.T,
                                      d.V);
    flash::cp_async_commit();
    for (int x = threadIdx.x; x < kC; x += kThreads) {
      sL[x] = x < n ? a.lse[(int64_t(b) * d.T + t0 + x) * d.Hq + h] : 0.f;
      sD[x] = x < n ? a.delta[(int64_t(b) * d.T + t0 + x) * d.Hq + h] : 0.f;
    }
    flash::cp_async_wait<0>();
    __syncthreads();
    float delta[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) delta[hh] = sD[m0 + frag_row(lane, 2 * hh)];
    for (int kb = kb_lo; kb <= kb_hi; ++kb) {
      float sw[1][2][4], dpw[1][2][4];
      window_block<KT, VT>(sw, dpw, sQr, sKr, sDO, sVw, m0, 16 * kb - x0, lane);
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = m0 + frag_row(lane, 2 * hh), x = 16 * kb + 8 * u + frag_col(lane, 0);
          float ds[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {  // key column x + e = key t0 - kC + x + e
            const int dist = r + kC - x - e;
            const bool in = dist >= 0 && dist < a.window && r < n && (c > 0 || x + e >= kC);
            const float p = in ? exp_ftz(a.scale * sw[0][u][2 * hh + e] - sL[r]) : 0.f;
            ds[e] = p * (dpw[0][u][2 * hh + e] - delta[hh]);
          }
          *reinterpret_cast<uint32_t*>(sdS + r * kDqLd + x - x0) = pack_bf16(ds[0], ds[1]);
        }
    }
    __syncwarp();  // the warp's dS rows
    float dq[1][KT / 8][4];
    zero(dq);
    warp_mma_range<1, KT / 8, false, false>(dq, sdS, kDqLd, m0, sKr, KT + 8, 0, 16 * kb_lo - x0, 16 * (kb_hi + 1) - x0,
                                            lane);
    const int64_t at = ((int64_t(b) * d.T + t0) * d.Hq + h) * d.K, stride = int64_t(d.Hq) * d.K;
    if (!a.sq.out) {
      store_window_grad(dq, a.scale, a.dqr, at, stride, n, d.K, m0, lane);
    } else {
      float* st = reinterpret_cast<float*>(sQr);  // over sQr and sDO, reloaded after the next head's barrier
      __syncthreads();  // every warp's reads of sQr, sDO and sdS are done
      stage_window_grad(dq, a.scale, st, m0, lane);
      __syncthreads();
      sum_window_rows(st, a.sq, at, stride, t0, n, d.K);
    }
  }
}

constexpr int kWinLd = 16 + 8;  // row stride of the per-warp P^T and dS^T tiles of one 16-query block
template <int KT, int VT>
size_t window_kv_smem(int window) {
  const int R = window_rows(window);
  return size_t(kC * (KT + 8) + kC * (VT + 8) + R * (KT + 8) + R * (VT + 8) + 2 * kC * kWinLd) * sizeof(bf16x) +
         2 * R * sizeof(float);
}

// The window's key and value gradients (nha.md 5.3) key-major, as the flash-attention backward: one CTA
// per (chunk of 64 keys, b, kv head), each warp owning 16 keys; for every query head of the group the
// queries that see those keys are the chunk's rows and the next chunk's (window <= 64): the tiles hold the
// R = window_rows of them from t0 on, of which a warp takes the 16-query blocks that reach its keys. Per
// block: S^T = Kr Qr^T and dP^T = Vw dO^T on the tensor cores, P^T = exp(scale S^T - lse) inside the
// window, dS^T = P^T .* (dP^T - delta), then dV += P^T dO and dKr += dS^T Qr with P^T, dS^T through the
// warp's own bf16 tiles. The sums stay in registers across heads: no atomics, one write.
template <int KT, int VT>
__global__ void __launch_bounds__(kThreads) nha_window_kv_kernel(WindowArgs a, Dims d) {
  const int R = window_rows(a.window);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sKr = reinterpret_cast<bf16x*>(smem);  // [64][KT + 8] the chunk's keys
  bf16x* sVw = sKr + kC * (KT + 8);             // [64][VT + 8]
  bf16x* sQr = sVw + kC * (VT + 8);             // [R][KT + 8] the queries of the chunk and the next
  bf16x* sDO = sQr + R * (KT + 8);              // [R][VT + 8]
  bf16x* sPt = sDO + R * (VT + 8);              // [64][kWinLd] P^T, each warp its 16 rows
  bf16x* sdSt = sPt + kC * kWinLd;              // [64][kWinLd] dS^T
  float* sL = reinterpret_cast<float*>(sdSt + kC * kWinLd);  // [R] lse of the query rows
  float* sD = sL + R;                                        // [R] delta
  const int c = blockIdx.x, b = blockIdx.y / d.Hkv, j = blockIdx.y % d.Hkv, t0 = c * kC, n = min(kC, d.T - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = warp * 16;
  const int64_t kv_k = (int64_t(b) * d.T * d.Hkv + j) * d.K, kv_v = (int64_t(b) * d.T * d.Hkv + j) * d.V;
  // In flight with the first head's tiles, waited for with them.
  load_rows_async<kC, KT, kThreads>(sKr, a.kr + kv_k, int64_t(d.Hkv) * d.K, t0, d.T, d.K);
  load_rows_async<kC, VT, kThreads>(sVw, a.vw + kv_v, int64_t(d.Hkv) * d.V, t0, d.T, d.V);
  // The second half holds queries only when the window reaches past the chunk and the sequence goes on.
  const int halves = a.window > 1 && t0 + kC < d.T ? 2 : 1;
  float dk[1][KT / 8][4], dv[1][VT / 8][4];
  zero(dk);
  zero(dv);
  for (int h = j * d.G; h < (j + 1) * d.G; ++h) {
    __syncthreads();  // the previous head's readers of sQr, sDO, sL, sD are done
    load_window_rows_async<KT>(sQr, a.qr + (int64_t(b) * d.T * d.Hq + h) * d.K, int64_t(d.Hq) * d.K, t0, R, d.T, d.K);
    load_window_rows_async<VT>(sDO, a.dout + (int64_t(b) * d.T * d.Hq + h) * d.V, int64_t(d.Hq) * d.V, t0, R, d.T,
                               d.V);
    flash::cp_async_commit();
    for (int x = threadIdx.x; x < R; x += kThreads) {
      const bool in = t0 + x < d.T;
      sL[x] = in ? a.lse[(int64_t(b) * d.T + t0 + x) * d.Hq + h] : 0.f;
      sD[x] = in ? a.delta[(int64_t(b) * d.T + t0 + x) * d.Hq + h] : 0.f;
    }
    flash::cp_async_wait<0>();
    __syncthreads();
    // The warp's keys t0 + m0 .. + 15 are seen by the queries t0 + m0 .. t0 + m0 + 14 + window: the 16-query
    // blocks qb_lo .. qb_hi of the R (the others hold only zeros of P^T and dS^T and are skipped).
    const int qb_hi = min(halves * kC / 16 - 1, (m0 + 14 + a.window) / 16);  // < R / 16
    for (int qb = warp; qb <= qb_hi; ++qb) {
      {
        float st[1][2][4], dpt[1][2][4];
        window_block<KT, VT>(st, dpt, sKr, sQr, sVw, sDO, m0, 16 * qb, lane);
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = m0 + frag_row(lane, 2 * hh), x = u * 8 + frag_col(lane, 0);
            float p[2], ds[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {  // key t0 + r, query t0 + 16 qb + x + e
              const int qx = 16 * qb + x + e, dist = qx - r;
              const bool in = dist >= 0 && dist < a.window && r < n && t0 + qx < d.T;
              p[e] = in ? exp_ftz(a.scale * st[0][u][2 * hh + e] - sL[qx]) : 0.f;
              ds[e] = p[e] * (dpt[0][u][2 * hh + e] - sD[qx]);
            }
            *reinterpret_cast<uint32_t*>(sPt + r * kWinLd + x) = pack_bf16(p[0], p[1]);
            *reinterpret_cast<uint32_t*>(sdSt + r * kWinLd + x) = pack_bf16(ds[0], ds[1]);
          }
      }
      __syncwarp();
      warp_mma<1, VT / 8, 16, false, false>(dv, sPt, kWinLd, m0, sDO + 16 * qb * (VT + 8), VT + 8, 0, lane);
      warp_mma<1, KT / 8, 16, false, false>(dk, sdSt, kWinLd, m0, sQr + 16 * qb * (KT + 8), KT + 8, 0, lane);
      __syncwarp();  // the warp's P^T, dS^T rows are read before the next block writes them
    }
  }
  const int64_t at_k = ((int64_t(b) * d.T + t0) * d.Hkv + j) * d.K, at_v = ((int64_t(b) * d.T + t0) * d.Hkv + j) * d.V;
  if (!a.sk.out) {
    store_window_grad(dk, a.scale, a.dkr, at_k, int64_t(d.Hkv) * d.K, n, d.K, m0, lane);
    store_window_grad(dv, 1.f, a.dv, at_v, int64_t(d.Hkv) * d.V, n, d.V, m0, lane);
    return;
  }
  // Every tile is free after the last head: the stages take the front of shared memory.
  float* st_k = reinterpret_cast<float*>(smem);
  float* st_v = st_k + kC * kStageLd;
  static_assert(2 * kC * kStageLd * sizeof(float) <= (kC * (KT + 8 + VT + 8) * 2 + 2 * kC * kWinLd) * sizeof(bf16x),
                "both stages fit the tiles at R = 64");
  __syncthreads();
  stage_window_grad(dk, a.scale, st_k, m0, lane);
  stage_window_grad(dv, 1.f, st_v, m0, lane);
  __syncthreads();
  sum_window_rows(st_k, a.sk, at_k, int64_t(d.Hkv) * d.K, t0, n, d.K);
  sum_window_rows(st_v, a.sv, at_v, int64_t(d.Hkv) * d.V, t0, n, d.V);
}

}  // namespace

bool nha_fused_supported(const Tensor& q, const NhaDims& d) {
  // HYBRID_NHA_FUSED=0 keeps bf16 on the generic slot-attention kernels (A/B timing, bisecting a mismatch).
  static const bool enabled = !env_is_zero("HYBRID_NHA_FUSED");
  if (!enabled || !q.is_cuda() || q.dtype() != DType::bf16 || d.T < 1) return false;
  if (d.window < 1 || d.window > kC || d.M < 1 || d.M > kMaxMT) return false;
  if (d.D > 128 || d.Dv > 128 || d.D % 8 != 0 || d.Dv % 8 != 0) return false;
  if (d.B * d.Hq > 65535) return false;  // gridDim.y of F2
  const size_t need = std::max(forward_smem_bytes(d.D, d.Dv, d.M, true), backward_smem_bytes(d.D, d.Dv, d.M));
  return need <= size_t(chunk_mma::max_smem(q.device().index));
}

NhaFusedOut nha_forward_fused(const SlotAttentionArgs& a, bool keep_states) {
  using chunk_mma::bp;
  using chunk_mma::rows16;
  const int64_t B = a.q.size(0), T = a.q.size(1), Hq = a.q.size(2), K = a.q.size(3);
  const int64_t Hkv = a.k.size(2), V = a.v.size(3), M = a.s.size(3);
  const Tensor q = rows16(a.q), k = rows16(a.k), v = rows16(a.v), qr = rows16(a.qr), kr = rows16(a.kr);
  const Tensor s = rows16(a.s), g = rows16(a.g);  // copy_gates_async reads 16-byte pieces
  const Tensor bias = a.bias.defined() ? a.bias.contiguous() : Tensor();
  const Device dev = q.device();
  const ChunkDims cd = chunk_dims(B, T, Hkv, dev);
  const Dims d{int(B), int(T), int(Hq), int(Hkv), int(Hq / Hkv), int(K), int(V), int(M), int(cd.NC), int(a.shift)};
  cudaStream_t stream = current_stream(dev.index);
  NhaFusedOut r{Tensor::empty({B, T, Hq, V}, DType::bf16, dev), Tensor::empty({B, Hkv, K, M}, DType::f32, dev),
                Tensor::empty({B, Hkv, M, V}, DType::f32, dev), Tensor::empty({B, T, Hq}, DType::f32, dev)};
  const States st = forward_states(k, v, s, g, a.HK0, a.HV0, d, stream, r.HK, r.HV);
  ForwardArgs fa{bp(q), bp(k), bp(v), s.data<float>(), g.data<float>(), bp(st.Hk), bp(st.Hv),
                 chunk_mma::bp_mut(r.o), r.lse.data<float>(), float(a.scale)};
  fa.qr = bp(qr), fa.kr = bp(kr), fa.vw = bp(v);
  fa.bias = bias.defined() ? bp(bias) : nullptr;
  fa.window = int(a.window), fa.nb = bias.defined() ? int(bias.size(1)) : 0;
  forward_output(fa, d, stream);
  if (keep_states) r.chunk_HK = st.Hk, r.chunk_HV = st.Hv, r.chunk_decay = st.decay;
  return r;
}

bool nha_window_fused(const SlotAttentionArgs& a) {
  // The window kernels' tiles are sized for D, Dv <= 64; the bias gradient stays with the slot-attention
  // kernels.
  return !a.bias.defined() && a.q.size(3) <= 64 && a.v.size(3) <= 64;
}

namespace {

// Both window kernels over (chunk, b, kv head), writing the outputs wa names (dqr, dkr, dv, or the sums'
// out); the inputs come from a, lse, delta and dout.
void launch_window_kernels(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& delta, const Tensor& dout0,
                           WindowArgs wa) {
  using chunk_mma::bp;
  using chunk_mma::rows16;
  const int64_t B = a.q.size(0), T = a.q.size(1), Hq = a.q.size(2), K = a.q.size(3);
  const int64_t Hkv = a.k.size(2), V = a.v.size(3);
  HYB_CHECK(!a.bias.defined() && K <= 64 && V <= 64 && a.window >= 1 && a.window <= kC, "nha window kernels: need "
            "no bias, D, Dv <= 64 and 1 <= window <= ", kC, "; got D ", K, ", Dv ", V, ", window ", a.window);
  if (B * T * Hq == 0) return;
  const Tensor qr = rows16(a.qr), kr = rows16(a.kr), v = rows16(a.v), dout = rows16(dout0);
  const Tensor lsec = lse.contiguous(), dc = delta.contiguous();
  const Dims d{int(B), int(T), int(Hq), int(Hkv), int(Hq / Hkv), int(K), int(V), 0, int((T + kC - 1) / kC), 0};
  wa.qr = bp(qr), wa.kr = bp(kr), wa.vw = bp(v), wa.dout = bp(dout), wa.lse = lsec.data<float>(), wa.delta = dc.data<float>();
  wa.scale = float(a.scale), wa.window = int(a.window);
  const dim3 grid(unsigned(d.NC), unsigned(B * Hkv));
  cudaStream_t stream = current_stream(a.q.device().index);
  const size_t qsmem = window_dq_smem<64, 64>(wa.window);
  chunk_mma::set_smem(nha_window_dq_kernel<64, 64>, qsmem);
  nha_window_dq_kernel<64, 64><<<grid, kThreads, qsmem, stream>>>(wa, d);
  HYB_CUDA_LAUNCH_CHECK("nha nha_window_dq_kernel", grid.x * grid.y, kThreads, qsmem);
  const size_t ksmem = window_kv_smem<64, 64>(wa.window);
  chunk_mma::set_smem(nha_window_kv_kernel<64, 64>, ksmem);
  nha_window_kv_kernel<64, 64><<<grid, kThreads, ksmem, stream>>>(wa, d);
  HYB_CUDA_LAUNCH_CHECK("nha nha_window_kv_kernel", grid.x * grid.y, kThreads, ksmem);
}

}  // namespace

SlotAttentionGrads nha_window_grads_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& delta,
                                          const Tensor& dout) {
  const Device dev = a.q.device();
  SlotAttentionGrads g;
  g.dqr = Tensor::empty(a.q.shape(), DType::f32, dev);
  g.dkr = Tensor::empty(a.k.shape(), DType::f32, dev);
  g.dv = Tensor::empty(a.v.shape(), DType::f32, dev);
  WindowArgs wa{};
  wa.dqr = g.dqr.data<float>(), wa.dkr = g.dkr.data<float>(), wa.dv = g.dv.data<float>();
  launch_window_kernels(a, lse, delta, dout, wa);
  return g;
}

bool nha_window_sum_fused_ok(const SlotAttentionArgs& a, const RopeTable* rope) {
  return nha_window_fused(a) && (!rope || (rope->rope_dim == a.q.size(3) && a.q.size(3) == 64));
}

NhaWindowSum nha_window_sum_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& delta,
                                  const Tensor& dout, const GsaGrads& slot, const RopeTable* rope, int64_t offset) {
  HYB_CHECK(nha_window_sum_fused_ok(a, rope), "nha_window_sum_fused: needs nha_window_fused and RoPE over D = 64 or ",
            "none; got D ", a.q.size(3), ", rope_dim ", rope ? rope->rope_dim : 0);
  auto base = [](const Tensor& t, const Tensor& like) {
    HYB_CHECK(t.dtype() == DType::bf16 && t.shape() == like.shape() && t.is_contiguous(), "nha_window_sum_fused: the "
              "slot side's gradient is ", t.str(), "; expected a contiguous bf16 ", shape_str(like.shape()));
    return t;
  };
  const Tensor bq = base(slot.dq, a.q), bk = base(slot.dk, a.k), bv = base(slot.dv, a.v);
  HYB_CHECK(!rope || (rope->cos.device() == a.q.device() && offset + a.q.size(1) <= rope->cos.size(0)),
            "nha_window_sum_fused: the RoPE table (", rope ? rope->cos.size(0) : 0, " positions) does not reach position ",
            offset + a.q.size(1) - 1);
  const Device dev = a.q.device();
  NhaWindowSum r{Tensor::empty(a.q.shape(), DType::bf16, dev), Tensor::empty(a.k.shape(), DType::bf16, dev),
                 Tensor::empty(a.v.shape(), DType::bf16, dev)};
  const float* cos = rope ? rope->cos.data<float>() : nullptr;
  const float* sin = rope ? rope->sin.data<float>() : nullptr;
  WindowArgs sums{};
  sums.sq = {chunk_mma::bp(bq), chunk_mma::bp_mut(r.dq), cos, sin, offset};
  sums.sk = {chunk_mma::bp(bk), chunk_mma::bp_mut(r.dk), cos, sin, offset};
  sums.sv = {chunk_mma::bp(bv), chunk_mma::bp_mut(r.dv), nullptr, nullptr, 0};
  launch_window_kernels(a, lse, delta, dout, sums);
  return r;
}

Tensor nha_add_window_grad(const Tensor& base, const Tensor& win, const RopeTable* rope, int64_t offset) {
  HYB_CHECK(base.dim() == 4 && base.dtype() == DType::bf16 && win.dtype() == DType::f32 && win.shape() == base.shape() &&
                base.is_contiguous() && win.is_contiguous(),
            "nha_add_window_grad: base ", base.str(), " and win ", win.str(), ": contiguous (B, T, H, D) bf16 and f32");
  const int64_t T = base.size(1), H = base.size(2), D = base.size(3), rows = base.size(0) * T * H;
  const int R = rope ? int(rope->rope_dim) : 0;
  HYB_CHECK(!rope || (R <= D && R % 2 == 0 && rope->cos.device() == base.device() && offset + T <= rope->cos.size(0)),
            "nha_add_window_grad: the RoPE table (rope_dim ", R, ", ", rope ? rope->cos.size(0) : 0,
            " positions) does not fit D = ", D, ", positions up to ", offset + T - 1);
  Tensor out = Tensor::empty(base.shape(), DType::bf16, base.device());
  if (rows * D == 0) return out;
  const int dev = base.device().index;
  const bool pairs = (R / 2) % 2 == 0 && (D - R) % 2 == 0;
  const int64_t units = rows * (R / 2 + D - R) / (pairs ? 2 : 1);
  const unsigned blocks = unsigned(std::min<int64_t>((units + 255) / 256, 16 * chunk_mma::sm_count(dev)));
  auto go = [&](auto kernel) {
    kernel<<<blocks, 256, 0, current_stream(dev)>>>(chunk_mma::bp(base), win.data<float>(), chunk_mma::bp_mut(out),
                                                    rope ? rope->cos.data<float>() : nullptr,
                                                    rope ? rope->sin.data<float>() : nullptr, rows, int(H), int(D), R,
                                                    int(T), offset);
    HYB_CUDA_LAUNCH_CHECK("nha add_window_grad_kernel", blocks, 256, 0);
  };
  pairs ? go(add_window_grad_kernel<2>) : go(add_window_grad_kernel<1>);
  return out;
}

NhaSlotGrads nha_slot_backward_fused(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& o0,
                                     const Tensor& dout0, const Tensor& dHK, const Tensor& dHV, const NhaSaved& kept) {
  const Tensor o = chunk_mma::rows16(o0), dout = chunk_mma::rows16(dout0);
  const int64_t rows = a.q.size(0) * a.q.size(1) * a.q.size(2), V = a.v.size(3);
  const Tensor delta = Tensor::empty({a.q.size(0), a.q.size(1), a.q.size(2)}, DType::f32, a.q.device());
  if (rows > 0) {
    constexpr int kDotThreads = 256;
    int L = 1;  // lanes a row: the power of two at or above V / 8, at most a warp
    while (L < 32 && 8 * L < V) L *= 2;
    const unsigned blocks = unsigned((rows * L + kDotThreads - 1) / kDotThreads);
    nha_row_dot_kernel<<<blocks, kDotThreads, 0, current_stream(a.q.device().index)>>>(
        chunk_mma::bp(dout), chunk_mma::bp(o), delta.data<float>(), rows, int(V), L);
    HYB_CUDA_LAUNCH_CHECK("nha nha_row_dot_kernel", blocks, kDotThreads, 0);
  }
  GsaParams p;
  p.scale = a.scale;
  const GsaSaved sv{a.q, a.k, a.v, a.s, a.g, a.HK0, a.HV0, p, lse, kept.chunk_HK, kept.chunk_HV, kept.chunk_decay};
  auto f32 = [](const Tensor& x) { return x.defined() ? x.to(DType::f32) : Tensor(); };
  return {gsa_backward_fused(sv, dout, f32(dHK), f32(dHV), GradMask{127}, delta, a.shift), delta};
}

}  // namespace hyb
