// The fused bf16 CUDA path of simple_gla (mamba2.md 4): per (b, h, chunk of 64 tokens) tensor-core
// kernels (mma.sync m16n8k16, bf16 operands staged in shared memory, fp32 accumulation), with the
// gates (F1: G, gam, kd, Glast) and a state scan (F3 / B2) in between that accumulates in fp32 and
// reads and writes bf16 per-chunk states (B, H, NC + 1, K, V).
// Forward:  gates_kernel; outer_kernel s_c = (kd .* K)^T @ V into state slot c + 1; state_scan_kernel
//           (slot c = S_c, S_T in fp32 to the final state); forward_kernel
//           O = scale (gam .* (Q @ S_c) + (L .* (Q @ K^T)) @ V).
// Backward: the forward's states (kept by the forward, or its first three steps again); outer_kernel
//           scale (gam .* Q)^T @ dO into slot c of D; the reverse state_scan_kernel from dS_T (slot
//           c + 1 = D_c, dS0 in fp32); backward_kernel per (b, q/k group, chunk), walking the group's
//           heads in order: dP, dQ_h, dK_h, dV_h, dG = rowdot(dQ_h, Q) - rowdot(dK_h, K) + <S_{c+1}, D_c>
//           on the last row and its reverse cumsum; dQ, dK are the group sums in head order (no atomics).
// The states are bf16 in memory because every consumer multiplies them in bf16 anyway; the chunk
// contributions are rounded once each and summed in fp32, so the error does not grow with the number
// of chunks. This halves the state traffic, most of the bytes of the op (docs/layers/mamba2.md).
// Tiles: K and V are padded to KT, VT in {64, 128} (zero columns change no product); the outer kernel's
// 4 warps own KT / 4 state rows each, the forward's and backward's 8 warps 16 token rows and a column
// half each. Every (tile) operand is loaded with ldmatrix from a
// row-major smem tile; a transposed operand uses ldmatrix.trans, never a reinterpreted accumulator
// (mamba2.md 4.7).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/env_switch.h"
#include "kernels/bf16.cuh"
#include "kernels/chunk_mma.cuh"
#include "kernels/chunk_ops.h"
#include "layers/mamba2/simple_gla_op.h"
#include "layers/softmax_attention/flash_attention_device.cuh"

