// The fused bf16 CUDA backward of the gated delta rule (gated_deltanet.md 4.4), mma.sync m16n8k16 on
// bf16 shared-memory tiles with fp32 accumulation, chunks of 64 tokens:
//   stage 0                      run_wy (gated_delta_rule_forward.cu): W, U and the chunk-start states
//                                S_c again, unless the forward kept them (GatedDeltaParams::save_chunk_states);
//   backward_scan_kernel         stage 1, sequential over the chunks in reverse per (b, value head, VS
//                                columns), D (K x VS) in fp32 registers: dU = scale P^T @ dO + kd .* (K @ D),
//                                D <- gam_n D + scale (gam .* Q)^T @ dO - W^T @ dU, with P = L .* (Q @ K^T)
//                                formed per chunk in the kernel; writes dU and the bf16 snapshot D_c;
//                                segmented like the forward scan when there are few (b, value head)
//                                pairs (ScanPlan; D_{c-1} = A_c^T D_c + B'_c);
//   backward_intra_chunk_kernel  stages 2 and 3 per (chunk, b, value head) in parallel: dQ, dK, dV,
//                                dbeta and dG, then dg = the reverse cumsum of dG within the chunk.
// Shared q/k heads (HV > H): per-value-head dQ and dK go to fp32 chunk scratch and are summed over the
// value heads of each q/k head in head order (chunk_to_tokens; no atomics).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_stream.h"
#include "kernels/chunk_ops.h"
#include "layers/gated_deltanet/gated_delta_rule_cuda.cuh"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb {
namespace gdn {
namespace {

using chunk_mma::block_sum;
using chunk_mma::bp;
using chunk_mma::bp_mut;
using chunk_mma::chunk_cumsum;
using chunk_mma::frag_col;
using chunk_mma::frag_row;
using chunk_mma::pack_bf16;
using chunk_mma::rowdot;
using chunk_mma::set_smem;
using chunk_mma::store_masked;
using chunk_mma::warp_mma_range;
using chunk_mma::warp_mma;
using chunk_mma::zero;

// ---------------------------------------------------------------------------------------------------
// Stage 1: the reverse inter-chunk recurrence.

template <int KT, int VS>
struct BackwardScanSmem {
  static constexpr size_t kKTile = size_t(kC) * (KT + 8) * 2, kVTile = size_t(kC) * (VS + 8) * 2;
  static constexpr size_t kBuf = 3 * kKTile + kVTile + kC * 4;   // one prefetch stage: Q, K, W, dO, raw g
  static constexpr size_t kQ = 0;                                // + p kBuf: bf16 [64][KT + 8]
  static constexpr size_t kK = kKTile;                           // + p kBuf: bf16 [64][KT + 8]
  static constexpr size_t kW = 2 * kKTile;                       // + p kBuf: bf16 [64][KT + 8]
  static constexpr size_t kDO = 3 * kKTile;                      // + p kBuf: bf16 [64][VS + 8]
  static constexpr size_t kGraw = 3 * kKTile + kVTile;           // + p kBuf: f32 [64]
  static constexpr size_t kP = 2 * kBuf;                         // bf16 [64][kLd64]: scale L .* (Q @ K^T)
  static constexpr size_t kDOg = kP + size_t(kC) * kLd64 * 2;    // bf16 [64][VS + 8]: scale gam .* dO
  static constexpr size_t kdUn = kDOg + kVTile;                  // bf16 [64][VS + 8]: -dU
  static constexpr size_t kD = kdUn + kVTile;                    // bf16 [KT][VS + 8]: D_c
  static constexpr size_t kGw = kD + size_t(KT) * (VS + 8) * 2;  // f32 [8][64]: each warp's copy of G
  static constexpr size_t kBytes = kGw + 8 * kC * 4;
};

struct BackwardScanArgs {
  const bf16x *q, *k;   // (B, T, H, K)
  const bf16x* W;       // (B, HV, NC, 64, K)
  const bf16x* dout;    // (B, T, HV, V)
  const float* g;       // (B, T, HV)
  const float* dfinal;  // (B, HV, K, V) or null (zeros)
  bf16x* dU;            // (B, HV, NC, 64, V) out
  bf16x* D;             // (B, HV, NC, K, V) out: D_c
  float* dS0;           // (B, HV, K, V) or null
  float scale;
};

// Grid (ceil(V / VS) [+ ceil(K / VS) in pass 1], B HV, segments from seg.first), kScanThreads (warps as
// kScanThreads says; at VS = 16 the upper four also form their column half of P); smem BackwardScanSmem<KT, VS>
// (110 KiB at KT = VS = 64). Per chunk of the block's segment, last to first, with D = D_c:
//   dU = kd .* (K @ D) + P^T @ dO                  warp w: token rows [16w, 16w + 16), VS columns
//   D  = gam_n D + Q^T @ (scale gam .* dO) + W^T @ (-dU)   warp w: KT / 4 state rows
// P (one 64 x KT product) is formed per chunk here instead of in a parallel pass: it costs less than
// writing and reading it. The next chunk's tiles are copied (cp.async) while this one computes; each
// warp keeps its own copy of the chunk's G, so no barrier guards the gates. Pass 1 (seg.local) writes
// no dU and no snapshots, only the segment's end, except in the last segment (scanned first, from the
// true state): it writes what pass 3 would (pass 3 skips it); a Phi column tile has dO = 0 (no P, no dO terms) and
// starts from the identity. A piece (seg.chain) also leaves its end as the start of the piece before.
template <int KT, int VS>
__global__ void __launch_bounds__(kScanThreads) backward_scan_kernel(BackwardScanArgs a, SegmentArgs seg, Dims d) {
  using L = BackwardScanSmem<KT, VS>;
  constexpr int kSplit = kScanSplit<VS>;
  constexpr int NT = VS / 8 / kSplit, MT2 = KT / 64;  // n-tiles of the warp's columns; state m-tiles
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sP = reinterpret_cast<bf16x*>(smem + L::kP);
  bf16x* sDOg = reinterpret_cast<bf16x*>(smem + L::kDOg);
  bf16x* sdUn = reinterpret_cast<bf16x*>(smem + L::kdUn);
  bf16x* sD = reinterpret_cast<bf16x*>(smem + L::kD);
  auto buf = [&](int p, size_t off) { return smem + p * L::kBuf + off; };
  const int nseg = seg.nseg, s = seg.first + int(blockIdx.z), vt = (d.V + VS - 1) / VS;
  const bool phi = seg.local && int(blockIdx.x) >= vt;
  if (seg.local && (phi ? s == 0 || s == nseg - 1 : s == 0)) return;  // nothing the combine reads
  const bool writes = !seg.local || (s == nseg - 1 && !phi);  // dU and the snapshots
  const int v0 = (phi ? int(blockIdx.x) - vt : int(blockIdx.x)) * VS, bh = blockIdx.y, b = bh / d.HV, j = bh % d.HV,
            qh = j / d.hpg;
  const int c_begin = s * seg.len, c_end = min(d.NC, c_begin + seg.len);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, half = warp / 4;
  const auto [m0, m2, nv, active] = scan_warp<KT, VS>(warp);
  float* sG = reinterpret_cast<float*>(smem + L::kGw) + warp * kC;
  const int64_t qk_off = (int64_t(b) * d.T * d.H + qh) * d.K, qk_row = int64_t(d.H) * d.K;
  const float* gb = a.g + int64_t(b) * d.T * d.HV + j;
  auto load_chunk = [&](int c, int p) {
    const int64_t z = int64_t(bh) * d.NC + c;
    if (!phi)  // a Phi column tile forms no P and takes no dO term: Q is not read
      flash::load_tile<kC, KT, kScanThreads, true>(reinterpret_cast<bf16x*>(buf(p, L::kQ)), a.q + qk_off, qk_row,
                                                   c * kC, d.T, d.K, tid);
    flash::load_tile<kC, KT, kScanThreads, true>(reinterpret_cast<bf16x*>(buf(p, L::kK)), a.k + qk_off, qk_row, c * kC,
                                                 d.T, d.K, tid);
    flash::load_tile<kC, KT, kScanThreads, true>(reinterpret_cast<bf16x*>(buf(p, L::kW)), a.W + z * kC * d.K, d.K, 0,
                                                 kC, d.K, tid);
    if (!phi && tid < 128)  // 64 x 16 is 128 pieces: 128 threads copy the narrowest dO tile
      flash::load_tile<kC, VS, 128, true>(reinterpret_cast<bf16x*>(buf(p, L::kDO)),
                                          a.dout + (int64_t(b) * d.T * d.HV + j) * d.V + v0, int64_t(d.HV) * d.V,
                                          c * kC, d.T, d.V - v0, tid);
    copy_chunk_gates(reinterpret_cast<float*>(buf(p, L::kGraw)), gb, c * kC, d.T, d.HV, tid);
    flash::cp_async_commit();
  };

  const int64_t seg_at = int64_t(bh) * nseg + s;
  float D[MT2][NT][4];
  if (phi)
    identity_fragments(D, d.K, v0 + nv, m2, lane);
  else
    load_state_fragments(D,
                         s == nseg - 1 ? (a.dfinal ? a.dfinal + int64_t(bh) * d.K * d.V : nullptr)
                         : seg.local   ? nullptr
                                       : seg.start + seg_at * d.K * d.V,
                         d.K, d.V, v0 + nv, m2, lane);
  if (active) store_state(sD, D, m2, lane, nv, VS + 8);
  load_chunk(c_end - 1, 0);
  for (int c = c_end - 1; c >= c_begin; --c) {
    const int p = (c_end - 1 - c) & 1;
    flash::cp_async_wait<0>();
    __syncthreads();  // chunk c's tiles and D_c (sD) are visible; every warp is done with buffer p ^ 1
    if (c > c_begin) load_chunk(c - 1, p ^ 1);
    const bf16x* sQ = reinterpret_cast<const bf16x*>(buf(p, L::kQ));
    const bf16x* sK = reinterpret_cast<const bf16x*>(buf(p, L::kK));
    const bf16x* sW = reinterpret_cast<const bf16x*>(buf(p, L::kW));
    const bf16x* sDO = reinterpret_cast<const bf16x*>(buf(p, L::kDO));
    const float* sGraw = reinterpret_cast<const float*>(buf(p, L::kGraw));
    const int64_t z = int64_t(bh) * d.NC + c;
    if (writes) store_tile<KT, VS, kScanThreads>(a.D + z * d.K * d.V + v0, d.V, sD, d.K, d.V - v0);

    const chunk_mma::PairCumsum gc = chunk_cumsum(sGraw[2 * lane], sGraw[2 * lane + 1], min(kC, d.T - c * kC), lane);
    *reinterpret_cast<float2*>(sG + 2 * lane) = make_float2(gc.G0, gc.G1);
    __syncwarp();
    float kd[2];
    row_kd(gc, m0, lane, kd);
    if (!phi) {  // the warp's rows and column half of P; a half wholly above the diagonal is zero
      float pp[1][kC / 16][4];
      zero(pp);
      if (32 * half <= m0 + 15) warp_mma<1, kC / 16, KT, false, true>(pp, sQ, KT + 8, m0, sK, KT + 8, 32 * half, lane);
      store_masked(sP, kLd64, pp, sG, a.scale, m0, 32 * half, lane);
    }
    for (int x = lane + 32 * half; !phi && x < 16 * (VS / 8); x += 64) {  // the warp's rows of scale gam .* dO
      const int r = m0 + x / (VS / 8), c8 = (x % (VS / 8)) * 8;
      const float f = a.scale * exp_ftz(sG[r]);
      uint4 val = *reinterpret_cast<const uint4*>(sDO + r * (VS + 8) + c8);
      __nv_bfloat162* h2 = reinterpret_cast<__nv_bfloat162*>(&val);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f2 = __bfloat1622float2(h2[e]);
        h2[e] = __floats2bfloat162_rn(f * f2.x, f * f2.y);
      }
      *reinterpret_cast<uint4*>(sDOg + r * (VS + 8) + c8) = val;
    }
    __syncthreads();  // P and scale gam .* dO complete

    if (active) {
      float du[1][NT][4];
      zero(du);
      warp_mma<1, NT, KT, false, false>(du, sK, KT + 8, m0, sD, VS + 8, nv, lane);
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) du[0][ni][e] *= kd[e / 2];
      if (!phi) warp_mma<1, NT, kC, true, false>(du, sP, kLd64, m0, sDO, VS + 8, nv, lane);
      bf16x* dUc = a.dU + z * kC * d.V + v0;
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int r = m0 + frag_row(lane, e), col = nv + ni * 8 + frag_col(lane, e);
          if (writes && v0 + col < d.V)
            *reinterpret_cast<uint32_t*>(dUc + r * d.V + col) = pack_bf16(du[0][ni][e], du[0][ni][e + 1]);
          *reinterpret_cast<uint32_t*>(sdUn + r * (VS + 8) + col) = pack_bf16(-du[0][ni][e], -du[0][ni][e + 1]);
        }
    }
    __syncthreads();  // -dU complete; every warp is done reading D_c

