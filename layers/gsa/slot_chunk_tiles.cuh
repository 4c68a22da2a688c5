// Block-wide fp32 products on shared-memory tiles for the chunk kernels of the slot attention
// (gsa.md 4.2, 4.3): a plain product and the two gated forms whose every term carries a pairwise decay
// exp(b_hi[m] - b_lo[m]) along the slot axis. Each thread owns a 4 x 4 micro-tile of the output whose
// rows and columns are strided by the tile counts, so the lanes of a warp read neighbouring columns
// (no bank conflicts with odd leading dimensions) and share a few rows (broadcasts). No barrier inside:
// the caller synchronises before the inputs are rewritten; a thread's output elements are the same
// for every call with the same R x N, so back-to-back accumulations into one tile need no barrier.
// tile_mm<Mma::bf16> runs the plain product on tensor cores instead (mma.sync m16n8k16, operands
// rounded to bf16 from the fp32 tiles, fp32 accumulation; gsa.md 4.5); Mma::bf16x3 splits every operand
// into a bf16 high part and a bf16 remainder and adds hi hi + hi lo + lo hi (about 16 mantissa bits per
// operand, three MMAs per tile) for the products that need close to fp32 accuracy.
//   tile_mm<Mma::bf16>(C, M, K, [&](int r, int k) { return q(r, k); }, [&](int k, int c) { return h(k, c); },
//                [&](int r, int c, float acc) { z(r, c) = acc; });
#pragma once
#include "layers/softmax_attention/flash_attention_device.cuh"

namespace hyb {

enum class Mma { simt, bf16, bf16x3 };

// Row-major fp32 matrix in shared memory; ld odd (smem_ld) keeps column walks conflict-free.
struct SMat {
  float* p;
  int ld;
  __device__ __forceinline__ float& operator()(int r, int c) const { return p[r * ld + c]; }
};

__host__ __device__ constexpr int smem_ld(int cols) { return cols | 1; }

// out(r, c) = sum_{k < K1} a1(r, k) b1(k, c) + sum_{k < K2} a2(r, k) b2(k, c), handed to epi(r, c, out).
template <class FA1, class FB1, class FA2, class FB2, class Epi>
__device__ void tile_mm2_simt(int R, int N, int K1, FA1 a1, FB1 b1, int K2, FA2 a2, FB2 b2, Epi epi) {
  const int tr = (R + 3) / 4, tc = (N + 3) / 4;
  for (int t = threadIdx.x; t < tr * tc; t += blockDim.x) {
    const int r0 = t / tc, c0 = t % tc;
    int rr[4], cc[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      rr[x] = min(r0 + x * tr, R - 1);  // clamped: duplicates are computed and dropped
      cc[x] = min(c0 + x * tc, N - 1);
    }
    float acc[4][4] = {};
    for (int k = 0; k < K1; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) av[x] = a1(rr[x], k), bv[x] = b1(k, cc[x]);
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) acc[x][y] = fmaf(av[x], bv[y], acc[x][y]);
    }
    for (int k = 0; k < K2; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) av[x] = a2(rr[x], k), bv[x] = b2(k, cc[x]);
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) acc[x][y] = fmaf(av[x], bv[y], acc[x][y]);
    }
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y)
        if (r0 + x * tr < R && c0 + y * tc < N) epi(r0 + x * tr, c0 + y * tc, acc[x][y]);
  }
}

// Tensor-core form: each warp owns 16 x 32 output blocks (four m16n8 tiles sharing one A fragment);
// fragments are gathered element by element through the accessors (zeros past R, N, K) and rounded to
// bf16 pairs. The fragment layouts are PTX's for mma.m16n8k16 (g = lane / 4, t = lane % 4): A rows
// g, g + 8 and columns 2t, 2t + 1, 2t + 8, 2t + 9; B rows 2t, 2t + 1, 2t + 8, 2t + 9 of column g;
// C rows g, g + 8 and columns 2t, 2t + 1.
struct Frag2 {  // a bf16 pair and, when split, the bf16 pair of its remainders
  uint32_t hi, lo;
};

template <bool kSplit>
__device__ __forceinline__ Frag2 frag2(float x0, float x1) {
  const uint32_t hi = flash::pack_bf16(x0, x1);
  if constexpr (!kSplit) return {hi, 0u};
  const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
  return {hi, flash::pack_bf16(x0 - h0, x1 - h1)};
}

template <bool kSplit, class FA1, class FB1, class FA2, class FB2, class Epi>
__device__ void tile_mm2_tc(int R, int N, int K1, FA1 a1, FB1 b1, int K2, FA2 a2, FB2 b2, Epi epi) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int br = (R + 15) / 16, bn = (N + 31) / 32;
  for (int blk = warp; blk < br * bn; blk += warps) {
    const int r0 = (blk / bn) * 16, n0 = (blk % bn) * 32;
    float acc[4][4] = {};
    auto product = [&](int K, auto a, auto b) {
      auto av = [&](int r, int k) { return r < R && k < K ? a(r, k) : 0.f; };
      for (int k0 = 0; k0 < K; k0 += 16) {
        const int ka = k0 + 2 * t, kb = ka + 8;
        const Frag2 f0 = frag2<kSplit>(av(r0 + g, ka), av(r0 + g, ka + 1));
        const Frag2 f1 = frag2<kSplit>(av(r0 + g + 8, ka), av(r0 + g + 8, ka + 1));
        const Frag2 f2 = frag2<kSplit>(av(r0 + g, kb), av(r0 + g, kb + 1));
        const Frag2 f3 = frag2<kSplit>(av(r0 + g + 8, kb), av(r0 + g + 8, kb + 1));
        const uint32_t ahi[4] = {f0.hi, f1.hi, f2.hi, f3.hi};
        [[maybe_unused]] const uint32_t alo[4] = {f0.lo, f1.lo, f2.lo, f3.lo};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          if (n0 + nt * 8 >= N) break;  // warp-uniform
          const int n = n0 + nt * 8 + g;
          auto bv = [&](int k) { return n < N && k < K ? b(k, n) : 0.f; };
          const Frag2 b0 = frag2<kSplit>(bv(ka), bv(ka + 1)), b1 = frag2<kSplit>(bv(kb), bv(kb + 1));
          if constexpr (kSplit) {  // small terms first
            flash::mma_16816(acc[nt], alo, b0.hi, b1.hi);
            flash::mma_16816(acc[nt], ahi, b0.lo, b1.lo);
          }
          flash::mma_16816(acc[nt], ahi, b0.hi, b1.hi);
        }
      }
    };
    product(K1, a1, b1);
    if (K2 > 0) product(K2, a2, b2);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + g + (e / 2) * 8, n = n0 + nt * 8 + 2 * t + e % 2;
        if (r < R && n < N) epi(r, n, acc[nt][e]);
      }
  }
}