namespace hyb {
namespace {

using chunk_mma::bf16x;
using chunk_mma::block_sum;
using chunk_mma::bp;
using chunk_mma::bp_mut;
using chunk_mma::chunk_cumsum;
using chunk_mma::frag_col;
using chunk_mma::frag_row;
using chunk_mma::kC;
using chunk_mma::load_rows;
using chunk_mma::max_smem;
using chunk_mma::pack_bf16;
using chunk_mma::rows16;
using chunk_mma::rowdot;
using chunk_mma::set_smem;
using chunk_mma::store_masked;
using chunk_mma::visit_tiles;
using chunk_mma::warp_mma;
using chunk_mma::zero;

constexpr int kThreads = 128;  // the outer kernel's 4 warps, each KT / 4 state rows
// The forward and backward kernels' warps: warp w takes rows [16 (w % 4), +16) and column half w / 4
// of each product, so an SM holds twice the warps to hide the latency of the dependent products
// (measured on the backward: 3 blocks of 8 warps an SM 0.79 ms, 2 blocks 0.87 ms).
constexpr int kSplitWarps = 8, kSplitThreads = 32 * kSplitWarps;
constexpr int kLdP = kC + 8;  // row stride of the 64 x 64 score tiles

// The chunk's gates (B, H, NC, 64) into shared memory.
template <int NTHREADS = kThreads>
__device__ __forceinline__ void load_vec(float* s, const float* src) {
  for (int x = threadIdx.x; x < kC; x += NTHREADS) s[x] = src[x];
}

struct Dims {
  int B, T, H, Gq, hpg, K, V, NC;
};

// F1, one warp per (b, h, c), lane l holding tokens 2l and 2l + 1 (a 64-token chunk is one warp):
// G the chunk-local cumsum of g (padded tokens add 0), gam = exp(G), kd = exp(min(Glast - G, 0)),
// Glast (B H NC) = G of the chunk's last valid token. Same outputs as chunk_gates, which walks the
// 64 tokens serially in one thread per chunk.
__global__ void __launch_bounds__(256) gates_kernel(const float* __restrict__ g, float* __restrict__ G,
                                                    float* __restrict__ gam, float* __restrict__ kd,
                                                    float* __restrict__ Glast, int T, int H, int NC, int64_t chunks) {
  const int64_t z = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (z >= chunks) return;  // z is per warp: whole warps leave together
  const int c = int(z % NC);
  const int64_t bh = z / NC, b = bh / H, h = bh % H;
  const int t = c * kC + 2 * lane, n = min(kC, T - c * kC);
  const float* gb = g + b * T * H + h;
  const float x0 = t < T ? gb[int64_t(t) * H] : 0.f, x1 = t + 1 < T ? gb[int64_t(t + 1) * H] : 0.f;
  const chunk_mma::PairCumsum p = chunk_cumsum(x0, x1, n, lane);
  const float G0 = p.G0, G1 = p.G1, last = p.last;
  const int64_t o = z * kC + 2 * lane;
  *reinterpret_cast<float2*>(G + o) = make_float2(G0, G1);
  *reinterpret_cast<float2*>(gam + o) = make_float2(expf(G0), expf(G1));
  *reinterpret_cast<float2*>(kd + o) = make_float2(expf(fminf(last - G0, 0.f)), expf(fminf(last - G1, 0.f)));
  if (lane == 0) Glast[z] = last;
}

// F3 / B2 on bf16 states (B H, NC + 1, K, V), one thread per 4 state elements accumulating in fp32,
// sequential over chunks (chunk_state_scan's recurrence, same order of operations):
//   forward: acc = init; slot 0 = acc; acc = slot c + 1 + exp(Glast_c) acc, slot c + 1 = acc, c = 0 .. NC-1
//   reverse: acc = init; slot NC = acc; acc = slot c + exp(Glast_c) acc, slot c = acc,     c = NC-1 .. 0
// init (B H, K, V) f32 or null (zeros); last (B H, K, V) f32 gets the final acc when not null (S_T or
// dS0). The slots of kAhead chunks are loaded before the dependent updates, so a thread has that many
// loads in flight instead of one per chunk.
template <bool kReverse>
__global__ void __launch_bounds__(256) state_scan_kernel(bf16x* __restrict__ states, const float* __restrict__ Glast,
                                                         const float* __restrict__ init, float* __restrict__ last,
                                                         int64_t BH, int NC, int64_t KV4) {
  constexpr int kAhead = 8;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= BH * KV4) return;
  const int64_t bh = i / KV4;
  uint2* s = reinterpret_cast<uint2*>(states) + bh * (NC + 1) * KV4 + i % KV4;
  const float* gl = Glast + bh * NC;
  float4 acc = init ? reinterpret_cast<const float4*>(init)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  s[kReverse ? int64_t(NC) * KV4 : 0] = make_uint2(pack_bf16(acc.x, acc.y), pack_bf16(acc.z, acc.w));
  for (int step0 = 0; step0 < NC; step0 += kAhead) {
    uint2 x[kAhead];
    float a[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int step = step0 + j, c = kReverse ? NC - 1 - step : step;
      if (step < NC) {
        x[j] = s[int64_t(kReverse ? c : c + 1) * KV4];
        a[j] = expf(gl[c]);
      }
    }
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int step = step0 + j, c = kReverse ? NC - 1 - step : step;
      if (step < NC) {
        acc.x = __uint_as_float(x[j].x << 16) + a[j] * acc.x;  // the bf16 halves widened to fp32 bit patterns
        acc.y = __uint_as_float(x[j].x & 0xffff0000u) + a[j] * acc.y;
        acc.z = __uint_as_float(x[j].y << 16) + a[j] * acc.z;
        acc.w = __uint_as_float(x[j].y & 0xffff0000u) + a[j] * acc.w;
        s[int64_t(kReverse ? c : c + 1) * KV4] = make_uint2(pack_bf16(acc.x, acc.y), pack_bf16(acc.z, acc.w));
      }
    }
  }
  if (last) reinterpret_cast<float4*>(last)[i] = acc;
}

// Starts the copy of rows [t0, t0 + ROWS) of a bf16 matrix (row_stride apart, T rows, D columns) into
// a [ROWS][DT + 8] tile, zero outside; complete after cp_async_commit and cp_async_wait. All of a
// kernel's tiles are in flight at once, where load_rows waits for each in turn.
template <int ROWS, int DT, int NTHREADS = kThreads>
__device__ __forceinline__ void load_async(bf16x* s, const bf16x* src, int64_t row_stride, int t0, int T, int D) {
  flash::load_tile<ROWS, DT, NTHREADS, true>(s, src, row_stride, t0, T, D, threadIdx.x);
}

// The bf16 (K, V) state of one slot into a [KT][VT + 8] tile, zero outside K x V (asynchronous).
template <int KT, int VT, int NTHREADS>
__device__ __forceinline__ void load_state(bf16x* s, const bf16x* slot, const Dims& d) {
  load_async<KT, VT, NTHREADS>(s, slot, d.V, 0, d.K, d.V);
}

// This thread's part of sum(x .* y) over K x V, x and y states in [KT][VT + 8] tiles (load_state);
// NTHREADS threads take part.
template <int KT, int VT, int NTHREADS>
__device__ __forceinline__ float tile_dot(const bf16x* x, const bf16x* y, const Dims& d) {
  float dot = 0.f;
  for (int i = threadIdx.x; i < d.K * (d.V / 8); i += NTHREADS) {
    const int r = i / (d.V / 8), c8 = (i % (d.V / 8)) * 8;
    const uint4 xv = *reinterpret_cast<const uint4*>(x + r * (VT + 8) + c8);
    const uint4 yv = *reinterpret_cast<const uint4*>(y + r * (VT + 8) + c8);
    const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w}, yw[4] = {yv.x, yv.y, yv.z, yv.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) dot += bf16x2_dot(xw[e], yw[e]);
  }
  return dot;
}

