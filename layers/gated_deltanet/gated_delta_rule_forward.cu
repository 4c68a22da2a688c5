// The fused bf16 CUDA forward of the gated delta rule (gated_deltanet.md 4.2-4.3), mma.sync m16n8k16
// on bf16 shared-memory tiles with fp32 accumulation, chunks of 64 tokens, in three kernels:
//   wy_prepare_kernel      F2 per (chunk, b, value head) in parallel: M = tril(beta .* L .* (K @ K^T), -1)
//                          and Ainv = (I + M)^-1 in fp32, W = Ainv @ (beta gam .* K), U0 = Ainv @ (beta .* V)
//                          with Ainv split into bf16 high and low parts (4.6 item 3);
//   forward_scan_kernel    F3, sequential over the chunks per (b, value head, VS state columns), the
//                          state (K x VS) in fp32 registers: U = U0 - W @ S, S <- gam_n S + K^T @ (kd .* U);
//                          writes U over U0 and the bf16 snapshot of each chunk-start state; with few
//                          (b, value head) pairs it runs per segment of chunks in three passes, the
//                          segment starts joined by segment_combine_kernel (ScanPlan);
//   forward_output_kernel  F4 per chunk in parallel: O = scale (gam .* (Q @ S_c) + (L .* (Q @ K^T)) @ U).
// The gates (G, gam, kd) are derived per chunk inside each kernel by a one-warp cumsum (64 tokens are
// one warp), so no gate tensors are stored. K is padded to KT in {64, 128}; V runs in 64-wide tiles
// (prepare, output) or VS-wide blocks (scan); padded rows and columns are zero and change no product.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_stream.h"
#include "core/env_switch.h"
#include "layers/gated_deltanet/gated_delta_rule_cuda.cuh"
#include "layers/gated_deltanet/gated_delta_rule_op.h"

