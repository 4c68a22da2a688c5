// Flash-attention backward (attention.md 4.2, 4.3): P is rebuilt from the saved lse.
//  1. preprocess: Di = rowsum(dO ∘ O) - dlse, one warp per row; the fp32 dQ accumulator is zeroed.
//  2. main: one CTA per (key block, kv head, batch), sink blocks first, looping over the G query heads of the group and
//     the query blocks that see the key block. Each warp owns 16 keys and works on the transposed
//     scores S^T = K Q^T, so P^T and dS^T come out of the accumulators already shaped as the A
//     operands of dV += P^T dO and dK += dS^T Q: dK and dV stay in registers, summed over the group,
//     and are written once. dS^T goes through smem for dQ = dS K, added to the accumulator with
//     fp32 vector atomics.
//  3. convert: dq = bf16(accumulator).
// Deterministic mode replaces the atomics and the convert with a query-parallel dQ kernel.
// dscale_h (the per-head scale's gradient) is summed in fp32 inside the main kernel.
// Head dims over 128 run the main kernel twice, each pass producing one half of the dK/dV/dQ columns.
#include <algorithm>

#include "layers/softmax_attention/flash_attention.cuh"
#include "layers/softmax_attention/flash_attention_device.cuh"
#include "layers/softmax_attention/flash_attention_sm90.cuh"