// out slot (c + slot_off) of (b, h) = alpha (rs .* X)^T @ Y, X = x of head h / xdiv (B, T, *, K),
// Y (B, T, H, V), rs a per-token vector of the chunk layout (B, H, NC, 64). out (B, H, NC + 1, K, V) bf16.
// Grid (NC, B H). Warps split the KT state rows.
template <int KT, int VT>
__global__ void __launch_bounds__(kThreads) outer_kernel(const bf16x* __restrict__ x, int xdiv, const bf16x* __restrict__ y,
                                                         const float* __restrict__ rs, bf16x* __restrict__ out,
                                                         int slot_off, float alpha, Dims d) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sX = reinterpret_cast<bf16x*>(smem);  // [64][KT + 8]
  bf16x* sY = sX + kC * (KT + 8);               // [64][VT + 8]
  float* sR = reinterpret_cast<float*>(sY + kC * (VT + 8));
  const int c = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int xh = h / xdiv, xheads = d.H / xdiv;
  load_async<kC, VT>(sY, y + (int64_t(b) * d.T * d.H + h) * d.V, int64_t(d.H) * d.V, c * kC, d.T, d.V);
  flash::cp_async_commit();
  load_vec(sR, rs + (int64_t(bh) * d.NC + c) * kC);
  __syncthreads();
  load_rows<kC, KT, kThreads>(sX, x + (int64_t(b) * d.T * xheads + xh) * d.K, int64_t(xheads) * d.K, c * kC, d.T, d.K, sR);
  flash::cp_async_wait<0>();
  __syncthreads();
  constexpr int MT = KT / 64;  // 16-row tiles per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = warp * 16 * MT;
  float acc[MT][VT / 8][4];
  zero(acc);
  warp_mma<MT, VT / 8, kC, true, false>(acc, sX, KT + 8, m0, sY, VT + 8, 0, lane);
  bf16x* o = out + (int64_t(bh) * (d.NC + 1) + c + slot_off) * d.K * d.V;
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < VT / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + mi * 16 + frag_row(lane, e), col = ni * 8 + frag_col(lane, e);
        if (r < d.K && col < d.V)
          *reinterpret_cast<uint32_t*>(o + int64_t(r) * d.V + col) =
              pack_bf16(alpha * acc[mi][ni][e], alpha * acc[mi][ni][e + 1]);
      }
}

// O = scale (gam .* (Q @ S_c) + (L .* (Q @ K^T)) @ V). Grid (NC, B H), kSplitThreads.
template <int KT, int VT>
constexpr int kFwdBlocksPerSm = KT + VT == 128 ? 4 : KT + VT == 192 ? 3 : 2;  // at 46, 62-72 and 96 KiB

template <int KT, int VT>
__global__ void __launch_bounds__(kSplitThreads, kFwdBlocksPerSm<KT, VT>) forward_kernel(
    const bf16x* __restrict__ q, const bf16x* __restrict__ k, const bf16x* __restrict__ v, const float* __restrict__ G,
    const float* __restrict__ gam, const bf16x* __restrict__ states, bf16x* __restrict__ o, float scale, Dims d) {
  constexpr int NTC = kC / 16, NTV = VT / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sQ = reinterpret_cast<bf16x*>(smem);  // [64][KT + 8]
  bf16x* sK = sQ + kC * (KT + 8);               // [64][KT + 8]
  bf16x* sV = sK + kC * (KT + 8);               // [64][VT + 8]
  bf16x* sS = sV + kC * (VT + 8);               // [KT][VT + 8]
  bf16x* sP = sS + KT * (VT + 8);               // [64][kLdP]
  float* sG = reinterpret_cast<float*>(sP + kC * kLdP);
  float* sGam = sG + kC;
  const int c = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H, grp = h / d.hpg;
  const int64_t z = int64_t(bh) * d.NC + c;
  const int64_t qk_row = int64_t(d.Gq) * d.K;
  load_async<kC, KT, kSplitThreads>(sQ, q + (int64_t(b) * d.T * d.Gq + grp) * d.K, qk_row, c * kC, d.T, d.K);
  load_async<kC, KT, kSplitThreads>(sK, k + (int64_t(b) * d.T * d.Gq + grp) * d.K, qk_row, c * kC, d.T, d.K);
  load_async<kC, VT, kSplitThreads>(sV, v + (int64_t(b) * d.T * d.H + h) * d.V, int64_t(d.H) * d.V, c * kC, d.T, d.V);
  load_state<KT, VT, kSplitThreads>(sS, states + (int64_t(bh) * (d.NC + 1) + c) * d.K * d.V, d);
  flash::cp_async_commit();
  load_vec<kSplitThreads>(sG, G + z * kC);
  load_vec<kSplitThreads>(sGam, gam + z * kC);
  flash::cp_async_wait<0>();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = (warp % 4) * 16, half = warp / 4;
  const int nc0 = half * (kC / 2), nv0 = half * (VT / 2);
  {  // a column half wholly above the diagonal is zero
    float s[1][NTC][4];
    zero(s);
    if (nc0 <= m0 + 15) warp_mma<1, NTC, KT, false, true>(s, sQ, KT + 8, m0, sK, KT + 8, nc0, lane);
    store_masked(sP, kLdP, s, sG, scale, m0, nc0, lane);
  }
  float acc[1][NTV][4];
  zero(acc);
  warp_mma<1, NTV, KT, false, false>(acc, sQ, KT + 8, m0, sS, VT + 8, nv0, lane);
#pragma unroll
  for (int ni = 0; ni < NTV; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][ni][e] *= scale * sGam[m0 + frag_row(lane, e)];
  __syncthreads();  // both halves of the warp's P rows are written
  warp_mma<1, NTV, kC, false, false>(acc, sP, kLdP, m0, sV, VT + 8, nv0, lane);
  bf16x* ob = o + (int64_t(b) * d.T * d.H + h) * d.V;
#pragma unroll
  for (int ni = 0; ni < NTV; ++ni)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int r = m0 + frag_row(lane, e), col = nv0 + ni * 8 + frag_col(lane, e), t = c * kC + r;
      if (t < d.T && col < d.V)
        *reinterpret_cast<uint32_t*>(ob + (int64_t(t) * d.H) * d.V + col) = pack_bf16(acc[0][ni][e], acc[0][ni][e + 1]);
    }
}