    if (active) {
      scale_all(D, exp_ftz(gc.last));  // gam_n
      if (!phi) warp_mma<MT2, NT, kC, true, false>(D, sQ, KT + 8, m2, sDOg, VS + 8, nv, lane);
      warp_mma<MT2, NT, kC, true, false>(D, sW, KT + 8, m2, sdUn, VS + 8, nv, lane);
      store_state(sD, D, m2, lane, nv, VS + 8);
    }
  }
  flash::cp_async_wait<0>();
  if (!active) return;
  if (phi)
    store_split_fragments(D, seg.phi + seg_at * 2 * d.K * d.K, d.K, v0 + nv, m2, lane);
  else if (seg.local)
    store_state_fragments(D, seg.end + seg_at * d.K * d.V, d.K, d.V, v0 + nv, m2, lane);
  else if (seg.chain && s > 0)
    store_state_fragments(D, seg.start + (seg_at - 1) * d.K * d.V, d.K, d.V, v0 + nv, m2, lane);
  else if (a.dS0 && s == 0)
    store_state_fragments(D, a.dS0 + int64_t(bh) * d.K * d.V, d.K, d.V, v0 + nv, m2, lane);
}

// ---------------------------------------------------------------------------------------------------
// Stages 2 and 3.

constexpr int kIntraChunkThreads = 256;  // 8 warps: warp w owns token rows [16 (w % 4), +16) and column half w / 4