namespace hyb {
namespace flash {

// kSlab: dK/dV/dQ columns one pass produces (kHeadDim, or half of it above 128).
// kMinBlocks: CTAs per SM the register allocation must allow.
template <int kHeadDim_, int kSlab_, int kBlockN_, int kBlockM_, bool kKVInRegs_, bool kVec16_, int kMinBlocks_ = 1>
struct BackwardTile {
  static constexpr int kHeadDim = kHeadDim_, kSlab = kSlab_, kBlockN = kBlockN_, kBlockM = kBlockM_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kKVInRegs = kKVInRegs_, kVec16 = kVec16_;
  static constexpr int kWarps = kBlockN / 16, kThreads = 32 * kWarps;
  static constexpr int kStride = kHeadDim + 8, kDSStride = kBlockM + 8;
  // dQ = dS K: kWarpsM x kWarpsN warps over the (kBlockM x kSlab) product.
  static constexpr int kWarpsM = kWarps < kBlockM / 16 ? kWarps : kBlockM / 16;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kDQRows = kBlockM / kWarpsM, kDQCols = kSlab / kWarpsN;
  static constexpr int kSmemBytes =
      (2 * kBlockN * kStride + 4 * kBlockM * kStride + kBlockN * kDSStride) * 2 + 4 * kBlockM * 4;
  static_assert(kBlockN % 16 == 0 && kBlockM % 16 == 0 && kHeadDim % 16 == 0 && kSlab % 16 == 0);
  static_assert(kWarpsM * kWarpsN == kWarps && kDQRows % 16 == 0 && kDQCols % 16 == 0);
};

struct BackwardArgs {
  FlashAttentionBackwardParams p;
  float* dq_acc;  // (B, Hq, Tq, kHeadDim) fp32, zeroed
  float* di;      // (B, Hq, Tq)
  int d_lo;       // first dK/dV/dQ column of this pass
};

// kDscale: also sum dL/dscale_h (a separate instantiation: the extra live values cost spills).
// kAtomicDQ: also add dQ into the accumulator; off in deterministic mode, where
// flash_backward_dq_kernel computes dQ (and dscale_h) without atomics.
template <class Cfg, bool kDscale, bool kAtomicDQ>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) flash_backward_kernel(const BackwardArgs args) {
  constexpr int kD = Cfg::kHeadDim, kSlab = Cfg::kSlab, kBN = Cfg::kBlockN, kBM = Cfg::kBlockM;
  constexpr int kThreads = Cfg::kThreads, kStride = Cfg::kStride, kDSStride = Cfg::kDSStride;
  constexpr bool kVec16 = Cfg::kVec16, kKVInRegs = Cfg::kKVInRegs;
  constexpr int kKT = kD / 16, kQT = kBM / 8, kST = kSlab / 8;
  constexpr int kDQM = Cfg::kDQRows / 16, kDQN = Cfg::kDQCols / 8;
  const FlashAttentionBackwardParams& p = args.p;
  const FlashAttentionForwardParams& f = p.fwd;

  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + kBN * kStride;
  bf16* sQ = sV + kBN * kStride;     // two buffers of kBM rows
  bf16* sdO = sQ + 2 * kBM * kStride;  // two buffers of kBM rows
  bf16* sdS = sdO + 2 * kBM * kStride;  // dS^T, (kBN keys) x (kBM queries)
  float* sLse = reinterpret_cast<float*>(sdS + kBN * kDSStride);  // two buffers of kBM
  float* sDi = sLse + 2 * kBM;                                    // two buffers of kBM

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gr = lane / 4, tq = lane % 4;
  const BackwardBlock kb(f, blockIdx.x, kBN, kBM, p.tail_heads);
  const int b = kb.b, kvh = kb.kvh, G = f.Hq / f.Hkv, off = f.Tk - f.Tq;
  const int c_lo = kb.c_lo, c_hi = kb.c_hi, m_lo = kb.m_lo, n_m = kb.n_m;
  const int n_iter = G * n_m;

  const bf16* kh = static_cast<const bf16*>(f.k) + b * f.k_stride.b + kvh * f.k_stride.h;
  const bf16* vh = static_cast<const bf16*>(f.v) + b * f.v_stride.b + kvh * f.v_stride.h;
  load_tile<kBN, kD, kThreads, kVec16>(sK, kh, f.k_stride.t, c_lo, f.Tk, f.D, tid);
  load_tile<kBN, kD, kThreads, kVec16>(sV, vh, f.v_stride.t, c_lo, f.Tk, f.Dv, tid);

  // Q, dO, lse and Di of step `it` into buffer `buf`. Rows >= Tq load as zeros, and so contribute
  // exactly nothing: S = 0 gives P = exp(0 - 0) = 1, but dO = 0 and Di = 0 make dV and dS zero.
  auto load_step = [&](int h, int row0, int buf) {
    const bf16* qh = static_cast<const bf16*>(f.q) + b * f.q_stride.b + h * f.q_stride.h;
    const bf16* doh = static_cast<const bf16*>(p.dout) + b * p.dout_stride.b + h * p.dout_stride.h;
    load_tile<kBM, kD, kThreads, kVec16>(sQ + buf * kBM * kStride, qh, f.q_stride.t, row0, f.Tq, f.D, tid);
    load_tile<kBM, kD, kThreads, kVec16>(sdO + buf * kBM * kStride, doh, p.dout_stride.t, row0, f.Tq, f.Dv, tid);
    load_row_terms<kBM>(sLse + buf * kBM, sDi + buf * kBM, f, args.di, b, h, row0, tid);
  };
  if (n_iter > 0) load_step(kvh * G, m_lo * kBM, 0);
  cp_async_commit();

  float acc_dk[kST][4], acc_dv[kST][4];
#pragma unroll
  for (int dj = 0; dj < kST; ++dj)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[dj][e] = acc_dv[dj][e] = 0.f;
  uint32_t kf[kKVInRegs ? kKT : 1][4], vf[kKVInRegs ? kKT : 1][4];

  // ldmatrix lane roles, as in the forward; `dsa` reads dS^T transposed into A fragments of dS.
  const int a_row = lane % 16, a_col = 8 * (lane / 16);
  const int b_row = lane % 8 + 8 * (lane / 16), b_col = 8 * ((lane / 8) % 2);
  const int bt_row = lane % 8 + 8 * ((lane / 8) % 2), bt_col = 8 * (lane / 16);
  const int dsa_row = lane % 8 + 8 * (lane / 16), dsa_col = 8 * ((lane / 8) % 2);
  const int key_row = warp * 16;  // this warp's keys within the block
  const uint32_t sK_u = smem_u32(sK), sV_u = smem_u32(sV), sQ_u = smem_u32(sQ), sdO_u = smem_u32(sdO);
  const uint32_t sdS_u = smem_u32(sdS);
  const int wm = warp % Cfg::kWarpsM, wn = warp / Cfg::kWarpsM;
  const int dq_row = wm * Cfg::kDQRows, dq_col = args.d_lo + wn * Cfg::kDQCols;

  // dL/dscale_h = sum dS_ij <q_i, k_j>, summed in fp32 from the unrounded dS of this warp's keys and
  // added once per head: rounding dS to bf16 first would swamp this heavily cancelling sum.
  float dscale_acc = 0.f;
  for (int it = 0, h = kvh * G, m = m_lo; it < n_iter; ++it) {
    // Step `it` is query block m of head h; the next step is the next block, or the next head.
    const int buf = it & 1, row0 = m * kBM;
    const bool last_m = m == m_lo + n_m - 1;
    const int next_h = last_m ? h + 1 : h, next_m = last_m ? m_lo : m + 1;
    cp_async_wait<0>();
    __syncthreads();  // this step's tiles landed; every warp is done with the other buffer and sdS
    if constexpr (kKVInRegs) {
      if (it == 0) {
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk) {
          ldsm_x4(kf[kk], sK_u + ((key_row + a_row) * kStride + kk * 16 + a_col) * 2);
          ldsm_x4(vf[kk], sV_u + ((key_row + a_row) * kStride + kk * 16 + a_col) * 2);
        }
      }
    }
    if (it + 1 < n_iter) load_step(next_h, next_m * kBM, buf ^ 1);
    cp_async_commit();
    const float scale = f.scale_h ? f.scale_h[h] : f.scale, sl2 = scale * kLog2e;
    const uint32_t sQb = sQ_u + buf * kBM * kStride * 2, sdOb = sdO_u + buf * kBM * kStride * 2;

    // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x kBM queries.
    float st[kQT][4], dpt[kQT][4];
#pragma unroll
    for (int j = 0; j < kQT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      uint32_t ka[4], va[4];
      if constexpr (kKVInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) ka[e] = kf[kk][e], va[e] = vf[kk][e];
      } else {
        ldsm_x4(ka, sK_u + ((key_row + a_row) * kStride + kk * 16 + a_col) * 2);
        ldsm_x4(va, sV_u + ((key_row + a_row) * kStride + kk * 16 + a_col) * 2);
      }
#pragma unroll
      for (int j2 = 0; j2 < kQT / 2; ++j2) {
        uint32_t bq[4], bo[4];
        ldsm_x4(bq, sQb + ((j2 * 16 + b_row) * kStride + kk * 16 + b_col) * 2);
        mma_16816(st[2 * j2], ka, bq[0], bq[1]);
        mma_16816(st[2 * j2 + 1], ka, bq[2], bq[3]);
        ldsm_x4(bo, sdOb + ((j2 * 16 + b_row) * kStride + kk * 16 + b_col) * 2);
        mma_16816(dpt[2 * j2], va, bo[0], bo[1]);
        mma_16816(dpt[2 * j2 + 1], va, bo[2], bo[3]);
      }
    }

