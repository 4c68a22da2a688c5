// The fused bf16 CUDA forward of gsa (gsa.md 4.8 F1, F2; gsa_fused.h): per (b, head, chunk of 64
// tokens) tensor-core kernels (mma.sync m16n8k16 through chunk_mma.cuh, bf16 operands in shared
// memory, fp32 accumulation), with an elementwise scan over the chunks in between (bf16 memories in
// memory, fp32 sums in registers).
//   F1 gsa_forward_state_kernel, grid (NC, B Hkv): b = chunk-local cumsum of g (fp32), SR = S .* Rem,
//      the increments Kc^T SR (K x M) and SR^T Vc (M x V) into state slot c + 1, and exp(bl).
//   scan gsa_state_scan_kernel: slot c + 1 += exp(bl_c) (.*c for Hk, .*r for Hv) slot c, so slot c is the
//      memory at the start of chunk c and slot NC the final one (also written in fp32).
//   F2 gsa_forward_output_kernel, grid (NC, B Hq): A1 = scale tril(Q Kc^T), Z = scale (Q HkS) .* Dec + Zi,
//      the slot softmax in registers (a row's slots live in one lane quad), lse, A2 and
//      O = (P .* Dec) HvS + A2 Vc. Its kWin instantiation is nha's output kernel (layers/nha/nha_fused.h):
//      the window logits of the tile's queries over the previous chunk's keys and its own join the
//      slots' in the one softmax, and O += Pw Vw.
// Gated products (gsa.md 4.1 rule 3). Fast path, when the chunk's decay range max_m (max_i b - min_i b,
// over its rows and the chunk start) is at most 60: one reference ref[m] = the middle of that range, so
// exp(b_i - b_j) = exp(b_i - ref) exp(ref - b_j) with both factors in [e^-30, e^30], and
//   Z  = exp(b_i - ref) .* (scale Q (HkS .*c exp(ref)) + A1 Sp),        Sp = S .* exp(ref - b_j)
//   A2 = tril(Pe Sp^T),  O = Pe (exp(ref) .*r HvS) + A2 Vc,              Pe = P .* exp(b_i - ref)
// are plain products (no exp per pair). Otherwise FLA's sub-block scheme: warp w owns rows [16w, 16w + 16);
// the blocks before them use the reference row 16w (Sw = S .* exp(b_16w - b_j), both factors <= 1), the
// 16 x 16 diagonal block is summed elementwise in fp32 (one exp per (i, j, m)).
// Work at K = V = M = 64 per token and head (gsa.md 4.6 units: 64 x 64 MAC = 8192 FLOP): F1 2 units per
// kv head (tensor cores); F2 6 units per query head (A1, Q HkS, A1 Sp over the causal k-blocks only,
// A2, Pe HvS, A2 Vc); 8 in all, 34 GFLOP at B T = 32768, H 16. Bytes there: F1 reads k v (bf16) s g
// (f32) 336 MB and writes the bf16 increments 134 MB; the scan reads and writes them (268 MB); F2 reads
// q k v s g 403 MB and the states 134 MB and writes o and lse 69 MB: about 1.3 GB, ~0.45 ms at 3 TB/s
// (the design of 4.8, with the scan inside F1, moves ~0.7 GB).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/env_switch.h"
#include "layers/gsa/gsa_fused.cuh"