namespace hyb {
namespace gdn {
namespace {

using chunk_mma::bp;
using chunk_mma::bp_mut;
using chunk_mma::chunk_cumsum;
using chunk_mma::frag_col;
using chunk_mma::frag_row;
using chunk_mma::pack_bf16;
using chunk_mma::set_smem;
using chunk_mma::store_masked;
using chunk_mma::warp_mma;
using chunk_mma::warp_mma_range;
using chunk_mma::zero;

constexpr int kThreads = 128;  // 4 warps; warp w owns token rows [16w, 16w + 16) (combine: KT / 4 state rows)

// ---------------------------------------------------------------------------------------------------
// F2: W and U0 per chunk.

template <int KT>
struct WyPrepareSmem {
  static constexpr size_t kTile = size_t(kC) * kLd64 * 2;
  static constexpr size_t kK = 0;                               // bf16 [64][KT + 8]
  static constexpr size_t kV = kK + size_t(kC) * (KT + 8) * 2;  // bf16 [64][kLd64], one V tile
  static constexpr size_t kX = kV + kTile;                      // f32 [64][kLdF]: Ainv
  static constexpr size_t kM = kX + size_t(kC) * kLdF * 4;      // f32 [64][kLdF]: M, until the solve returns
  static constexpr size_t kT = kM + size_t(kC) * kLdF * 4;      // f32 kSolveScratch, until the solve returns
  // After the solve, over M and its scratch: Ainv diag(beta gam), then Ainv diag(beta), high and low parts,
  // bf16 [64][kLd64] each. The reuse keeps the block at 56 KiB at KT = 64: four blocks an SM, not three.
  static constexpr size_t kAhi = kM, kAlo = kAhi + kTile;
  static_assert(kAlo + kTile <= kT + size_t(kSolveScratch) * 4, "Ainv's parts fit over M and the scratch");
  static constexpr size_t kG = kT + size_t(kSolveScratch) * 4;  // f32 [64] each: G, beta, beta gam
  static constexpr size_t kBytes = kG + 3 * kC * 4;
};

struct WyPrepareArgs {
  const bf16x *k, *v;     // (B, T, H, K), (B, T, HV, V)
  const float *g, *beta;  // (B, T, HV)
  bf16x *W, *U;           // (B, HV, NC, 64, K), (B, HV, NC, 64, V)
  bf16x* Ainv;            // (B, HV, NC, 2, 64, 64) high and low parts, or null
};

// Grid (chunks, B HV), kThreads, chunk c0 + blockIdx.x. smem WyPrepareSmem<KT> (56 KiB at KT = 64: four
// blocks per SM).
// Ainv is scaled by the token factors before the split (Ainv diag(beta gam), then Ainv diag(beta) in
// the same tiles), so the products read the exact bf16 K and V tiles and only the solve's result is split.
template <int KT>
__global__ void __launch_bounds__(kThreads) wy_prepare_kernel(WyPrepareArgs a, Dims d, int c0) {
  using L = WyPrepareSmem<KT>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sK = reinterpret_cast<bf16x*>(smem + L::kK);
  bf16x* sV = reinterpret_cast<bf16x*>(smem + L::kV);
  bf16x* sAhi = reinterpret_cast<bf16x*>(smem + L::kAhi);
  bf16x* sAlo = reinterpret_cast<bf16x*>(smem + L::kAlo);
  float* sM = reinterpret_cast<float*>(smem + L::kM);
  float* sX = reinterpret_cast<float*>(smem + L::kX);
  float* sT = reinterpret_cast<float*>(smem + L::kT);
  float* sG = reinterpret_cast<float*>(smem + L::kG);
  float* sBeta = sG + kC;
  float* sBg = sBeta + kC;
  const int c = c0 + blockIdx.x, bh = blockIdx.y, b = bh / d.HV, j = bh % d.HV, qh = j / d.hpg, t0 = c * kC;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = 16 * warp;
  const bf16x* vb = a.v + (int64_t(b) * d.T * d.HV + j) * d.V;
  const int64_t v_row = int64_t(d.HV) * d.V;
  // K and the first V tile are copied while warp 0 forms the gates; V waits in its own tile until
  // the solve is done.
  flash::load_tile<kC, KT, kThreads, true>(sK, a.k + (int64_t(b) * d.T * d.H + qh) * d.K, int64_t(d.H) * d.K, t0, d.T,
                                           d.K, threadIdx.x);
  flash::load_tile<kC, 64, kThreads, true>(sV, vb, v_row, t0, d.T, d.V, threadIdx.x);
  flash::cp_async_commit();
  if (warp == 0) {
    const int64_t gate_off = int64_t(b) * d.T * d.HV + j;
    chunk_gates(a.g + gate_off, a.beta + gate_off, d.HV, t0, d.T, sG, nullptr, nullptr, sBeta, sBg, lane);
  }
  flash::cp_async_wait<0>();
  __syncthreads();
  chunk_inverse<KT, kThreads>(sK, sG, sBeta, sM, sX, sT);
  const int64_t z = int64_t(bh) * d.NC + c;  // chunk index of the scratch
  // Four adjacent columns a thread (16-byte loads, 8-byte stores): one element at a time, these passes
  // issued a shared-memory load and two 2-byte stores per element.
  if (a.Ainv) {  // the backward's form of Ainv: unscaled, high and low parts
    bf16x* out = a.Ainv + z * 2 * kC * kC;
    for (int e = 4 * threadIdx.x; e < kC * kC; e += 4 * kThreads)
      split_bf16x4(*reinterpret_cast<const float4*>(sX + (e / kC) * kLdF + e % kC), out + e, out + kC * kC + e);
  }
  auto split_scaled = [&](const float* colscale) {  // Ainv diag(colscale) into sAhi + sAlo
    for (int e = 4 * threadIdx.x; e < kC * kC; e += 4 * kThreads) {
      const int r = e / kC, i = e % kC;
      const float4 x = *reinterpret_cast<const float4*>(sX + r * kLdF + i);
      const float4 f = *reinterpret_cast<const float4*>(colscale + i);
      split_bf16x4(make_float4(x.x * f.x, x.y * f.y, x.z * f.z, x.w * f.w), sAhi + r * kLd64 + i,
                   sAlo + r * kLd64 + i);
    }
  };
  split_scaled(sBg);
  __syncthreads();
  {                                          // W = (Ainv diag(beta gam)) @ K
    float w[1][KT / 8][4];
    zero(w);
    // Ainv is lower triangular: row r reads tokens <= r only (the same bits as the full product)
    warp_mma_range<1, KT / 8, false, false>(w, sAhi, kLd64, m0, sK, KT + 8, 0, 0, m0 + 16, lane);
    warp_mma_range<1, KT / 8, false, false>(w, sAlo, kLd64, m0, sK, KT + 8, 0, 0, m0 + 16, lane);
    bf16x* Wc = a.W + z * kC * d.K;
#pragma unroll
    for (int ni = 0; ni < KT / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + frag_row(lane, e), col = ni * 8 + frag_col(lane, e);
        if (col < d.K) *reinterpret_cast<uint32_t*>(Wc + r * d.K + col) = pack_bf16(w[0][ni][e], w[0][ni][e + 1]);
      }
  }
  __syncthreads();  // every warp is done with Ainv diag(beta gam)
  split_scaled(sBeta);
  bf16x* Uc = a.U + z * kC * d.V;
  for (int v0 = 0; v0 < d.V; v0 += 64) {  // U0 = (Ainv diag(beta)) @ V, one 64-column tile at a time
    if (v0) {                             // the first tile came with K
      __syncthreads();                    // every warp is done with the previous tile
      flash::load_tile<kC, 64, kThreads, true>(sV, vb + v0, v_row, t0, d.T, d.V - v0, threadIdx.x);
      flash::cp_async_commit();
      flash::cp_async_wait<0>();
    }
    __syncthreads();  // the V tile (and, the first time, Ainv diag(beta)) complete
    float u[1][8][4];
    zero(u);
    warp_mma_range<1, 8, false, false>(u, sAhi, kLd64, m0, sV, kLd64, 0, 0, m0 + 16, lane);
    warp_mma_range<1, 8, false, false>(u, sAlo, kLd64, m0, sV, kLd64, 0, 0, m0 + 16, lane);
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + frag_row(lane, e), col = v0 + ni * 8 + frag_col(lane, e);
        if (col < d.V) *reinterpret_cast<uint32_t*>(Uc + r * d.V + col) = pack_bf16(u[0][ni][e], u[0][ni][e + 1]);
      }
  }
}

// ---------------------------------------------------------------------------------------------------
// F3: the inter-chunk recurrence.

template <int KT, int VS>
struct ForwardScanSmem {
  static constexpr size_t kKTile = size_t(kC) * (KT + 8) * 2, kVTile = size_t(kC) * (VS + 8) * 2;
  static constexpr int kStages = 3;  // chunk buffers: the one computed and the next two in flight
  static constexpr size_t kBuf = 2 * kKTile + kVTile + kC * 4;   // one prefetch stage: W, K, U0, raw g
  static constexpr size_t kW = 0;                                // + p kBuf: bf16 [64][KT + 8]
  static constexpr size_t kK = kKTile;                           // + p kBuf: bf16 [64][KT + 8]
  static constexpr size_t kU0 = 2 * kKTile;                      // + p kBuf: bf16 [64][VS + 8]
  static constexpr size_t kGraw = 2 * kKTile + kVTile;           // + p kBuf: f32 [64]
  static constexpr size_t kS = kStages * kBuf;                   // bf16 [KT][VS + 8]: S_c
  static constexpr size_t kUk = kS + size_t(KT) * (VS + 8) * 2;  // bf16 [64][VS + 8]: kd .* U
  static constexpr size_t kBytes = kUk + kVTile;
};

struct ForwardScanArgs {
  const bf16x* k;      // (B, T, H, K)
  const bf16x* W;      // (B, HV, NC, 64, K)
  bf16x* U;            // (B, HV, NC, 64, V): U0 in, U out
  const float* g;      // (B, T, HV)
  const float* S0;     // (B, HV, K, V) or null (zeros)
  bf16x* S;            // (B, HV, NC, K, V): S_c out
  float* final_state;  // (B, HV, K, V) or null
};

// Grid (ceil(V / VS) [+ ceil(K / VS) in pass 1], B HV, segments from seg.first), kScanThreads (warps as kScanThreads
// says); smem ForwardScanSmem<KT, VS> (100 KiB at KT = VS = 64). Per chunk of the block's segment:
//   -U = -U0 + W @ S                 warp w: token rows [16 (w % 4), +16), reduction over KT
//   S  = gam_n S + K^T @ (kd .* U)   warp w: state rows [(w % 4) KT / 4, +KT / 4), reduction over 64
// each on the warp's column half. The next two chunks' W, K, U0 and g are copied (cp.async) while this
// one computes: a chunk step (a few dependent warp products) can be shorter than a global load under
// load, and with few blocks per SM nothing else hides the wait. Each warp derives the chunk's gates
// itself (a one-warp cumsum), so no barrier guards them. Pass 1 (seg.local) writes no U and no
// snapshots, only the segment's end, except in the first segment, which starts from the true state:
// it writes what pass 3 would (pass 3 skips it); a Phi column tile has U0 = 0 and starts from the
// identity. A piece
// (seg.chain) also leaves its end as the next piece's start.
template <int KT, int VS>
__global__ void __launch_bounds__(kScanThreads) forward_scan_kernel(ForwardScanArgs a, SegmentArgs seg, Dims d) {
  using L = ForwardScanSmem<KT, VS>;
  constexpr int kSplit = kScanSplit<VS>;
  constexpr int NT = VS / 8 / kSplit, MT2 = KT / 64;  // n-tiles of the warp's columns; state m-tiles
  constexpr int kU0Threads = VS == 16 ? 128 : kScanThreads;  // 64 x 16 is 128 pieces
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sS = reinterpret_cast<bf16x*>(smem + L::kS);
  bf16x* sUk = reinterpret_cast<bf16x*>(smem + L::kUk);
  auto buf = [&](int p, size_t off) { return smem + p * L::kBuf + off; };
  const int nseg = seg.nseg, s = seg.first + int(blockIdx.z), vt = (d.V + VS - 1) / VS;
  const bool phi = seg.local && int(blockIdx.x) >= vt;
  if (seg.local && (phi ? s == 0 || s == nseg - 1 : s == nseg - 1)) return;  // nothing the combine reads
  const bool writes = !seg.local || (s == 0 && !phi);  // U and the snapshots
  const int v0 = (phi ? int(blockIdx.x) - vt : int(blockIdx.x)) * VS, bh = blockIdx.y, b = bh / d.HV, j = bh % d.HV,
            qh = j / d.hpg;
  const int c_begin = s * seg.len, c_end = min(d.NC, c_begin + seg.len);
  const int tid = threadIdx.x, lane = tid % 32;
  const auto [m0, m2, nv, active] = scan_warp<KT, VS>(tid / 32);
  const bf16x* kb = a.k + (int64_t(b) * d.T * d.H + qh) * d.K;
  const float* gb = a.g + int64_t(b) * d.T * d.HV + j;
  auto load_chunk = [&](int c, int p) {
    const int64_t z = int64_t(bh) * d.NC + c;
    flash::load_tile<kC, KT, kScanThreads, true>(reinterpret_cast<bf16x*>(buf(p, L::kW)), a.W + z * kC * d.K, d.K, 0,
                                                 kC, d.K, tid);
    flash::load_tile<kC, KT, kScanThreads, true>(reinterpret_cast<bf16x*>(buf(p, L::kK)), kb, int64_t(d.H) * d.K,
                                                 c * kC, d.T, d.K, tid);
    if (!phi && tid < kU0Threads)
      flash::load_tile<kC, VS, kU0Threads, true>(reinterpret_cast<bf16x*>(buf(p, L::kU0)), a.U + z * kC * d.V + v0,
                                                 d.V, 0, kC, d.V - v0, tid);
    copy_chunk_gates(reinterpret_cast<float*>(buf(p, L::kGraw)), gb, c * kC, d.T, d.HV, tid);
    flash::cp_async_commit();
  };

  const int64_t seg_at = int64_t(bh) * nseg + s;
  float S[MT2][NT][4];
  if (phi)
    identity_fragments(S, d.K, v0 + nv, m2, lane);
  else
    load_state_fragments(S,
                         s == 0      ? (a.S0 ? a.S0 + int64_t(bh) * d.K * d.V : nullptr)
                         : seg.local ? nullptr
                                     : seg.start + seg_at * d.K * d.V,
                         d.K, d.V, v0 + nv, m2, lane);
  if (active) store_state(sS, S, m2, lane, nv, VS + 8);
  load_chunk(c_begin, 0);
  if (c_begin + 1 < c_end) load_chunk(c_begin + 1, 1);
  for (int c = c_begin; c < c_end; ++c) {
    const int p = (c - c_begin) % L::kStages;
    if (c + 1 < c_end)
      flash::cp_async_wait<1>();  // chunk c + 1's group may stay in flight
    else
      flash::cp_async_wait<0>();
    __syncthreads();  // chunk c's tiles and S_c (sS) are visible; every warp is done with chunk c - 1's buffer
    if (c + 2 < c_end) load_chunk(c + 2, (c + 2 - c_begin) % L::kStages);
    const bf16x* sW = reinterpret_cast<const bf16x*>(buf(p, L::kW));
    const bf16x* sK = reinterpret_cast<const bf16x*>(buf(p, L::kK));
    const bf16x* sU0 = reinterpret_cast<const bf16x*>(buf(p, L::kU0));
    const float* sGraw = reinterpret_cast<const float*>(buf(p, L::kGraw));
    const int64_t z = int64_t(bh) * d.NC + c;
    if (writes) store_tile<KT, VS, kScanThreads>(a.S + z * d.K * d.V + v0, d.V, sS, d.K, d.V - v0);

    chunk_mma::PairCumsum gc{};
    if (active) {
      gc = chunk_cumsum(sGraw[2 * lane], sGraw[2 * lane + 1], min(kC, d.T - c * kC), lane);
      float kd[2];
      row_kd(gc, m0, lane, kd);
      float u[1][NT][4];  // -U = -U0 + W @ S
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {  // columns e and e + 1 are adjacent: one 4-byte load
          const float2 x = phi ? make_float2(0.f, 0.f)
                               : __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(
                                     sU0 + (m0 + frag_row(lane, e)) * (VS + 8) + nv + ni * 8 + frag_col(lane, e)));
          u[0][ni][e] = -x.x, u[0][ni][e + 1] = -x.y;
        }
      warp_mma<1, NT, KT, false, false>(u, sW, KT + 8, m0, sS, VS + 8, nv, lane);
      bf16x* Uc = a.U + z * kC * d.V + v0;
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int r = m0 + frag_row(lane, e), col = nv + ni * 8 + frag_col(lane, e);
          const float f = -kd[e / 2];
          if (writes && v0 + col < d.V)
            *reinterpret_cast<uint32_t*>(Uc + r * d.V + col) = pack_bf16(-u[0][ni][e], -u[0][ni][e + 1]);
          *reinterpret_cast<uint32_t*>(sUk + r * (VS + 8) + col) = pack_bf16(f * u[0][ni][e], f * u[0][ni][e + 1]);
        }
    }
    __syncthreads();  // kd .* U complete; every warp is done reading S_c

