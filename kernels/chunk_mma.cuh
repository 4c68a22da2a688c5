// Tensor-core tile helpers of the fused chunk kernels of the linear-recurrence ops (simple_gla:
// mamba2.md 4; gated_delta_rule: gated_deltanet.md 4): warp products on bf16 shared-memory tiles
// (mma.sync m16n8k16 through ldmatrix, fp32 accumulation), the accumulator fragment layout, row
// loads into padded tiles, the masked decay tile, the chunk-local cumsum of one chunk in one warp,
// and the host side (opt-in shared memory, bf16 pointers, 16-byte aligned rows).
// Tiles are row-major with (width + 8) bf16 per row, so the 8 rows one ldmatrix reads start in 8
// different bank groups. A transposed operand is read with ldmatrix.trans from its own tile, never by
// reinterpreting an accumulator (gated_deltanet.md 4.8 item 1).
//   float acc[1][8][4]; zero(acc);
//   warp_mma<1, 8, 64, false, true>(acc, sQ, 72, 16 * warp, sK, 72, 0, lane);   // rows of Q @ K^T
#pragma once
#include <cuda_bf16.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/tensor.h"
#include "kernels/chunk_ops.h"
#include "kernels/vector_io.cuh"
#include "layers/softmax_attention/flash_attention_device.cuh"

namespace hyb::chunk_mma {

using bf16x = __nv_bfloat16;
using flash::ldsm_x4;
using flash::ldsm_x4_t;
using flash::mma_16816;
using flash::pack_bf16;
using flash::smem_u32;

constexpr int kC = kScanChunk;  // tokens per chunk

// e^x as one multiply and ex2.approx.ftz: __expf's ex2.approx without .ftz costs a range test and two more
// multiplies a call in sm_90 code, which made FMUL the most executed instruction of gsa's backward and a
// fifth of the gated delta rule's backward scan sat in store_masked's exps (ncu). Only results below
// 2^-126 differ (flushed to zero), far under what the fp32 sums and bf16 products here resolve.
__device__ __forceinline__ float exp_ftz(float x) { return flash::fast_exp2(x * 1.44269504088896341f); }

// acc[mi][ni] += A[m0 + 16 mi .., 0 .. KR) @ B[0 .. KR, n0 + 8 ni ..) for one warp.
// A is M x KR: stored row-major [m][k] (lda) or, kA_T, as its transpose [k][m].
// B is KR x N: stored row-major [k][n] (ldb) or, kB_T, as its transpose [n][k].
template <int MT, int NT, int KR, bool kA_T, bool kB_T>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const bf16x* A, int lda, int m0, const bf16x* B,
                                         int ldb, int n0, int lane) {
  static_assert(NT % 2 == 0 && KR % 16 == 0, "n-tiles go in pairs, the reduction in steps of 16");
  const int i = lane % 8, j = lane / 8;
#pragma unroll
  for (int k0 = 0; k0 < KR; k0 += 16) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      if constexpr (kA_T)
        ldsm_x4_t(a[mi], smem_u32(A + (k0 + i + (j / 2) * 8) * lda + m0 + mi * 16 + (j % 2) * 8));
      else
        ldsm_x4(a[mi], smem_u32(A + (m0 + mi * 16 + lane % 16) * lda + k0 + (lane / 16) * 8));
    }