namespace hyb {
namespace gsa_fused {
namespace {

using chunk_mma::bp;
using chunk_mma::bp_mut;
using chunk_mma::load_rows_async;
using chunk_mma::max_smem;
using chunk_mma::rows16;
using chunk_mma::set_smem;
using chunk_mma::warp_mma;
using chunk_mma::warp_mma_range;
using chunk_mma::zero;

// F1. Grid (NC, B Hkv). inc_k (B Hkv, NC + 1, K, M) and inc_v (B Hkv, NC + 1, M, V) get the chunk's
// increments in slot c + 1 (bf16); decay (B Hkv, NC, M) = exp(bl).
template <int KT, int VT, int MT>
__global__ void __launch_bounds__(kThreads) gsa_forward_state_kernel(const bf16x* __restrict__ k,
                                                                     const bf16x* __restrict__ v,
                                                                     const float* __restrict__ s,
                                                                     const float* __restrict__ g,
                                                                     bf16x* __restrict__ inc_k,
                                                                     bf16x* __restrict__ inc_v,
                                                                     float* __restrict__ decay, Dims d) {
  constexpr int kLdM = ld_m<MT>, kLdF = ld_f<MT>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sK = reinterpret_cast<bf16x*>(smem);  // [64][KT + 8]
  bf16x* sV = sK + kC * (KT + 8);               // [64][VT + 8]
  float* sB = reinterpret_cast<float*>(sV + kC * (VT + 8));
  float* sS = sB + kC * kLdF;
  // [64][kLdM] S .* Rem, written over the gates once every thread has read them: the block fits 52 KiB
  // at KT = VT = MT = 64, four blocks an SM instead of three.
  bf16x* sSR = reinterpret_cast<bf16x*>(sB);
  static_assert(kC * kLdM * sizeof(bf16x) <= 2 * kC * kLdF * sizeof(float), "S .* Rem fits over the gates");
  const int c = blockIdx.x, bj = blockIdx.y, b = bj / d.Hkv, j = bj % d.Hkv, t0 = c * kC, n = min(kC, d.T - t0);
  const int ts = t0 - d.shift, Ts = d.T - d.shift;  // the chunk's first token and the token count
  const int64_t gs_head = (int64_t(b) * d.T * d.Hkv + j) * d.M;
  const bool gasync = gates_async(d.M);  // the gates in the first group, k and v in the second
  if (gasync) copy_gates_async<MT>(g + gs_head, s + gs_head, int64_t(d.Hkv) * d.M, ts, Ts, d.M, sB, sS);
  flash::cp_async_commit();
  load_rows_async<kC, KT, kThreads>(sK, k + (int64_t(b) * d.T * d.Hkv + j) * d.K, int64_t(d.Hkv) * d.K, ts, Ts, d.K);
  load_rows_async<kC, VT, kThreads>(sV, v + (int64_t(b) * d.T * d.Hkv + j) * d.V, int64_t(d.Hkv) * d.V, ts, Ts, d.V);
  flash::cp_async_commit();
  flash::cp_async_wait<1>();
  load_gates<MT>(g + gs_head, s + gs_head, int64_t(d.Hkv) * d.M, ts, Ts, d.M, sB, sS, nullptr, nullptr,
                 sS + kC * kLdF, gasync);
  const float* bl = sB + (n - 1) * kLdF;
  constexpr int kPairs = kC * MT / 2 / kThreads;
  static_assert(kC * MT / 2 % kThreads == 0, "S .* Rem pairs split evenly over the threads");
  uint32_t sr_pairs[kPairs];
#pragma unroll
  for (int i = 0; i < kPairs; ++i) {
    const int x = i * kThreads + threadIdx.x, r = x / (MT / 2), m = (x % (MT / 2)) * 2;
    const float* br = sB + r * kLdF;
    const float* sr = sS + r * kLdF;
    sr_pairs[i] = pack_bf16(sr[m] * exp_ftz(bl[m] - br[m]), sr[m + 1] * exp_ftz(bl[m + 1] - br[m + 1]));
  }
  if (threadIdx.x < d.M) decay[(int64_t(bj) * d.NC + c) * d.M + threadIdx.x] = exp_ftz(bl[threadIdx.x]);
  __syncthreads();  // every thread has read the gates
#pragma unroll
  for (int i = 0; i < kPairs; ++i) {
    const int x = i * kThreads + threadIdx.x, r = x / (MT / 2), m = (x % (MT / 2)) * 2;
    *reinterpret_cast<uint32_t*>(sSR + r * kLdM + m) = sr_pairs[i];
  }
  flash::cp_async_wait<0>();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  {  // Kc^T SR: warps split the KT rows
    constexpr int RT = KT / 64;
    const int m0 = warp * 16 * RT;
    float acc[RT][MT / 8][4];
    zero(acc);
    warp_mma<RT, MT / 8, kC, true, false>(acc, sK, KT + 8, m0, sSR, kLdM, 0, lane);
    bf16x* o = inc_k + (int64_t(bj) * (d.NC + 1) + c + 1) * d.K * d.M;
#pragma unroll
    for (int mi = 0; mi < RT; ++mi)
#pragma unroll
      for (int ni = 0; ni < MT / 8; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = m0 + mi * 16 + frag_row(lane, 2 * h), col = ni * 8 + frag_col(lane, 0);
          if (r < d.K) store_pair(o + int64_t(r) * d.M, col, d.M, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
        }
  }
  {  // SR^T Vc: warps split the MT slot rows in 16-row blocks, and the V columns in 64 / MT parts
    constexpr int kParts = 4 * 16 / MT, NT = VT / 8 / kParts;
    const int m0 = warp % (MT / 16) * 16, n0 = warp / (MT / 16) * (VT / kParts);
    float acc[1][NT][4];
    zero(acc);
    warp_mma<1, NT, kC, true, false>(acc, sSR, kLdM, m0, sV, VT + 8, n0, lane);
    bf16x* o = inc_v + (int64_t(bj) * (d.NC + 1) + c + 1) * d.M * d.V;
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + frag_row(lane, 2 * h), col = n0 + ni * 8 + frag_col(lane, 0);
        if (r < d.M) store_pair(o + int64_t(r) * d.V, col, d.V, acc[0][ni][2 * h], acc[0][ni][2 * h + 1]);
      }
  }
}

// states (BH, NC + 1, P) bf16 with P = rows x cols of one memory, sequential over chunks in fp32 registers:
// forward, slot 0 = init, slot c + 1 += decay_c[m] slot c (c = 0 .. NC-1); kReverse, slot NC = init, slot
// c += decay_c[m] slot c + 1 (c = NC-1 .. 0); m = the column (Hk, K x M) or, kSlotRows, the row (Hv, M x V)
// of the element. One thread per pair of elements (P is even: K, V are multiples of 8); init (BH, P) f32 or
// null (zeros), last (BH, P) f32 gets the final sums when not null. The slots of kAhead chunks are loaded
// before the dependent updates.
template <bool kSlotRows, bool kReverse>
__global__ void __launch_bounds__(256) gsa_state_scan_kernel(bf16x* __restrict__ states,
                                                             const float* __restrict__ decay,
                                                             const float* __restrict__ init, float* __restrict__ last,
                                                             int64_t BH, int NC, int cols, int M) {
  constexpr int kAhead = 8;
  const int64_t P2 = int64_t(cols) * M / 2;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= BH * P2) return;
  const int64_t bh = i / P2, e = (i % P2) * 2;
  const int m0 = int(kSlotRows ? e / cols : e % M), m1 = int(kSlotRows ? e / cols : (e + 1) % M);
  uint32_t* st = reinterpret_cast<uint32_t*>(states) + bh * (NC + 1) * P2 + i % P2;
  const float* dc = decay + bh * NC * M;
  float acc0 = init ? init[2 * i] : 0.f, acc1 = init ? init[2 * i + 1] : 0.f;
  st[kReverse ? int64_t(NC) * P2 : 0] = pack_bf16(acc0, acc1);
  for (int step0 = 0; step0 < NC; step0 += kAhead) {
    uint32_t x[kAhead];
    float a0[kAhead], a1[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int step = step0 + u, c = kReverse ? NC - 1 - step : step;
      if (step < NC)
        x[u] = st[int64_t(kReverse ? c : c + 1) * P2], a0[u] = dc[int64_t(c) * M + m0], a1[u] = dc[int64_t(c) * M + m1];
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int step = step0 + u, c = kReverse ? NC - 1 - step : step;
      if (step < NC) {
        acc0 = bf16x2_lo(x[u]) + a0[u] * acc0;
        acc1 = bf16x2_hi(x[u]) + a1[u] * acc1;
        st[int64_t(kReverse ? c : c + 1) * P2] = pack_bf16(acc0, acc1);
      }
    }
  }
  if (last) last[2 * i] = acc0, last[2 * i + 1] = acc1;
}

// F2. Grid (NC, B Hq). kWin (nha): the window keys of the tile's queries are the previous chunk and this
// one (window <= kC); their logits join the slot logits before the softmax and P_win Vw joins O.
template <int KT, int VT, int MT, bool kWin>
__global__ void __launch_bounds__(kThreads) gsa_forward_output_kernel(ForwardArgs a, Dims d) {
  static_assert(KT >= MT, "the P tile reuses the rows of the Q tile");
  constexpr int kLdM = ld_m<MT>, kLdF = ld_f<MT>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16x* sQ = reinterpret_cast<bf16x*>(smem);  // [64][KT + 8]; later P-side operands, row stride KT + 8
  bf16x* sK = sQ + kC * (KT + 8);               // [64][KT + 8]
  bf16x* sV = sK + kC * (KT + 8);               // [64][VT + 8]
  bf16x* sHk = sV + kC * (VT + 8);              // [KT][kLdM]
  bf16x* sHv = sHk + KT * kLdM;                 // [MT][VT + 8]
  bf16x* sA = sHv + MT * (VT + 8);              // [64][kLdA]  A1, then A2
  bf16x* sSw = sA + kC * kLdA;                  // [kSwRows][kLdM]: Sp (fast) or the per-warp Sw (fallback)
  float* sB = reinterpret_cast<float*>(sSw + kSwRows * kLdM);  // [64][kLdF]
  float* sS = sB + kC * kLdF;                                  // [64][kLdF]
  float* sRef = sS + kC * kLdF;                                // [MT] (sLo, then the reference)
  float* sHi = sRef + MT;                                      // [MT] (sHi, then the scale exp(ref))
  float* sBias = sHi + MT;                                     // [kC] kWin: bias[h, dist]
  // kWin: key row x of the window tiles is key t0 - kC + x0 + x, R rows in all.
  const int x0 = kWin ? window_first_key(a.window) : 0, R = 2 * kC - x0, kLdW = R + 8;  // at w = 32 two CTAs an SM
  bf16x* sQr = reinterpret_cast<bf16x*>(sBias + kC);  // kWin: [64][KT + 8]
  bf16x* sKr = sQr + kC * (KT + 8);                   // kWin: [R][KT + 8], the previous chunk's rows first
  bf16x* sVw = sKr + R * (KT + 8);                    // kWin: [R][VT + 8]
  bf16x* sPw = sQr;  // kWin: [64][kLdW] window probabilities, over sQr and sKr once the logits are formed
  const int c = blockIdx.x, bh = blockIdx.y, b = bh / d.Hq, h = bh % d.Hq, j = h / d.G, t0 = c * kC;
  const int n = min(kC, d.T - t0), bj = b * d.Hkv + j;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = warp * 16;
  // Every load goes out before the gates are summed: the gates (where gates_async) in a first group, the
  // bf16 tiles in a second, the fp32 memories into registers.
  const int64_t gs_head = (int64_t(b) * d.T * d.Hkv + j) * d.M;
  const bool gasync = gates_async(d.M);
  const int ts = t0 - d.shift, Ts = d.T - d.shift;  // the slot stream's first token and token count
  if (gasync) copy_gates_async<MT>(a.g + gs_head, a.s + gs_head, int64_t(d.Hkv) * d.M, ts, Ts, d.M, sB, sS);
  flash::cp_async_commit();
  load_rows_async<kC, KT, kThreads>(sQ, a.q + (int64_t(b) * d.T * d.Hq + h) * d.K, int64_t(d.Hq) * d.K, t0, d.T, d.K);
  load_rows_async<kC, KT, kThreads>(sK, a.k + (int64_t(b) * d.T * d.Hkv + j) * d.K, int64_t(d.Hkv) * d.K, ts, Ts, d.K);
  load_rows_async<kC, VT, kThreads>(sV, a.v + (int64_t(b) * d.T * d.Hkv + j) * d.V, int64_t(d.Hkv) * d.V, ts, Ts, d.V);
  if constexpr (kWin) {
    const int64_t kv_k = (int64_t(b) * d.T * d.Hkv + j) * d.K, kv_v = (int64_t(b) * d.T * d.Hkv + j) * d.V;
    load_rows_async<kC, KT, kThreads>(sQr, a.qr + (int64_t(b) * d.T * d.Hq + h) * d.K, int64_t(d.Hq) * d.K, t0, d.T,
                                      d.K);
    // The previous chunk's keys and this one's; rows before token 0 are zeros, so that the masked products
    // stay 0 (not 0 * NaN).
    load_window_rows_async<KT>(sKr, a.kr + kv_k, int64_t(d.Hkv) * d.K, t0 - kC + x0, R, d.T, d.K);
    load_window_rows_async<VT>(sVw, a.vw + kv_v, int64_t(d.Hkv) * d.V, t0 - kC + x0, R, d.T, d.V);
    if (threadIdx.x < kC)
      sBias[threadIdx.x] =
          a.bias && threadIdx.x < a.window ? __bfloat162float(a.bias[int64_t(h) * a.nb + threadIdx.x]) : 0.f;
  }
  flash::cp_async_commit();
  StateRegs<KT, MT> hk;
  StateRegs<MT, VT> hv;
  hk.fetch(a.Hk + (int64_t(bj) * (d.NC + 1) + c) * d.K * d.M, d.K, d.M);
  hv.fetch(a.Hv + (int64_t(bj) * (d.NC + 1) + c) * d.M * d.V, d.M, d.V);
  flash::cp_async_wait<1>();
  static_assert(gate_scratch_floats<MT>(true) * sizeof(float) <= kSwRows * kLdM * sizeof(bf16x),
                "the gates' scratch fits the Sp tile");
  const bool fast = load_gates<MT>(a.g + gs_head, a.s + gs_head, int64_t(d.Hkv) * d.M, ts, Ts, d.M, sB, sS, sRef, sHi,
                                   reinterpret_cast<float*>(sSw), gasync);
  if (threadIdx.x < MT) {
    const int m = threadIdx.x;
    const float ref = fast ? 0.5f * (sRef[m] + sHi[m]) : 0.f;
    sRef[m] = ref;
    sHi[m] = exp_ftz(ref);
  }
  __syncthreads();
  hk.store(sHk, kLdM, nullptr, sHi);
  hv.store(sHv, VT + 8, sHi, nullptr);
  bf16x* sW = sSw + 8 * warp * (warp - 1) * kLdM;  // fallback: warp w's rows j < 16 w
  if (fast) {
    for (int x = threadIdx.x; x < kC * MT / 2; x += kThreads) {
      const int r = x / (MT / 2), m = (x % (MT / 2)) * 2;
      const float* br = sB + r * kLdF;
      const float* sr = sS + r * kLdF;
      *reinterpret_cast<uint32_t*>(sSw + r * kLdM + m) =
          pack_bf16(sr[m] * exp_ftz(sRef[m] - br[m]), sr[m + 1] * exp_ftz(sRef[m + 1] - br[m + 1]));
    }
  } else {
    const float* bw = sB + 16 * warp * kLdF;
    for (int x = lane; x < 16 * warp * MT / 2; x += 32) {
      const int r = x / (MT / 2), m = (x % (MT / 2)) * 2;
      const float* br = sB + r * kLdF;
      const float* sr = sS + r * kLdF;
      *reinterpret_cast<uint32_t*>(sW + r * kLdM + m) =
          pack_bf16(sr[m] * exp_ftz(bw[m] - br[m]), sr[m + 1] * exp_ftz(bw[m + 1] - br[m + 1]));
    }
  }
  flash::cp_async_wait<0>();
  __syncthreads();

  {  // A1 = scale tril(Q Kc^T), the warp's rows
    float x[1][kC / 8][4];
    zero(x);
    warp_mma<1, kC / 8, KT, false, true>(x, sQ, KT + 8, m0, sK, KT + 8, 0, lane);
    store_tril(sA, kLdA, x, a.scale, m0, 0, lane);
  }
  __syncwarp();  // the A1 rows this warp reads are the rows it wrote
  float z[1][MT / 8][4];
  zero(z);
  warp_mma<1, MT / 8, KT, false, false>(z, sQ, KT + 8, m0, sHk, kLdM, 0, lane);
  if (fast) {
#pragma unroll
    for (int ni = 0; ni < MT / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) z[0][ni][e] *= a.scale;
    for (int k0 = 0; k0 <= m0; k0 += 16)  // A1 is zero right of the diagonal block
      warp_mma<1, MT / 8, 16, false, false>(z, sA + k0, kLdA, m0, sSw + k0 * kLdM, kLdM, 0, lane);
    scale_rows<MT>(z, m0, lane, sB, sRef, 1.f);
  } else {
    scale_rows<MT>(z, m0, lane, sB, nullptr, a.scale);
    if (warp > 0) {
      float t[1][MT / 8][4];
      zero(t);
      for (int k0 = 0; k0 < m0; k0 += 16)
        warp_mma<1, MT / 8, 16, false, false>(t, sA + k0, kLdA, m0, sW + k0 * kLdM, kLdM, 0, lane);
      const float* bw = sB + m0 * kLdF;
#pragma unroll
      for (int ni = 0; ni < MT / 8; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = m0 + frag_row(lane, e), m = ni * 8 + frag_col(lane, e);
          z[0][ni][e] += t[0][ni][e] * exp_ftz(sB[r * kLdF + m] - bw[m]);
        }
    }
#pragma unroll
    for (int ni = 0; ni < MT / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // the diagonal block, elementwise
        const int r = m0 + frag_row(lane, e), m = ni * 8 + frag_col(lane, e);
        const float br = sB[r * kLdF + m];
        float acc = 0.f;
        for (int jj = m0; jj <= r; ++jj)
          acc += __bfloat162float(sA[r * kLdA + jj]) * exp_ftz(br - sB[jj * kLdF + m]) * sS[jj * kLdF + m];
        z[0][ni][e] += acc;
      }
  }

  // The slot softmax of rows r0 = m0 + lane / 4 and r0 + 8: their slots are spread over the lane quad.
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int ni = 0; ni < MT / 8; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (ni * 8 + frag_col(lane, e) >= d.M) z[0][ni][e] = -INFINITY;
      mx[e / 2] = fmaxf(mx[e / 2], z[0][ni][e]);
    }
  // kWin: the window logits of the rows, key column x = key t0 - kC + x at distance r + kC - x from row r,
  // in 16-key blocks; the rows' window keys lie in the blocks kb_lo .. kb_hi, the others are neither formed
  // nor read (their probabilities are 0); kb_lo >= x0 / 16.
  constexpr int kWb = kWin ? 2 * kC / 16 : 1;
  float wl[kWb][1][2][4];
  const int kb_lo = max(c > 0 ? 0 : kC / 16, (m0 + kC + 1 - a.window) / 16), kb_hi = (m0 + kC + 15) / 16;
  if constexpr (kWin) {
#pragma unroll
    for (int nb = 0; nb < kWb; ++nb) {
      if (nb < kb_lo || nb > kb_hi) continue;
      zero(wl[nb]);
      warp_mma<1, 2, KT, false, true>(wl[nb], sQr, KT + 8, m0, sKr, KT + 8, 16 * nb - x0, lane);
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = m0 + frag_row(lane, e), x = 16 * nb + 8 * u + frag_col(lane, e), dist = r + kC - x;
          const bool in = dist >= 0 && dist < a.window && (c > 0 || x >= kC);
          wl[nb][0][u][e] = in ? a.scale * wl[nb][0][u][e] + sBias[in ? dist : 0] : -INFINITY;
          mx[e / 2] = fmaxf(mx[e / 2], wl[nb][0][u][e]);
        }
    }
  }
  float sum[2] = {0.f, 0.f};
  if constexpr (kWin) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
    }