    if (active) {
      scale_all(S, exp_ftz(gc.last));  // gam_n
      warp_mma<MT2, NT, kC, true, false>(S, sK, KT + 8, m2, sUk, VS + 8, nv, lane);
      store_state(sS, S, m2, lane, nv, VS + 8);
    }
  }
  flash::cp_async_wait<0>();
  if (!active) return;
  if (phi)
    store_split_fragments(S, seg.phi + seg_at * 2 * d.K * d.K, d.K, v0 + nv, m2, lane);
  else if (seg.local)
    store_state_fragments(S, seg.end + seg_at * d.K * d.V, d.K, d.V, v0 + nv, m2, lane);
  else if (seg.chain && s < nseg - 1)
    store_state_fragments(S, seg.start + (seg_at + 1) * d.K * d.V, d.K, d.V, v0 + nv, m2, lane);
  else if (a.final_state && s == nseg - 1)
    store_state_fragments(S, a.final_state + int64_t(bh) * d.K * d.V, d.K, d.V, v0 + nv, m2, lane);
}

// ---------------------------------------------------------------------------------------------------
// Pass 2 of a segmented scan (ScanPlan): the true start of every segment.

template <int KT, int VS>
struct SegmentCombineSmem {
  static constexpr size_t kPhi = size_t(KT) * (KT + 8) * 2, kX = size_t(KT) * (VS + 8) * 2;
  static constexpr size_t kPhiHi = 0, kPhiLo = kPhi;          // + p 2 kPhi: bf16 [KT][KT + 8], Phi high and low parts
  static constexpr size_t kXhi = 4 * kPhi, kXlo = kXhi + kX;  // bf16 [KT][VS + 8]: the running start
  static constexpr size_t kBytes = kXlo + kX;
};