template <int KT>
struct IntraChunkSmem {
  static constexpr size_t kTile = size_t(kC) * kLd64 * 2, kKTile = size_t(kC) * (KT + 8) * 2;
  static constexpr size_t kQ = 0;               // bf16 [64][KT + 8]
  static constexpr size_t kK = kKTile;          // bf16 [64][KT + 8]
  static constexpr size_t kAhi = 2 * kKTile;    // bf16 [64][kLd64]: Ainv, high part
  static constexpr size_t kAlo = kAhi + kTile;  // bf16 [64][kLd64]: Ainv, low part
  static constexpr size_t kdP = kAlo + kTile;   // bf16 [64][kLd64]: dP
  static constexpr size_t kAv = kdP + kTile;    // bf16 [64][kLd64]: tril(beta_i (dU @ V^T), -1)
  static constexpr size_t kR = kAv + kTile;     // the region below, reused by phase
  // Phase 1, the solve: f32 M and X [64][kLdF], the block scratch.
  static constexpr size_t kM = kR, kX = kM + size_t(kC) * kLdF * 4, kT = kX + size_t(kC) * kLdF * 4;
  static constexpr size_t kSolveEnd = kT + size_t(kSolveScratch) * 4;
  // Phase 2, the V tiles: bf16 dO, U, dU, V [64][kLd64], S_c and D_c [KT][kLd64], + b kVBuf in buffer b.
  // At KT = 128 the block is alone on its SM (it needs more than half the shared memory), so nothing
  // else hides a V tile's load: the next tiles are copied into a second buffer while these are used.
  // At KT = 64 two blocks share an SM and the second buffer would take that away.
  static constexpr int kVBufs = KT == 128 ? 2 : 1;
  static constexpr size_t kDO = kR, kU = kDO + kTile, kdU = kU + kTile, kV = kdU + kTile, kS = kV + kTile;
  static constexpr size_t kD = kS + size_t(KT) * kLd64 * 2, kVBuf = kD + size_t(KT) * kLd64 * 2 - kDO;
  static constexpr size_t kVEnd = kDO + kVBufs * kVBuf;
  // Phase 3, after the V tiles: bf16 dW [64][KT + 8], dA (then R) and T1 [64][kLd64].
  static constexpr size_t kdW = kR, kdA = kdW + kKTile, kT1 = kdA + kTile, kPostEnd = kT1 + kTile;
  static constexpr size_t kVec = std::max({kSolveEnd, kVEnd, kPostEnd});
  // f32 [64] each: G, gam, kd, beta, beta gam; [2][64] row partials of dG and dbeta per column half;
  // [4][64] column sums of Z per row block; 8 block-sum slots.
  static constexpr size_t kBytes = kVec + (5 * kC + 4 * kC + 4 * kC + 8) * 4;
};

struct IntraChunkArgs {
  const bf16x *q, *k;          // (B, T, H, K)
  const bf16x *v, *dout;       // (B, T, HV, V)
  const bf16x *U, *dU;         // (B, HV, NC, 64, V)
  const bf16x *S, *D;          // (B, HV, NC, K, V): S_c, D_c
  const bf16x* Ainv;           // (B, HV, NC, 2, 64, 64) high and low parts from the forward, or null (solved here)
  const float *g, *beta;       // (B, T, HV)
  bf16x *dq, *dk;              // (B, T, H, K) when HV == H (else null)
  float *dq_heads, *dk_heads;  // (B, HV, NC, 64, K) per value head when HV > H (else null)
  bf16x* dv;                   // (B, T, HV, V) or null
  float *dbeta, *dg;           // (B, T, HV) or null
  float scale;
};

