// Pieces of the fused bf16 CUDA path of the gated delta rule (gated_deltanet.md 4) that the forward
// (gated_delta_rule_forward.cu) and the backward (gated_delta_rule_backward.cu) share: the sizes, the
// chunk gates and the fp32 triangular solve as device functions, and the forward's first two steps
// (prepare W and U0, the inter-chunk scan), which the backward re-runs for the chunk-start states.
// Scratch layouts: chunk matrices (B, HV, NC, 64, width) bf16 with rows = the chunk's tokens (padded
// rows hold exact zeros); state snapshots (B, HV, NC, K, V) bf16, slot c = the state at the start of
// chunk c (backward: D_c, the gradient at the end of chunk c).
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "kernels/chunk_mma.cuh"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb::gdn {

using chunk_mma::bf16x;
using chunk_mma::exp_ftz;
using chunk_mma::kC;

constexpr int kLd64 = kC + 8;               // row stride of the 64-wide bf16 tiles
constexpr int kLdF = kC + 4;                // row stride of the 64 x 64 fp32 tiles of the solve
constexpr int kSolveScratch = 3 * 16 * 17;  // floats of unit_lower_inverse's block scratch

// The two state scans (forward_scan_kernel, backward_scan_kernel) run 8 warps: warp w takes token rows
// [16 (w % 4), +16) and state rows [(w % 4) KT / 4, +KT / 4), and column half w / 4 of the VS columns
// (at VS = 16, one n-tile pair, the upper four warps only copy tiles): a chunk step is a chain of
// dependent warp products, and twice the warps, each with half the columns, shorten it.
constexpr int kScanThreads = 256;
template <int VS>
constexpr int kScanSplit = VS >= 32 ? 2 : 1;  // column halves (warp_mma takes n-tiles in pairs)

// A scan warp's share of a chunk step: chunk rows [m0, m0 + 16) and state rows [m2, m2 + KT / 4) by
// warp % 4, and where VS >= 32 the column half from nv by warp / 4. At VS = 16 the upper four warps own
// no columns (active false): they only copy tiles.
struct ScanWarp {
  int m0, m2, nv;
  bool active;
};
template <int KT, int VS>
__device__ __forceinline__ ScanWarp scan_warp(int warp) {
  const int half = warp / 4;
  return {16 * (warp % 4), (warp % 4) * (KT / 4), kScanSplit<VS> == 2 ? half * (VS / 2) : 0, half < kScanSplit<VS>};
}

struct Dims {
  int B, T, H, HV, hpg, K, V, NC;  // hpg = HV / H: value head j reads q and k of head j / hpg
};
inline Dims dims_of(const GatedDeltaDims& g) {
  return {int(g.B), int(g.T), int(g.H), int(g.HV), int(g.v_per_qk), int(g.K), int(g.V), int((g.T + kC - 1) / kC)};
}

// One warp: the gates of the chunk starting at token t0 of (b, value head j) into shared memory, lane
// l handling tokens 2l and 2l + 1: sG the chunk-local cumsum of g (padded tokens add 0), sGam =
// exp(G), sKd = exp(min(Glast - G, 0)), sBeta = beta (0 on padded tokens), sBg = beta exp(G); a null
// output is skipped. g and beta (B, T, HV) f32 point at (b, 0, j).
__device__ __forceinline__ void chunk_gates(const float* g, const float* beta, int HV, int t0, int T, float* sG,
                                            float* sGam, float* sKd, float* sBeta, float* sBg, int lane) {
  const int t = t0 + 2 * lane, n = min(kC, T - t0);
  const float x0 = t < T ? g[int64_t(t) * HV] : 0.f, x1 = t + 1 < T ? g[int64_t(t + 1) * HV] : 0.f;
  const chunk_mma::PairCumsum p = chunk_mma::chunk_cumsum(x0, x1, n, lane);
  const int r = 2 * lane;
  if (sG) sG[r] = p.G0, sG[r + 1] = p.G1;
  if (sGam) sGam[r] = exp_ftz(p.G0), sGam[r + 1] = exp_ftz(p.G1);
  if (sKd) sKd[r] = exp_ftz(fminf(p.last - p.G0, 0.f)), sKd[r + 1] = exp_ftz(fminf(p.last - p.G1, 0.f));
  if (sBeta || sBg) {
    const float b0 = t < T ? beta[int64_t(t) * HV] : 0.f, b1 = t + 1 < T ? beta[int64_t(t + 1) * HV] : 0.f;
    if (sBeta) sBeta[r] = b0, sBeta[r + 1] = b1;
    if (sBg) sBg[r] = b0 * exp_ftz(p.G0), sBg[r + 1] = b1 * exp_ftz(p.G1);
  }
}

// sX = (I + sM)^-1 for a strictly lower triangular 64 x 64 sM, both fp32 [64][kLdF] in shared memory,
// in fp32 (gated_deltanet.md 4.3 F2, 4.6 item 3): the four 16 x 16 diagonal blocks by forward
// substitution (warp a < 4 inverts block a, lane j < 16 owning column j in registers), then one
// sub-diagonal of blocks at a time, X_ab = -X_aa sum_{c=b}^{a-1} M_ac X_cb, which is exact block
// forward substitution. The blocks above the diagonal are written as zeros. sT: kSolveScratch floats.
// The caller synchronises after writing sM; this returns after a barrier, with sX complete.
template <int NTHREADS>
__device__ void unit_lower_inverse(const float* sM, float* sX, float* sT) {
  static_assert(NTHREADS >= 128 && 256 % NTHREADS == 0, "the diagonal blocks take four warps");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (warp < 4 && lane < 16) {
    const int a = warp, j = lane;
    const float* Ma = sM + 16 * a * kLdF + 16 * a;
    float x[16];  // column j of X_aa: x_r = -sum_{i<r} M_ri x_i below the unit diagonal; x_i = 0 for i < j
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < r; ++i) acc += Ma[r * kLdF + i] * x[i];
      x[r] = r == j ? 1.f : r < j ? 0.f : -acc;
    }
    float* Xa = sX + 16 * a * kLdF;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      Xa[r * kLdF + 16 * a + j] = x[r];
      for (int b = a + 1; b < 4; ++b) Xa[r * kLdF + 16 * b + j] = 0.f;
    }
  }
  __syncthreads();
  // Constant trip counts throughout, so each thread's independent dot products interleave. A thread
  // takes W adjacent columns of a block row, so one load of M (and of X_aa) serves W products: the
  // merges are bound by shared-memory loads, not FMAs. Each entry's sum runs in the same order (c,
  // then i) at any W, so 128 and 256 threads give the same bits.
  constexpr int W = 256 / NTHREADS >= 2 ? 2 : 1;
  constexpr int kPer = 256 / NTHREADS / W;  // column groups of one 16 x 16 block per thread
  constexpr int kGroups = 256 / W;          // column groups of a block