struct SegmentCombineArgs {
  const float* end;  // (B HV, nseg, K, V): pass 1's E
  const bf16x* phi;  // (B HV, nseg, 2, K, K): pass 1's Phi, high and low parts
  float* start;      // (B HV, nseg, K, V): the true start of each segment but the first
  int nseg;
  bool reverse;     // segments in decreasing order (the backward's reverse scan)
  bool transposed;  // Phi_s read as its transpose (the backward's transitions from the forward's)
};

// Grid (ceil(V / VS), B HV), kThreads; smem SegmentCombineSmem<KT, VS> (36 KiB at KT = VS = 64). X = E of
// the first segment, then per following segment s: start_s = X, X = Phi_s X + E_s. The product runs on
// bf16 high and low parts of Phi and X (split_bf16; the lo x lo term is below fp32 rounding), so the join
// adds no error beyond what one chunk step of the scan does. Nothing a step loads depends on X, so the
// next two Phi are copied (cp.async, two buffers) and the next E loaded into registers while a step
// computes: a step is then a product and two barriers, not a global load's latency. Warp w owns state
// rows [w KT / 4, (w + 1) KT / 4).
template <int KT, int VS>
__global__ void __launch_bounds__(kThreads) segment_combine_kernel(SegmentCombineArgs a, Dims d) {
  using L = SegmentCombineSmem<KT, VS>;
  constexpr int NT = VS / 8, MT2 = KT / 64;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sXhi = reinterpret_cast<bf16x*>(smem + L::kXhi);
  bf16x* sXlo = reinterpret_cast<bf16x*>(smem + L::kXlo);
  auto phi_tile = [&](int p, size_t part) { return reinterpret_cast<bf16x*>(smem + p * 2 * L::kPhi + part); };
  const int v0 = blockIdx.x * VS, bh = blockIdx.y, tid = threadIdx.x, lane = tid % 32, m2 = (tid / 32) * (KT / 4);
  const int step = a.reverse ? -1 : 1, first = a.reverse ? a.nseg - 1 : 0, last = a.reverse ? 0 : a.nseg - 1;
  auto at = [&](int s) { return int64_t(bh) * a.nseg + s; };
  const int64_t kk = int64_t(d.K) * d.K;
  // Phi of segment s into buffer p, as one commit group; segments past the inner ones commit an empty
  // group, so every step can wait for all but the newest group.
  auto copy_phi = [&](int s, int p) {
    if (s != last && (s - last) * step < 0) {
      const bf16x* src = a.phi + at(s) * 2 * kk;
      flash::load_tile<KT, KT, kThreads, true>(phi_tile(p, L::kPhiHi), src, d.K, 0, d.K, d.K, tid);
      flash::load_tile<KT, KT, kThreads, true>(phi_tile(p, L::kPhiLo), src + kk, d.K, 0, d.K, d.K, tid);
    }
    flash::cp_async_commit();
  };
  // E a step ahead in registers, where a second state array fits them (at KT = 128, VS = 64 it spills:
  // there E_s is loaded when X is free, before the step's wait and barrier).
  constexpr bool kEAhead = MT2 * NT <= 8;
  float X[MT2][NT][4], E[kEAhead ? MT2 : 1][NT][4];
  load_state_fragments(X, a.end + at(first) * d.K * d.V, d.K, d.V, v0, m2, lane);
  copy_phi(first + step, 0);
  copy_phi(first + 2 * step, 1);
  if (kEAhead && first + step != last)
    load_state_fragments(E, a.end + at(first + step) * d.K * d.V, d.K, d.V, v0, m2, lane);
  for (int s = first + step, i = 0;; s += step, ++i) {
    store_state_fragments(X, a.start + at(s) * d.K * d.V, d.K, d.V, v0, m2, lane);
    if (s == last) break;
    store_state_split(sXhi, sXlo, X, m2, lane);
    if constexpr (kEAhead) {
#pragma unroll
      for (int mi = 0; mi < MT2; ++mi)
#pragma unroll
        for (int ni = 0; ni < NT; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) X[mi][ni][e] = E[mi][ni][e];
      if (s + step != last) load_state_fragments(E, a.end + at(s + step) * d.K * d.V, d.K, d.V, v0, m2, lane);
    } else {
      load_state_fragments(X, a.end + at(s) * d.K * d.V, d.K, d.V, v0, m2, lane);
    }
    flash::cp_async_wait<1>();  // Phi_s (buffer i % 2) has landed; Phi of the step after may be in flight
    __syncthreads();            // Phi_s and X complete
    const bf16x* hi = phi_tile(i % 2, L::kPhiHi);
    const bf16x* lo = phi_tile(i % 2, L::kPhiLo);
    auto join = [&](auto transposed) {
      constexpr bool kT = decltype(transposed)::value;
      warp_mma<MT2, NT, KT, kT, false>(X, hi, KT + 8, m2, sXhi, VS + 8, 0, lane);
      warp_mma<MT2, NT, KT, kT, false>(X, lo, KT + 8, m2, sXhi, VS + 8, 0, lane);
      warp_mma<MT2, NT, KT, kT, false>(X, hi, KT + 8, m2, sXlo, VS + 8, 0, lane);
    };
    if (a.transposed)
      join(std::true_type{});
    else
      join(std::false_type{});
    __syncthreads();  // every warp is done with Phi_s and X
    copy_phi(s + 2 * step, i % 2);
  }
  flash::cp_async_wait<0>();
}