#pragma unroll
    for (int nb = 0; nb < kWb; ++nb) {
      if (nb < kb_lo || nb > kb_hi) continue;
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          wl[nb][0][u][e] = exp_ftz(wl[nb][0][u][e] - mx[e / 2]);
          sum[e / 2] += wl[nb][0][u][e];
        }
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
  }
#pragma unroll
  for (int ni = 0; ni < MT / 8; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      z[0][ni][e] = exp_ftz(z[0][ni][e] - mx[e / 2]);
      sum[e / 2] += z[0][ni][e];
    }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 1);
    sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 2);
  }
  const float inv[2] = {1.f / sum[0], 1.f / sum[1]};
#pragma unroll
  for (int ni = 0; ni < MT / 8; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) z[0][ni][e] *= inv[e / 2];
  if constexpr (kWin) {
    __syncthreads();  // every warp has formed its window logits: sPw takes over sQr and sKr
#pragma unroll
    for (int nb = 0; nb < kWb; ++nb) {
      if (nb < kb_lo || nb > kb_hi) continue;
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int r = m0 + frag_row(lane, e), x = 16 * nb + 8 * u + frag_col(lane, e) - x0;
          *reinterpret_cast<uint32_t*>(sPw + r * kLdW + x) =
              pack_bf16(wl[nb][0][u][e] * inv[e / 2], wl[nb][0][u][e + 1] * inv[e / 2]);
        }
    }
  }
  if (lane % 4 == 0)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = m0 + lane / 4 + 8 * hh;
      if (r < n) a.lse[(int64_t(b) * d.T + t0 + r) * d.Hq + h] = mx[hh] + logf(sum[hh]);
    }

  // A2 and O. sX: the warp's rows of the Q tile (Q is read no more), row stride KT + 8.
  bf16x* sX = sQ;
  constexpr int kLdX = KT + 8;
  float a2[1][kC / 8][4];
  zero(a2);
  __syncwarp();  // every lane is done reading its Q rows
  if (fast) {
    store_slots(sX, kLdX, z, m0, 0, lane, [&](int r, int m) { return exp_ftz(sB[r * kLdF + m] - sRef[m]); });
    __syncwarp();
    warp_mma<1, kC / 8, MT, false, true>(a2, sX, kLdX, m0, sSw, kLdM, 0, lane);
  } else {
    store_slots(sX, kLdX, z, m0, 0, lane, [](int, int) { return 1.f; });
    __syncwarp();
#pragma unroll
    for (int ni = 0; ni < kC / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // the diagonal block, elementwise
        const int r = m0 + frag_row(lane, e), jj = ni * 8 + frag_col(lane, e);
        if (jj < m0 || jj > r) continue;
        float acc = 0.f;
        for (int m = 0; m < MT; ++m)
          acc += __bfloat162float(sX[r * kLdX + m]) * exp_ftz(sB[r * kLdF + m] - sB[jj * kLdF + m]) * sS[jj * kLdF + m];
        a2[0][ni][e] = acc;
      }
    __syncwarp();
    const float* bw = sB + m0 * kLdF;
    store_slots(sX, kLdX, z, m0, 0, lane, [&](int r, int m) { return exp_ftz(sB[r * kLdF + m] - bw[m]); });
    __syncwarp();
#pragma unroll
    for (int nb = 0; nb < 3; ++nb)
      if (nb < warp) {
        float t[1][2][4];
        zero(t);
        warp_mma<1, 2, MT, false, true>(t, sX, kLdX, m0, sW, kLdM, 16 * nb, lane);
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int e = 0; e < 4; ++e) a2[0][2 * nb + u][e] += t[0][u][e];
      }
    __syncwarp();
    store_slots(sX, kLdX, z, m0, 0, lane, [&](int r, int m) { return exp_ftz(sB[r * kLdF + m]); });
  }
  store_tril(sA, kLdA, a2, 1.f, m0, 0, lane);
  __syncwarp();
  float o[1][VT / 8][4];
  zero(o);
  warp_mma<1, VT / 8, MT, false, false>(o, sX, kLdX, m0, sHv, VT + 8, 0, lane);
  for (int k0 = 0; k0 <= m0; k0 += 16)  // A2 is zero right of the diagonal block
    warp_mma<1, VT / 8, 16, false, false>(o, sA + k0, kLdA, m0, sV + k0 * (VT + 8), VT + 8, 0, lane);
  if constexpr (kWin)  // the warp wrote its sPw rows before the A2 barrier above
    warp_mma_range<1, VT / 8, false, false>(o, sPw, kLdW, m0, sVw, VT + 8, 0, 16 * kb_lo - x0, 16 * (kb_hi + 1) - x0,
                                            lane);
  bf16x* ob = a.o + (int64_t(b) * d.T * d.Hq + h) * d.V;
