// Flash-attention forward (attention.md 4.1, 4.3, 4.4): one CTA per (query block, query head,
// batch), each warp owning 16·kMT complete rows so the online softmax needs only quad shuffles.
// K/V tiles stream through a cp.async double buffer (block n+1 lands while block n is computed);
// key blocks outside the causal/window/sink visit list are never
// loaded, so a window w costs O(T·w). Writes o (bf16) and lse (fp32, natural log).
#include <algorithm>

#include "layers/softmax_attention/flash_attention.cuh"
#include "layers/softmax_attention/flash_attention_device.cuh"
#include "layers/softmax_attention/flash_attention_sm90.cuh"

namespace hyb {
namespace flash {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, bool kQInRegs_, bool kVec16_, int kMinBlocks_ = 0>
struct ForwardTile {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_, kWarps = kWarps_;
  static constexpr bool kQInRegs = kQInRegs_, kVec16 = kVec16_;
  static constexpr int kThreads = 32 * kWarps, kStride = kHeadDim + 8;
  static constexpr int kMT = kBlockM / (16 * kWarps);  // 16-row MMA tiles per warp
  static constexpr int kSmemBytes = (kBlockM + 4 * kBlockN) * kStride * 2;
  // CTAs per SM the register allocation must allow (0: two when the shared memory allows two).
  static constexpr int kMinBlocks = kMinBlocks_ ? kMinBlocks_ : kSmemBytes <= 110 * 1024 ? 2 : 1;
  static_assert(kMT >= 1 && kBlockM == 16 * kMT * kWarps && kBlockN % 16 == 0 && kHeadDim % 16 == 0);
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) flash_forward_kernel(const FlashAttentionForwardParams p) {
  constexpr int kD = Cfg::kHeadDim, kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kThreads = Cfg::kThreads;
  constexpr bool kVec16 = Cfg::kVec16, kQInRegs = Cfg::kQInRegs;
  constexpr int kStride = Cfg::kStride, kMT = Cfg::kMT, kNT = kBN / 8, kKT = kD / 16, kDT = kD / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + kBM * kStride;      // two buffers of kBN rows
  bf16* sV = sK + 2 * kBN * kStride;  // two buffers of kBN rows

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gr = lane / 4, tq = lane % 4;
  const QueryBlockCta cta(p, kBM);
  const int m_block = cta.m_block, h = cta.h, b = cta.b;
  const bf16 *qh = cta.qh, *kh = cta.kh, *vh = cta.vh;

  const int row0 = m_block * kBM, off = p.Tk - p.Tq;
  const ForwardVisits visits(p, row0, kBM, kBN);
  const int p_lo = visits.p_lo, p_hi = visits.p_hi, n_iter = visits.n_iter;

  load_tile<kBM, kD, kThreads, kVec16>(sQ, qh, p.q_stride.t, row0, p.Tq, p.D, tid);
  load_tile<kBN, kD, kThreads, kVec16>(sK, kh, p.k_stride.t, visits.block(0) * kBN, p.Tk, p.D, tid);
  cp_async_commit();
  load_tile<kBN, kD, kThreads, kVec16>(sV, vh, p.v_stride.t, visits.block(0) * kBN, p.Tk, p.Dv, tid);
  cp_async_commit();

  const float sl2 = (p.scale_h ? p.scale_h[h] : p.scale) * kLog2e;  // logits in log2 units
  float acc[kMT][kDT][4];
  float row_max[kMT][2], row_sum[kMT][2];  // running max (log2 units) and this thread's partial sum
#pragma unroll
  for (int mi = 0; mi < kMT; ++mi) {
#pragma unroll
    for (int dj = 0; dj < kDT; ++dj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][dj][e] = 0.f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }
  uint32_t qf[kQInRegs ? kMT : 1][kQInRegs ? kKT : 1][4];

  // ldmatrix lane roles. A (rows x k, row-major): row lane%16, column 8*(lane/16). B from [n][k]
  // rows, two n-tiles per x4: row lane%8 + 8*(lane/16), column 8*((lane/8)%2). B from [k][n] rows
  // (transposed load), two n-tiles per x4: row lane%8 + 8*((lane/8)%2), column 8*(lane/16).
  const int a_row = lane % 16, a_col = 8 * (lane / 16);
  const int b_row = lane % 8 + 8 * (lane / 16), b_col = 8 * ((lane / 8) % 2);
  const int bt_row = lane % 8 + 8 * ((lane / 8) % 2), bt_col = 8 * (lane / 16);
  const int warp_row = warp * kMT * 16;
  const uint32_t sQ_u = smem_u32(sQ), sK_u = smem_u32(sK), sV_u = smem_u32(sV);

  for (int it = 0; it < n_iter; ++it) {
    const int n = visits.block(it), buf = it & 1;
    // Q and K of this block (the first block's V may still be in flight). Past the barrier every
    // warp is done with the other buffers, so the next K and V go there now, while no scores are
    // live in registers.
    if (it == 0)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < n_iter) {
      const int next = visits.block(it + 1) * kBN;
      load_tile<kBN, kD, kThreads, kVec16>(sK + (buf ^ 1) * kBN * kStride, kh, p.k_stride.t, next, p.Tk, p.D, tid);
      load_tile<kBN, kD, kThreads, kVec16>(sV + (buf ^ 1) * kBN * kStride, vh, p.v_stride.t, next, p.Tk, p.Dv, tid);
    }
    cp_async_commit();
    if constexpr (kQInRegs) {
      if (it == 0) {
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
          for (int kk = 0; kk < kKT; ++kk)
            ldsm_x4(qf[mi][kk], sQ_u + ((warp_row + mi * 16 + a_row) * kStride + kk * 16 + a_col) * 2);
      }
    }
    float s[kMT][kNT][4];
#pragma unroll
    for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
      for (int nj = 0; nj < kNT; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nj][e] = 0.f;
    const uint32_t sKb = sK_u + buf * kBN * kStride * 2, sVb = sV_u + buf * kBN * kStride * 2;
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mi][e] = qf[mi][kk][e];
        } else {
          ldsm_x4(a[mi], sQ_u + ((warp_row + mi * 16 + a_row) * kStride + kk * 16 + a_col) * 2);
        }
      }