#pragma unroll
    for (int nj = 0; nj < NT / 2; ++nj) {
      uint32_t b[4];
      if constexpr (kB_T)
        ldsm_x4(b, smem_u32(B + (n0 + nj * 16 + i + (j / 2) * 8) * ldb + k0 + (j % 2) * 8));
      else
        ldsm_x4_t(b, smem_u32(B + (k0 + i + (j % 2) * 8) * ldb + n0 + nj * 16 + (j / 2) * 8));
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        mma_16816(acc[mi][2 * nj], a[mi], b[0], b[1]);
        mma_16816(acc[mi][2 * nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// A hint: the 128-byte line at p into L2, for a load that comes long after and should not wait on DRAM.
// (Host builds of the kernels, tools/kernel_emu, have no L2 to warm.)
__device__ __forceinline__ void prefetch_l2(const void* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#endif
}

// acc += A @ B over the reduction rows [k_begin, k_end) only (multiples of 16, at run time): products
// with a causal operand (a masked score tile, a triangular inverse) skip the 16-wide steps where it
// is zero, which gives the same bits.
template <int MT, int NT, bool kA_T, bool kB_T>
__device__ __forceinline__ void warp_mma_range(float (&acc)[MT][NT][4], const bf16x* A, int lda, int m0, const bf16x* B,
                                               int ldb, int n0, int k_begin, int k_end, int lane) {
  for (int k = k_begin; k < k_end; k += 16)
    warp_mma<MT, NT, 16, kA_T, kB_T>(acc, kA_T ? A + k * lda : A + k, lda, m0, kB_T ? B + k : B + k * ldb, ldb, n0,
                                     lane);
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
}

// Row of accumulator entry e of the warp's single m-tile (rows r and r + 8 of each 16-row tile).
__device__ __forceinline__ int frag_row(int lane, int e) { return lane / 4 + (e / 2) * 8; }
__device__ __forceinline__ int frag_col(int lane, int e) { return (lane % 4) * 2 + (e % 2); }

// Rows t0 .. t0 + ROWS - 1 of one head of a (B, T, heads, D) bf16 tensor (or any row-major matrix:
// head = its first row, T = its row count) into a [ROWS][DT + 8] tile, times rowscale[r] when given;
// rows outside [0, T) (t0 may be negative: nha's shifted stream) and columns >= D are zero, not read.
// D % 8 == 0 and 16-byte aligned rows. NTHREADS threads take part. The trip count is a constant so
// that every thread's loads are issued before the first store.
template <int ROWS, int DT, int NTHREADS>
__device__ __forceinline__ void load_rows(bf16x* s, const bf16x* head, int64_t row_stride, int t0, int T, int D,
                                          const float* rowscale) {
  constexpr int kVec = DT / 8, kIters = ROWS * kVec / NTHREADS;
  static_assert(ROWS * kVec % NTHREADS == 0, "the tile splits evenly over the threads");
  uint4 val[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int x = it * NTHREADS + threadIdx.x, r = x / kVec, c8 = (x % kVec) * 8;
    val[it] = make_uint4(0, 0, 0, 0);
    if (t0 + r >= 0 && t0 + r < T && c8 < D)
      val[it] = *reinterpret_cast<const uint4*>(head + int64_t(t0 + r) * row_stride + c8);
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int x = it * NTHREADS + threadIdx.x, r = x / kVec, c8 = (x % kVec) * 8;
    if (rowscale) {
      __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&val[it]);
      const float f = rowscale[r];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 v = __bfloat1622float2(p[e]);
        p[e] = __floats2bfloat162_rn(v.x * f, v.y * f);
      }
    }
    *reinterpret_cast<uint4*>(s + r * (DT + 8) + c8) = val[it];
  }
}

// load_rows without its wait (and without rowscale): the rows go out as 16-byte cp.async copies, zero-filled
// outside the rows [0, T) and the D columns, and land after flash::cp_async_commit and cp_async_wait, so
// that a kernel's tiles are in flight together.
template <int ROWS, int DT, int NTHREADS>
__device__ __forceinline__ void load_rows_async(bf16x* s, const bf16x* head, int64_t row_stride, int t0, int T,
                                                int D) {
  constexpr int kVec = DT / 8, kIters = ROWS * kVec / NTHREADS;
  static_assert(ROWS * kVec % NTHREADS == 0, "the tile splits evenly over the threads");
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int x = it * NTHREADS + threadIdx.x, r = x / kVec, c8 = (x % kVec) * 8;
    const bool ok = t0 + r >= 0 && t0 + r < T && c8 < D;
    flash::cp_async16(smem_u32(s + r * (DT + 8) + c8), ok ? head + int64_t(t0 + r) * row_stride + c8 : head, ok);
  }
}

// Sum over the block (NWARPS warps) of one float per thread; every thread gets the total, summed in
// warp order. red: NWARPS floats.
template <int NWARPS>
__device__ __forceinline__ float block_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < NWARPS; ++w) t += red[w];
  __syncthreads();
  return t;
}