    // P^T = exp(s - lse) (0 where not visible), dS^T = scale · P^T ∘ (dP^T - Di).
    const int pr_lo = row0 + off, pr_hi = min(f.Tq, row0 + kBM) - 1 + off;
    // Keys >= Tk are masked too: their zero K gives P = exp(-lse), which need not be finite.
    const bool full = c_lo + kBN <= f.Tk && c_hi <= pr_lo &&
                      (f.window == 0 || pr_hi - c_lo < f.window || c_hi < f.sinks);
    const float* lse_b = sLse + buf * kBM;
    const float* di_b = sDi + buf * kBM;
#pragma unroll
    for (int j = 0; j < kQT; ++j) {
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_b + j * 8 + 2 * tq);
      const float2 di2 = *reinterpret_cast<const float2*>(di_b + j * 8 + 2 * tq);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float nl = -(e ? lse2.y : lse2.x) * kLog2e, di = e ? di2.y : di2.x;
        const int pos = row0 + j * 8 + 2 * tq + e + off;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float dot = st[j][2 * half + e];
          float pv = fast_exp2(fmaf(dot, sl2, nl));
          const int key = c_lo + key_row + gr + 8 * half;
          if (!full && !visible(pos, key, f.Tk, f.window, f.sinks)) pv = 0.f;
          const float ds = pv * (dpt[j][2 * half + e] - di);
          if constexpr (kDscale) dscale_acc = fmaf(ds, dot, dscale_acc);
          st[j][2 * half + e] = pv;
          dpt[j][2 * half + e] = ds * scale;
        }
      }
    }

    // dV += P^T dO[:, slab], dK += dS^T Q[:, slab].
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) {
      uint32_t pa[4], da[4];
      c_to_a(pa, st[2 * kk], st[2 * kk + 1]);
      c_to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dj2 = 0; dj2 < kST / 2; ++dj2) {
        const int o = ((kk * 16 + bt_row) * kStride + args.d_lo + dj2 * 16 + bt_col) * 2;
        uint32_t bo[4], bq[4];
        ldsm_x4_t(bo, sdOb + o);
        mma_16816(acc_dv[2 * dj2], pa, bo[0], bo[1]);
        mma_16816(acc_dv[2 * dj2 + 1], pa, bo[2], bo[3]);
        ldsm_x4_t(bq, sQb + o);
        mma_16816(acc_dk[2 * dj2], da, bq[0], bq[1]);
        mma_16816(acc_dk[2 * dj2 + 1], da, bq[2], bq[3]);
      }
    }

    if constexpr (kAtomicDQ) {
#pragma unroll
    for (int j = 0; j < kQT; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<uint32_t*>(sdS + (key_row + gr + 8 * half) * kDSStride + j * 8 + 2 * tq) =
            pack_bf16(dpt[j][2 * half], dpt[j][2 * half + 1]);
    __syncthreads();

    // dQ[rows, slab] += dS K[:, slab]; each warp adds a (kDQRows x kDQCols) piece.
    float dq[kDQM][kDQN][4];
#pragma unroll
    for (int mi = 0; mi < kDQM; ++mi)
#pragma unroll
      for (int dj = 0; dj < kDQN; ++dj)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[mi][dj][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[kDQM][4];
#pragma unroll
      for (int mi = 0; mi < kDQM; ++mi)
        ldsm_x4_t(a[mi], sdS_u + ((kk * 16 + dsa_row) * kDSStride + dq_row + mi * 16 + dsa_col) * 2);
#pragma unroll
      for (int dj2 = 0; dj2 < kDQN / 2; ++dj2) {
        uint32_t bk[4];
        ldsm_x4_t(bk, sK_u + ((kk * 16 + bt_row) * kStride + dq_col + dj2 * 16 + bt_col) * 2);
#pragma unroll
        for (int mi = 0; mi < kDQM; ++mi) {
          mma_16816(dq[mi][2 * dj2], a[mi], bk[0], bk[1]);
          mma_16816(dq[mi][2 * dj2 + 1], a[mi], bk[2], bk[3]);
        }
      }
    }
    float* dq_head = args.dq_acc + (int64_t(b) * f.Hq + h) * f.Tq * kD;
#pragma unroll
    for (int mi = 0; mi < kDQM; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + dq_row + mi * 16 + gr + 8 * half;
        if (row < f.Tq) {
#pragma unroll
          for (int dj = 0; dj < kDQN; ++dj)
            red_add_v2(dq_head + int64_t(row) * kD + dq_col + dj * 8 + 2 * tq, dq[mi][dj][2 * half],
                       dq[mi][dj][2 * half + 1]);
        }
      }
    }
    if (kDscale && (next_h != h || it + 1 == n_iter) && args.d_lo == 0) {
      flush_dscale(dscale_acc, p.dscale_h, h, lane);
    }
    h = next_h;
    m = next_m;
  }

  // dK, dV (already summed over the group) out through smem as coalesced rows.
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int dj = 0; dj < kST; ++dj)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = key_row + gr + 8 * half;
      *reinterpret_cast<uint32_t*>(sK + r * kStride + dj * 8 + 2 * tq) =
          pack_bf16(acc_dk[dj][2 * half], acc_dk[dj][2 * half + 1]);
      *reinterpret_cast<uint32_t*>(sV + r * kStride + dj * 8 + 2 * tq) =
          pack_bf16(acc_dv[dj][2 * half], acc_dv[dj][2 * half + 1]);
    }
  __syncthreads();
  bf16* dkh = static_cast<bf16*>(p.dk) + b * p.dk_stride.b + kvh * p.dk_stride.h + args.d_lo;
  bf16* dvh = static_cast<bf16*>(p.dv) + b * p.dv_stride.b + kvh * p.dv_stride.h + args.d_lo;
  store_tile<kBN, kSlab, kStride, kThreads, kVec16>(sK, dkh, p.dk_stride.t, c_lo, f.Tk, min(kSlab, f.D - args.d_lo), tid);
  store_tile<kBN, kSlab, kStride, kThreads, kVec16>(sV, dvh, p.dv_stride.t, c_lo, f.Tk, min(kSlab, f.Dv - args.d_lo),
                                                    tid);
}