// dQ or dK rows of the warp (K columns k0 ..) to the output: bf16 (B, T, H, K) at the q/k head, or the
// per-value-head fp32 chunk scratch.
template <int NTK>
__device__ __forceinline__ void store_qk_grad(const float (&acc)[1][NTK][4], bf16x* out, float* out_heads,
                                              int64_t qk_off, int64_t z, int t0, int m0, int k0, int lane,
                                              const Dims& d) {
#pragma unroll
  for (int ni = 0; ni < NTK; ++ni)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int r = m0 + frag_row(lane, e), col = k0 + ni * 8 + frag_col(lane, e);
      if (col >= d.K) continue;
      if (out && t0 + r < d.T)
        *reinterpret_cast<uint32_t*>(out + qk_off + int64_t(t0 + r) * d.H * d.K + col) =
            pack_bf16(acc[0][ni][e], acc[0][ni][e + 1]);
      if (out_heads)
        *reinterpret_cast<float2*>(out_heads + (z * kC + r) * d.K + col) =
            make_float2(acc[0][ni][e], acc[0][ni][e + 1]);
    }
}

// Starts the copy of rows [row0, row0 + ROWS) (nrows in all, cols wide, row_stride apart) into a
// [ROWS][WIDTH + 8] tile of backward_intra_chunk_kernel, zero outside; complete after a commit and a wait.
template <int ROWS, int WIDTH>
__device__ __forceinline__ void copy_tile(bf16x* dst, const bf16x* src, int64_t row_stride, int row0, int nrows,
                                          int cols) {
  flash::load_tile<ROWS, WIDTH, kIntraChunkThreads, true>(dst, src, row_stride, row0, nrows, cols, threadIdx.x);
}

