// The fused bf16 CUDA backward of gsa (gsa.md 4.3, 4.8 B0..B3; gsa_fused.h), one CTA per (chunk, b, kv
// head) walking the G query heads of the group, so k, v, s, g and the memories are loaded once:
//   B0 forward_states (F1 and the chunk scan again): HkS, HvS for every chunk, unless the forward kept them
//      (GsaParams::save_chunk_states).
//   B1 gsa_backward_kernel<kLocal>: rebuild Z (as F2), P = exp(Z - lse), dP, dZ; the chunk's read
//      increments Uv = sum_h (P .* Dec)^T dO and Uk = scale sum_h Q^T (dZ .* Dec) into slot c of Dv, Dk.
//   B2 the reverse chunk scan: slot c += exp(bl_c) slot c + 1 from slot NC = the final-memory gradient, so
//      slot c + 1 = dHkE, dHvE of chunk c and slot 0 = dHk0, dHv0.
//   B3 gsa_backward_kernel<!kLocal>: the same rebuild, then per head dA1, A2 and dQ; the group sums dKc,
//      dVc, dS (intra: A1^T (dZ .* E) + dA2^T (P .* E); inter: Rem .* (Vc dHvE^T + Kc dHkE) and
//      (S .* Rem) dHvE, (S .* Rem) dHkE^T), and dG = the chunk-local reverse cumsum of
//      sum_h (Z .* dZ + P .* dP) - S .* dS plus the tail sum(HkE .* dHkE) + sum(HvE .* dHvE) (gsa.md 4.3).
// The gated products use F2's mid reference on chunks within the decay guard (Pe = P .* exp(b - ref),
// dZe = dZ .* exp(b - ref), Sp = S .* exp(ref - b), memories pre-scaled by exp(ref)); other chunks run
// them elementwise in fp32 over all pairs j <= i (one exp per term), with ref = 0 for the inter terms;
// the two paths are two instantiations of the chunk body, chosen per chunk.
// dG is a small remainder of terms that cancel in pairs, so dB takes P, dZ and S as the products saw
// them (bf16-rounded) and the tail the tiles' bf16 dH: each pair then cancels with one rounding.
// Work at K = V = M = 64 per token and kv head (gsa.md 4.6 units): B0 2; B1 per query head 6 (A1, Q HkS,
// A1 Sp, dO Vc^T, dO HvS^T, dA2 Sp) + 2 (Uv, Uk); B3 per query head 6 + 2 (dA1, A2) + 2 (dQ) + 4 (dVc,
// dKc, dS intra x2) and 4 once (dS inter x2, dVc, dKc inter): 28 units, about 120 GFLOP at the reference
// shape (B1 and B3 both rebuild Z, P, dP, dZ: the split form of 4.6). Bytes there (memories and their
// gradients bf16, summed in fp32 by the scans): B0 as F1 + scan (~0.74 GB), B1 reads q k v dO s g lse and
// the states (~0.6 GB) and writes U (134 MB), B2 reads and writes U (268 MB), B3 reads ~0.87 GB and writes
// dq dk dv (bf16) ds dg (fp32) 470 MB.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "layers/gsa/gsa_fused.cuh"