// Di = rowsum(dO ∘ O) - dlse, kLanes threads per (b, t, h) row (16-byte loads of 8 elements each when
// kVec16, pairs otherwise); also clears dscale_h and the n4 float4 of the dQ accumulator for the main
// kernel (here rather than by a memset: one launch less). A warp per row with 4-byte loads had taken
// 174 us for 134 MB read and 134 MB zeroed (H200, T = 8k; the copy rate would be ~63 us).
template <int kLanes, bool kVec16>
__global__ void flash_backward_preprocess_kernel(const FlashAttentionBackwardParams p, float* __restrict__ di,
                                                 float4* __restrict__ dq_acc, int64_t n4) {
  const FlashAttentionForwardParams& f = p.fwd;
  if (p.dscale_h && blockIdx.x == 0)
    for (int i = threadIdx.x; i < f.Hq; i += blockDim.x) p.dscale_h[i] = 0.f;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, threads = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = tid; i < n4; i += threads) dq_acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  constexpr int kElems = kVec16 ? 8 : 2, kRowsPerWarp = 32 / kLanes;
  const int lane = threadIdx.x % 32, sub = lane % kLanes;
  const int64_t rows = int64_t(f.B) * f.Tq * f.Hq;
  // r0 is the same for the whole warp, so every lane reaches the shuffles.
  for (int64_t r0 = tid / 32 * kRowsPerWarp; r0 < rows; r0 += threads / 32 * kRowsPerWarp) {
    const int64_t r = r0 + lane / kLanes;
    const int h = int(r % f.Hq), t = int((r / f.Hq) % f.Tq), b = int(r / (int64_t(f.Hq) * f.Tq));
    float sum = 0.f;
    if (r < rows) {
      const bf16* o = static_cast<const bf16*>(f.o) + b * f.o_stride.b + t * f.o_stride.t + h * f.o_stride.h;
      const bf16* g = static_cast<const bf16*>(p.dout) + b * p.dout_stride.b + t * p.dout_stride.t + h * p.dout_stride.h;
      for (int d = sub * kElems; d < f.Dv; d += kLanes * kElems) {
        if constexpr (kVec16) {
          const uint4 a = *reinterpret_cast<const uint4*>(o + d), c = *reinterpret_cast<const uint4*>(g + d);
          const uint32_t av[4] = {a.x, a.y, a.z, a.w}, cv[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&av[e]));
            const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&cv[e]));
            sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
          }
        } else {
          const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(o + d));
          const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(g + d));
          sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
        }
      }
    }
#pragma unroll
    for (int sh = kLanes / 2; sh > 0; sh /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, sh);
    if (r < rows && sub == 0) {
      const int64_t idx = (int64_t(b) * f.Hq + h) * f.Tq + t;
      di[idx] = sum - (p.dlse ? p.dlse[idx] : 0.f);
    }
  }
}

template <int kLanes, bool kVec16>
cudaError_t launch_preprocess_as(const FlashAttentionBackwardParams& p, float* di, float* dq_acc, int64_t n4,
                                 cudaStream_t stream) {
  const int64_t threads = int64_t(p.fwd.B) * p.fwd.Tq * p.fwd.Hq * kLanes;
  const int grid = int(std::min<int64_t>((threads + 255) / 256, 65536));
  flash_backward_preprocess_kernel<kLanes, kVec16>
      <<<grid, 256, 0, stream>>>(p, di, reinterpret_cast<float4*>(dq_acc), n4);
  return cudaGetLastError();
}