// Adds this head's dQ_h or dK_h (acc: the warp's rows, columns n0 ..) to the group sum: kept in
// fragment order in sum (fp32 smem) between heads, written to dst (B, T, Gq, K) bf16 at the group's
// last head.
template <int NT>
__device__ __forceinline__ void group_accumulate(const float (&acc)[1][NT][4], float* sum, bool first, bool last,
                                                 bf16x* dst, int64_t row_stride, int t0, Dims d, int m0, int n0,
                                                 int lane) {
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int ni = 0; ni < NT; ++ni) {
    float4 s = make_float4(acc[0][ni][0], acc[0][ni][1], acc[0][ni][2], acc[0][ni][3]);
    float4* slot = reinterpret_cast<float4*>(sum) + (warp * NT + ni) * 32 + lane;
    if (!first) {
      const float4 p = *slot;
      s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
    }
    if (!last) {
      *slot = s;
      continue;
    }
    if (!dst) continue;
    const int col = n0 + ni * 8 + frag_col(lane, 0);
    const int r0 = m0 + frag_row(lane, 0), r1 = m0 + frag_row(lane, 2);
    if (col < d.K) {
      if (t0 + r0 < d.T) *reinterpret_cast<uint32_t*>(dst + int64_t(t0 + r0) * row_stride + col) = pack_bf16(s.x, s.y);
      if (t0 + r1 < d.T) *reinterpret_cast<uint32_t*>(dst + int64_t(t0 + r1) * row_stride + col) = pack_bf16(s.z, s.w);
    }
  }
}

struct BackwardArgs {
  const bf16x *q, *k, *v, *dout;
  const float *G, *gam, *kd;
  const bf16x* states;  // (B, H, NC + 1, K, V): slot c = S_c
  const bf16x* D;       // (B, H, NC + 1, K, V): slot c + 1 = D_c
  bf16x *dq, *dk, *dv;  // null when not wanted
  float* dg;            // (B, T, H) or null
  float scale;
};

// B3 of mamba2.md 4.3 for one chunk of one q/k group, over the group's heads in order. Grid (NC, B Gq),
// kSplitThreads. Warp w: rows m0 = 16 (w % 4), columns [half * width / 2, +width / 2) of every product
// (half = w / 4); the row dots for dG are summed over both halves in shared memory.
// The blocks an SM holds at the tiles' shared memory (75, 108 and 157 KiB), so that the register
// budget matches them: at 64 x 64, 80 registers and a 32-byte spill for three blocks of 8 warps.
template <int KT, int VT>
constexpr int kBwdBlocksPerSm = KT + VT == 128 ? 3 : KT + VT == 192 ? 2 : 1;