#pragma unroll
  for (int dist = 1; dist < 4; ++dist) {
    const int blocks = 4 - dist;  // (a, a - dist) for a = dist .. 3
    float acc[3 * kPer][W];
#pragma unroll
    for (int x = 0; x < blocks * kPer; ++x) {  // sT[blk] = sum_{c=b}^{a-1} M_ac X_cb
      const int e = x * NTHREADS + tid, blk = e / kGroups, rr = e / (16 / W) % 16, cc = e % (16 / W) * W;
      const int a = dist + blk, b = a - dist;
#pragma unroll
      for (int w = 0; w < W; ++w) acc[x][w] = 0.f;
#pragma unroll
      for (int c = 0; c < dist; ++c)
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const float m = sM[(16 * a + rr) * kLdF + 16 * (b + c) + i];
          const float* xr = sX + (16 * (b + c) + i) * kLdF + 16 * b + cc;
#pragma unroll
          for (int w = 0; w < W; ++w) acc[x][w] += m * xr[w];
        }
    }
#pragma unroll
    for (int x = 0; x < blocks * kPer; ++x) {
      const int e = x * NTHREADS + tid, blk = e / kGroups, rr = e / (16 / W) % 16, cc = e % (16 / W) * W;
#pragma unroll
      for (int w = 0; w < W; ++w) sT[(blk * 16 + rr) * 17 + cc + w] = acc[x][w];
    }
    __syncthreads();
#pragma unroll
    for (int x = 0; x < blocks * kPer; ++x) {  // X_ab = -X_aa sT[blk]
      const int e = x * NTHREADS + tid, blk = e / kGroups, rr = e / (16 / W) % 16, cc = e % (16 / W) * W;
      const int a = dist + blk;
#pragma unroll
      for (int w = 0; w < W; ++w) acc[x][w] = 0.f;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float xa = sX[(16 * a + rr) * kLdF + 16 * a + i];
#pragma unroll
        for (int w = 0; w < W; ++w) acc[x][w] += xa * sT[(blk * 16 + i) * 17 + cc + w];
      }
    }
#pragma unroll
    for (int x = 0; x < blocks * kPer; ++x) {
      const int e = x * NTHREADS + tid, blk = e / kGroups, rr = e / (16 / W) % 16, cc = e % (16 / W) * W;
      const int a = dist + blk, b = a - dist;
#pragma unroll
      for (int w = 0; w < W; ++w) sX[(16 * a + rr) * kLdF + 16 * b + cc + w] = -acc[x][w];
    }
    __syncthreads();
  }
}

// cp.async of the log decays g of the 64 tokens from t0 into s (zeros past T), by threads 0 .. 63;
// gb is g (B, T, HV) at (b, 0, j). A scan prefetches them with the next chunk's tiles.
__device__ __forceinline__ void copy_chunk_gates(float* s, const float* gb, int t0, int T, int HV, int tid) {
  if (tid >= kC) return;
  const int t = t0 + tid;
  flash::cp_async4(chunk_mma::smem_u32(s + tid), t < T ? gb + int64_t(t) * HV : gb, t < T);
}

// kd = exp(min(Glast - G, 0)) of rows m0 + lane / 4 and m0 + lane / 4 + 8 (a warp's accumulator rows),
// from the chunk cumsum that lane l holds for tokens 2l and 2l + 1.
__device__ __forceinline__ void row_kd(const chunk_mma::PairCumsum& gc, int m0, int lane, float (&kd)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = m0 + lane / 4 + 8 * h;
    const float G0 = __shfl_sync(0xffffffffu, gc.G0, r / 2), G1 = __shfl_sync(0xffffffffu, gc.G1, r / 2);
    kd[h] = exp_ftz(fminf(gc.last - (r % 2 ? G1 : G0), 0.f));
  }
}