// A row of Dv elements takes Dv / 8 threads (16-byte loads) where o and dout allow, a warp otherwise.
inline cudaError_t launch_preprocess(const FlashAttentionBackwardParams& p, float* di, float* dq_acc, int64_t n4,
                                     cudaStream_t stream) {
  const FlashAttentionForwardParams& f = p.fwd;
  if (f.Dv % 8 != 0 || !rows_aligned(f.o, f.o_stride, 16) || !rows_aligned(p.dout, p.dout_stride, 16))
    return launch_preprocess_as<32, false>(p, di, dq_acc, n4, stream);
  if (f.Dv <= 64) return launch_preprocess_as<8, true>(p, di, dq_acc, n4, stream);
  if (f.Dv <= 128) return launch_preprocess_as<16, true>(p, di, dq_acc, n4, stream);
  return launch_preprocess_as<32, true>(p, di, dq_acc, n4, stream);
}

// dq = bf16(dq_acc), one warp per row.
__global__ void flash_backward_convert_kernel(const FlashAttentionBackwardParams p, const float* __restrict__ dq_acc,
                                              int head_dim) {
  const FlashAttentionForwardParams& f = p.fwd;
  const int lane = threadIdx.x % 32;
  const int64_t rows = int64_t(f.B) * f.Hq * f.Tq, warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
    const int t = int(r % f.Tq), h = int((r / f.Tq) % f.Hq), b = int(r / (int64_t(f.Tq) * f.Hq));
    const float* src = dq_acc + r * head_dim;
    bf16* dst = static_cast<bf16*>(p.dq) + b * p.dq_stride.b + t * p.dq_stride.t + h * p.dq_stride.h;
    for (int d = 2 * lane; d < f.D; d += 64) {
      const float2 v = *reinterpret_cast<const float2*>(src + d);
      *reinterpret_cast<__nv_bfloat162*>(dst + d) = __floats2bfloat162_rn(v.x, v.y);
    }
  }
}

// Deterministic dQ (attention.md 4.2): one CTA per (query block, query head, batch) walks the
// forward's visit list, rebuilds S, P and dP and keeps dQ in registers (7 products per tile pair
// in all instead of 5, no atomics). Each warp owns 16 query rows. With kDscale it also writes this
// CTA's part of dL/dscale_h, summed in a fixed order, to `dscale_part`.
template <int kHeadDim_, int kBlockN_, bool kVec16_>
struct DqTile {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = 64, kBlockN = kBlockN_, kWarps = 4, kThreads = 128;
  static constexpr bool kVec16 = kVec16_;
  static constexpr int kStride = kHeadDim + 8;
  static constexpr int kSmemBytes = (2 * kBlockM + 4 * kBlockN) * kStride * 2;
};