// Grid (chunks, B HV), kIntraChunkThreads, chunk c0 + blockIdx.x; smem IntraChunkSmem<KT> (111 KiB at KT = 64: two
// blocks per SM; 217 KiB at KT = 128, with the V tiles double-buffered). With S = S_c,
// D = D_c, U, dU of the chunk (4.4 stages 2, 3):
//   pass 1 over 64-column V tiles: dP = scale (dO @ U^T) .* L, dU @ V^T, X2 = Ainv^T @ dU (dV = beta .* X2,
//          rowdot(V, X2));  pass 2: dO @ S^T, U @ D^T, dU @ S^T, <S, D>;
//   then dQ = scale gam .* (dO @ S^T) + dP @ K, dK1 = kd .* (U @ D^T) + dP^T @ Q, dW = -dU @ S^T,
//   dA = tril(beta_i (dU @ V^T) + beta_i gam_i (dW @ K^T), -1), X1 = Ainv^T @ dW, T1 = Ainv^T @ dA,
//   dM = tril(-T1 @ Ainv^T, -1), R = beta .* (dM .* L), dK = dK1 + beta gam .* X1 + R @ K + R^T @ K,
//   dbeta = gam .* rowdot(K, X1) + rowdot(V, X2) + rowsum(dM .* L .* (K @ K^T)),
//   dG = rowdot(dQ, Q) - rowdot(dK1, K) + beta gam .* rowdot(K, X1) + rowsum(Z) - colsum(Z) with
//   Z = dM .* M, plus <S_{c+1}, D> on the last row = gam_n <S, D> + sum rowdot(kd .* (U @ D^T), K).
// Warp w: rows [16 (w % 4), +16); columns [32 (w / 4), +32) of the 64-wide products and [(w / 4) KT / 2,
// +KT / 2) of the K-wide ones. Ainv comes from the forward (save_chunk_states) or is solved again here in
// fp32 (4.5), the same bits either way; the products use its bf16 high + low parts.
template <int KT>
__global__ void __launch_bounds__(kIntraChunkThreads, KT == 64 ? 2 : 1)
    backward_intra_chunk_kernel(IntraChunkArgs a, Dims d, int c0) {
  using L = IntraChunkSmem<KT>;
  constexpr int NTK = KT / 16, LDK = KT + 8;  // K-wide products: KT / 2 columns (NTK n-tiles) per warp
  extern __shared__ __align__(16) unsigned char smem[];
  auto tile = [&](size_t off) { return reinterpret_cast<bf16x*>(smem + off); };
  bf16x *sQ = tile(L::kQ), *sK = tile(L::kK), *sAhi = tile(L::kAhi), *sAlo = tile(L::kAlo), *sdP = tile(L::kdP),
        *sAv = tile(L::kAv);
  bf16x *sDO, *sU, *sdU, *sV, *sS, *sD;  // the V tiles of the step at hand (use_vbuf)
  auto use_vbuf = [&](int b) {
    const size_t o = b * L::kVBuf;
    sDO = tile(L::kDO + o), sU = tile(L::kU + o), sdU = tile(L::kdU + o), sV = tile(L::kV + o), sS = tile(L::kS + o);
    sD = tile(L::kD + o);
  };
  bf16x *sdW = tile(L::kdW), *sdA = tile(L::kdA), *sT1 = tile(L::kT1);
  float* sM = reinterpret_cast<float*>(smem + L::kM);
  float* sX = reinterpret_cast<float*>(smem + L::kX);
  float* sT = reinterpret_cast<float*>(smem + L::kT);
  float* sG = reinterpret_cast<float*>(smem + L::kVec);
  float *sGam = sG + kC, *sKd = sGam + kC, *sBeta = sKd + kC, *sBg = sBeta + kC;
  float* sRowG = sBg + kC;        // [2][64]
  float* sRowB = sRowG + 2 * kC;  // [2][64]
  float* sColZ = sRowB + 2 * kC;  // [4][64]
  float* sRed = sColZ + 4 * kC;   // [8]

  const int c = c0 + blockIdx.x, bh = blockIdx.y, b = bh / d.HV, j = bh % d.HV, qh = j / d.hpg, t0 = c * kC;
  const int n = min(kC, d.T - t0);  // valid tokens of the chunk
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = 16 * (warp % 4), n0 = 32 * (warp / 4), k0 = (warp / 4) * (KT / 2);
  const int64_t qk_off = (int64_t(b) * d.T * d.H + qh) * d.K, qk_row = int64_t(d.H) * d.K;
  const int64_t v_off = (int64_t(b) * d.T * d.HV + j) * d.V, v_row = int64_t(d.HV) * d.V;
  const int64_t z = int64_t(bh) * d.NC + c, gate_off = int64_t(b) * d.T * d.HV + j;
  const bf16x *Uc = a.U + z * kC * d.V, *dUc = a.dU + z * kC * d.V;
  const bf16x *Sc = a.S + z * d.K * d.V, *Dc = a.D + z * d.K * d.V;

  // Every tile copy is asynchronous (copy_tile): a kernel's loads are in flight together. The V tiles
  // come in steps: pass 1's VN column tiles, then pass 2's (with VN = 1 one load serves both passes).
  const int VN = (d.V + 63) / 64, nsteps = VN > 1 ? 2 * VN : 1;
  auto load_step = [&](int step) {
    use_vbuf(step % L::kVBufs);
    const bool pass1 = step < VN;
    const int v0 = (step % VN) * 64, cols = d.V - v0;
    copy_tile<kC, 64>(sDO, a.dout + v_off + v0, v_row, t0, d.T, cols);
    copy_tile<kC, 64>(sU, Uc + v0, d.V, 0, kC, cols);
    copy_tile<kC, 64>(sdU, dUc + v0, d.V, 0, kC, cols);
    if (pass1) copy_tile<kC, 64>(sV, a.v + v_off + v0, v_row, t0, d.T, cols);
    if (!pass1 || VN == 1) {
      copy_tile<KT, 64>(sS, Sc + v0, d.V, 0, d.K, cols);
      copy_tile<KT, 64>(sD, Dc + v0, d.V, 0, d.K, cols);
    }
    flash::cp_async_commit();
  };
  copy_tile<kC, KT>(sQ, a.q + qk_off, qk_row, t0, d.T, d.K);
  copy_tile<kC, KT>(sK, a.k + qk_off, qk_row, t0, d.T, d.K);
  if (a.Ainv) {  // the forward's parts (the same bits the solve below gives)
    const bf16x* src = a.Ainv + z * 2 * kC * kC;
    copy_tile<kC, kC>(sAhi, src, kC, 0, kC, kC);
    copy_tile<kC, kC>(sAlo, src + kC * kC, kC, 0, kC, kC);
  }
  flash::cp_async_commit();
  // With Ainv given there is no solve, so the first V tiles need not wait for its scratch.
  const bool early_vtiles = a.Ainv != nullptr;
  if (early_vtiles) load_step(0);
  if (warp == 0) chunk_gates(a.g + gate_off, a.beta + gate_off, d.HV, t0, d.T, sG, sGam, sKd, sBeta, sBg, lane);
  flash::cp_async_wait<0>();
  __syncthreads();
  if (!a.Ainv) {
    chunk_inverse<KT, kIntraChunkThreads>(sK, sG, sBeta, sM, sX, sT);  // Ainv in fp32, recomputed (4.5), then split
    for (int e = tid; e < kC * kC; e += kIntraChunkThreads)
      split_bf16(sX[(e / kC) * kLdF + e % kC], sAhi[(e / kC) * kLd64 + e % kC], sAlo[(e / kC) * kLd64 + e % kC]);
  }
  __syncthreads();  // Ainv ready; the solve's scratch is free for the V tiles
  // Makes step's tiles visible to every warp and points the tile pointers at them. With two buffers the
  // next step's copy starts here, into the buffer the previous step used: the barrier has just seen
  // every warp leave it.
  auto begin_step = [&](int step) {
    if (step == 0 && !early_vtiles) load_step(0);
    if (L::kVBufs == 1 && step > 0) {
      __syncthreads();  // every warp is done with the previous tiles
      load_step(step);
    }
    if (step > 0 || !early_vtiles) {
      flash::cp_async_wait<0>();
      __syncthreads();
    }
    if (L::kVBufs == 2 && step + 1 < nsteps) load_step(step + 1);
    use_vbuf(step % L::kVBufs);
  };
  float rowB[2] = {0.f, 0.f}, rowG[2] = {0.f, 0.f};  // this warp's parts of dbeta, dG for rows r0, r0 + 8
  // Causal skips, the same bits: products whose 64-wide output the mask (j <= i or j < i) zeroes for
  // every row of the warp are not formed (`live`), and products with dP, P or the unit lower Ainv^T
  // as an operand reduce only over the 16-wide steps where it is not zero.
  const bool live = n0 <= m0 + 15;
  // Pass 1: dP, dU @ V^T, X2.
  float accP[1][4][4], accAv[1][4][4];
  zero(accP);
  zero(accAv);
  for (int v0 = 0; v0 < d.V; v0 += 64) {
    begin_step(v0 / 64);
    if (live) {
      warp_mma<1, 4, kC, false, true>(accP, sDO, kLd64, m0, sU, kLd64, n0, lane);
      warp_mma<1, 4, kC, false, true>(accAv, sdU, kLd64, m0, sV, kLd64, n0, lane);
    }
    float x2[1][4][4];
    zero(x2);
    warp_mma_range<1, 4, true, false>(x2, sAhi, kLd64, m0, sdU, kLd64, n0, m0, kC, lane);
    warp_mma_range<1, 4, true, false>(x2, sAlo, kLd64, m0, sdU, kLd64, n0, m0, kC, lane);
    float rd[2];
    rowdot<4>(rd, x2, sV + n0, kLd64, m0, lane);
    rowB[0] += rd[0], rowB[1] += rd[1];
    if (a.dv) {
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int r = m0 + frag_row(lane, e), col = v0 + n0 + ni * 8 + frag_col(lane, e);
          if (t0 + r < d.T && col < d.V)
            *reinterpret_cast<uint32_t*>(a.dv + v_off + int64_t(t0 + r) * v_row + col) =
                pack_bf16(sBeta[r] * x2[0][ni][e], sBeta[r] * x2[0][ni][e + 1]);
        }
    }
  }
  store_masked(sdP, kLd64, accP, sG, a.scale, m0, n0, lane);  // dP = scale (dO @ U^T) .* L