template <int MT, int NT>
__device__ __forceinline__ void scale_all(float (&acc)[MT][NT][4], float f) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] *= f;
}

// Ainv = (I + M)^-1 of the chunk into sX (fp32 [64][kLdF]), M = tril(beta .* L .* (K @ K^T), -1)
// (gated_deltanet.md 4.2): sK the chunk's keys (bf16 [64][KT + 8]), sG and sBeta its gates (padded
// rows have beta 0, so their rows of M are 0). Warp w forms rows [16 (w % 4), +16) of K @ K^T and
// its 64 / (NTHREADS / 128) columns from 64 (w / 4) / (NTHREADS / 128); sM holds M, sT is scratch.
// Call after a barrier that publishes sK, sG, sBeta; returns after one that publishes sX.
template <int KT, int NTHREADS>
__device__ void chunk_inverse(const bf16x* sK, const float* sG, const float* sBeta, float* sM, float* sX, float* sT) {
  constexpr int NT = 8 * 128 / NTHREADS;  // n-tiles per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = 16 * (warp % 4), n0 = (warp / 4) * 8 * NT;
  float kk[1][NT][4];
  chunk_mma::zero(kk);
  chunk_mma::warp_mma<1, NT, KT, false, true>(kk, sK, KT + 8, m0, sK, KT + 8, n0, lane);
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + chunk_mma::frag_row(lane, e), i = n0 + ni * 8 + chunk_mma::frag_col(lane, e);
      sM[r * kLdF + i] = i < r ? sBeta[r] * exp_ftz(fminf(sG[r] - sG[i], 0.f)) * kk[0][ni][e] : 0.f;
    }
  __syncthreads();
  unit_lower_inverse<NTHREADS>(sM, sX, sT);
}

// x as a bf16 high part and the bf16 rounding of the rest: hi + lo carries about 16 mantissa bits, so a
// product with both parts keeps the fp32 solve's accuracy where a single bf16 operand would not.
__device__ __forceinline__ void split_bf16(float x, bf16x& hi, bf16x& lo) {
  hi = __float2bfloat16_rn(x);
  lo = __float2bfloat16_rn(x - __bfloat162float(hi));
}

// split_bf16 of four values into four adjacent high and low parts (8-byte aligned).
__device__ __forceinline__ void split_bf16x4(float4 x, bf16x* hi, bf16x* lo) {
  __align__(8) bf16x h[4], l[4];
  split_bf16(x.x, h[0], l[0]);
  split_bf16(x.y, h[1], l[1]);
  split_bf16(x.z, h[2], l[2]);
  split_bf16(x.w, h[3], l[3]);
  *reinterpret_cast<uint2*>(hi) = *reinterpret_cast<const uint2*>(h);
  *reinterpret_cast<uint2*>(lo) = *reinterpret_cast<const uint2*>(l);
}

// Calls f(x, y, r, col) for each pair of accumulator elements x = st[mi][ni][e], y = st[mi][ni][e + 1]
// (e = 0, 2) of the warp's [MT][NT] fragments: row r and adjacent columns col, col + 1 of the tile whose
// m-tiles start at row m0 and n-tiles at column c0. The state helpers below are this walk.
template <int MT, int NT, typename Acc, typename F>
__device__ __forceinline__ void for_fragment_pairs(Acc& st, int m0, int c0, int lane, F&& f) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2)
        f(st[mi][ni][e], st[mi][ni][e + 1], m0 + mi * 16 + chunk_mma::frag_row(lane, e),
          c0 + ni * 8 + chunk_mma::frag_col(lane, e));
}

// The warp's fp32 state fragments (m-tiles from row m0, NT n-tiles from column n0) to a bf16 tile of
// row stride ld ([rows][8 NT + 8] by default).
template <int MT, int NT>
__device__ __forceinline__ void store_state(bf16x* s, const float (&st)[MT][NT][4], int m0, int lane, int n0 = 0,
                                            int ld = NT * 8 + 8) {
  for_fragment_pairs<MT, NT>(st, m0, n0, lane, [&](float x, float y, int r, int col) {
    *reinterpret_cast<uint32_t*>(s + r * ld + col) = chunk_mma::pack_bf16(x, y);
  });
}

// The warp's fp32 state fragments to bf16 high and low parts (split_bf16), [rows][8 NT + 8] tiles each.
template <int MT, int NT>
__device__ __forceinline__ void store_state_split(bf16x* hi, bf16x* lo, const float (&st)[MT][NT][4], int m0,
                                                  int lane) {
  for_fragment_pairs<MT, NT>(st, m0, 0, lane, [&](float x, float y, int r, int col) {
    const int at = r * (NT * 8 + 8) + col;
    split_bf16(x, hi[at], lo[at]);
    split_bf16(y, hi[at + 1], lo[at + 1]);
  });
}