template <class Cfg, bool kDscale>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    flash_backward_dq_kernel(const BackwardArgs args, float* __restrict__ dscale_part) {
  constexpr int kD = Cfg::kHeadDim, kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kThreads = Cfg::kThreads;
  constexpr bool kVec16 = Cfg::kVec16;
  constexpr int kStride = Cfg::kStride, kNT = kBN / 8, kKT = kD / 16, kDT = kD / 8;
  const FlashAttentionBackwardParams& p = args.p;
  const FlashAttentionForwardParams& f = p.fwd;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sdO = sQ + kBM * kStride;
  bf16* sK = sdO + kBM * kStride;     // two buffers of kBN rows
  bf16* sV = sK + 2 * kBN * kStride;  // two buffers of kBN rows

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gr = lane / 4, tq = lane % 4;
  const QueryBlockCta cta(f, kBM);
  const int num_m = (f.Tq + kBM - 1) / kBM, m_block = cta.m_block, h = cta.h, b = cta.b;
  const bf16 *qh = cta.qh, *kh = cta.kh, *vh = cta.vh;
  const bf16* doh = static_cast<const bf16*>(p.dout) + b * p.dout_stride.b + h * p.dout_stride.h;

  // The forward's visit list (attention.md 4.3).
  const int row0 = m_block * kBM, off = f.Tk - f.Tq;
  const ForwardVisits visits(f, row0, kBM, kBN);
  const int p_lo = visits.p_lo, p_hi = visits.p_hi, n_iter = visits.n_iter;

  load_tile<kBM, kD, kThreads, kVec16>(sQ, qh, f.q_stride.t, row0, f.Tq, f.D, tid);
  load_tile<kBM, kD, kThreads, kVec16>(sdO, doh, p.dout_stride.t, row0, f.Tq, f.Dv, tid);
  load_tile<kBN, kD, kThreads, kVec16>(sK, kh, f.k_stride.t, visits.block(0) * kBN, f.Tk, f.D, tid);
  cp_async_commit();
  load_tile<kBN, kD, kThreads, kVec16>(sV, vh, f.v_stride.t, visits.block(0) * kBN, f.Tk, f.Dv, tid);
  cp_async_commit();

  const float scale = f.scale_h ? f.scale_h[h] : f.scale, sl2 = scale * kLog2e;
  // Rows >= Tq: zero Q and dO with lse = Di = 0 give dS = 0.
  float nl[2], di[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + warp * 16 + gr + 8 * half;
    const int64_t idx = (int64_t(b) * f.Hq + h) * f.Tq + row;
    nl[half] = row < f.Tq ? -f.lse[idx] * kLog2e : 0.f;
    di[half] = row < f.Tq ? args.di[idx] : 0.f;
  }
  float dq[kDT][4];
#pragma unroll
  for (int dj = 0; dj < kDT; ++dj)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[dj][e] = 0.f;
  float dscale_acc = 0.f;

  const int a_row = lane % 16, a_col = 8 * (lane / 16);
  const int b_row = lane % 8 + 8 * (lane / 16), b_col = 8 * ((lane / 8) % 2);
  const int bt_row = lane % 8 + 8 * ((lane / 8) % 2), bt_col = 8 * (lane / 16);
  const uint32_t sQ_u = smem_u32(sQ), sdO_u = smem_u32(sdO), sK_u = smem_u32(sK), sV_u = smem_u32(sV);

  for (int it = 0; it < n_iter; ++it) {
    const int n = visits.block(it), buf = it & 1;
    if (it == 0)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < n_iter) {
      const int next = visits.block(it + 1) * kBN;
      load_tile<kBN, kD, kThreads, kVec16>(sK + (buf ^ 1) * kBN * kStride, kh, f.k_stride.t, next, f.Tk, f.D, tid);
      load_tile<kBN, kD, kThreads, kVec16>(sV + (buf ^ 1) * kBN * kStride, vh, f.v_stride.t, next, f.Tk, f.Dv, tid);
    }
    cp_async_commit();
    const uint32_t sKb = sK_u + buf * kBN * kStride * 2, sVb = sV_u + buf * kBN * kStride * 2;

    float st[kNT][4], dp[kNT][4];
#pragma unroll
    for (int nj = 0; nj < kNT; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nj][e] = dp[nj][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, sQ_u + ((warp * 16 + a_row) * kStride + kk * 16 + a_col) * 2);
#pragma unroll
      for (int nj2 = 0; nj2 < kNT / 2; ++nj2) {
        uint32_t bk[4];
        ldsm_x4(bk, sKb + ((nj2 * 16 + b_row) * kStride + kk * 16 + b_col) * 2);
        mma_16816(st[2 * nj2], a, bk[0], bk[1]);
        mma_16816(st[2 * nj2 + 1], a, bk[2], bk[3]);
      }
    }
    if (it == 0) {  // the first block's V
      cp_async_wait<1>();
      __syncthreads();
    }
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, sdO_u + ((warp * 16 + a_row) * kStride + kk * 16 + a_col) * 2);
#pragma unroll
      for (int nj2 = 0; nj2 < kNT / 2; ++nj2) {
        uint32_t bv[4];
        ldsm_x4(bv, sVb + ((nj2 * 16 + b_row) * kStride + kk * 16 + b_col) * 2);
        mma_16816(dp[2 * nj2], a, bv[0], bv[1]);
        mma_16816(dp[2 * nj2 + 1], a, bv[2], bv[3]);
      }
    }

    const int c_lo = n * kBN;
    const bool full = c_lo + kBN <= f.Tk && c_lo + kBN - 1 <= p_lo &&
                      (f.window == 0 || p_hi - c_lo < f.window || c_lo + kBN <= f.sinks);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int pos = row0 + warp * 16 + gr + 8 * half + off;
#pragma unroll
      for (int nj = 0; nj < kNT; ++nj)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = c_lo + nj * 8 + 2 * tq + e;
          const float dot = st[nj][2 * half + e];
          float pv = fast_exp2(fmaf(dot, sl2, nl[half]));
          if (!full && !visible(pos, col, f.Tk, f.window, f.sinks)) pv = 0.f;
          const float ds = pv * (dp[nj][2 * half + e] - di[half]);
          if constexpr (kDscale) dscale_acc = fmaf(ds, dot, dscale_acc);
          st[nj][2 * half + e] = ds * scale;
        }
    }

    // dQ += dS K: A = dS from the accumulators, B = K read transposed (k = key, n = d).
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      uint32_t a[4];
      c_to_a(a, st[2 * kk], st[2 * kk + 1]);
#pragma unroll
      for (int dj2 = 0; dj2 < kDT / 2; ++dj2) {
        uint32_t bk[4];
        ldsm_x4_t(bk, sKb + ((kk * 16 + bt_row) * kStride + dj2 * 16 + bt_col) * 2);
        mma_16816(dq[2 * dj2], a, bk[0], bk[1]);
        mma_16816(dq[2 * dj2 + 1], a, bk[2], bk[3]);
      }
    }
  }

  // dq out through smem (sQ) as coalesced rows; dscale_h part: warps in order, then one store.
  __syncthreads();