namespace hyb {
namespace gsa_fused {
namespace {

using chunk_mma::bp;
using chunk_mma::bp_mut;
using chunk_mma::load_rows_async;
using chunk_mma::rows16;
using chunk_mma::set_smem;
using chunk_mma::warp_mma;
using chunk_mma::zero;

// B1 and B3 run 8 warps: warp w owns the chunk rows 16 (w % 4) .. + 15 and the column half w / 4 of every
// product (MT / 2 of the slots, 32 of the 64 score columns, KT / 2 or VT / 2 of the head dims). The tiles
// take ~151 KB at MT = 64 (one CTA an SM) and ~107 KB at 32 (two); 8 warps instead of 4 hide twice the
// latency of its loads and products. The two warps of a row block exchange their halves of the slot
// softmax's row sums through shared memory.
constexpr int kBwdWarps = 8, kBwdThreads = 32 * kBwdWarps, kHalfC = kC / 2;

__device__ __forceinline__ float bf(bf16x x) { return __bfloat162float(x); }
__device__ __forceinline__ float rounded(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Fallback forms, fp32, over the warp's fragment (rows m0 .. m0 + 15, columns n0 .. n0 + 8 NT).
// acc[i][m] += sum_{j <= i} A[i][j] exp(b_i[m] - b_j[m]) S[j][m]
template <int MT, int NT>
__device__ __forceinline__ void ew_rows(float (&acc)[1][NT][4], const bf16x* A, const float* sB, const float* sS,
                                        int m0, int n0, int lane) {
  constexpr int kLdF = ld_f<MT>;
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + frag_row(lane, e), m = n0 + ni * 8 + frag_col(lane, e);
      const float br = sB[r * kLdF + m];
      float x = 0.f;
      for (int j = 0; j <= r; ++j) x += bf(A[r * kLdA + j]) * exp_ftz(br - sB[j * kLdF + m]) * sS[j * kLdF + m];
      acc[0][ni][e] += x;
    }
}

// acc[i][j] = sum_m X[i][m] exp(b_i[m] - b_j[m]) S[j][m] for j <= i, else 0
template <int MT, int NT>
__device__ __forceinline__ void ew_cols(float (&acc)[1][NT][4], const bf16x* X, const float* sB, const float* sS,
                                        int m0, int n0, int lane) {
  constexpr int kLdM = ld_m<MT>, kLdF = ld_f<MT>;
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + frag_row(lane, e), j = n0 + ni * 8 + frag_col(lane, e);
      float x = 0.f;
      if (j <= r)
        for (int m = 0; m < MT; ++m)
          x += bf(X[r * kLdM + m]) * exp_ftz(sB[r * kLdF + m] - sB[j * kLdF + m]) * sS[j * kLdF + m];
      acc[0][ni][e] = x;
    }
}

// acc[j][m] += sum_{i >= j} (A[i][j] X[i][m] + A2[i][j] X2[i][m]) exp(b_i[m] - b_j[m]), rows j of the warp
template <int MT, int NT>
__device__ __forceinline__ void ew_trows(float (&acc)[1][NT][4], const bf16x* A, const bf16x* X, const bf16x* A2,
                                         const bf16x* X2, const float* sB, int m0, int n0, int lane) {
  constexpr int kLdM = ld_m<MT>, kLdF = ld_f<MT>;
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = m0 + frag_row(lane, e), m = n0 + ni * 8 + frag_col(lane, e);
      const float bj = sB[j * kLdF + m];
      float x = 0.f;
      for (int i = j; i < kC; ++i)
        x += (bf(A[i * kLdA + j]) * bf(X[i * kLdM + m]) + bf(A2[i * kLdA + j]) * bf(X2[i * kLdM + m])) *
             exp_ftz(sB[i * kLdF + m] - bj);
      acc[0][ni][e] += x;
    }
}

struct BackwardArgs {
  const bf16x *q, *k, *v, *dout;
  const float *s, *g, *lse;
  const bf16x *Hk, *Hv;  // forward states, slot c = the start of chunk c
  bf16x *Dk, *Dv;        // kLocal: slot c gets the chunk's increments; else slot c + 1 = dHkE, dHvE of chunk c
  bf16x *dq, *dk, *dv;
  float *ds, *dg;
  float scale;
  const float* delta = nullptr;  // (B, T, Hq) rowsum(dO .* O) of a larger softmax (nha), or null: the slots'
};

// bf16 elements of the backward's tiles, the same for B1 and B3; the fp32 part of its shared memory follows
// them.
template <int KT, int VT, int MT>
constexpr int backward_tile_elems() {
  constexpr int kLdM = ld_m<MT>;
  return 2 * kC * (KT + 8) + 2 * kC * (VT + 8) + KT * kLdM + MT * (VT + 8) + kC * kLdM + 2 * kC * kLdA +
         2 * kC * kLdM;
}

// Threads a slot in the tail of dG: parts of its Hk sum, lanes of its Hv row.
template <int MT>
constexpr int kTailParts = kBwdThreads / MT;

// Bytes of the backward's tiles and fp32 part (16-byte multiples).
template <int KT, int VT, int MT>
constexpr size_t backward_smem_fixed() {
  const size_t tiles = size_t(backward_tile_elems<KT, VT, MT>()) * 2;
  return tiles + size_t(2 * kC * ld_f<MT> + (kTailParts<MT> + 3) * MT + kC + 2 * kC + kBwdThreads * MT / 4) *
                     sizeof(float);
}

// The chunk's gates into the backward's sB, sS (and the decay range into sRef, sSc): whether the chunk
// takes the fast path.
template <int KT, int VT, int MT>
__device__ __forceinline__ bool chunk_guard(const BackwardArgs& a, const Dims& d, unsigned char* smem) {
  float* sB = reinterpret_cast<float*>(smem + 2 * backward_tile_elems<KT, VT, MT>());
  float* sS = sB + kC * ld_f<MT>;
  float* sRef = sS + kC * ld_f<MT>;
  float* sSc = sRef + MT;
  const int c = blockIdx.x, bj = blockIdx.y, b = bj / d.Hkv, j = bj % d.Hkv, t0 = c * kC;
  const int64_t gs_head = (int64_t(b) * d.T * d.Hkv + j) * d.M;
  flash::cp_async_wait<1>();  // the gates' group (gsa_backward_kernel)
  float* sDB = sSc + MT + kC + (kTailParts<MT> + 1) * MT + 2 * kC;  // backward_chunk's sDB, free until it starts
  static_assert(gate_scratch_floats<MT>(true) <= kBwdThreads * MT / 4, "the gates' scratch fits sDB");
  return load_gates<MT, kBwdThreads>(a.g + gs_head, a.s + gs_head, int64_t(d.Hkv) * d.M, t0 - d.shift, d.T - d.shift,
                                     d.M, sB, sS, sRef, sSc, sDB, gates_async(d.M));
}

// The body of B1 (kLocal) and B3 for one chunk after chunk_guard, the path a template argument so
// that the fallback's registers do not weigh on the fast path.
// The tiles of q and dO of query head h (sQ, sDO: the first two of the backward's tiles), asynchronously.
template <int KT, int VT>
__device__ __forceinline__ void load_head_async(const BackwardArgs& a, const Dims& d, unsigned char* smem, int h) {
  bf16x* sQ = reinterpret_cast<bf16x*>(smem);
  bf16x* sDO = sQ + 2 * kC * (KT + 8) + kC * (VT + 8);
  const int b = blockIdx.y / d.Hkv, t0 = blockIdx.x * kC;
  load_rows_async<kC, KT, kBwdThreads>(sQ, a.q + (int64_t(b) * d.T * d.Hq + h) * d.K, int64_t(d.Hq) * d.K, t0, d.T,
                                       d.K);
  load_rows_async<kC, VT, kBwdThreads>(sDO, a.dout + (int64_t(b) * d.T * d.Hq + h) * d.V, int64_t(d.Hq) * d.V, t0,
                                       d.T, d.V);
  flash::cp_async_commit();
}

// How the chunk-start memories reach their tiles. B3 at MT = 32 (two CTAs an SM at 128 registers) copies
// them with cp.async and scales them in place once the gates are summed: held in registers across the
// gates' sum, they spilled, and each spill store waited for its load (B3 887 -> 764 us a launch at nha's
// 4k bench shape, ncu, H200). The other instantiations have registers to spare and keep the register
// fetch, which measured ahead there (B1 at MT = 32 305 against 310 us; gsa's B3 1565 against 1580).
// Hk's rows take 16-byte copies only at M % 8 == 0; else backward_chunk loads Hk once the gates are
// summed.
template <int MT, bool kLocal>
constexpr bool kStatesAsync = !kLocal && MT == 32;
__device__ __forceinline__ bool hk_async(const Dims& d) { return d.M % 8 == 0; }
template <int KT, int VT, int MT, bool kAsync>
struct StateFetch {  // kAsync: nothing held
  __device__ __forceinline__ void fetch(const BackwardArgs&, const Dims&, int64_t) {}
};
template <int KT, int VT, int MT>
struct StateFetch<KT, VT, MT, false> {
  StateRegs<KT, MT, kBwdThreads> hk;
  StateRegs<MT, VT, kBwdThreads> hv;
  __device__ __forceinline__ void fetch(const BackwardArgs& a, const Dims& d, int64_t slot) {
    hk.fetch(a.Hk + slot * d.K * d.M, d.K, d.M);
    hv.fetch(a.Hv + slot * d.M * d.V, d.M, d.V);
  }
};

// k, v and the first head's q, dO are in flight to their tiles; the chunk-start memories in st or (kStatesAsync)
// in flight to theirs, unscaled (Hk where hk_async).
template <int KT, int VT, int MT, bool kLocal, bool kFast>
__device__ __forceinline__ void backward_chunk(const BackwardArgs& a, const Dims& d, unsigned char* smem,
                                               const StateFetch<KT, VT, MT, kStatesAsync<MT, kLocal>>& st) {
  constexpr bool kAsync = kStatesAsync<MT, kLocal>;
  constexpr bool fast = kFast;
  constexpr int kLdM = ld_m<MT>, kLdF = ld_f<MT>, kHalf = MT / 2, kParts = kTailParts<MT>;
  bf16x* sQ = reinterpret_cast<bf16x*>(smem);  // [64][KT + 8]
  bf16x* sK = sQ + kC * (KT + 8);               // [64][KT + 8]
  bf16x* sV = sK + kC * (KT + 8);               // [64][VT + 8]
  bf16x* sDO = sV + kC * (VT + 8);              // [64][VT + 8]
  bf16x* sHk = sDO + kC * (VT + 8);             // [KT][kLdM]   HkS .*c exp(ref), at the end dHkE
  bf16x* sHv = sHk + KT * kLdM;                 // [MT][VT + 8] exp(ref) .*r HvS, at the end dHvE
  bf16x* sSp = sHv + MT * (VT + 8);             // [64][kLdM]   Sp (fallback: P), at the end S .* Rem
  bf16x* sA1 = sSp + kC * kLdM;                 // [64][kLdA] x 2: A1, dA2
  bf16x* sdA2 = sA1 + kC * kLdA;
  bf16x* sPe = sdA2 + kC * kLdA;                // [64][kLdM] Pe (B3 fallback: dZ)
  bf16x* sdZe = sPe + kC * kLdM;                // [64][kLdM] dZe
  bf16x* sdA1 = sA1;                            // B3, once dS's intra part has read A1 and dA2
  bf16x* sA2 = sdA2;
  bf16x* sP = sSp;                              // the fallback's P and dZ take tiles it has no use for
  bf16x* sdZ = sPe;
  float* sB = reinterpret_cast<float*>(smem + 2 * backward_tile_elems<KT, VT, MT>());  // [64][kLdF] b
  float* sS = sB + kC * kLdF;                             // [64][kLdF] S, at the end dS
  float* sRef = sS + kC * kLdF;                           // [MT]
  float* sSc = sRef + MT;                                 // [MT] exp(ref)
  float* sL = sSc + MT;                                   // [64] lse of the head's rows
  float* sTail = sL + kC;                                 // [kParts + 1][MT] parts of the tail of dG
  float* sPart = sTail + (kParts + 1) * MT;               // [2][64] each column half's row sums of P .* dP
  float4* sDB = reinterpret_cast<float4*>(sPart + 2 * kC);  // [kBwdWarps][kHalf / 8][32] dB, fragment order
  const int c = blockIdx.x, bj = blockIdx.y, b = bj / d.Hkv, j = bj % d.Hkv, t0 = c * kC, n = min(kC, d.T - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, m0 = (warp % 4) * 16, half = warp / 4;
  // The warp's first column: of the slots, of the score columns, of K, of V.
  const int n0 = half * kHalf, ns = half * kHalfC, nk = half * KT / 2, nv = half * VT / 2;
  // The slot stream's first token and token count, and the chunk's first row that holds a token.
  const int ts = t0 - d.shift, lo = max(0, -ts);
  if (threadIdx.x < MT) {
    const int m = threadIdx.x;
    const float ref = fast ? 0.5f * (sRef[m] + sSc[m]) : 0.f;
    sRef[m] = ref;
    sSc[m] = exp_ftz(ref);
  }
  __syncthreads();
  const int64_t KM = int64_t(d.K) * d.M, MV = int64_t(d.M) * d.V;
  if constexpr (kAsync) {
    if (!hk_async(d))
      load_state<KT, MT, kBwdThreads>(sHk, kLdM, a.Hk + (int64_t(bj) * (d.NC + 1) + c) * KM, d.K, d.M, nullptr, sSc);
  } else {
    st.hk.store(sHk, kLdM, nullptr, sSc);
    st.hv.store(sHv, VT + 8, sSc, nullptr);
  }
  // kAsync: the copied memories times exp(ref), once they have landed: Hv's rows and (hk_async) Hk's columns.
  auto scale_states = [&] {
    for (int x = threadIdx.x; x < MT * VT / 2; x += kBwdThreads) {
      const int r = x / (VT / 2), col = (x % (VT / 2)) * 2;
      uint32_t* w = reinterpret_cast<uint32_t*>(sHv + r * (VT + 8) + col);
      *w = pack_bf16(bf16x2_lo(*w) * sSc[r], bf16x2_hi(*w) * sSc[r]);
    }
    if (hk_async(d))
      for (int x = threadIdx.x; x < KT * MT / 2; x += kBwdThreads) {
        const int r = x / (MT / 2), m = (x % (MT / 2)) * 2;
        uint32_t* w = reinterpret_cast<uint32_t*>(sHk + r * kLdM + m);
        *w = pack_bf16(bf16x2_lo(*w) * sSc[m], bf16x2_hi(*w) * sSc[m + 1]);
      }
  };
  if constexpr (fast)
    for (int x = threadIdx.x; x < kC * MT / 2; x += kBwdThreads) {
      const int r = x / (MT / 2), m = (x % (MT / 2)) * 2;
      const float* br = sB + r * kLdF;
      const float* sr = sS + r * kLdF;
      *reinterpret_cast<uint32_t*>(sSp + r * kLdM + m) =
          pack_bf16(sr[m] * exp_ftz(sRef[m] - br[m]), sr[m + 1] * exp_ftz(sRef[m + 1] - br[m + 1]));
    }
  auto ei = [&](int r, int m) { return exp_ftz(sB[r * kLdF + m] - sRef[m]); };
  auto one = [](int, int) { return 1.f; };
  // Score columns ns .. ns + 31 of the rows m0 .. m0 + 15 are all above the diagonal: their causal products
  // are zero and skipped.
  const bool live = ns <= m0 + 15;

  constexpr int UT = KT / 64;  // 16-row tiles of Uk per warp
  float dVa[1][VT / 16][4], dKa[1][KT / 16][4], dSa[1][kHalf / 8][4];  // group sums, the warp's fragment
  float4* myDB = sDB + warp * (kHalf / 8) * 32 + lane;  // dB of the warp's fragment, lives in shared memory
  // between heads to spare registers
  // Uv (MT x VT): warp w owns the slot rows mu .. mu + 15 and the kUvParts-th part of the columns from nu.
  constexpr int kUvParts = kBwdWarps / (MT / 16);
  const int mu = warp % (MT / 16) * 16, nu = warp / (MT / 16) * (VT / kUvParts);
  float Uk[UT][kHalf / 8][4], Uv[1][VT / 8 / kUvParts][4];
  if constexpr (kLocal) {
    zero(Uk);
    zero(Uv);
  } else {
#pragma unroll
    for (int ni = 0; ni < kHalf / 8; ++ni) myDB[ni * 32] = make_float4(0.f, 0.f, 0.f, 0.f);
    zero(dVa);
    zero(dKa);
    zero(dSa);
  }
  for (int hi = 0; hi < d.G; ++hi) {
    const int h = j * d.G + hi;
    __syncthreads();  // the previous head is done with every tile (the first: the memory tiles are written)
    if (hi > 0) load_head_async<KT, VT>(a, d, smem, h);  // the first head's went out with the kernel's start
    for (int x = threadIdx.x; x < kC; x += kBwdThreads) {  // in flight with the tiles; a.delta into sPart,
      // which only the slots' own delta uses otherwise
      sL[x] = x < n ? a.lse[(int64_t(b) * d.T + t0 + x) * d.Hq + h] : 0.f;
      if (a.delta) sPart[x] = x < n ? a.delta[(int64_t(b) * d.T + t0 + x) * d.Hq + h] : 0.f;
    }
    flash::cp_async_wait<0>();
    __syncthreads();
    if (kAsync && hi == 0) scale_states();  // read first after the barrier below
    {
      float x[1][kHalfC / 8][4];
      zero(x);
      if (live) warp_mma<1, kHalfC / 8, KT, false, true>(x, sQ, KT + 8, m0, sK, KT + 8, ns, lane);
      store_tril(sA1, kLdA, x, a.scale, m0, ns, lane);
      zero(x);
      if (live) warp_mma<1, kHalfC / 8, VT, false, true>(x, sDO, VT + 8, m0, sV, VT + 8, ns, lane);
      store_tril(sdA2, kLdA, x, 1.f, m0, ns, lane);
    }
    __syncthreads();  // both halves of the rows of A1 and dA2
    float z[1][kHalf / 8][4], dp[1][kHalf / 8][4];
    zero(z);
    warp_mma<1, kHalf / 8, KT, false, false>(z, sQ, KT + 8, m0, sHk, kLdM, n0, lane);
#pragma unroll
    for (int ni = 0; ni < kHalf / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) z[0][ni][e] *= a.scale;
    zero(dp);
    warp_mma<1, kHalf / 8, VT, false, true>(dp, sDO, VT + 8, m0, sHv, VT + 8, n0, lane);
    if constexpr (fast)
      for (int k0 = 0; k0 <= m0; k0 += 16) {
        warp_mma<1, kHalf / 8, 16, false, false>(z, sA1 + k0, kLdA, m0, sSp + k0 * kLdM, kLdM, n0, lane);
        warp_mma<1, kHalf / 8, 16, false, false>(dp, sdA2 + k0, kLdA, m0, sSp + k0 * kLdM, kLdM, n0, lane);
      }
    float ex[kHalf / 8][4];  // exp(b - ref) of the warp's fragment (the fallback: exp(b), Dec)
#pragma unroll
    for (int ni = 0; ni < kHalf / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ex[ni][e] = ei(m0 + frag_row(lane, e), n0 + ni * 8 + frag_col(lane, e));
        z[0][ni][e] *= ex[ni][e];
        dp[0][ni][e] *= ex[ni][e];
      }
    if constexpr (!fast) {
      ew_rows<MT>(z, sA1, sB, sS, m0, n0, lane);
      ew_rows<MT>(dp, sdA2, sB, sS, m0, n0, lane);
    }
    // P = exp(Z - lse) (0 on padded slots), delta = rowsum(P .* dP), dZ = P .* (dP - delta); then z holds
    // dZ and dp holds P.
    float delta[2] = {0.f, 0.f};
    if (a.delta) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) delta[hh] = sPart[m0 + lane / 4 + 8 * hh];
    } else {
#pragma unroll
      for (int ni = 0; ni < kHalf / 8; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = m0 + frag_row(lane, e), m = n0 + ni * 8 + frag_col(lane, e);
          delta[e / 2] += (m < d.M ? exp_ftz(z[0][ni][e] - sL[r]) : 0.f) * dp[0][ni][e];
        }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        delta[hh] += __shfl_xor_sync(0xffffffffu, delta[hh], 1);
        delta[hh] += __shfl_xor_sync(0xffffffffu, delta[hh], 2);
        if (lane % 4 == 0) sPart[half * kC + m0 + lane / 4 + 8 * hh] = delta[hh];
      }
      __syncthreads();  // a.delta is the same for the whole block
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = m0 + lane / 4 + 8 * hh;
        delta[hh] = sPart[r] + sPart[kC + r];  // the same order in both warps of the row block
      }
    }
    // Pe = P .* ex and dZe = dZ .* ex go to their tiles from here.