// The warp's fp32 state fragments (m-tiles from row m0) to columns c0 .. of a K x K matrix stored as
// bf16 high and low parts (split_bf16), hi at dst and lo at dst + K K: a segment's transition, split
// once by pass 1 so the combine copies it straight into its product tiles.
template <int MT, int NT>
__device__ __forceinline__ void store_split_fragments(const float (&st)[MT][NT][4], bf16x* dst, int K, int c0, int m0,
                                                      int lane) {
  for_fragment_pairs<MT, NT>(st, m0, c0, lane, [&](float x, float y, int r, int col) {
    if (r >= K || col >= K) return;  // K % 8 == 0: col + 1 < K as well
    bf16x h[2], l[2];
    split_bf16(x, h[0], l[0]);
    split_bf16(y, h[1], l[1]);
    const int64_t at = int64_t(r) * K + col;
    *reinterpret_cast<__nv_bfloat162*>(dst + at) = __halves2bfloat162(h[0], h[1]);
    *reinterpret_cast<__nv_bfloat162*>(dst + int64_t(K) * K + at) = __halves2bfloat162(l[0], l[1]);
  });
}

// Columns c0 .. of the K x K identity as the warp's state fragments (m-tiles from row m0): the start of
// a segment's transition (SegmentArgs).
template <int MT, int NT>
__device__ __forceinline__ void identity_fragments(float (&st)[MT][NT][4], int K, int c0, int m0, int lane) {
  for_fragment_pairs<MT, NT>(st, m0, c0, lane, [&](float& x, float& y, int r, int col) {
    x = r == col && r < K ? 1.f : 0.f;
    y = r == col + 1 && r < K ? 1.f : 0.f;
  });
}

// The warp's fp32 state fragments (m-tiles from row m0) from, or to, columns v0 .. of an fp32 (K, V)
// state; rows >= K and columns >= V read as zero and are not written. A null src reads zeros.
template <int MT, int NT>
__device__ __forceinline__ void load_state_fragments(float (&st)[MT][NT][4], const float* src, int K, int V, int v0,
                                                     int m0, int lane) {
  for_fragment_pairs<MT, NT>(st, m0, v0, lane, [&](float& x, float& y, int r, int col) {
    // V % 8 == 0: col + 1 < V as well
    const float2 v = src && r < K && col < V ? *reinterpret_cast<const float2*>(src + int64_t(r) * V + col)
                                             : make_float2(0.f, 0.f);
    x = v.x, y = v.y;
  });
}
template <int MT, int NT>
__device__ __forceinline__ void store_state_fragments(const float (&st)[MT][NT][4], float* dst, int K, int V, int v0,
                                                      int m0, int lane) {
  for_fragment_pairs<MT, NT>(st, m0, v0, lane, [&](float x, float y, int r, int col) {
    if (r < K && col < V) *reinterpret_cast<float2*>(dst + int64_t(r) * V + col) = make_float2(x, y);
  });
}

// A bf16 [ROWS][WIDTH + 8] tile to rows < rows_valid, columns < cols_valid of a row-major bf16 matrix
// (row stride ld), in 16-byte pieces; cols_valid % 8 == 0. The snapshot writes of the scans.
template <int ROWS, int WIDTH, int NTHREADS>
__device__ __forceinline__ void store_tile(bf16x* dst, int64_t ld, const bf16x* s, int rows_valid, int cols_valid) {
  constexpr int kVec = WIDTH / 8;
  for (int x = threadIdx.x; x < ROWS * kVec; x += NTHREADS) {
    const int r = x / kVec, c8 = (x % kVec) * 8;
    if (r < rows_valid && c8 < cols_valid)
      *reinterpret_cast<uint4*>(dst + r * ld + c8) = *reinterpret_cast<const uint4*>(s + r * (WIDTH + 8) + c8);
  }
}

// Calls f with the padded K width KT.
template <typename F>
void visit_kt(int K, F&& f) {
  if (K <= 64) return f(std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 128>{});
}

// Calls f with a scan's column tile VS (ScanPlan::vs), or kMax where vs is wider (the wider tiles are then
// not instantiated).
template <int kMax = 128, typename F>
void visit_vs(int vs, F&& f) {
  static_assert(kMax == 64 || kMax == 128);
  if (vs == 16) return f(std::integral_constant<int, 16>{});
  if (vs == 32) return f(std::integral_constant<int, 32>{});
  if constexpr (kMax == 64) return f(std::integral_constant<int, 64>{});
  if constexpr (kMax == 128) {
    if (vs == 64) return f(std::integral_constant<int, 64>{});
    return f(std::integral_constant<int, 128>{});
  }
}

// Smem<KT, VS>::kBytes at head dim K and column tile vs: a scan's shared memory, as scan_plan weighs it.
template <template <int, int> class Smem>
size_t scan_smem_bytes(int K, int vs) {
  size_t bytes = 0;
  visit_kt(K, [&](auto kt) {
    visit_vs(vs, [&](auto vt) { bytes = Smem<decltype(kt)::value, decltype(vt)::value>::kBytes; });
  });
  return bytes;
}

// HYBRID_GDN_SEGMENTS, read at every call (the tests switch it): -1 unset (the model's choice), 0 one
// sequential scan, N >= 2 N segments.
inline int forced_segments() {
  const char* e = std::getenv("HYBRID_GDN_SEGMENTS");
  return e ? std::max(0, std::atoi(e)) : -1;
}