#pragma unroll
  for (int dj = 0; dj < kDT; ++dj)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      *reinterpret_cast<uint32_t*>(sQ + (warp * 16 + gr + 8 * half) * kStride + dj * 8 + 2 * tq) =
          pack_bf16(dq[dj][2 * half], dq[dj][2 * half + 1]);
  if constexpr (kDscale) {
#pragma unroll
    for (int sh = 16; sh > 0; sh /= 2) dscale_acc += __shfl_xor_sync(0xffffffffu, dscale_acc, sh);
    float* part = reinterpret_cast<float*>(sdO);
    if (lane == 0) part[warp] = dscale_acc;
  }
  __syncthreads();
  if constexpr (kDscale) {
    if (tid == 0) {
      const float* part = reinterpret_cast<const float*>(sdO);
      dscale_part[(int64_t(h) * f.B + b) * num_m + m_block] = (part[0] + part[1]) + (part[2] + part[3]);
    }
  }
  bf16* dqh = static_cast<bf16*>(p.dq) + b * p.dq_stride.b + h * p.dq_stride.h;
  store_tile<kBM, kD, kStride, kThreads, kVec16>(sQ, dqh, p.dq_stride.t, row0, f.Tq, f.D, tid);
}

// dscale_h[h] = sum of the per-CTA parts of head h in a fixed order (deterministic mode).
__global__ void flash_backward_dscale_reduce_kernel(float* __restrict__ dscale_h, const float* __restrict__ part,
                                                    int Hq, int parts_per_head) {
  const int h = blockIdx.x;
  __shared__ float red[256];
  float acc = 0.f;
  for (int i = threadIdx.x; i < parts_per_head; i += blockDim.x) acc += part[int64_t(h) * parts_per_head + i];
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) dscale_h[h] = red[0];
}