#pragma unroll
  for (int ni = 0; ni < VT / 8; ++ni)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int r = m0 + frag_row(lane, e), col = ni * 8 + frag_col(lane, e);
      if (r < n && col < d.V)
        *reinterpret_cast<uint32_t*>(ob + int64_t(t0 + r) * d.Hq * d.V + col) = pack_bf16(o[0][ni][e], o[0][ni][e + 1]);
    }
}

template <int KT, int VT, int MT>
size_t state_smem() {
  return size_t(kC * (KT + 8) + kC * (VT + 8)) * 2 +
         size_t(2 * kC * ld_f<MT> + gate_scratch_floats<MT>(false)) * sizeof(float);
}
// window: kWin's window (1 .. kC), which sizes its key tiles.
template <int KT, int VT, int MT, bool kWin>
size_t output_smem(int window) {
  const size_t tiles = size_t(2 * kC * (KT + 8) + kC * (VT + 8) + KT * ld_m<MT> + MT * (VT + 8) + kC * kLdA +
                              kSwRows * ld_m<MT>) * 2;
  const int R = window_rows(window);
  static_assert(kC * (2 * kC + 8) <= (kC + 2 * kC) * (KT + 8), "sPw fits over sQr and sKr");
  const size_t win = size_t(kC * (KT + 8) + R * (KT + 8) + R * (VT + 8)) * 2 + kC * sizeof(float);
  return tiles + size_t(2 * kC * ld_f<MT> + 2 * MT) * sizeof(float) + (kWin ? win : 0);
}

}  // namespace