#pragma unroll
    for (int ni = 0; ni < kHalf / 8; ++ni) {
      float x[4], pe[4], dze[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + frag_row(lane, e), m = n0 + ni * 8 + frag_col(lane, e);
        const float p = m < d.M ? exp_ftz(z[0][ni][e] - sL[r]) : 0.f, dz = p * (dp[0][ni][e] - delta[e / 2]);
        pe[e] = p * ex[ni][e];
        dze[e] = dz * ex[ni][e];
        // dB with P and dZ as the dS products see them (rounded to bf16 in their tiles): the diagonal
        // terms of Z .* dZ + P .* dP and S .* dS cancel to well below either, and only cancel with one
        // rounding on both sides. (The fallback's products read P and dZ unscaled.)
        if constexpr (fast)
          x[e] = z[0][ni][e] * __fdividef(rounded(dze[e]), ex[ni][e]) +
                 __fdividef(rounded(pe[e]), ex[ni][e]) * dp[0][ni][e];
        else
          x[e] = z[0][ni][e] * rounded(dz) + rounded(p) * dp[0][ni][e];
        z[0][ni][e] = dz;
        dp[0][ni][e] = p;
      }
      if constexpr (!kLocal) {
        float4 acc = myDB[ni * 32];
        acc.x += x[0], acc.y += x[1], acc.z += x[2], acc.w += x[3];
        myDB[ni * 32] = acc;
      }
      const int r = m0 + frag_row(lane, 0), col = n0 + ni * 8 + frag_col(lane, 0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (kLocal || fast)
          *reinterpret_cast<uint32_t*>(sPe + (r + 8 * h) * kLdM + col) = pack_bf16(pe[2 * h], pe[2 * h + 1]);
        *reinterpret_cast<uint32_t*>(sdZe + (r + 8 * h) * kLdM + col) = pack_bf16(dze[2 * h], dze[2 * h + 1]);
      }
    }
    if constexpr (kLocal) {
      __syncthreads();
      warp_mma<1, VT / 8 / kUvParts, kC, true, false>(Uv, sPe, kLdM, mu, sDO, VT + 8, nu, lane);
      warp_mma<UT, kHalf / 8, kC, true, false>(Uk, sQ, KT + 8, (warp % 4) * 16 * UT, sdZe, kLdM, n0, lane);
      continue;
    } else {
      if constexpr (!fast) {
        store_slots(sP, kLdM, dp, m0, n0, lane, one);
        store_slots(sdZ, kLdM, z, m0, n0, lane, one);
      }
      __syncthreads();  // both slot halves of the rows of Pe and dZe (the fallback: P and dZ)
      // dS's intra part (A1^T dZe + dA2^T Pe over the rows i >= j) goes first: dA1 and A2 then take the
      // tiles of A1 and dA2, which keeps B3 in B1's shared memory (two CTAs an SM at MT = 32).
      if constexpr (fast) {
        for (int k0 = m0; k0 < kC; k0 += 16) {
          warp_mma<1, kHalf / 8, 16, true, false>(dSa, sA1 + k0 * kLdA, kLdA, m0, sdZe + k0 * kLdM, kLdM, n0, lane);
          warp_mma<1, kHalf / 8, 16, true, false>(dSa, sdA2 + k0 * kLdA, kLdA, m0, sPe + k0 * kLdM, kLdM, n0, lane);
        }
      } else {
        ew_trows<MT>(dSa, sA1, sdZ, sdA2, sP, sB, m0, n0, lane);
      }
      TrilFrag<kHalfC / 8> tdA1, tA2;
      {
        float x[1][kHalfC / 8][4];
        if constexpr (fast) {
          zero(x);
          if (live) warp_mma<1, kHalfC / 8, MT, false, true>(x, sdZe, kLdM, m0, sSp, kLdM, ns, lane);
        } else {
          ew_cols<MT>(x, sdZ, sB, sS, m0, ns, lane);
        }
        tdA1.pack(x, 1.f, m0, ns, lane);
        if constexpr (fast) {
          zero(x);
          if (live) warp_mma<1, kHalfC / 8, MT, false, true>(x, sPe, kLdM, m0, sSp, kLdM, ns, lane);
        } else {
          ew_cols<MT>(x, sP, sB, sS, m0, ns, lane);
        }
        tA2.pack(x, 1.f, m0, ns, lane);
      }
      __syncthreads();  // every warp is done with A1 and dA2
      tdA1.store(sdA1, kLdA, m0, ns, lane);
      tA2.store(sA2, kLdA, m0, ns, lane);
      __syncthreads();  // every warp's part of the score tiles dA1 and A2
      {  // dQ = scale (dZe HkS'^T + dA1 Kc)
        float x[1][KT / 16][4];
        zero(x);
        warp_mma<1, KT / 16, MT, false, true>(x, sdZe, kLdM, m0, sHk, kLdM, nk, lane);
        for (int k0 = 0; k0 <= m0; k0 += 16)
          warp_mma<1, KT / 16, 16, false, false>(x, sdA1 + k0, kLdA, m0, sK + k0 * (KT + 8), KT + 8, nk, lane);
        bf16x* dqb = a.dq + (int64_t(b) * d.T * d.Hq + h) * d.K;
#pragma unroll
        for (int ni = 0; ni < KT / 16; ++ni)
#pragma unroll
          for (int e = 0; e < 4; e += 2) {
            const int r = m0 + frag_row(lane, e), col = nk + ni * 8 + frag_col(lane, e);
            if (r < n && col < d.K)
              *reinterpret_cast<uint32_t*>(dqb + int64_t(t0 + r) * d.Hq * d.K + col) =
                  pack_bf16(a.scale * x[0][ni][e], a.scale * x[0][ni][e + 1]);
          }
      }
      for (int k0 = m0; k0 < kC; k0 += 16) {  // the rows i >= j of the transposed products
        warp_mma<1, VT / 16, 16, true, false>(dVa, sA2 + k0 * kLdA, kLdA, m0, sDO + k0 * (VT + 8), VT + 8, nv, lane);
        warp_mma<1, KT / 16, 16, true, false>(dKa, sdA1 + k0 * kLdA, kLdA, m0, sQ + k0 * (KT + 8), KT + 8, nk, lane);
      }
    }
  }

  if constexpr (kLocal) {
    bf16x* uk = a.Dk + (int64_t(bj) * (d.NC + 1) + c) * KM;
    bf16x* uv = a.Dv + (int64_t(bj) * (d.NC + 1) + c) * MV;
    // The increments leave through the memory tiles (free since the last head's products) in 16-byte row
    // pieces where the rows split into them, else pair by pair from the fragments.
    const bool staged = d.M % 8 == 0;
#pragma unroll
    for (int mi = 0; mi < UT; ++mi)
#pragma unroll
      for (int ni = 0; ni < kHalf / 8; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = (warp % 4) * 16 * UT + mi * 16 + frag_row(lane, 2 * h), m = n0 + ni * 8 + frag_col(lane, 0);
          const float x0 = a.scale * Uk[mi][ni][2 * h] * sSc[m], x1 = a.scale * Uk[mi][ni][2 * h + 1] * sSc[m + 1];
          if (staged)
            *reinterpret_cast<uint32_t*>(sHk + r * kLdM + m) = pack_bf16(x0, x1);
          else if (r < d.K)
            store_pair(uk + int64_t(r) * d.M, m, d.M, x0, x1);
        }
#pragma unroll
    for (int ni = 0; ni < VT / 8 / kUvParts; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = mu + frag_row(lane, 2 * h), col = nu + ni * 8 + frag_col(lane, 0);
        const float x0 = Uv[0][ni][2 * h] * sSc[m], x1 = Uv[0][ni][2 * h + 1] * sSc[m];
        if (staged)
          *reinterpret_cast<uint32_t*>(sHv + m * (VT + 8) + col) = pack_bf16(x0, x1);
        else if (m < d.M)
          store_pair(uv + int64_t(m) * d.V, col, d.V, x0, x1);
      }
    if (staged) {
      __syncthreads();
      flash::store_tile<KT, MT, kLdM, kBwdThreads, true>(sHk, uk, d.M, 0, d.K, d.M, threadIdx.x);
      flash::store_tile<MT, VT, VT + 8, kBwdThreads, true>(sHv, uv, d.V, 0, d.M, d.V, threadIdx.x);
    }
  } else {
    // The tail of dG (below) takes the chunk-start memories from global memory again, copied with dHkE and
    // dHvE into tiles the head loop is done with: HkS over Pe and dZe, HvS over dO. Loaded into registers
    // before the barrier, their loads were waited for at the first use, after it.
    static_assert(kBwdThreads == kParts * MT && 32 % kParts == 0, "whole parts a slot, a row's lanes in a warp");
    static_assert(KT <= 2 * kC, "HkS fits the Pe and dZe tiles");
    const int mk = threadIdx.x % MT, pk = threadIdx.x / MT;  // Hk: slot mk, rows pk, pk + kParts, ...
    const int mv = threadIdx.x / kParts, pv = threadIdx.x % kParts;  // Hv: row mv, columns pv, pv + kParts, ...
    bf16x* sHkS = sPe;  // [KT][kLdM]
    bf16x* sHvS = sDO;  // [MT][VT + 8]
    __syncthreads();    // done with the memory tiles, Sp, Pe, dZe and dO
    const bf16x* HkS = a.Hk + (int64_t(bj) * (d.NC + 1) + c) * KM;
    const bf16x* HvS = a.Hv + (int64_t(bj) * (d.NC + 1) + c) * MV;
    const bf16x* dHkE = a.Dk + (int64_t(bj) * (d.NC + 1) + c + 1) * KM;
    const bf16x* dHvE = a.Dv + (int64_t(bj) * (d.NC + 1) + c + 1) * MV;
    if (hk_async(d)) {  // copies, in flight while Rem .* S is formed below
      load_rows_async<KT, MT, kBwdThreads>(sHk, dHkE, d.M, 0, d.K, d.M);
      load_rows_async<KT, MT, kBwdThreads>(sHkS, HkS, d.M, 0, d.K, d.M);
    } else {
      load_state<KT, MT, kBwdThreads>(sHk, kLdM, dHkE, d.K, d.M, nullptr, nullptr);
      load_state<KT, MT, kBwdThreads>(sHkS, kLdM, HkS, d.K, d.M, nullptr, nullptr);
    }
    load_rows_async<MT, VT, kBwdThreads>(sHv, dHvE, d.V, 0, d.M, d.V);
    load_rows_async<MT, VT, kBwdThreads>(sHvS, HvS, d.V, 0, d.M, d.V);
    flash::cp_async_commit();
    const float* bl = sB + (n - 1) * kLdF;
    for (int x = threadIdx.x; x < kC * MT / 2; x += kBwdThreads) {
      const int r = x / (MT / 2), m = (x % (MT / 2)) * 2;
      const float* br = sB + r * kLdF;
      const float* sr = sS + r * kLdF;
      *reinterpret_cast<uint32_t*>(sSp + r * kLdM + m) =
          pack_bf16(sr[m] * exp_ftz(bl[m] - br[m]), sr[m + 1] * exp_ftz(bl[m + 1] - br[m + 1]));
    }
    flash::cp_async_wait<0>();
    __syncthreads();
    {  // The tail of dG, sum(HkE .* dHkE) + sum(HvE .* dHvE) per slot, with HkE = exp(bl) .*c HkS + Kc^T (S .* Rem)
       // (HvE alike): the increments' part equals the sum over the chunk's rows of S .* (the inter part of dS),
       // which dB subtracts row by row, so it is taken as that sum of the same products (sInter, below)
       // and the two cancel to fp32 rounding whatever the memories were rounded to; the carried part is
       // exp(bl) times the bf16 chunk-start memories against dH as rounded in the tiles. In parts the dG pass
       // adds: sTail[p][m] (p < kParts) over the rows p, p + kParts, ... of Hk, sTail[kParts][m] over row m
       // of Hv (kParts lanes a row).
      float t = 0.f;
#pragma unroll
      for (int i = 0; i < KT / kParts; ++i)
        t += bf(sHkS[(pk + kParts * i) * kLdM + mk]) * bf(sHk[(pk + kParts * i) * kLdM + mk]);
      sTail[pk * MT + mk] = exp_ftz(bl[mk]) * t;
      t = 0.f;
#pragma unroll
      for (int i = 0; i < VT / kParts; ++i)
        t += bf(sHvS[mv * (VT + 8) + pv + kParts * i]) * bf(sHv[mv * (VT + 8) + pv + kParts * i]);
#pragma unroll
      for (int o = 1; o < kParts; o *= 2) t += __shfl_xor_sync(0xffffffffu, t, o);
      if (pv == 0) sTail[kParts * MT + mv] = exp_ftz(bl[mv]) * t;
    }
    // dS = the intra part (fast path: times exp(ref - b_j)) + Rem .* t, t = Vc dHvE^T + Kc dHkE. The
    // S .* dS of dB takes S as each product saw it (rounded in Sp and S .* Rem); its inter part goes to
    // sInter (the score tiles' space, free after the head loop), whose column sums are the increments'
    // share of the tail above.
    float* sInter = reinterpret_cast<float*>(sA1);  // [64][kLdF]
    static_assert(kC * kLdF * sizeof(float) <= 2 * kC * kLdA * sizeof(bf16x), "sInter fits sA1 and sdA2");
    {
      float t[1][kHalf / 8][4];
      zero(t);
      warp_mma<1, kHalf / 8, VT, false, true>(t, sV, VT + 8, m0, sHv, VT + 8, n0, lane);
      warp_mma<1, kHalf / 8, KT, false, false>(t, sK, KT + 8, m0, sHk, kLdM, n0, lane);
#pragma unroll
      for (int ni = 0; ni < kHalf / 8; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = m0 + frag_row(lane, e), m = n0 + ni * 8 + frag_col(lane, e);
          const float br = sB[r * kLdF + m], sv = sS[r * kLdF + m];
          const float f = fast ? exp_ftz(sRef[m] - br) : 1.f, intra = dSa[0][ni][e];
          const float x = bf(sSp[r * kLdM + m]) * t[0][ni][e];
          dSa[0][ni][e] = (fast ? rounded(sv * f) : sv) * intra + x;  // S .* dS
          sInter[r * kLdF + m] = x;
          sS[r * kLdF + m] = f * intra + t[0][ni][e] * exp_ftz(bl[m] - br);  // dS; the thread's own entries
        }
    }
    warp_mma<1, VT / 16, MT, false, false>(dVa, sSp, kLdM, m0, sHv, VT + 8, nv, lane);
#pragma unroll
    for (int ni = 0; ni < KT / 16; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) dKa[0][ni][e] *= a.scale;
    warp_mma<1, KT / 16, MT, false, true>(dKa, sSp, kLdM, m0, sHk, kLdM, nk, lane);
    const int64_t tok = int64_t(b) * d.T + ts;  // the slot gradients go to the rows of the tokens
    // dK, dV and dS leave through tiles in 16-byte row pieces: dK and dV through the q and dO tiles, written
    // by warps 4 .. 7, and dS (its own tile, M % 4 == 0) by warps 2 and 3, while warps 0 and 1 run dG's
    // serial sum over dB in the Pe and dZe tiles.
    bf16x* sdK = sQ;
    bf16x* sdV = sDO;
    float* sdB = reinterpret_cast<float*>(sPe);
    static_assert(kC * kLdF * sizeof(float) <= 2 * kC * kLdM * sizeof(bf16x), "dB fits the Pe and dZe tiles");
    const bool ds_rows = gates_async(d.M);
    __syncthreads();  // every thread's tail sums have read HkS and HvS
    store_slots(sdV, VT + 8, dVa, m0, nv, lane, one);
    store_slots(sdK, KT + 8, dKa, m0, nk, lane, one);
#pragma unroll
    for (int ni = 0; ni < kHalf / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + frag_row(lane, e), m = n0 + ni * 8 + frag_col(lane, e);
        if (!ds_rows && r >= lo && r < n && m < d.M) a.ds[((tok + r) * d.Hkv + j) * d.M + m] = sS[r * kLdF + m];
        sdB[r * kLdF + m] = reinterpret_cast<const float*>(myDB + ni * 32)[e] - dSa[0][ni][e];
      }
    __syncthreads();
    if (warp >= 4) {
      constexpr int kOut = kBwdThreads / 2;
      const int tid = threadIdx.x - kOut;
      flash::store_tile<kC, KT, KT + 8, kOut, true>(sdK + lo * (KT + 8), a.dk + (int64_t(b) * d.T * d.Hkv + j) * d.K,
                                                    int64_t(d.Hkv) * d.K, ts + lo, ts + n, d.K, tid);
      flash::store_tile<kC, VT, VT + 8, kOut, true>(sdV + lo * (VT + 8), a.dv + (int64_t(b) * d.T * d.Hkv + j) * d.V,
                                                    int64_t(d.Hkv) * d.V, ts + lo, ts + n, d.V, tid);
    } else if (warp >= 2 && ds_rows) {
      constexpr int kVec = MT / 4, kOut = 64;
      for (int x = threadIdx.x - kOut; x < kC * kVec; x += kOut) {
        const int r = x / kVec, c4 = (x % kVec) * 4;
        if (r >= lo && r < n && c4 < d.M)
          *reinterpret_cast<float4*>(a.ds + ((tok + r) * d.Hkv + j) * d.M + c4) =
              *reinterpret_cast<const float4*>(sS + r * kLdF + c4);
      }
    }
    if (threadIdx.x < d.M) {  // dG: reverse cumsum over the chunk's rows plus the tail
      const int m = threadIdx.x;
      float part[4] = {};
#pragma unroll
      for (int r = 0; r < kC; r += 4)
#pragma unroll
        for (int u = 0; u < 4; ++u) part[u] += sInter[(r + u) * kLdF + m];
      float acc = (part[0] + part[1]) + (part[2] + part[3]);
#pragma unroll
      for (int p = 0; p <= kParts; ++p) acc += sTail[p * MT + m];
      for (int r = n - 1; r >= lo; --r) {
        acc += sdB[r * kLdF + m];
        a.dg[((tok + r) * d.Hkv + j) * d.M + m] = acc;
      }
    }
  }
}