// How the forward scan (F3) and the reverse scan (stage 1) run. Both are affine in the state per chunk:
// S_{c+1} = A_c S_c + B_c with A_c = gam_n I - K^T diag(kd) W (K x K), and D_{c-1} = A_c^T D_c + B'_c.
// With nseg > 1 the chunks are split into segments of len chunks, scanned in three passes
// (docs/layers/gated_deltanet.md): (1) every segment in parallel from a zero state, keeping only its
// end E_s, and its transition Phi_s (the product of its A_c, or A_c^T) as K more state columns that
// start from the identity and get no input; the segment scanned first starts from the true state and
// writes what a single scan writes; (2) segment_combine_kernel: start_{s+1} = Phi_s start_s + E_s in
// scan order, sequential over the segments only; (3) every other segment again from its true start,
// writing what a single scan writes.
struct ScanPlan {
  int vs;        // state columns per block
  int nseg;      // segments (1: one sequential scan per column tile)
  int len;       // chunks per segment (the last may be shorter)
  int64_t cost;  // the critical path in chunk steps (scan_plan's model)
};

// Blocks of a scan kernel with `smem` bytes of shared memory that run at once: the SMs times the blocks
// one SM holds (1 KiB more per block, what the runtime reserves).
inline int64_t scan_slots(int device, size_t smem) {
  const int64_t smem_sm = chunk_mma::device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>(device);
  return chunk_mma::sm_count(device) * std::max<int64_t>(1, smem_sm / int64_t(smem + 1024));
}

// The chunks per segment that split NC chunks into exactly `want` segments, or 0 where no length does:
// 10 chunks in 6 would take segments of 2, which make 5 (a smaller count's plan).
inline int segment_len(int NC, int want) {
  const int len = (NC + want - 1) / want;
  return (NC + len - 1) / len == want ? len : 0;
}

// The plan with the shortest critical path in chunk steps, counting a step as the same latency at any
// VS (the steps are latency-bound: a few dependent warp products, a barrier, the prefetch) and blocks
// beyond what fits the SMs at once (smem_of(vs): the scan's shared memory) as further waves:
//   single scan   NC waves(B HV tiles)
//   segmented     len (waves(pass 1 blocks) + waves(pass 3 blocks)) + nseg (the combine's steps)
// Ties keep the single scan, and the narrower tile while every block fits at once (a shorter step),
// else the one with fewer blocks (less repeated loading of the K-side tiles). HYBRID_GDN_SEGMENTS=0
// keeps the single scan (A/B timing, bisecting a mismatch); =N (>= 2) takes N segments where there are
// N chunks (timing the model's choice against others). fixed_nseg >= 1: that segment count, only VS is
// chosen; phi_given: the segments' transitions are given (the backward's, from the forward's Phi), so
// pass 1 forms no Phi.
template <typename SmemOf>
ScanPlan scan_plan(const Dims& d, int device, SmemOf&& smem_of, int fixed_nseg = 0, bool phi_given = false) {
  const int forced = forced_segments();
  const bool segments = forced != 0;
  const int64_t pairs = int64_t(d.B) * d.HV;
  ScanPlan best{64, 1, d.NC, -1};
  int64_t best_blocks = 0;
  bool best_fits = false;
  for (int vs : {16, 32, 64, 128}) {
    const int64_t slots = scan_slots(device, smem_of(vs));
    const int64_t vt = (d.V + vs - 1) / vs, kt = (d.K + vs - 1) / vs;
    auto waves = [&](int64_t blocks) { return (blocks + slots - 1) / slots; };
    auto consider = [&](int nseg, int len, int64_t cost, int64_t blocks, bool fits) {
      const bool tie_wins = cost == best.cost && !(fits && best_fits) && blocks < best_blocks;
      if (best.cost < 0 || cost < best.cost || tie_wins)
        best = {vs, nseg, len, cost}, best_blocks = blocks, best_fits = fits;
    };
    if (fixed_nseg == 1 || (fixed_nseg == 0 && (forced < 2 || forced > d.NC)))
      consider(1, d.NC, d.NC * waves(pairs * vt), pairs * vt, waves(pairs * vt) == 1);
    for (int want = 2; (fixed_nseg >= 2 || (fixed_nseg == 0 && segments)) && want <= std::min(d.NC, 64); ++want) {
      const int len = segment_len(d.NC, want), nseg = want;
      if (len == 0) continue;
      if (fixed_nseg >= 2 ? nseg != fixed_nseg : forced >= 2 && forced <= d.NC && nseg != forced) continue;
      // Pass 1 skips E of the last segment and Phi of the first and last (SegmentArgs).
      const int64_t phis = phi_given ? 0 : (nseg - 2) * kt;
      const int64_t pass1 = pairs * ((nseg - 1) * vt + phis), pass3 = pairs * (nseg - 1) * vt;
      consider(nseg, len, len * (waves(pass1) + waves(pass3)) + nseg, pass1 + pass3,
               waves(pass1) == 1 && waves(pass3) == 1);
    }
  }
  return best;
}