size_t forward_smem_bytes(int64_t K, int64_t V, int64_t M, bool window) {
  size_t need = 0;
  visit_tiles(K, V, [&](auto kt, auto vt) {
    visit_slots(M, [&](auto mt) {
      constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value, MT = decltype(mt)::value;
      need = std::max(state_smem<KT, VT, MT>(),
                      window ? output_smem<KT, VT, MT, true>(kC) : output_smem<KT, VT, MT, false>(0));
    });
  });
  return need;
}

void forward_output(const ForwardArgs& a, const Dims& d, cudaStream_t stream) {
  visit_tiles(d.K, d.V, [&](auto kt, auto vt) {
   visit_slots(d.M, [&](auto mt) {
    constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value, MT = decltype(mt)::value;
    auto go = [&](auto kernel, size_t smem) {
      set_smem(kernel, smem);
      const dim3 grid(unsigned(d.NC), unsigned(d.B * d.Hq));
      kernel<<<grid, kThreads, smem, stream>>>(a, d);
      HYB_CUDA_LAUNCH_CHECK("gsa gsa_forward_output_kernel", grid, kThreads, smem);
    };
    if (a.window > 0)
      go(gsa_forward_output_kernel<KT, VT, MT, true>, output_smem<KT, VT, MT, true>(a.window));
    else
      go(gsa_forward_output_kernel<KT, VT, MT, false>, output_smem<KT, VT, MT, false>(0));
   });
  });
}