template <class Cfg>
cudaError_t launch_backward_main(const FlashAttentionBackwardParams& p, float* dq_acc, float* di, cudaStream_t stream) {
  const auto kernel = p.deterministic ? flash_backward_kernel<Cfg, false, false>
                     : p.dscale_h     ? flash_backward_kernel<Cfg, true, true>
                                      : flash_backward_kernel<Cfg, false, true>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  const FlashAttentionBackwardParams q = key_block_order(p, Cfg::kBlockN, 0);
  const int grid = (p.fwd.Tk + Cfg::kBlockN - 1) / Cfg::kBlockN * p.fwd.Hkv * p.fwd.B;
  for (int d_lo = 0; d_lo < Cfg::kHeadDim; d_lo += Cfg::kSlab) {
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(BackwardArgs{q, dq_acc, di, d_lo});
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <int kD, bool kVec16>
struct BackwardDefault;
template <bool V>
struct BackwardDefault<32, V> : BackwardTile<32, 32, 128, 64, true, V> {};
template <bool V>
struct BackwardDefault<64, V> : BackwardTile<64, 64, 64, 64, true, V> {};
template <bool V>
struct BackwardDefault<96, V> : BackwardTile<96, 96, 128, 64, false, V> {};
template <bool V>
struct BackwardDefault<128, V> : BackwardTile<128, 128, 128, 64, false, V> {};
template <bool V>
struct BackwardDefault<192, V> : BackwardTile<192, 96, 64, 32, false, V> {};
template <bool V>
struct BackwardDefault<256, V> : BackwardTile<256, 128, 64, 32, false, V> {};

inline int padded_dim(const FlashAttentionBackwardParams& p) { return padded_head_dim(std::max(p.fwd.D, p.fwd.Dv)); }

// The three kernels with main kernel tile Cfg; `workspace` as flash_attention_backward_workspace_bytes.
// Workspace layout, in floats: the dQ accumulator (atomic mode), Di, the dscale_h parts
// (deterministic mode with dscale_h); each piece rounded up to 64 floats.
struct WorkspaceLayout {
  int64_t dq_acc, di, dscale_part, total;
};
inline WorkspaceLayout workspace_layout(const FlashAttentionBackwardParams& p, int head_dim) {
  const int64_t rows = int64_t(p.fwd.B) * p.fwd.Hq * p.fwd.Tq;
  auto round = [](int64_t n) { return (n + 63) / 64 * 64; };
  WorkspaceLayout w;
  w.dq_acc = 0;
  // Room for either accumulator layout: row-major, or the wgmma kernel's tiles of 64 query rows.
  w.di = p.deterministic ? 0 : round(std::max<int64_t>(rows * head_dim, int64_t(sm90_dq_acc_floats(p))));
  w.dscale_part = w.di + round(rows);
  const int64_t parts = p.deterministic && p.dscale_h ? int64_t(p.fwd.Hq) * p.fwd.B * ((p.fwd.Tq + 63) / 64) : 0;
  w.total = w.dscale_part + round(parts);
  return w;
}

template <class Dq>
cudaError_t launch_backward_dq(const FlashAttentionBackwardParams& p, float* di, float* dscale_part,
                               cudaStream_t stream) {
  const auto kernel = p.dscale_h ? flash_backward_dq_kernel<Dq, true> : flash_backward_dq_kernel<Dq, false>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Dq::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int num_m = (p.fwd.Tq + Dq::kBlockM - 1) / Dq::kBlockM;
  FlashAttentionBackwardParams q = p;
  q.fwd = query_block_order(p.fwd);
  kernel<<<num_m * p.fwd.Hq * p.fwd.B, Dq::kThreads, Dq::kSmemBytes, stream>>>(BackwardArgs{q, nullptr, di, 0},
                                                                             dscale_part);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if (p.dscale_h) {
    flash_backward_dscale_reduce_kernel<<<p.fwd.Hq, 256, 0, stream>>>(p.dscale_h, dscale_part, p.fwd.Hq,
                                                                      p.fwd.B * num_m);
    err = cudaGetLastError();
  }
  return err;
}

// The backward with main kernel tile Cfg (or kSm90Main, a wgmma main kernel, where it applies);
// `workspace` as flash_attention_backward_workspace_bytes.
using BackwardMainFn = cudaError_t (*)(const FlashAttentionBackwardParams&, float*, const float*, cudaStream_t);
template <class Cfg, BackwardMainFn kSm90Main = nullptr>
cudaError_t run_backward(const FlashAttentionBackwardParams& p, void* workspace, cudaStream_t stream) {
  const FlashAttentionForwardParams& f = p.fwd;
  const int64_t rows = int64_t(f.B) * f.Hq * f.Tq;
  const WorkspaceLayout w = workspace_layout(p, Cfg::kHeadDim);
  float* ws = static_cast<float*>(workspace);
  float *dq_acc = ws + w.dq_acc, *di = ws + w.di;
  const bool sm90 = kSm90Main && sm90_backward_applies(p);
  cudaError_t err = cudaSuccess;
  if (rows > 0) {
    const int64_t acc4 = p.deterministic ? 0 : w.di / 4;  // w.di: a multiple of 64 floats
    if ((err = launch_preprocess(p, di, dq_acc, acc4, stream)) != cudaSuccess) return err;
  }
  err = sm90 ? kSm90Main(p, dq_acc, di, stream) : launch_backward_main<Cfg>(p, dq_acc, di, stream);
  if (err != cudaSuccess) return err;
  if (rows == 0) return cudaSuccess;
  if (p.deterministic)
    return launch_backward_dq<DqTile<Cfg::kHeadDim, 64, Cfg::kVec16>>(p, di, ws + w.dscale_part, stream);
  if (sm90) return flash_dq_convert_sm90(p, dq_acc, stream);
  const int grid = int(std::min<int64_t>((rows + 7) / 8, 65536));
  flash_backward_convert_kernel<<<grid, 256, 0, stream>>>(p, dq_acc, Cfg::kHeadDim);
  return cudaGetLastError();
}

template <bool kVec16>
cudaError_t dispatch_backward(const FlashAttentionBackwardParams& p, void* workspace, cudaStream_t stream) {
  switch (padded_dim(p)) {
    case 32: return run_backward<BackwardDefault<32, kVec16>>(p, workspace, stream);
    case 64: return run_backward<BackwardDefault<64, kVec16>, flash_backward_sm90_main>(p, workspace, stream);
    case 96: return run_backward<BackwardDefault<96, kVec16>>(p, workspace, stream);
    case 128: return run_backward<BackwardDefault<128, kVec16>>(p, workspace, stream);
    case 192: return run_backward<BackwardDefault<192, kVec16>>(p, workspace, stream);
    case 256: return run_backward<BackwardDefault<256, kVec16>>(p, workspace, stream);
    default: return cudaErrorInvalidValue;
  }
}

// 16-byte rows for the tensors the tiles copy in (q, k, v, dO) and out (dk, dv; dq when
// deterministic).
inline bool backward_vec16(const FlashAttentionBackwardParams& p) {
  const FlashAttentionForwardParams& f = p.fwd;
  return f.D % 8 == 0 && f.Dv % 8 == 0 && rows_aligned(f.q, f.q_stride, 16) && rows_aligned(f.k, f.k_stride, 16) &&
         rows_aligned(f.v, f.v_stride, 16) && rows_aligned(p.dout, p.dout_stride, 16) &&
         rows_aligned(p.dk, p.dk_stride, 16) && rows_aligned(p.dv, p.dv_stride, 16) &&
         (!p.deterministic || rows_aligned(p.dq, p.dq_stride, 16));
}

}  // namespace flash

size_t flash_attention_backward_workspace_bytes(const FlashAttentionBackwardParams& p) {
  return size_t(flash::workspace_layout(p, flash::padded_dim(p)).total) * sizeof(float);
}

cudaError_t flash_attention_backward(const FlashAttentionBackwardParams& p, void* workspace, cudaStream_t stream) {
  using flash::rows_aligned;
  if (flash_attention_unsupported(p.fwd)) return cudaErrorInvalidValue;
  if (!rows_aligned(p.dout, p.dout_stride, 4) || !rows_aligned(p.dq, p.dq_stride, 4) ||
      !rows_aligned(p.dk, p.dk_stride, 4) || !rows_aligned(p.dv, p.dv_stride, 4))
    return cudaErrorInvalidValue;
  if (p.fwd.B == 0 || p.fwd.Tk == 0 || p.fwd.Hq == 0) return cudaSuccess;
  return flash::backward_vec16(p) ? flash::dispatch_backward<true>(p, workspace, stream)
                                  : flash::dispatch_backward<false>(p, workspace, stream);
}

}  // namespace hyb