// The scans' shared memory at column tile vs, as scan_plan weighs it.
size_t forward_scan_smem(int K, int vs);
size_t backward_scan_smem(int K, int vs);

// The forward scan's plan, its segments chosen for both scans: the backward takes the forward's segments
// and transitions (run_scan), so a segment count is worth the forward's steps plus the backward's without
// Phi tiles; one scan each is worth both single scans' (or the backward's own plan's) steps.
// HYBRID_GDN_SEGMENTS leaves both scans to it.
inline ScanPlan forward_scan_plan(const Dims& d, int device) {
  auto fwd_smem = [&](int vs) { return forward_scan_smem(d.K, vs); };
  auto bwd_smem = [&](int vs) { return backward_scan_smem(d.K, vs); };
  if (forced_segments() >= 0) return scan_plan(d, device, fwd_smem);
  // The search below runs scan_plan up to ~130 times, and a layer's shape comes back every step: the plan
  // is kept per shape (the shared memory weighed depends on K alone).
  static std::mutex mu;
  static std::map<std::array<int, 6>, ScanPlan> plans;
  const std::array<int, 6> key{device, d.B, d.HV, d.K, d.V, d.NC};
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = plans.find(key); it != plans.end()) return it->second;
  }
  ScanPlan best = scan_plan(d, device, fwd_smem, 1);
  int64_t best_cost = best.cost + scan_plan(d, device, bwd_smem).cost;
  const int64_t single = best_cost;
  for (int want = 2; want <= std::min(d.NC, 64); ++want) {
    if (segment_len(d.NC, want) == 0) continue;
    const ScanPlan f = scan_plan(d, device, fwd_smem, want);
    const int64_t cost = f.cost + scan_plan(d, device, bwd_smem, want, true).cost;
    // The model counts steps only, and the combine and the Phi tiles cost more than theirs; the single
    // scan can also run in pieces beside the per-chunk kernels (scan_pieces). On the H200 at B T = 32768:
    // K = V = 64 at 4k, three segments (116 steps against the single scan's 128) ran 1.376 ms against
    // 1.341; NAtS-L's shape at 8k, three segments (178 steps against 217) 2.134 against 1.976 in pieces.
    // So segments must save a fifth of the steps.
    if (5 * cost < 4 * single && cost < best_cost) best = f, best_cost = cost;
  }
  const std::lock_guard<std::mutex> lock(mu);
  plans.emplace(key, best);
  return best;
}

// What a scan kernel's block reads of the plan. The block's segment is first + blockIdx.z of nseg.
struct SegmentArgs {
  int len;       // chunks per segment
  int nseg;      // segments in all
  int first;     // the segment of blockIdx.z = 0 (a piece is launched alone: run_pieces)
  bool local;    // pass 1: blockIdx.x past the V column tiles scans a column tile of Phi
  bool chain;    // pieces: the block also writes its end into `start` at the segment scanned next
  float* end;    // pass 1 out: (B HV, nseg, K, V) f32, E of each segment
  bf16x* phi;    // pass 1 out: (B HV, nseg, 2, K, K) bf16, Phi of each segment (high, low parts)
  float* start;  // pass 3, pieces: (B HV, nseg, K, V) f32, the true start of each segment but the first scanned
};

// Pass 2 on the end states and transitions of pass 1 (reverse: the backward's order, last segment first;
// transposed: each Phi_s is read as its transpose, the forward's transitions in the backward).
void combine_segments(const ScanPlan& p, const Dims& d, const float* end, const bf16x* phi, float* start, bool reverse,
                      bool transposed, cudaStream_t stream);