#pragma unroll
  for (int ni = 0; ni < 4; ++ni)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {  // the V part of dA, parked in shared memory to free registers for pass 2
      const int r = m0 + frag_row(lane, e), i = n0 + ni * 8 + frag_col(lane, e);
      const float x0 = i < r ? sBeta[i] * accAv[0][ni][e] : 0.f,
                  x1 = i + 1 < r ? sBeta[i + 1] * accAv[0][ni][e + 1] : 0.f;
      *reinterpret_cast<uint32_t*>(sAv + r * kLd64 + i) = pack_bf16(x0, x1);
    }

  // Pass 2: dO @ S^T, U @ D^T, dU @ S^T and <S, D>.
  float accQ[1][NTK][4], accK[1][NTK][4], accW[1][NTK][4];
  zero(accQ);
  zero(accK);
  zero(accW);
  float inner = 0.f;  // this thread's part of <S_{c+1}, D_c>
  for (int v0 = 0; v0 < d.V; v0 += 64) {
    if (VN > 1) begin_step(VN + v0 / 64);
    warp_mma<1, NTK, kC, false, true>(accQ, sDO, kLd64, m0, sS, kLd64, k0, lane);
    warp_mma<1, NTK, kC, false, true>(accK, sU, kLd64, m0, sD, kLd64, k0, lane);
    warp_mma<1, NTK, kC, false, true>(accW, sdU, kLd64, m0, sS, kLd64, k0, lane);
    if (a.dg)
      for (int x = tid; x < KT * 32; x += kIntraChunkThreads) {  // bf16 pairs of the S and D tiles
        const int r = x / 32, c2 = (x % 32) * 2;
        const float2 s2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sS + r * kLd64 + c2));
        const float2 d2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sD + r * kLd64 + c2));
        inner += s2.x * d2.x + s2.y * d2.y;
      }
  }
  inner *= sGam[n - 1];  // gam_n <S_c, D_c>
  __syncthreads();       // dP complete; every warp is done with the V tiles (their space becomes dW, dA, T1)

#pragma unroll
  for (int ni = 0; ni < NTK; ++ni)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {  // dW = -dU @ S^T
      const int r = m0 + frag_row(lane, e), col = k0 + ni * 8 + frag_col(lane, e);
      *reinterpret_cast<uint32_t*>(sdW + r * LDK + col) = pack_bf16(-accW[0][ni][e], -accW[0][ni][e + 1]);
    }
  {  // dQ = scale gam .* (dO @ S^T) + dP @ K
#pragma unroll
    for (int ni = 0; ni < NTK; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) accQ[0][ni][e] *= a.scale * sGam[m0 + frag_row(lane, e)];
    warp_mma_range<1, NTK, false, false>(accQ, sdP, kLd64, m0, sK, LDK, k0, 0, m0 + 16, lane);
    float rd[2];
    rowdot<NTK>(rd, accQ, sQ + k0, LDK, m0, lane);
    rowG[0] += rd[0], rowG[1] += rd[1];
    store_qk_grad(accQ, a.dq, a.dq_heads, qk_off, z, t0, m0, k0, lane, d);
  }
  // dK1 = kd .* (U @ D^T) + dP^T @ Q; sum rowdot(kd .* (U @ D^T), K) is the rest of <S_{c+1}, D_c>.
#pragma unroll
  for (int ni = 0; ni < NTK; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) accK[0][ni][e] *= sKd[m0 + frag_row(lane, e)];
  {
    float rd[2];
    rowdot<NTK>(rd, accK, sK + k0, LDK, m0, lane);
    if (lane % 4 == 0) inner += rd[0] + rd[1];
  }
  warp_mma_range<1, NTK, true, false>(accK, sdP, kLd64, m0, sQ, LDK, k0, m0, kC, lane);
  {
    float rd[2];
    rowdot<NTK>(rd, accK, sK + k0, LDK, m0, lane);
    rowG[0] -= rd[0], rowG[1] -= rd[1];
  }
  __syncthreads();  // dW complete

  {  // dA = tril(beta_i (dU @ V^T) + beta_i gam_i (dW @ K^T), -1)
    float t[1][4][4];
    zero(t);
    if (live) warp_mma<1, 4, KT, false, true>(t, sdW, LDK, m0, sK, LDK, n0, lane);
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + frag_row(lane, e), i = n0 + ni * 8 + frag_col(lane, e);
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sAv + r * kLd64 + i));
        const float x0 = i < r ? v.x + sBg[i] * t[0][ni][e] : 0.f;
        const float x1 = i + 1 < r ? v.y + sBg[i + 1] * t[0][ni][e + 1] : 0.f;
        *reinterpret_cast<uint32_t*>(sdA + r * kLd64 + i) = pack_bf16(x0, x1);
      }
  }
  {  // X1 = Ainv^T @ dW: dK += beta gam .* X1; rowdot(K, X1) feeds dbeta (gam) and dG (beta gam)
    float x1[1][NTK][4];
    zero(x1);
    warp_mma_range<1, NTK, true, false>(x1, sAhi, kLd64, m0, sdW, LDK, k0, m0, kC, lane);
    warp_mma_range<1, NTK, true, false>(x1, sAlo, kLd64, m0, sdW, LDK, k0, m0, kC, lane);
    float rd[2];
    rowdot<NTK>(rd, x1, sK + k0, LDK, m0, lane);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + lane / 4 + 8 * h;
      rowB[h] += sGam[r] * rd[h];
      rowG[h] += sBg[r] * rd[h];
    }