void state_scan(const Tensor& states, const Tensor& decay, const Dims& d, bool slot_rows, bool reverse,
                const Tensor& init, const Tensor& last, cudaStream_t stream) {
  const int cols = slot_rows ? d.V : d.K;
  const int64_t BH = int64_t(d.B) * d.Hkv, n = BH * cols * d.M / 2;
  for (const Tensor* t : {&init, &last})
    HYB_ASSERT(!t->defined() || (t->dtype() == DType::f32 && t->is_contiguous() && t->numel() == 2 * n),
               "gsa state_scan: an initial or final memory is ", t->str(), "; expected ", 2 * n, " contiguous f32");
  if (n == 0 || d.NC == 0) return;
  constexpr int kScanThreads = 256;
  const unsigned blocks = unsigned((n + kScanThreads - 1) / kScanThreads);
  auto go = [&](auto kernel) {
    kernel<<<blocks, kScanThreads, 0, stream>>>(bp_mut(states), decay.data<float>(),
                                                init.defined() ? init.data<float>() : nullptr,
                                                last.defined() ? last.data<float>() : nullptr, BH, d.NC, cols, d.M);
    HYB_CUDA_LAUNCH_CHECK("gsa gsa_state_scan_kernel", blocks, kScanThreads, 0);
  };
  if (slot_rows)
    reverse ? go(gsa_state_scan_kernel<true, true>) : go(gsa_state_scan_kernel<true, false>);
  else
    reverse ? go(gsa_state_scan_kernel<false, true>) : go(gsa_state_scan_kernel<false, false>);
}