#pragma unroll
      for (int nj2 = 0; nj2 < kNT / 2; ++nj2) {
        uint32_t bk[4];
        ldsm_x4(bk, sKb + ((nj2 * 16 + b_row) * kStride + kk * 16 + b_col) * 2);
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi) {
          mma_16816(s[mi][2 * nj2], a[mi], bk[0], bk[1]);
          mma_16816(s[mi][2 * nj2 + 1], a[mi], bk[2], bk[3]);
        }
      }
    }

    // Full tiles (every pair visible, every key in range) skip the elementwise mask.
    const int c_lo = n * kBN;
    const bool full = c_lo + kBN <= p.Tk && c_lo + kBN - 1 <= p_lo &&
                      (p.window == 0 || p_hi - c_lo < p.window || c_lo + kBN <= p.sinks);
    if (!full) {
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int pos = row0 + warp_row + mi * 16 + gr + 8 * half + off;
#pragma unroll
          for (int nj = 0; nj < kNT; ++nj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = c_lo + nj * 8 + 2 * tq + e;
              if (!visible(pos, col, p.Tk, p.window, p.sinks)) s[mi][nj][2 * half + e] = -INFINITY;
            }
        }
    }

    // Online softmax; `ref` guards rows that have seen no visible key yet ((-inf) - (-inf)).
#pragma unroll
    for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = -INFINITY;
#pragma unroll
        for (int nj = 0; nj < kNT; ++nj) mx = fmaxf(mx, fmaxf(s[mi][nj][2 * half], s[mi][nj][2 * half + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[mi][half], mx * sl2);
        const float ref = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fast_exp2(row_max[mi][half] - ref);
        row_max[mi][half] = m_new;
#pragma unroll
        for (int dj = 0; dj < kDT; ++dj) {
          acc[mi][dj][2 * half] *= alpha;
          acc[mi][dj][2 * half + 1] *= alpha;
        }
        float sum = 0.f;
#pragma unroll
        for (int nj = 0; nj < kNT; ++nj)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pe = fast_exp2(fmaf(s[mi][nj][2 * half + e], sl2, -ref));
            s[mi][nj][2 * half + e] = pe;
            sum += pe;
          }
        row_sum[mi][half] = row_sum[mi][half] * alpha + sum;
      }

    if (it == 0) {  // the first block's V
      cp_async_wait<1>();
      __syncthreads();
    }
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi) c_to_a(a[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
#pragma unroll
      for (int dj2 = 0; dj2 < kDT / 2; ++dj2) {
        uint32_t bv[4];
        ldsm_x4_t(bv, sVb + ((kk * 16 + bt_row) * kStride + dj2 * 16 + bt_col) * 2);
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi) {
          mma_16816(acc[mi][2 * dj2], a[mi], bv[0], bv[1]);
          mma_16816(acc[mi][2 * dj2 + 1], a[mi], bv[2], bv[3]);
        }
      }
    }
  }

  // o = acc / l, lse = ln(l) + max; o goes out through smem (sQ) as coalesced 16-byte rows.
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float l = row_sum[mi][half];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int r = warp_row + mi * 16 + gr + 8 * half, row = row0 + r;
      if (tq == 0 && row < p.Tq) p.lse[(int64_t(b) * p.Hq + h) * p.Tq + row] = (row_max[mi][half] + __log2f(l)) * kLn2;