template <int KT, int VT>
__global__ void __launch_bounds__(kSplitThreads, kBwdBlocksPerSm<KT, VT>) backward_kernel(BackwardArgs a, Dims d) {
  constexpr int NTC = kC / 16, NTK = KT / 16, NTV = VT / 16;  // n-tiles a warp holds, per product width
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sQ = reinterpret_cast<bf16x*>(smem);  // [64][KT + 8]
  bf16x* sK = sQ + kC * (KT + 8);               // [64][KT + 8]
  bf16x* sV = sK + kC * (KT + 8);               // [64][VT + 8]
  bf16x* sDO = sV + kC * (VT + 8);              // [64][VT + 8]
  bf16x* sS = sDO + kC * (VT + 8);              // [KT][VT + 8]
  bf16x* sD = sS + KT * (VT + 8);               // [KT][VT + 8]
  bf16x* sP = sD + KT * (VT + 8);               // [64][kLdP]  scale L .* (Q @ K^T)
  bf16x* sdP = sP + kC * kLdP;                  // [64][kLdP]  scale (dO @ V^T) .* L
  float* sG = reinterpret_cast<float*>(sdP + kC * kLdP);
  float* sGam = sG + kC;
  float* sKd = sGam + kC;
  float* sDg = sKd + kC;                         // [2][64]: the row dots of each column half
  float* sRed = sDg + 2 * kC;                    // [kSplitWarps]
  float* sSumQ = sRed + kSplitWarps;               // [kSplitWarps][NTK][32][4] when hpg > 1
  float* sSumK = sSumQ + kSplitWarps * NTK * 128;
  const int c = blockIdx.x, bg = blockIdx.y, b = bg / d.Gq, grp = bg % d.Gq, t0 = c * kC;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = (warp % 4) * 16, half = warp / 4;
  const int nc0 = half * (kC / 2), nk0 = half * (KT / 2), nv0 = half * (VT / 2);  // the warp's first columns
  const int64_t qk_row = int64_t(d.Gq) * d.K, v_row = int64_t(d.H) * d.V;
  const int64_t qk_off = (int64_t(b) * d.T * d.Gq + grp) * d.K;
  load_async<kC, KT, kSplitThreads>(sQ, a.q + qk_off, qk_row, t0, d.T, d.K);
  load_async<kC, KT, kSplitThreads>(sK, a.k + qk_off, qk_row, t0, d.T, d.K);
  const int n = min(kC, d.T - t0);  // valid tokens of the chunk
  for (int hi = 0; hi < d.hpg; ++hi) {
    const int h = grp * d.hpg + hi, bh = b * d.H + h;
    const int64_t z = int64_t(bh) * d.NC + c;
    const int64_t KV = int64_t(d.K) * d.V;
    __syncthreads();  // the previous head is done with every tile
    load_async<kC, VT, kSplitThreads>(sV, a.v + (int64_t(b) * d.T * d.H + h) * d.V, v_row, t0, d.T, d.V);
    load_async<kC, VT, kSplitThreads>(sDO, a.dout + (int64_t(b) * d.T * d.H + h) * d.V, v_row, t0, d.T, d.V);
    const bf16x* Sc = a.states + (int64_t(bh) * (d.NC + 1) + c) * KV;
    load_state<KT, VT, kSplitThreads>(sS, Sc, d);
    load_state<KT, VT, kSplitThreads>(sD, a.D + (int64_t(bh) * (d.NC + 1) + c + 1) * KV, d);
    flash::cp_async_commit();
    load_vec<kSplitThreads>(sG, a.G + z * kC);
    load_vec<kSplitThreads>(sGam, a.gam + z * kC);
    load_vec<kSplitThreads>(sKd, a.kd + z * kC);
    flash::cp_async_wait<0>();
    __syncthreads();

    {  // dP and P of the warp's rows and columns (Q @ K^T is recomputed per head: holding it costs
       // occupancy); a column half wholly above the diagonal is zero
      float x[1][NTC][4];
      const bool live = nc0 <= m0 + 15;
      zero(x);
      if (live) warp_mma<1, NTC, VT, false, true>(x, sDO, VT + 8, m0, sV, VT + 8, nc0, lane);
      store_masked(sdP, kLdP, x, sG, a.scale, m0, nc0, lane);
      zero(x);
      if (live) warp_mma<1, NTC, KT, false, true>(x, sQ, KT + 8, m0, sK, KT + 8, nc0, lane);
      store_masked(sP, kLdP, x, sG, a.scale, m0, nc0, lane);
    }
    __syncthreads();  // dP^T and P^T read every row

    float dg_rows[2] = {0.f, 0.f};
    float inc = 0.f;  // this thread's share of sum_r <k_r, kd_r (V D^T)_r>, the increment's part of <S_{c+1}, D_c>
    {  // dQ_h = scale gam .* (dO @ S^T) + dP @ K
      float acc[1][NTK][4];
      zero(acc);
      warp_mma<1, NTK, VT, false, true>(acc, sDO, VT + 8, m0, sS, VT + 8, nk0, lane);
#pragma unroll
      for (int ni = 0; ni < NTK; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][ni][e] *= a.scale * sGam[m0 + frag_row(lane, e)];
      warp_mma<1, NTK, kC, false, false>(acc, sdP, kLdP, m0, sK, KT + 8, nk0, lane);
      float rd[2];
      rowdot<NTK>(rd, acc, sQ + nk0, KT + 8, m0, lane);
      dg_rows[0] += rd[0], dg_rows[1] += rd[1];
      group_accumulate<NTK>(acc, sSumQ, hi == 0, hi == d.hpg - 1, a.dq ? a.dq + qk_off : nullptr, qk_row, t0, d, m0,
                            nk0, lane);
    }
    {  // dK_h = kd .* (V @ D^T) + dP^T @ Q
      float acc[1][NTK][4];
      zero(acc);
      warp_mma<1, NTK, VT, false, true>(acc, sV, VT + 8, m0, sD, VT + 8, nk0, lane);
#pragma unroll
      for (int ni = 0; ni < NTK; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][ni][e] *= sKd[m0 + frag_row(lane, e)];
      if (a.dg) {
        float ri[2];
        rowdot<NTK>(ri, acc, sK + nk0, KT + 8, m0, lane);
        inc = lane % 4 == 0 ? ri[0] + ri[1] : 0.f;  // one lane of the quad counts the rows
      }
      warp_mma<1, NTK, kC, true, false>(acc, sdP, kLdP, m0, sQ, KT + 8, nk0, lane);
      float rd[2];
      rowdot<NTK>(rd, acc, sK + nk0, KT + 8, m0, lane);
      dg_rows[0] -= rd[0], dg_rows[1] -= rd[1];
      group_accumulate<NTK>(acc, sSumK, hi == 0, hi == d.hpg - 1, a.dk ? a.dk + qk_off : nullptr, qk_row, t0, d, m0,
                            nk0, lane);
    }
    if (a.dv) {  // dV_h = kd .* (K @ D) + P^T @ dO
      float acc[1][NTV][4];
      zero(acc);
      warp_mma<1, NTV, KT, false, false>(acc, sK, KT + 8, m0, sD, VT + 8, nv0, lane);
#pragma unroll
      for (int ni = 0; ni < NTV; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][ni][e] *= sKd[m0 + frag_row(lane, e)];
      warp_mma<1, NTV, kC, true, false>(acc, sP, kLdP, m0, sDO, VT + 8, nv0, lane);
      bf16x* dvb = a.dv + (int64_t(b) * d.T * d.H + h) * d.V;
#pragma unroll
      for (int ni = 0; ni < NTV; ++ni)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int r = m0 + frag_row(lane, e), col = nv0 + ni * 8 + frag_col(lane, e);
          if (t0 + r < d.T && col < d.V)
            *reinterpret_cast<uint32_t*>(dvb + int64_t(t0 + r) * v_row + col) =
                pack_bf16(acc[0][ni][e], acc[0][ni][e + 1]);
        }
    }
    if (a.dg) {
      // <S_{c+1}, D_c> for the last row of dG, as gam_n <S_c, D_c> + sum_r <k_r, kd_r (V D^T)_r> (S_{c+1} =
      // gam_n S_c + (kd .* K)^T V): the second sum is made of the very terms the rows' rowdot(dK, K) takes
      // off, so the two cancel to fp32 rounding (reading the bf16 S_{c+1} instead left its rounding in dG).
      const float inner = block_sum<kSplitWarps>(sGam[n - 1] * tile_dot<KT, VT, kSplitThreads>(sS, sD, d) + inc, sRed);
      if (lane % 4 == 0) {
        const int r0 = m0 + lane / 4;
        const bool add_inner = half == 0;
        sDg[half * kC + r0] = dg_rows[0] + (add_inner && r0 == n - 1 ? inner : 0.f);
        sDg[half * kC + r0 + 8] = dg_rows[1] + (add_inner && r0 + 8 == n - 1 ? inner : 0.f);
      }
      __syncthreads();
      if (warp == 0) {  // reverse cumsum over the valid tokens: lane l holds rows 63 - 2l and 62 - 2l
        const int ra = kC - 1 - 2 * lane, rb = ra - 1;
        const float xa = ra < n ? sDg[ra] + sDg[kC + ra] : 0.f, xb = rb < n ? sDg[rb] + sDg[kC + rb] : 0.f;
        float s = xa + xb;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const float u = __shfl_up_sync(0xffffffffu, s, o);
          if (lane >= o) s += u;
        }
        // s = sum of rows >= rb; row ra's suffix excludes row rb.
        float* dgb = a.dg + int64_t(b) * d.T * d.H + h;
        if (ra < n) dgb[int64_t(t0 + ra) * d.H] = s - xb;
        if (rb < n) dgb[int64_t(t0 + rb) * d.H] = s;
      }
    }
  }
}