// B1 (kLocal) and B3. Grid (NC, B Hkv).
// At MT = 32 both run two CTAs an SM at 128 registers. B3 spills there (~90 words a thread, ptxas), yet
// took 887 us a launch at nha's 4k bench shape against 954 at one CTA (H200, ncu, one call, both with
// the memories fetched into registers; kStatesAsync since).
template <int KT, int VT, int MT, bool kLocal>
__global__ void __launch_bounds__(kBwdThreads, MT == 32 ? 2 : 1) gsa_backward_kernel(BackwardArgs a, Dims d) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Every load the chunk starts with goes out before the gates are summed: the gates (gates_async) in a
  // first group, k, v, the first head's q, dO (and kStatesAsync the chunk-start memories) in a second,
  // else the memories into registers.
  const int c = blockIdx.x, bj = blockIdx.y, b = bj / d.Hkv, j = bj % d.Hkv, ts = c * kC - d.shift;
  if (gates_async(d.M)) {  // in a group of their own, waited for by chunk_guard
    float* sB = reinterpret_cast<float*>(smem + 2 * backward_tile_elems<KT, VT, MT>());
    const int64_t gs_head = (int64_t(b) * d.T * d.Hkv + j) * d.M;
    copy_gates_async<MT, kBwdThreads>(a.g + gs_head, a.s + gs_head, int64_t(d.Hkv) * d.M, ts, d.T - d.shift, d.M, sB,
                                      sB + kC * ld_f<MT>);
  }
  flash::cp_async_commit();
  bf16x* sK = reinterpret_cast<bf16x*>(smem) + kC * (KT + 8);
  bf16x* sV = sK + kC * (KT + 8);
  load_rows_async<kC, KT, kBwdThreads>(sK, a.k + (int64_t(b) * d.T * d.Hkv + j) * d.K, int64_t(d.Hkv) * d.K, ts,
                                       d.T - d.shift, d.K);
  load_rows_async<kC, VT, kBwdThreads>(sV, a.v + (int64_t(b) * d.T * d.Hkv + j) * d.V, int64_t(d.Hkv) * d.V, ts,
                                       d.T - d.shift, d.V);
  const int64_t slot = int64_t(bj) * (d.NC + 1) + c;
  StateFetch<KT, VT, MT, kStatesAsync<MT, kLocal>> st;
  if constexpr (kStatesAsync<MT, kLocal>) {
    bf16x* sHk = sV + 2 * kC * (VT + 8);  // after sV and sDO (backward_chunk)
    bf16x* sHv = sHk + KT * ld_m<MT>;
    if (hk_async(d)) load_rows_async<KT, MT, kBwdThreads>(sHk, a.Hk + slot * d.K * d.M, d.M, 0, d.K, d.M);
    load_rows_async<MT, VT, kBwdThreads>(sHv, a.Hv + slot * d.M * d.V, d.V, 0, d.M, d.V);
  }
  load_head_async<KT, VT>(a, d, smem, j * d.G);  // commits the group
  if constexpr (!kLocal) {  // dHkE, dHvE, read after the head loop, from DRAM into L2 meanwhile
    const int64_t KM = int64_t(d.K) * d.M, MV = int64_t(d.M) * d.V, lk = (KM + 63) / 64, lv = (MV + 63) / 64;
    const bf16x* dhk = a.Dk + (int64_t(bj) * (d.NC + 1) + c + 1) * KM;
    const bf16x* dhv = a.Dv + (int64_t(bj) * (d.NC + 1) + c + 1) * MV;
    for (int64_t x = threadIdx.x; x < lk + lv; x += kBwdThreads)  // a 128-byte line (64 elements) a thread
      chunk_mma::prefetch_l2(x < lk ? dhk + 64 * x : dhv + 64 * (x - lk));
  }
  st.fetch(a, d, slot);
  if (chunk_guard<KT, VT, MT>(a, d, smem))
    backward_chunk<KT, VT, MT, kLocal, true>(a, d, smem, st);
  else
    backward_chunk<KT, VT, MT, kLocal, false>(a, d, smem, st);
}