#pragma unroll
      for (int dj = 0; dj < kDT; ++dj)
        *reinterpret_cast<uint32_t*>(sQ + r * kStride + dj * 8 + 2 * tq) =
            pack_bf16(acc[mi][dj][2 * half] * inv, acc[mi][dj][2 * half + 1] * inv);
    }
  __syncthreads();
  bf16* oh = static_cast<bf16*>(p.o) + b * p.o_stride.b + h * p.o_stride.h;
  store_tile<kBM, kD, kStride, kThreads, kVec16>(sQ, oh, p.o_stride.t, row0, p.Tq, p.Dv, tid);
}

template <class Cfg>
cudaError_t launch_forward(const FlashAttentionForwardParams& p, cudaStream_t stream) {
  const auto kernel = flash_forward_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int grid = (p.Tq + Cfg::kBlockM - 1) / Cfg::kBlockM * p.Hq * p.B;
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(query_block_order(p));
  return cudaGetLastError();
}

// Default tiles per padded head dim (attention.md 4.4 starting points, tuned in flash_attention_dev).
template <int kD, bool kVec16>
struct ForwardDefault;
template <bool V>
struct ForwardDefault<32, V> : ForwardTile<32, 128, 128, 4, true, V> {};
template <bool V>
struct ForwardDefault<64, V> : ForwardTile<64, 128, 128, 4, false, V> {};
template <bool V>
struct ForwardDefault<96, V> : ForwardTile<96, 128, 64, 4, false, V> {};
template <bool V>
struct ForwardDefault<128, V> : ForwardTile<128, 128, 64, 4, false, V> {};
template <bool V>
struct ForwardDefault<192, V> : ForwardTile<192, 64, 64, 4, false, V> {};
template <bool V>
struct ForwardDefault<256, V> : ForwardTile<256, 64, 64, 4, false, V> {};

template <bool kVec16>
cudaError_t dispatch_forward(const FlashAttentionForwardParams& p, cudaStream_t stream) {
  switch (padded_head_dim(std::max(p.D, p.Dv))) {
    case 32: return launch_forward<ForwardDefault<32, kVec16>>(p, stream);
    case 64: return launch_forward<ForwardDefault<64, kVec16>>(p, stream);
    case 96: return launch_forward<ForwardDefault<96, kVec16>>(p, stream);
    case 128: return launch_forward<ForwardDefault<128, kVec16>>(p, stream);
    case 192: return launch_forward<ForwardDefault<192, kVec16>>(p, stream);
    case 256: return launch_forward<ForwardDefault<256, kVec16>>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

// 16-byte rows for every tensor the forward touches.
inline bool forward_vec16(const FlashAttentionForwardParams& p) {
  return p.D % 8 == 0 && p.Dv % 8 == 0 && rows_aligned(p.q, p.q_stride, 16) && rows_aligned(p.k, p.k_stride, 16) &&
         rows_aligned(p.v, p.v_stride, 16) && rows_aligned(p.o, p.o_stride, 16);
}

}  // namespace flash

const char* flash_attention_unsupported(const FlashAttentionForwardParams& p) {
  using flash::rows_aligned;
  if (p.D <= 0 || p.Dv <= 0 || p.D % 2 != 0 || p.Dv % 2 != 0) return "head dims D and Dv must be even and positive";
  if (flash::padded_head_dim(std::max(p.D, p.Dv)) == 0) return "head dims over 256 are not supported";
  if (p.Hkv <= 0 || p.Hq % p.Hkv != 0) return "Hq must be a multiple of Hkv";
  if (p.Tq > p.Tk) return "Tq must not exceed Tk (queries are aligned bottom-right)";
  if (p.window < 0 || p.sinks < 0) return "window and sinks must be >= 0";
  if (!rows_aligned(p.q, p.q_stride, 4) || !rows_aligned(p.k, p.k_stride, 4) || !rows_aligned(p.v, p.v_stride, 4) ||
      !rows_aligned(p.o, p.o_stride, 4) || reinterpret_cast<uintptr_t>(p.lse) % 4 != 0)
    return "q, k, v, o need 4-byte aligned base pointers and even B/T/H strides";
  return nullptr;
}

cudaError_t flash_attention_forward(const FlashAttentionForwardParams& p, cudaStream_t stream) {
  if (flash_attention_unsupported(p)) return cudaErrorInvalidValue;
  if (p.B == 0 || p.Tq == 0 || p.Hq == 0) return cudaSuccess;
  if (flash::sm90_forward_applies(p)) return flash::flash_forward_sm90(p, stream);
  return flash::forward_vec16(p) ? flash::dispatch_forward<true>(p, stream) : flash::dispatch_forward<false>(p, stream);
}

}  // namespace hyb