template <int KT, int VT>
size_t forward_smem() {
  return size_t(2 * kC * (KT + 8) + kC * (VT + 8) + KT * (VT + 8) + kC * kLdP) * 2 + 2 * kC * sizeof(float);
}
template <int KT, int VT>
size_t outer_smem() {
  return size_t(kC * (KT + 8) + kC * (VT + 8)) * 2 + kC * sizeof(float);
}
template <int KT, int VT>
size_t backward_smem(int hpg) {
  const size_t tiles = size_t(2 * kC * (KT + 8) + 2 * kC * (VT + 8) + 2 * KT * (VT + 8) + 2 * kC * kLdP) * 2;
  const size_t vecs = (5 * kC + kSplitWarps) * sizeof(float);
  return tiles + vecs + (hpg > 1 ? size_t(2) * kSplitWarps * (KT / 16) * 128 * sizeof(float) : 0);
}

Dims dims_of(const SimpleGlaDims& sd, const ChunkDims& cd) {
  return {int(sd.B), int(sd.T), int(sd.H), int(sd.Gq), int(sd.heads_per_group), int(sd.K), int(sd.V), int(cd.NC)};
}

// Per-chunk states of every (b, h): (B H, NC + 1, K, V) bf16.
Tensor state_slots(const Dims& d, Device dev) {
  return Tensor::empty({int64_t(d.B) * d.H, int64_t(d.NC) + 1, d.K, d.V}, DType::bf16, dev);
}