// ---------------------------------------------------------------------------------------------------
// F4: the output.

template <int KT>
struct ForwardOutputSmem {
  static constexpr size_t kTile = size_t(kC) * kLd64 * 2;
  static constexpr size_t kQ = 0;                               // bf16 [64][KT + 8]
  static constexpr size_t kK = kQ + size_t(kC) * (KT + 8) * 2;  // bf16 [64][KT + 8]
  // bf16 [64][kLd64]: scale L .* (Q @ K^T), over K once every warp has formed its rows of Q @ K^T (37 KiB
  // at KT = 64: six blocks an SM, four with a tile of its own)
  static constexpr size_t kP = kK;
  static constexpr size_t kS = kK + size_t(kC) * (KT + 8) * 2;  // bf16 [KT][kLd64]: S_c, one V tile
  static constexpr size_t kU = kS + size_t(KT) * kLd64 * 2;     // bf16 [64][kLd64]: U, one V tile
  static constexpr size_t kG = kU + kTile;                      // f32 [64]: G, then gam
  static constexpr size_t kBytes = kG + 2 * kC * 4;
};

struct ForwardOutputArgs {
  const bf16x *q, *k;  // (B, T, H, K)
  const float* g;      // (B, T, HV)
  const bf16x* U;      // (B, HV, NC, 64, V)
  const bf16x* S;      // (B, HV, NC, K, V)
  bf16x* o;            // (B, T, HV, V)
  float scale;
};