#pragma unroll
    for (int ni = 0; ni < NTK; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) accK[0][ni][e] += sBg[m0 + frag_row(lane, e)] * x1[0][ni][e];
  }
  __syncthreads();  // dA complete
  {                 // T1 = Ainv^T @ dA
    float t1[1][4][4];
    zero(t1);
    warp_mma_range<1, 4, true, false>(t1, sAhi, kLd64, m0, sdA, kLd64, n0, m0, kC, lane);
    warp_mma_range<1, 4, true, false>(t1, sAlo, kLd64, m0, sdA, kLd64, n0, m0, kC, lane);
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + frag_row(lane, e), i = n0 + ni * 8 + frag_col(lane, e);
        *reinterpret_cast<uint32_t*>(sT1 + r * kLd64 + i) = pack_bf16(t1[0][ni][e], t1[0][ni][e + 1]);
      }
  }
  __syncthreads();  // T1 complete; dA is consumed (its space becomes R)
  {                 // dM = -T1 @ Ainv^T on i < r < n; R = beta .* dM .* L; the dM terms of dbeta and dG
    float dm[1][4][4], kk[1][4][4];
    zero(dm);
    zero(kk);
    if (live) {  // Ainv[i][c] is zero for c > i, and i < n0 + 32
      warp_mma_range<1, 4, false, true>(dm, sT1, kLd64, m0, sAhi, kLd64, n0, 0, n0 + 32, lane);
      warp_mma_range<1, 4, false, true>(dm, sT1, kLd64, m0, sAlo, kLd64, n0, 0, n0 + 32, lane);
      warp_mma<1, 4, KT, false, true>(kk, sK, LDK, m0, sK, LDK, n0, lane);
    }
    float rb[2] = {0.f, 0.f}, rg[2] = {0.f, 0.f}, colz[4][2];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + frag_row(lane, e), i = n0 + ni * 8 + frag_col(lane, e);
        const float w = i < r && r < n ? -dm[0][ni][e] * exp_ftz(fminf(sG[r] - sG[i], 0.f)) : 0.f;  // dM .* L
        dm[0][ni][e] = sBeta[r] * w;                                                               // R
        const float zz = dm[0][ni][e] * kk[0][ni][e];                                              // (dM .* M)
        rb[e / 2] += w * kk[0][ni][e];
        rg[e / 2] += zz;
        if (e < 2)
          colz[ni][e] = zz;
        else
          colz[ni][e - 2] += zz;
      }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + frag_row(lane, e), i = n0 + ni * 8 + frag_col(lane, e);
        *reinterpret_cast<uint32_t*>(sdA + r * kLd64 + i) = pack_bf16(dm[0][ni][e], dm[0][ni][e + 1]);
      }
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // column sums over the warp's 16 rows: lanes with equal lane % 4
        float v = colz[ni][q];
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        if (lane < 4) sColZ[(warp % 4) * kC + n0 + ni * 8 + lane * 2 + q] = v;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // quad sums of the elementwise parts
      rb[h] += __shfl_xor_sync(0xffffffffu, rb[h], 1);
      rb[h] += __shfl_xor_sync(0xffffffffu, rb[h], 2);
      rg[h] += __shfl_xor_sync(0xffffffffu, rg[h], 1);
      rg[h] += __shfl_xor_sync(0xffffffffu, rg[h], 2);
      rowB[h] += rb[h];
      rowG[h] += rg[h];
    }
  }
  __syncthreads();                                                              // R complete
  warp_mma<1, NTK, kC, false, false>(accK, sdA, kLd64, m0, sK, LDK, k0, lane);  // + R @ K
  warp_mma<1, NTK, kC, true, false>(accK, sdA, kLd64, m0, sK, LDK, k0, lane);   // + R^T @ K
  store_qk_grad(accK, a.dk, a.dk_heads, qk_off, z, t0, m0, k0, lane, d);

  if (lane % 4 == 0) {
    const int r0 = m0 + lane / 4, s = warp / 4;
    sRowG[s * kC + r0] = rowG[0], sRowG[s * kC + r0 + 8] = rowG[1];
    sRowB[s * kC + r0] = rowB[0], sRowB[s * kC + r0 + 8] = rowB[1];
  }
  const float inner_sum = a.dg ? block_sum<kIntraChunkThreads / 32>(inner, sRed) : 0.f;  // + barriers
  if (!a.dg) __syncthreads();
  if (warp != 0) return;
  if (a.dbeta)
    for (int r = lane; r < n; r += 32) a.dbeta[gate_off + int64_t(t0 + r) * d.HV] = sRowB[r] + sRowB[kC + r];
  if (a.dg) {  // reverse cumsum over the valid rows: lane l holds rows 63 - 2l and 62 - 2l
    auto dG = [&](int r) {
      if (r >= n) return 0.f;
      const float zc = sColZ[r] + sColZ[kC + r] + sColZ[2 * kC + r] + sColZ[3 * kC + r];
      return sRowG[r] + sRowG[kC + r] - zc + (r == n - 1 ? inner_sum : 0.f);
    };
    const int ra = kC - 1 - 2 * lane, rb = ra - 1;
    const float xa = dG(ra), xb = dG(rb);
    float s = xa + xb;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += u;
    }
    // s = sum of rows >= rb; row ra's suffix excludes row rb.
    if (ra < n) a.dg[gate_off + int64_t(t0 + ra) * d.HV] = s - xb;
    if (rb < n) a.dg[gate_off + int64_t(t0 + rb) * d.HV] = s;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Launchers.

size_t backward_scan_smem(int K, int vs) { return scan_smem_bytes<BackwardScanSmem>(K, vs); }

size_t backward_smem_max(int K) {
  size_t need = 0;
  visit_kt(K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    need = std::max({BackwardScanSmem<KT, 16>::kBytes, BackwardScanSmem<KT, 32>::kBytes,
                     BackwardScanSmem<KT, 64>::kBytes, BackwardScanSmem<KT, 128>::kBytes, IntraChunkSmem<KT>::kBytes});
  });
  return need;
}

}  // namespace gdn