States forward_states(const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g, const Tensor& Hk0,
                      const Tensor& Hv0, const Dims& d, cudaStream_t stream, const Tensor& Hk_last,
                      const Tensor& Hv_last) {
  const Device dev = k.device();
  States st{Tensor::empty({d.B, d.Hkv, d.NC + 1, d.K, d.M}, DType::bf16, dev),
            Tensor::empty({d.B, d.Hkv, d.NC + 1, d.M, d.V}, DType::bf16, dev),
            Tensor::empty({d.B, d.Hkv, d.NC, d.M}, DType::f32, dev)};
  visit_tiles(d.K, d.V, [&](auto kt, auto vt) {
    visit_slots(d.M, [&](auto mt) {
      constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value, MT = decltype(mt)::value;
      auto kernel = gsa_forward_state_kernel<KT, VT, MT>;
      const size_t smem = state_smem<KT, VT, MT>();
      set_smem(kernel, smem);
      const dim3 grid(unsigned(d.NC), unsigned(d.B * d.Hkv));
      kernel<<<grid, kThreads, smem, stream>>>(bp(k), bp(v), s.data<float>(), g.data<float>(), bp_mut(st.Hk),
                                               bp_mut(st.Hv), st.decay.data<float>(), d);
      HYB_CUDA_LAUNCH_CHECK("gsa gsa_forward_state_kernel", grid, kThreads, smem);
    });
  });
  state_scan(st.Hk, st.decay, d, false, false, Hk0, Hk_last, stream);
  state_scan(st.Hv, st.decay, d, true, false, Hv0, Hv_last, stream);
  return st;
}

}  // namespace gsa_fused