// Grid (chunks, B HV), kThreads, chunk c0 + blockIdx.x; smem ForwardOutputSmem<KT> (37 KiB at KT = 64).
// Warp w owns token rows [16w, 16w + 16) of every product; P stays in shared memory across the 64-column
// V tiles.
template <int KT>
__global__ void __launch_bounds__(kThreads) forward_output_kernel(ForwardOutputArgs a, Dims d, int c0) {
  using L = ForwardOutputSmem<KT>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sQ = reinterpret_cast<bf16x*>(smem + L::kQ);
  bf16x* sK = reinterpret_cast<bf16x*>(smem + L::kK);
  bf16x* sP = reinterpret_cast<bf16x*>(smem + L::kP);
  bf16x* sS = reinterpret_cast<bf16x*>(smem + L::kS);
  bf16x* sU = reinterpret_cast<bf16x*>(smem + L::kU);
  float* sG = reinterpret_cast<float*>(smem + L::kG);
  float* sGam = sG + kC;
  const int c = c0 + blockIdx.x, bh = blockIdx.y, b = bh / d.HV, j = bh % d.HV, qh = j / d.hpg, t0 = c * kC;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = 16 * warp;
  const int64_t qk_off = (int64_t(b) * d.T * d.H + qh) * d.K, qk_row = int64_t(d.H) * d.K;
  const int64_t z = int64_t(bh) * d.NC + c;
  auto load_vtiles = [&](int v0) {  // S_c and U of columns [v0, v0 + 64), asynchronous
    flash::load_tile<KT, 64, kThreads, true>(sS, a.S + z * d.K * d.V + v0, d.V, 0, d.K, d.V - v0, threadIdx.x);
    flash::load_tile<kC, 64, kThreads, true>(sU, a.U + z * kC * d.V + v0, d.V, 0, kC, d.V - v0, threadIdx.x);
  };
  flash::load_tile<kC, KT, kThreads, true>(sQ, a.q + qk_off, qk_row, t0, d.T, d.K, threadIdx.x);
  flash::load_tile<kC, KT, kThreads, true>(sK, a.k + qk_off, qk_row, t0, d.T, d.K, threadIdx.x);
  load_vtiles(0);
  flash::cp_async_commit();
  if (warp == 0)
    chunk_gates(a.g + int64_t(b) * d.T * d.HV + j, nullptr, d.HV, t0, d.T, sG, sGam, nullptr, nullptr, nullptr, lane);
  flash::cp_async_wait<0>();
  __syncthreads();
  {
    float p[1][kC / 8][4];
    zero(p);
    warp_mma<1, kC / 8, KT, false, true>(p, sQ, KT + 8, m0, sK, KT + 8, 0, lane);
    __syncthreads();  // every warp is done with K: P goes over it
    store_masked(sP, kLd64, p, sG, a.scale, m0, 0, lane);
  }
  __syncwarp();  // the P rows this warp reads are the rows it wrote
  bf16x* ob = a.o + (int64_t(b) * d.T * d.HV + j) * d.V;
  for (int v0 = 0; v0 < d.V; v0 += 64) {
    if (v0) {                   // the first tiles came with Q and K
      __syncthreads();          // every warp is done with the previous tiles
      load_vtiles(v0);
      flash::cp_async_commit();
      flash::cp_async_wait<0>();
      __syncthreads();
    }
    float acc[1][8][4];
    zero(acc);
    warp_mma<1, 8, KT, false, false>(acc, sQ, KT + 8, m0, sS, kLd64, 0, lane);
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[0][ni][e] *= a.scale * sGam[m0 + frag_row(lane, e)];
    warp_mma_range<1, 8, false, false>(acc, sP, kLd64, m0, sU, kLd64, 0, 0, m0 + 16, lane);  // keys j <= i
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + frag_row(lane, e), col = v0 + ni * 8 + frag_col(lane, e), t = t0 + r;
        if (t < d.T && col < d.V)
          *reinterpret_cast<uint32_t*>(ob + int64_t(t) * d.HV * d.V + col) =
              pack_bf16(acc[0][ni][e], acc[0][ni][e + 1]);
      }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Launchers.

void combine_segments(const ScanPlan& p, const Dims& d, const float* end, const bf16x* phi, float* start, bool reverse,
                      bool transposed, cudaStream_t stream) {
  visit_kt(d.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    // The combine's column tiles are its own (it reads and writes whole states); past 64 columns its
    // running start would not fit the registers of a 4-warp block.
    visit_vs<64>(p.vs, [&](auto vt) {
      constexpr int VS = decltype(vt)::value;
      const size_t smem = SegmentCombineSmem<KT, VS>::kBytes;
      set_smem(segment_combine_kernel<KT, VS>, smem);
      const dim3 grid(unsigned((d.V + VS - 1) / VS), unsigned(d.B * d.HV));
      const SegmentCombineArgs a{end, phi, start, p.nseg, reverse, transposed};
      segment_combine_kernel<KT, VS><<<grid, kThreads, smem, stream>>>(a, d);
      HYB_CUDA_LAUNCH_CHECK("gated_delta_rule segment_combine_kernel", grid, kThreads, smem);
    });
  });
}