// Runs a scan under the plan beside the per-chunk kernels around it. produce(c0, c1) queues on `stream`
// what makes the inputs of chunks [c0, c1) (the prepare kernel; nothing in the backward),
// launch(grid, seg, s) launches the scan kernel on stream s, consume(c0, c1) queues on `stream` what
// reads the scan's outputs for those chunks. One scan, or segments of fewer than kBesideLen chunks: all
// on `stream`, in that order. Longer segments: pass 1 of each segment on its own scan stream (its rank
// in scan order mod kScanStreams) once the segment is produced, so the first segments' pass 1 runs
// beside the producer of the later ones and beside each other; the combine and pass 3 on scan stream 0
// once every pass 1 is done; the segment scanned first (pass 1 wrote its outputs) is consumed once its
// pass 1 is, beside the combine and pass 3, and the rest once pass 3 is. On return `stream` has waited
// for all of it, so scratch freed afterwards is not handed out again under it. phi: undefined on entry,
// it receives the segments' transitions (when there are segments); defined, it holds the forward's, to
// be read transposed, and pass 1 forms none (the plan's segments are its).
// Segments shorter than this run their passes one after another on `stream`: side by side, their pass 1
// launches (short chains, few blocks each) slowed the prepare kernel more than they hid (H200, B T =
// 32768, K = V = 64: 29 chunks a segment at 16k, 1.497 -> 1.606 ms; 26 at 8k, 1.434 -> 1.492; in two
// groups of segments, one launch each, 1.522 and 1.470), while NAtS-L's shape at 16k (86 chunks a
// segment) gained (2.586 -> 2.390).
constexpr int kBesideLen = 64;
template <int VS, typename Produce, typename Launch, typename Consume>
void run_scan(const ScanPlan& p, const Dims& d, bool reverse, Device dev, cudaStream_t stream, Tensor& phi,
              Produce&& produce, Launch&& launch, Consume&& consume) {
  const unsigned bhs = unsigned(d.B * d.HV), vt = unsigned((d.V + VS - 1) / VS);
  if (p.nseg == 1) {
    produce(0, d.NC);
    launch(dim3(vt, bhs, 1), SegmentArgs{d.NC, 1, 0, false, false, nullptr, nullptr, nullptr}, stream);
    consume(0, d.NC);
    return;
  }
  const bool given = phi.defined();
  HYB_CHECK(!given || phi.shape()[1] == p.nseg, "gated_delta_rule: the given segment transitions are for ",
            phi.shape()[1], " segments, the plan has ", p.nseg);
  const Tensor end = Tensor::empty({d.B * d.HV, p.nseg, d.K, d.V}, DType::f32, dev);
  if (!given) phi = Tensor::empty({d.B * d.HV, p.nseg, 2, d.K, d.K}, DType::bf16, dev);
  const Tensor start = Tensor::empty({d.B * d.HV, p.nseg, d.K, d.V}, DType::f32, dev);
  const unsigned kt = unsigned((d.K + VS - 1) / VS);
  const SegmentArgs pass3{p.len, p.nseg, reverse ? 0 : 1, false, false, nullptr, nullptr, start.data<float>()};
  if (p.len < kBesideLen) {
    produce(0, d.NC);
    launch(dim3(vt + (p.nseg > 2 && !given ? kt : 0u), bhs, unsigned(p.nseg)),  // Phi: the inner segments
           SegmentArgs{p.len, p.nseg, 0, true, false, end.data<float>(), given ? nullptr : chunk_mma::bp_mut(phi),
                       nullptr},
           stream);
    combine_segments(p, d, end.data<float>(), chunk_mma::bp(phi), start.data<float>(), reverse, given, stream);
    launch(dim3(vt, bhs, unsigned(p.nseg - 1)), pass3, stream);  // every segment but the one scanned first
    consume(0, d.NC);
    return;
  }
  const int first = reverse ? p.nseg - 1 : 0, last = reverse ? 0 : p.nseg - 1;
  auto chunks = [&](int s) { return std::pair{s * p.len, std::min(d.NC, (s + 1) * p.len)}; };
  const cudaStream_t chain = cuda_stream(dev.index, StreamRole::scan, 0);
  std::vector<CudaEvent> produced(size_t(p.nseg)), ended(size_t(p.nseg));
  for (int i = 0; i < p.nseg; ++i) {
    const int s = reverse ? p.nseg - 1 - i : i;
    const auto [c0, c1] = chunks(s);
    produce(c0, c1);
    produced[size_t(s)].record(stream);
    produced[size_t(s)].block(chain);  // pass 3 reads every segment
    if (s == last) continue;           // its end is not needed: no pass 1
    const cudaStream_t side = cuda_stream(dev.index, StreamRole::scan, i % kScanStreams);
    produced[size_t(s)].block(side);
    const unsigned x = vt + (s != first && !given ? kt : 0u);  // Phi column tiles: the inner segments
    launch(dim3(x, bhs, 1),
           SegmentArgs{p.len, p.nseg, s, true, false, end.data<float>(), given ? nullptr : chunk_mma::bp_mut(phi),
                       nullptr},
           side);
    ended[size_t(s)].record(side);
    ended[size_t(s)].block(chain);
  }
  combine_segments(p, d, end.data<float>(), chunk_mma::bp(phi), start.data<float>(), reverse, given, chain);
  launch(dim3(vt, bhs, unsigned(p.nseg - 1)), pass3, chain);
  CudaEvent done;
  done.record(chain);
  ended[size_t(first)].block(stream);
  const auto [f0, f1] = chunks(first);
  consume(f0, f1);
  done.block(stream);
  if (reverse)
    consume(0, first * p.len);
  else
    consume(f1, d.NC);
}

// Pieces: with few (b, value head) pairs and a long sequence a scan is a chain of NC latency-bound steps
// on a few blocks, which leaves most of every SM idle, while the per-chunk kernels around it (prepare and
// output in the forward, the intra-chunk backward) are parallel and wait for it. Cut into pieces of len
// chunks, they run side by side (run_pieces): a piece's scan starts once the producer of its chunks is
// done, and their consumer once it is, so the scan of piece i runs beside the producer of piece i + 1
// and the consumer of piece i - 1, and the state passes from piece to piece through SegmentArgs::start.
struct ScanPieces {
  int len;  // chunks per piece (the last may be shorter)
  int n;    // pieces; 0: none (the scan plan's single scan or segments)
};