void launch_outer(const Tensor& x, int xdiv, const Tensor& y, const float* rs, Tensor& out, int slot_off,
                  float alpha, const Dims& d, cudaStream_t stream) {
  visit_tiles(d.K, d.V, [&](auto kt, auto vt) {
    constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value;
    const size_t smem = outer_smem<KT, VT>();
    set_smem(outer_kernel<KT, VT>, smem);
    const dim3 grid(unsigned(d.NC), unsigned(d.B * d.H));
    outer_kernel<KT, VT><<<grid, kThreads, smem, stream>>>(bp(x), xdiv, bp(y), rs, bp_mut(out), slot_off, alpha, d);
    HYB_CUDA_LAUNCH_CHECK("simple_gla outer_kernel", grid, kThreads, smem);
  });
}

// init and last: (B, H, K, V) f32, either may be undefined (zeros; not written).
void state_scan(Tensor& states, const Tensor& Glast, const Tensor& init, Tensor& last, bool reverse, const Dims& d,
                cudaStream_t stream) {
  const int64_t BH = int64_t(d.B) * d.H, KV4 = int64_t(d.K) * d.V / 4, n = BH * KV4;
  if (n == 0) return;
  constexpr int kScanThreads = 256;
  const unsigned blocks = unsigned((n + kScanThreads - 1) / kScanThreads);
  const float* in = init.defined() ? init.data<float>() : nullptr;
  float* out = last.defined() ? last.data<float>() : nullptr;
  if (reverse)
    state_scan_kernel<true><<<blocks, kScanThreads, 0, stream>>>(bp_mut(states), Glast.data<float>(), in, out, BH, d.NC,
                                                                 KV4);
  else
    state_scan_kernel<false><<<blocks, kScanThreads, 0, stream>>>(bp_mut(states), Glast.data<float>(), in, out, BH,
                                                                  d.NC, KV4);
  HYB_CUDA_LAUNCH_CHECK("simple_gla state_scan_kernel", blocks, kScanThreads, 0);
}

struct Gates {
  Tensor G, gam, kd;  // (B, H, NC, 64) f32
  Tensor Glast;       // (B, H, NC) f32
};

Gates run_gates(const Tensor& g, const Dims& d, Device dev, cudaStream_t stream) {
  const int64_t chunks = int64_t(d.B) * d.H * d.NC;
  const Shape vec{d.B, d.H, d.NC, kC};
  Gates r{Tensor::empty(vec, DType::f32, dev), Tensor::empty(vec, DType::f32, dev), Tensor::empty(vec, DType::f32, dev),
          Tensor::empty({d.B, d.H, d.NC}, DType::f32, dev)};
  constexpr int kGateThreads = 256;
  const unsigned blocks = unsigned((chunks * 32 + kGateThreads - 1) / kGateThreads);
  gates_kernel<<<blocks, kGateThreads, 0, stream>>>(g.data<float>(), r.G.data<float>(), r.gam.data<float>(),
                                                    r.kd.data<float>(), r.Glast.data<float>(), d.T, d.H, d.NC, chunks);
  HYB_CUDA_LAUNCH_CHECK("simple_gla gates_kernel", blocks, kGateThreads, 0);
  return r;
}

// The forward's states: slot c = S_c (slot NC = S_T); S_T in f32 into final when defined.
Tensor run_states(const Tensor& k, const Tensor& v, const Gates& gates, const Tensor& S0, Tensor& final,
                  const Dims& d, Device dev, cudaStream_t stream) {
  Tensor states = state_slots(d, dev);
  launch_outer(k, d.hpg, v, gates.kd.data<float>(), states, 1, 1.f, d, stream);
  state_scan(states, gates.Glast, S0, final, false, d, stream);
  return states;
}

}  // namespace

bool simple_gla_fused_supported(const Tensor& q, const Tensor& k, const Tensor& v, int64_t T, int64_t K, int64_t V,
                                int64_t hpg) {
  // HYBRID_SIMPLE_GLA_FUSED=0 keeps bf16 on the toolkit sequence (A/B timing, bisecting a mismatch).
  static const bool enabled = !env_is_zero("HYBRID_SIMPLE_GLA_FUSED");
  if (!enabled || !q.is_cuda() || q.dtype() != DType::bf16 || T < 1) return false;
  if (K > 128 || V > 128 || K % 8 != 0 || V % 8 != 0) return false;
  size_t need = 0;
  visit_tiles(K, V, [&](auto kt, auto vt) {
    constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value;
    need = std::max({forward_smem<KT, VT>(), outer_smem<KT, VT>(), backward_smem<KT, VT>(int(hpg))});
  });
  return need <= size_t(max_smem(q.device().index));
}