GatedDeltaGrads gated_delta_rule_backward_fused(const GatedDeltaSaved& sv, const Tensor& dout0, const Tensor& dfinal0,
                                                GradMask needed) {
  const GatedDeltaDims gd = gated_delta_rule_dims("gated_delta_rule_backward", sv.q, sv.k, sv.v, sv.beta, sv.g, sv.S0);
  const Tensor q = chunk_mma::rows16(sv.q), k = chunk_mma::rows16(sv.k), v = chunk_mma::rows16(sv.v);
  const Tensor dout = chunk_mma::rows16(dout0);
  const Tensor beta = sv.beta.contiguous(), g = sv.g.contiguous();
  // The states are read in float2 pieces: a contiguous view at an odd offset is copied.
  const Tensor S0 = sv.S0.defined() ? chunk_mma::rows16(sv.S0) : Tensor();
  const Tensor dfinal = dfinal0.defined() ? chunk_mma::rows16(dfinal0) : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(gd.K));
  const Device dev = q.device();
  const gdn::Dims d = gdn::dims_of(gd);
  cudaStream_t stream = current_stream(dev.index);
  GatedDeltaGrads out;
  if (needed[0]) out.dq = Tensor::empty(q.shape(), DType::bf16, dev);
  if (needed[1]) out.dk = Tensor::empty(k.shape(), DType::bf16, dev);
  if (needed[2]) out.dv = Tensor::empty(v.shape(), DType::bf16, dev);
  if (needed[3]) out.dbeta = Tensor::empty(beta.shape(), DType::f32, dev);
  if (needed[4]) out.dg = Tensor::empty(g.shape(), DType::f32, dev);
  if (needed[5] && S0.defined()) out.dS0 = Tensor::empty(S0.shape(), DType::f32, dev);
  const bool stage23 = needed[0] || needed[1] || needed[2] || needed[3] || needed[4];
  if (!stage23 && !out.dS0.defined()) return out;

  // Stage 0. The chunk states and U feed stages 2 and 3 only; stage 1 reads W.
  const gdn::WyScratch w =
      sv.chunks.W.defined() ? sv.chunks : gdn::run_wy(k, v, beta, g, S0, Tensor(), d, false, stream, {});
  const Tensor dU = Tensor::empty(w.U.shape(), DType::bf16, dev), D = Tensor::empty(w.S.shape(), DType::bf16, dev);

  // Shared q/k heads: per-value-head dQ, dK in fp32 chunk scratch, summed per q/k head afterwards.
  const bool grouped = d.hpg > 1;
  const ChunkDims cd = chunk_dims(gd.B, gd.T, gd.HV, dev);
  ChunkBuffer dq_heads, dk_heads;
  if (grouped && needed[0]) dq_heads = ChunkBuffer(cd, cd.NC, gdn::kC, gd.K);
  if (grouped && needed[1]) dk_heads = ChunkBuffer(cd, cd.NC, gdn::kC, gd.K);
  const gdn::IntraChunkArgs intra_args{gdn::bp(q),
                                       gdn::bp(k),
                                       gdn::bp(v),
                                       gdn::bp(dout),
                                       gdn::bp(w.U),
                                       gdn::bp(dU),
                                       gdn::bp(w.S),
                                       gdn::bp(D),
                                       w.Ainv.defined() ? gdn::bp(w.Ainv) : nullptr,
                                       g.data<float>(),
                                       beta.data<float>(),
                                       grouped ? nullptr : gdn::bp_mut(out.dq),
                                       grouped ? nullptr : gdn::bp_mut(out.dk),
                                       dq_heads.t.defined() ? dq_heads.data() : nullptr,
                                       dk_heads.t.defined() ? dk_heads.data() : nullptr,
                                       gdn::bp_mut(out.dv),
                                       out.dbeta.defined() ? out.dbeta.data<float>() : nullptr,
                                       out.dg.defined() ? out.dg.data<float>() : nullptr,
                                       float(scale)};
  auto intra_chunk = [&](int c0, int c1) {  // stages 2 and 3 on the chunks [c0, c1)
    if (!stage23) return;
    gdn::visit_kt(d.K, [&](auto kt) {
      constexpr int KT = decltype(kt)::value;
      const size_t smem = gdn::IntraChunkSmem<KT>::kBytes;
      gdn::set_smem(gdn::backward_intra_chunk_kernel<KT>, smem);
      const dim3 grid(unsigned(c1 - c0), unsigned(d.B * d.HV));
      gdn::backward_intra_chunk_kernel<KT><<<grid, gdn::kIntraChunkThreads, smem, stream>>>(intra_args, d, c0);
      HYB_CUDA_LAUNCH_CHECK("gated_delta_rule backward_intra_chunk_kernel", grid, gdn::kIntraChunkThreads, smem);
    });
  };

  // Stage 1, then stages 2 and 3: in pieces side by side, unless the forward ran its scan in segments
  // (their transitions, transposed, are this scan's).
  const gdn::ScanPieces pieces = w.Phi.defined() ? gdn::ScanPieces{d.NC, 0} : gdn::scan_pieces(d, dev.index);
  gdn::visit_kt(d.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    Tensor phi = w.Phi;
    auto bwd_smem = [&](int vs) { return gdn::backward_scan_smem(d.K, vs); };
    const gdn::ScanPlan plan = pieces.n ? gdn::scan_plan(d, dev.index, bwd_smem, 1)
                                        : gdn::scan_plan(d, dev.index, bwd_smem,
                                                         phi.defined() ? int(phi.shape()[1]) : 0, phi.defined());
    gdn::visit_vs(plan.vs, [&](auto vt) {
      constexpr int VS = decltype(vt)::value;
      const size_t smem = gdn::BackwardScanSmem<KT, VS>::kBytes;
      gdn::set_smem(gdn::backward_scan_kernel<KT, VS>, smem);
      const gdn::BackwardScanArgs a{
          gdn::bp(q),      gdn::bp(k),      gdn::bp(w.W),
          gdn::bp(dout),   g.data<float>(), dfinal.defined() ? dfinal.data<float>() : nullptr,
          gdn::bp_mut(dU), gdn::bp_mut(D),  out.dS0.defined() ? out.dS0.data<float>() : nullptr,
          float(scale)};
      auto launch = [&](dim3 grid, const gdn::SegmentArgs& seg, cudaStream_t st) {
        gdn::backward_scan_kernel<KT, VS><<<grid, gdn::kScanThreads, smem, st>>>(a, seg, d);
        HYB_CUDA_LAUNCH_CHECK("gated_delta_rule backward_scan_kernel", grid, gdn::kScanThreads, smem);
      };
      auto nothing = [](int, int) {};  // the backward scan's inputs are all there
      if (pieces.n) return gdn::run_pieces<VS>(pieces, d, true, dev, stream, nothing, launch, intra_chunk);
      gdn::run_scan<VS>(plan, d, true, dev, stream, phi, nothing, launch, intra_chunk);
    });
  });
  if (dq_heads.t.defined()) chunk_to_tokens(out.dq, dq_heads, d.hpg, nullptr, 1.f, cd);
  if (dk_heads.t.defined()) chunk_to_tokens(out.dk, dk_heads, d.hpg, nullptr, 1.f, cd);
  return out;
}

}  // namespace hyb