size_t forward_scan_smem(int K, int vs) { return scan_smem_bytes<ForwardScanSmem>(K, vs); }

size_t forward_smem_max(int K) {
  size_t need = 0;
  visit_kt(K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    need =
        std::max({WyPrepareSmem<KT>::kBytes, ForwardScanSmem<KT, 16>::kBytes, ForwardScanSmem<KT, 32>::kBytes,
                  ForwardScanSmem<KT, 64>::kBytes, ForwardScanSmem<KT, 128>::kBytes, ForwardOutputSmem<KT>::kBytes,
                  SegmentCombineSmem<KT, 64>::kBytes});
  });
  return need;
}

WyScratch run_wy(const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& g, const Tensor& S0,
                 const Tensor& final_state, const Dims& d, bool keep_ainv, cudaStream_t stream,
                 const WyConsumer& consume) {
  const Device dev = k.device();
  WyScratch w{Tensor::empty({d.B, d.HV, d.NC, kC, d.K}, DType::bf16, dev),
              Tensor::empty({d.B, d.HV, d.NC, kC, d.V}, DType::bf16, dev),
              Tensor::empty({d.B, d.HV, d.NC, d.K, d.V}, DType::bf16, dev),
              keep_ainv ? Tensor::empty({d.B, d.HV, d.NC, 2, kC, kC}, DType::bf16, dev) : Tensor(), Tensor()};
  const ScanPieces pieces = scan_pieces(d, dev.index);
  visit_kt(d.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    const ScanPlan plan =
        pieces.n ? scan_plan(d, dev.index, [&](int vs) { return forward_scan_smem(d.K, vs); }, 1)
                 : forward_scan_plan(d, dev.index);
    auto prepare = [&](int c0, int c1) {
      const size_t smem = WyPrepareSmem<KT>::kBytes;
      set_smem(wy_prepare_kernel<KT>, smem);
      const dim3 grid(unsigned(c1 - c0), unsigned(d.B * d.HV));
      const WyPrepareArgs a{bp(k),       bp(v),       g.data<float>(), beta.data<float>(),
                            bp_mut(w.W), bp_mut(w.U), w.Ainv.defined() ? bp_mut(w.Ainv) : nullptr};
      wy_prepare_kernel<KT><<<grid, kThreads, smem, stream>>>(a, d, c0);
      HYB_CUDA_LAUNCH_CHECK("gated_delta_rule wy_prepare_kernel", grid, kThreads, smem);
    };
    auto consumed = [&](int c0, int c1) {
      if (consume) consume(w, c0, c1);
    };
    visit_vs(plan.vs, [&](auto vt) {
      constexpr int VS = decltype(vt)::value;
      const size_t smem = ForwardScanSmem<KT, VS>::kBytes;
      set_smem(forward_scan_kernel<KT, VS>, smem);
      const ForwardScanArgs a{bp(k),
                              bp(w.W),
                              bp_mut(w.U),
                              g.data<float>(),
                              S0.defined() ? S0.data<float>() : nullptr,
                              bp_mut(w.S),
                              final_state.defined() ? final_state.data<float>() : nullptr};
      auto launch = [&](dim3 grid, const SegmentArgs& seg, cudaStream_t st) {
        forward_scan_kernel<KT, VS><<<grid, kScanThreads, smem, st>>>(a, seg, d);
        HYB_CUDA_LAUNCH_CHECK("gated_delta_rule forward_scan_kernel", grid, kScanThreads, smem);
      };
      if (pieces.n) return run_pieces<VS>(pieces, d, false, dev, stream, prepare, launch, consumed);
      run_scan<VS>(plan, d, false, dev, stream, w.Phi, prepare, launch, consumed);
    });
  });
  return w;
}

}  // namespace gdn