// Writes the warp's masked score rows to a bf16 tile (row stride ld), columns n0 .. n0 + 8 NT:
// s[r, i] = f * acc * exp(min(G_r - G_i, 0)) for i <= r, else 0.
template <int NT>
__device__ __forceinline__ void store_masked(bf16x* s, int ld, const float (&acc)[1][NT][4], const float* G, float f,
                                             int m0, int n0, int lane) {
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int r = m0 + frag_row(lane, e), i = n0 + ni * 8 + frag_col(lane, e);
      const float p0 = i <= r ? f * acc[0][ni][e] * exp_ftz(fminf(G[r] - G[i], 0.f)) : 0.f;
      const float p1 = i + 1 <= r ? f * acc[0][ni][e + 1] * exp_ftz(fminf(G[r] - G[i + 1], 0.f)) : 0.f;
      *reinterpret_cast<uint32_t*>(s + r * ld + i) = pack_bf16(p0, p1);
    }
}

// sum over the row's columns of acc * X[row, col] for the warp's rows r and r + 8 (quad-reduced).
template <int NT>
__device__ __forceinline__ void rowdot(float (&out)[2], const float (&acc)[1][NT][4], const bf16x* X, int ld, int m0,
                                       int lane) {
  out[0] = out[1] = 0.f;
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + frag_row(lane, e), col = ni * 8 + frag_col(lane, e);
      out[e / 2] += acc[0][ni][e] * __bfloat162float(X[r * ld + col]);
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    out[h] += __shfl_xor_sync(0xffffffffu, out[h], 1);
    out[h] += __shfl_xor_sync(0xffffffffu, out[h], 2);
  }
}

// The chunk-local cumsum of one 64-token chunk in one warp, lane l holding tokens 2l and 2l + 1
// (x0, x1: their log decays, 0 on padded tokens): G of both tokens, and G of the last valid token
// n - 1 (n >= 1), the log of the chunk's total decay.
struct PairCumsum {
  float G0, G1, last;
};
__device__ __forceinline__ PairCumsum chunk_cumsum(float x0, float x1, int n, int lane) {
  float s = x0 + x1;  // inclusive scan of the pair sums
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, s, o);
    if (lane >= o) s += u;
  }
  const float before = __shfl_up_sync(0xffffffffu, s, 1);
  PairCumsum p;
  p.G0 = (lane == 0 ? 0.f : before) + x0;
  p.G1 = p.G0 + x1;
  const int last_tok = n - 1;
  p.last = __shfl_sync(0xffffffffu, last_tok % 2 ? p.G1 : p.G0, last_tok / 2);
  return p;
}

// A device attribute, asked once per device index.
template <cudaDeviceAttr kAttr>
int device_attribute(int device) {
  static std::array<std::atomic<int>, 64> cache{};  // 0: not asked yet
  HYB_CHECK(device >= 0 && device < int(cache.size()), "chunk kernels: device index ", device, " out of range");
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    HYB_CUDA_CHECK(cudaDeviceGetAttribute(&v, kAttr, device));
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}
// The opt-in shared memory per block, and the number of SMs.
inline int max_smem(int device) { return device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device); }
inline int sm_count(int device) { return device_attribute<cudaDevAttrMultiProcessorCount>(device); }

template <typename F>
void set_smem(F* kernel, size_t bytes) {
  HYB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

inline const bf16x* bp(const Tensor& t) { return reinterpret_cast<const bf16x*>(t.data<bf16>()); }
inline bf16x* bp_mut(const Tensor& t) { return t.defined() ? reinterpret_cast<bf16x*>(t.data<bf16>()) : nullptr; }

// The kernels read rows with 16-byte loads: a contiguous tensor with a 16-byte aligned base (a view
// at an odd offset, Mamba2's split of x B C for instance, is copied).
inline Tensor rows16(const Tensor& t) {
  Tensor c = t.contiguous();
  return is_aligned(c.raw_data(), 16) ? c : c.clone();
}

// Calls f with the tile widths of K and V (64 or 128 each) as integral constants.
template <typename F>
void visit_tiles(int64_t K, int64_t V, F&& f) {
  if (K <= 64 && V <= 64) return f(std::integral_constant<int, 64>{}, std::integral_constant<int, 64>{});
  if (K <= 64) return f(std::integral_constant<int, 64>{}, std::integral_constant<int, 128>{});
  if (V <= 64) return f(std::integral_constant<int, 128>{}, std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 128>{}, std::integral_constant<int, 128>{});
}

}  // namespace hyb::chunk_mma