using namespace gsa_fused;

bool gsa_fused_supported(const Tensor& q, const GsaDims& d) {
  // HYBRID_GSA_FUSED=0 keeps bf16 on the generic slot-attention kernels (A/B timing, bisecting a mismatch).
  static const bool enabled = !env_is_zero("HYBRID_GSA_FUSED");
  if (!enabled || !q.is_cuda() || q.dtype() != DType::bf16 || d.T < 1) return false;
  if (d.K > 128 || d.V > 128 || d.K % 8 != 0 || d.V % 8 != 0 || d.M > kMaxMT) return false;
  if (d.B * d.Hq > 65535) return false;  // gridDim.y of F2
  const size_t need = std::max(forward_smem_bytes(d.K, d.V, d.M, false), backward_smem_bytes(d.K, d.V, d.M));
  return need <= size_t(max_smem(q.device().index));
}

GsaFusedOut gsa_forward_fused(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& s0, const Tensor& g0,
                              const Tensor& Hk00, const Tensor& Hv00, double scale, bool keep_states) {
  const GsaDims gd = gsa_dims("gsa_forward", q0, k0, v0, s0, g0, Hk00, Hv00);
  const Tensor q = rows16(q0), k = rows16(k0), v = rows16(v0), s = rows16(s0), g = rows16(g0);
  const Tensor Hk0 = Hk00.defined() ? Hk00.contiguous() : Tensor(), Hv0 = Hv00.defined() ? Hv00.contiguous() : Tensor();
  const Device dev = q.device();
  const ChunkDims cd = chunk_dims(gd.B, gd.T, gd.Hkv, dev);
  const Dims d{int(gd.B), int(gd.T), int(gd.Hq), int(gd.Hkv), int(gd.group), int(gd.K), int(gd.V), int(gd.M), int(cd.NC)};
  cudaStream_t stream = current_stream(dev.index);
  GsaFusedOut r{Tensor::empty({gd.B, gd.T, gd.Hq, gd.V}, DType::bf16, dev),
                Tensor::empty({gd.B, gd.Hkv, gd.K, gd.M}, DType::f32, dev),
                Tensor::empty({gd.B, gd.Hkv, gd.M, gd.V}, DType::f32, dev),
                Tensor::empty({gd.B, gd.T, gd.Hq}, DType::f32, dev)};
  const States st = forward_states(k, v, s, g, Hk0, Hv0, d, stream, r.Hk, r.Hv);
  forward_output({bp(q), bp(k), bp(v), s.data<float>(), g.data<float>(), bp(st.Hk), bp(st.Hv), bp_mut(r.o),
                  r.lse.data<float>(), float(scale)},
                 d, stream);
  if (keep_states) r.chunk_Hk = st.Hk, r.chunk_Hv = st.Hv, r.chunk_decay = st.decay;
  return r;
}

}  // namespace hyb