namespace {

// HYBRID_GDN_FUSED=0 keeps bf16 on the toolkit sequence (A/B timing, bisecting a mismatch).
bool fused_enabled() {
  static const bool enabled = !env_is_zero("HYBRID_GDN_FUSED");
  return enabled;
}

}  // namespace

bool gated_delta_rule_fused_supported(const Tensor& q, const GatedDeltaDims& d) {
  if (!fused_enabled() || !q.is_cuda() || q.dtype() != DType::bf16 || d.T < 1) return false;
  if (d.K > 128 || d.K % 8 != 0 || d.V % 8 != 0 || d.V < 8) return false;
  if (d.B * d.HV > 65535) return false;  // (b, value head) is a grid y index
  const size_t need = std::max(gdn::forward_smem_max(int(d.K)), gdn::backward_smem_max(int(d.K)));
  return need <= size_t(chunk_mma::max_smem(q.device().index));
}

GatedDeltaOutputs gated_delta_rule_forward_fused(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                                 const Tensor& beta0, const Tensor& g0, const Tensor& S00,
                                                 double scale, GatedDeltaChunkScratch* keep) {
  const GatedDeltaDims gd = gated_delta_rule_dims("gated_delta_rule_forward", q0, k0, v0, beta0, g0, S00);
  const Tensor q = chunk_mma::rows16(q0), k = chunk_mma::rows16(k0), v = chunk_mma::rows16(v0);
  const Tensor beta = beta0.contiguous(), g = g0.contiguous();
  const Tensor S0 = S00.defined() ? chunk_mma::rows16(S00) : Tensor();  // read in float2 pieces
  const Device dev = q.device();
  const gdn::Dims d = gdn::dims_of(gd);
  cudaStream_t stream = current_stream(dev.index);
  GatedDeltaOutputs r{Tensor::empty({gd.B, gd.T, gd.HV, gd.V}, DType::bf16, dev),
                      Tensor::empty({gd.B, gd.HV, gd.K, gd.V}, DType::f32, dev)};
  auto output = [&](const gdn::WyScratch& scratch, int c0, int c1) {
    gdn::visit_kt(d.K, [&](auto kt) {
      constexpr int KT = decltype(kt)::value;
      const size_t smem = gdn::ForwardOutputSmem<KT>::kBytes;
      gdn::set_smem(gdn::forward_output_kernel<KT>, smem);
      const dim3 grid(unsigned(c1 - c0), unsigned(d.B * d.HV));
      const gdn::ForwardOutputArgs a{gdn::bp(q),
                                     gdn::bp(k),
                                     g.data<float>(),
                                     gdn::bp(scratch.U),
                                     gdn::bp(scratch.S),
                                     gdn::bp_mut(r.o),
                                     float(scale)};
      gdn::forward_output_kernel<KT><<<grid, gdn::kThreads, smem, stream>>>(a, d, c0);
      HYB_CUDA_LAUNCH_CHECK("gated_delta_rule forward_output_kernel", grid, gdn::kThreads, smem);
    });
  };
  const gdn::WyScratch w = gdn::run_wy(k, v, beta, g, S0, r.final_state, d, keep != nullptr, stream, output);
  if (keep) *keep = w;
  return r;
}

}  // namespace hyb