// The forward's kept chunk memories (GsaSaved::chunk_Hk, ...) as B0 would recompute them.
States kept_states(const GsaSaved& sv, const Dims& d) {
  auto check = [&](const Tensor& t, int rows, int cols) {
    HYB_CHECK(t.dtype() == DType::bf16 && t.shape() == Shape({d.B, d.Hkv, d.NC + 1, rows, cols}),
              "gsa_backward_fused: the kept chunk memories are ", t.str(), "; expected (", d.B, ", ", d.Hkv, ", ",
              d.NC + 1, ", ", rows, ", ", cols, ") bf16");
  };
  check(sv.chunk_Hk, d.K, d.M);
  check(sv.chunk_Hv, d.M, d.V);
  return {sv.chunk_Hk, sv.chunk_Hv, sv.chunk_decay};
}

}  // namespace

size_t backward_smem_bytes(int64_t K, int64_t V, int64_t M) {
  size_t r = 0;
  visit_tiles(K, V, [&](auto kt, auto vt) {
    visit_slots(M, [&](auto mt) {
      r = backward_smem_fixed<decltype(kt)::value, decltype(vt)::value, decltype(mt)::value>();
    });
  });
  return r;
}

}  // namespace gsa_fused

using namespace gsa_fused;

GsaGrads gsa_backward_fused(const GsaSaved& sv, const Tensor& dout0, const Tensor& dHk, const Tensor& dHv,
                            GradMask needed, const Tensor& delta, int64_t shift) {
  const GsaDims gd = gsa_dims("gsa_backward", sv.q, sv.k, sv.v, sv.s, sv.g, sv.Hk0, sv.Hv0);
  HYB_CHECK(shift == 0 || (sv.lse.defined() && shift > 0 && shift <= gd.T), "gsa_backward_fused: shift ", shift,
            " needs the forward's lse and 0 <= shift <= T = ", gd.T);
  const Tensor q = rows16(sv.q), k = rows16(sv.k), v = rows16(sv.v), dout = rows16(dout0);
  const Tensor s = rows16(sv.s), g = rows16(sv.g);  // copy_gates_async reads 16-byte pieces
  const Tensor Hk0 = sv.Hk0.defined() ? sv.Hk0.contiguous() : Tensor();
  const Tensor Hv0 = sv.Hv0.defined() ? sv.Hv0.contiguous() : Tensor();
  const double scale = sv.params.scale ? *sv.params.scale : 1.0 / std::sqrt(double(gd.K));
  const Tensor lse = (sv.lse.defined() ? sv.lse : gsa_forward_fused(q, k, v, s, g, Hk0, Hv0, scale).lse).contiguous();
  const Device dev = q.device();
  const ChunkDims cd = chunk_dims(gd.B, gd.T, gd.Hkv, dev);
  const Dims d{int(gd.B), int(gd.T), int(gd.Hq), int(gd.Hkv), int(gd.group), int(gd.K), int(gd.V), int(gd.M),
               int(cd.NC), int(shift)};
  cudaStream_t stream = current_stream(dev.index);
  const States st =  // B0, unless the forward kept them
      sv.chunk_Hk.defined() ? kept_states(sv, d) : forward_states(k, v, s, g, Hk0, Hv0, d, stream);
  const Tensor Dk = Tensor::empty({gd.B, gd.Hkv, cd.NC + 1, gd.K, gd.M}, DType::bf16, dev);
  const Tensor Dv = Tensor::empty({gd.B, gd.Hkv, cd.NC + 1, gd.M, gd.V}, DType::bf16, dev);
  GsaGrads r;
  r.dq = Tensor::empty(sv.q.shape(), DType::bf16, dev);
  r.dk = Tensor::empty(sv.k.shape(), DType::bf16, dev);
  r.dv = Tensor::empty(sv.v.shape(), DType::bf16, dev);
  r.ds = Tensor::empty(sv.s.shape(), DType::f32, dev);
  r.dg = Tensor::empty(sv.g.shape(), DType::f32, dev);
  if (shift > 0)  // the last shift tokens never reach the slots; B3 writes the rows of the others
    for (const Tensor* x : {&r.dk, &r.dv, &r.ds, &r.dg}) x->narrow(1, gd.T - shift, shift).zero_();
  BackwardArgs a{bp(q),       bp(k),       bp(v),        bp(dout),    s.data<float>(), g.data<float>(),
                 lse.data<float>(), bp(st.Hk), bp(st.Hv), bp_mut(Dk), bp_mut(Dv),       bp_mut(r.dq),
                 bp_mut(r.dk), bp_mut(r.dv), r.ds.data<float>(), r.dg.data<float>(), float(scale),
                 delta.defined() ? delta.data<float>() : nullptr};
  if (Hk0.defined()) {
    r.dHk0 = Tensor::empty(Hk0.shape(), DType::f32, dev);
    r.dHv0 = Tensor::empty(Hv0.shape(), DType::f32, dev);
  }
  const Tensor dHkT = dHk.defined() ? dHk.contiguous() : Tensor(), dHvT = dHv.defined() ? dHv.contiguous() : Tensor();
  const dim3 grid(unsigned(d.NC), unsigned(d.B * d.Hkv));
  visit_tiles(d.K, d.V, [&](auto kt, auto vt) {
    visit_slots(d.M, [&](auto mt) {
      constexpr int KT = decltype(kt)::value, VT = decltype(vt)::value, MT = decltype(mt)::value;
      const size_t smem = backward_smem_fixed<KT, VT, MT>();
      set_smem(gsa_backward_kernel<KT, VT, MT, true>, smem);
      gsa_backward_kernel<KT, VT, MT, true><<<grid, kBwdThreads, smem, stream>>>(a, d);  // B1
      HYB_CUDA_LAUNCH_CHECK("gsa gsa_backward_kernel (local)", grid, kBwdThreads, smem);
      state_scan(Dk, st.decay, d, false, true, dHkT, r.dHk0, stream);  // B2
      state_scan(Dv, st.decay, d, true, true, dHvT, r.dHv0, stream);
      set_smem(gsa_backward_kernel<KT, VT, MT, false>, smem);
      gsa_backward_kernel<KT, VT, MT, false><<<grid, kBwdThreads, smem, stream>>>(a, d);  // B3
      HYB_CUDA_LAUNCH_CHECK("gsa gsa_backward_kernel", grid, kBwdThreads, smem);
    });
  });
  GsaGrads out;
  if (needed[0]) out.dq = r.dq;
  if (needed[1]) out.dk = r.dk;
  if (needed[2]) out.dv = r.dv;
  if (needed[3]) out.ds = r.ds;
  if (needed[4]) out.dg = r.dg;
  if (needed[5]) out.dHk0 = r.dHk0;
  if (needed[6]) out.dHv0 = r.dHv0;
  return out;
}

}  // namespace hyb