// HYBRID_GDN_PIECES, read at every call (the tests switch it): unset, the choice below; 0, no pieces; N,
// pieces of N chunks. HYBRID_GDN_SEGMENTS (forcing the plan's segment count) turns pieces off.
// The choice, where the plan is one scan: pieces of at least 64 chunks where it has 128 chunks or more;
// two pieces where it has 32 or more and its last wave of blocks leaves a quarter of the SMs idle (the
// per-chunk kernels of one piece then run there beside the scan of the other). Each piece costs a scan
// launch that waits for blocks of the per-chunk kernels to leave room, and beside them a scan step is
// slower, so pieces lose to the plan's segments (H200, B T = 32768, docs/performance.md: K = V = 64 at
// 8k and 16k, 1.434 -> 1.611 and 1.497 -> 1.806 ms in pieces of 64 chunks) and where the scan fills
// every SM, and win over one long scan or one that leaves SMs idle (NAtS-L's shape, 96 scan blocks of
// 128 columns at 4k, 192 at 2k on 132 SMs: 1.860 -> 1.792 and 1.856 -> 1.796 ms in two pieces; four
// were slower, 1.901 at 4k).
inline ScanPieces scan_pieces(const Dims& d, int device) {
  int len = 0;
  if (const char* e = std::getenv("HYBRID_GDN_PIECES")) {
    len = std::max(0, std::atoi(e));
  } else if (forced_segments() < 0 && d.NC >= 32) {
    const ScanPlan p = forward_scan_plan(d, device);
    if (p.nseg == 1 && d.NC >= 128) {
      len = std::max(64, (d.NC + 3) / 4);
    } else if (p.nseg == 1) {
      const int64_t sms = chunk_mma::sm_count(device), slots = scan_slots(device, forward_scan_smem(d.K, p.vs));
      const int64_t blocks = int64_t(d.B) * d.HV * ((d.V + p.vs - 1) / p.vs), last = (blocks - 1) % slots + 1;
      if (4 * (sms - std::min(sms, last)) >= sms) len = (d.NC + 1) / 2;
    }
  }
  if (len == 0 || len >= d.NC) return {d.NC, 0};
  return {len, (d.NC + len - 1) / len};
}

// Runs a scan in pieces, in scan order (reverse: the last piece first). Per piece: produce(c0, c1) on
// `stream`; then launch(grid, seg, scan stream), a launch of the scan kernel on the chunks [c0, c1),
// once that is done; then consume(c0, c1) on `stream` once the piece's scan is done. Every producer is
// queued before the first consumer: the scan waits on producers, consumers only trail it. The scan
// stream has the higher priority, so a piece's blocks are placed before the waiting per-chunk blocks.
// On return `stream` has waited for every piece's scan, so scratch freed afterwards (the carried
// starts, what the scans read) is not handed out again under them.
template <int VS, typename Produce, typename Launch, typename Consume>
void run_pieces(const ScanPieces& p, const Dims& d, bool reverse, Device dev, cudaStream_t stream, Produce&& produce,
                Launch&& launch, Consume&& consume) {
  const unsigned bhs = unsigned(d.B * d.HV), vt = unsigned((d.V + VS - 1) / VS);
  const Tensor start = Tensor::empty({d.B * d.HV, p.n, d.K, d.V}, DType::f32, dev);
  const cudaStream_t side = cuda_stream(dev.index, StreamRole::scan, 0);
  std::vector<CudaEvent> produced(size_t(p.n)), scanned(size_t(p.n));
  auto piece = [&](int i) { return reverse ? p.n - 1 - i : i; };
  for (int i = 0; i < p.n; ++i) {
    const int s = piece(i), c0 = s * p.len;
    produce(c0, std::min(d.NC, c0 + p.len));
    produced[size_t(s)].record(stream);
    produced[size_t(s)].block(side);
    launch(dim3(vt, bhs, 1), SegmentArgs{p.len, p.n, s, false, true, nullptr, nullptr, start.data<float>()}, side);
    scanned[size_t(s)].record(side);
  }
  for (int i = 0; i < p.n; ++i) {
    const int s = piece(i), c0 = s * p.len;
    scanned[size_t(s)].block(stream);
    consume(c0, std::min(d.NC, c0 + p.len));
  }
}

// What the prepare kernel and the forward scan leave for the output kernel and the backward (U is
// written as U0 = Ainv @ (beta .* V) first and replaced in place by the scan).
using WyScratch = GatedDeltaChunkScratch;

// F2 and F3 (gated_deltanet.md 4.3: wy_prepare_kernel, forward_scan_kernel) on bf16 q, k, v (16-byte aligned rows) and
// f32 g, beta, S0: W, U and the chunk-start states, the final state into final_state when it is defined (f32 (B, HV, K,
// V)). S0 may be undefined (zeros). The backward's stage 0 (4.4).
// keep_ainv: also Ainv's high and low parts (WyScratch::Ainv), for a backward that will not solve again.
// consume(w, c0, c1), when given, is queued on `stream` once the chunks [c0, c1) have their U and
// states in w: per piece (run_pieces), or once for every chunk.
using WyConsumer = std::function<void(const WyScratch& w, int c0, int c1)>;
WyScratch run_wy(const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& g, const Tensor& S0,
                 const Tensor& final_state, const Dims& d, bool keep_ainv, cudaStream_t stream,
                 const WyConsumer& consume);

// The largest shared memory of the forward's and of the backward's kernels at this K, over every
// column tile of the scans, for gated_delta_rule_fused_supported.
size_t forward_smem_max(int K);
size_t backward_smem_max(int K);

}  // namespace hyb::gdn