SimpleGlaOutputs simple_gla_forward_fused(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0,
                                          const Tensor& S00, double scale, Tensor* keep_states) {
  const SimpleGlaDims sd = simple_gla_dims("simple_gla_forward", q0, k0, v0, g0, S00);
  const Tensor q = rows16(q0), k = rows16(k0), v = rows16(v0);
  const Tensor g = g0.contiguous(), S0 = S00.defined() ? S00.contiguous() : Tensor();
  const Device dev = q.device();
  const Dims d = dims_of(sd, chunk_dims(sd.B, sd.T, sd.H, dev));
  cudaStream_t stream = current_stream(dev.index);
  SimpleGlaOutputs r{Tensor::empty({sd.B, sd.T, sd.H, sd.V}, q.dtype(), dev),
                     Tensor::empty({sd.B, sd.H, sd.K, sd.V}, DType::f32, dev)};
  const Gates gates = run_gates(g, d, dev, stream);
  const Tensor states = run_states(k, v, gates, S0, r.final_state, d, dev, stream);
  visit_tiles(d.K, d.V, [&](auto kt, auto vt) {
    constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value;
    const size_t smem = forward_smem<KT, VT>();
    set_smem(forward_kernel<KT, VT>, smem);
    const dim3 grid(unsigned(d.NC), unsigned(d.B * d.H));
    forward_kernel<KT, VT><<<grid, kSplitThreads, smem, stream>>>(bp(q), bp(k), bp(v), gates.G.data<float>(),
                                                                 gates.gam.data<float>(), bp(states), bp_mut(r.o),
                                                                 float(scale), d);
    HYB_CUDA_LAUNCH_CHECK("simple_gla forward_kernel", grid, kSplitThreads, smem);
  });
  if (keep_states) *keep_states = states;
  return r;
}

SimpleGlaGrads simple_gla_backward_fused(const SimpleGlaSaved& sv, const Tensor& dout0, const Tensor& dfinal0,
                                         GradMask needed) {
  const SimpleGlaDims sd = simple_gla_dims("simple_gla_backward", sv.q, sv.k, sv.v, sv.g, sv.S0);
  const Tensor g = sv.g.contiguous(), S0 = sv.S0.defined() ? sv.S0.contiguous() : Tensor();
  const Tensor q = rows16(sv.q), k = rows16(sv.k), v = rows16(sv.v), dout = rows16(dout0);
  const Tensor dfinal = dfinal0.defined() ? dfinal0.contiguous() : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(sd.K));
  const Device dev = sv.q.device();
  const Dims d = dims_of(sd, chunk_dims(sd.B, sd.T, sd.H, dev));
  cudaStream_t stream = current_stream(dev.index);
  SimpleGlaGrads out;
  // dg needs dQ_h and dK_h, which the kernel forms whether or not dq and dk are written.
  if (needed[0]) out.dq = Tensor::empty(sv.q.shape(), DType::bf16, dev);
  if (needed[1]) out.dk = Tensor::empty(sv.k.shape(), DType::bf16, dev);
  if (needed[2]) out.dv = Tensor::empty(sv.v.shape(), DType::bf16, dev);
  if (needed[3]) out.dg = Tensor::empty(g.shape(), DType::f32, dev);
  if (needed[4] && S0.defined()) out.dS0 = Tensor::empty(S0.shape(), DType::f32, dev);
  const Gates gates = run_gates(g, d, dev, stream);  // B1
  Tensor no_final;
  const Tensor states = sv.chunk_states.defined() ? sv.chunk_states : run_states(k, v, gates, S0, no_final, d, dev, stream);
  HYB_ASSERT(states.shape() == Shape({int64_t(d.B) * d.H, int64_t(d.NC) + 1, sd.K, sd.V}) && states.dtype() == DType::bf16,
             "simple_gla_backward: the kept chunk states are ", states.str(), ", not this op's");

  Tensor D = state_slots(d, dev);  // B2: afterwards slot c + 1 = D_c
  launch_outer(q, d.hpg, dout, gates.gam.data<float>(), D, 0, float(scale), d, stream);
  state_scan(D, gates.Glast, dfinal, out.dS0, true, d, stream);

  if (needed[0] || needed[1] || needed[2] || needed[3]) {
    BackwardArgs a{bp(q), bp(k), bp(v), bp(dout), gates.G.data<float>(), gates.gam.data<float>(),
                   gates.kd.data<float>(), bp(states), bp(D), bp_mut(out.dq), bp_mut(out.dk), bp_mut(out.dv),
                   out.dg.defined() ? out.dg.data<float>() : nullptr, float(scale)};
    visit_tiles(d.K, d.V, [&](auto kt, auto vt) {
      constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value;
      const size_t smem = backward_smem<KT, VT>(d.hpg);
      set_smem(backward_kernel<KT, VT>, smem);
      const dim3 grid(unsigned(d.NC), unsigned(d.B * d.Gq));
      backward_kernel<KT, VT><<<grid, kSplitThreads, smem, stream>>>(a, d);
      HYB_CUDA_LAUNCH_CHECK("simple_gla backward_kernel", grid, kSplitThreads, smem);
    });
  }
  return out;
}

}  // namespace hyb