template <Mma kMode, class FA1, class FB1, class FA2, class FB2, class Epi>
__device__ void tile_mm2(int R, int N, int K1, FA1 a1, FB1 b1, int K2, FA2 a2, FB2 b2, Epi epi) {
  if constexpr (kMode == Mma::simt)
    tile_mm2_simt(R, N, K1, a1, b1, K2, a2, b2, epi);
  else
    tile_mm2_tc<kMode == Mma::bf16x3>(R, N, K1, a1, b1, K2, a2, b2, epi);
}

template <Mma kMode, class FA, class FB, class Epi>
__device__ void tile_mm(int R, int N, int K, FA a, FB b, Epi epi) {
  tile_mm2<kMode>(R, N, K, a, b, 0, a, b, epi);
}

// Gated product along rows, for the R x M output and rows x < R of the chunk:
//   lower:  out(r, m) = sum_{x <= r} f(r, x) w(x, m) exp(bz(r, m) - bz(x, m))
//   upper:  out(r, m) = sum_{x >= r} f(r, x) w(x, m) exp(bz(x, m) - bz(r, m))
// bz is the chunk-local cumsum of the log gates (non-increasing along rows), so every exponent
// evaluated on a kept term is <= 0; masked terms are selected away after the exp (never inf * 0).
template <bool kUpper, class F, class W, class Epi>
__device__ void tile_gated_rows(int R, int M, F f, W w, SMat bz, Epi epi) {
  const int tr = (R + 3) / 4, tc = (M + 3) / 4;
  for (int t = threadIdx.x; t < tr * tc; t += blockDim.x) {
    const int r0 = t / tc, c0 = t % tc;
    int rr[4], cc[4];
    float br[4][4];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      rr[x] = min(r0 + x * tr, R - 1);
      cc[x] = min(c0 + x * tc, M - 1);
    }
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y) br[x][y] = bz(rr[x], cc[y]);
    float acc[4][4] = {};
    const int lo = kUpper ? rr[0] : 0, hi = kUpper ? R - 1 : rr[3];
    for (int k = lo; k <= hi; ++k) {
      float fv[4], wv[4], bk[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) fv[x] = f(rr[x], k);
#pragma unroll
      for (int y = 0; y < 4; ++y) wv[y] = w(k, cc[y]), bk[y] = bz(k, cc[y]);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const bool keep = kUpper ? k >= rr[x] : k <= rr[x];
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          const float e = __expf(kUpper ? bk[y] - br[x][y] : br[x][y] - bk[y]);
          acc[x][y] = fmaf(keep ? fv[x] * e : 0.f, wv[y], acc[x][y]);
        }
      }
    }
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y)
        if (r0 + x * tr < R && c0 + y * tc < M) epi(r0 + x * tr, c0 + y * tc, acc[x][y]);
  }
}

// Gated product along slots, for the R x R output of row pairs (i, x) of the chunk:
//   out(i, x) = sum_{m < M} u(i, m) w(x, m) exp(bz(i, m) - bz(x, m))  for x <= i, else 0.
template <class U, class W, class Epi>
__device__ void tile_gated_slots(int R, int M, U u, W w, SMat bz, Epi epi) {
  const int tr = (R + 3) / 4;
  for (int t = threadIdx.x; t < tr * tr; t += blockDim.x) {
    const int r0 = t / tr, c0 = t % tr;
    int rr[4], cc[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      rr[x] = min(r0 + x * tr, R - 1);
      cc[x] = min(c0 + x * tr, R - 1);
    }
    float acc[4][4] = {};
    if (c0 <= rr[3]) {  // otherwise every pair of the tile lies above the diagonal
      for (int m = 0; m < M; ++m) {
        float uv[4], bi[4], wv[4], bx[4];
#pragma unroll
        for (int x = 0; x < 4; ++x)
          uv[x] = u(rr[x], m), bi[x] = bz(rr[x], m), wv[x] = w(cc[x], m), bx[x] = bz(cc[x], m);
#pragma unroll
        for (int x = 0; x < 4; ++x)
#pragma unroll
          for (int y = 0; y < 4; ++y) {
            const float e = __expf(bi[x] - bx[y]);
            acc[x][y] = fmaf(cc[y] <= rr[x] ? uv[x] * e : 0.f, wv[y], acc[x][y]);
          }
      }
    }
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int y = 0; y < 4; ++y)
        if (r0 + x * tr < R && c0 + y * tr < R) epi(r0 + x * tr, c0 + y * tr, acc[x][y]);
  }
}

}  // namespace hyb
