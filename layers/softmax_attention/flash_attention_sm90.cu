// Flash attention with Hopper warpgroup MMA (attention.md 4.7), head dim 64. Same algorithm, tiles
// and visit lists as the mma.sync kernels (flash_attention_forward.cu, flash_attention_backward.cu);
// what changes is where the operands come from. wgmma reads its shared-memory operands through
// descriptors, so the per-warp ldmatrix traffic that bounds the mma.sync backward (docs/perf_notes/
// flash_attention.md, v2) is gone. Tiles are 128B-swizzled rows of 64 bf16 (kernels/wgmma.cuh);
// the tiles of each step come by TMA into mbarrier-counted buffers (kernels/tma.cuh), those loaded
// once per CTA, and every tile where the driver cannot map the tensor, by cp.async. Each warpgroup
// owns 64 rows of every product.
//  forward: CTA = kWG warpgroups x 64 query rows; S = Q K^T with both operands in smem, P stays in
//           registers as the A operand of O += P V (V read MN-major).
//  backward main: CTA = kWG warpgroups x 64 keys; per 64-query step S^T = K Q^T and dP^T = V dO^T
//           (smem x smem), dV += P^T dO and dK += dS^T Q (registers x MN-major smem), dS^T to smem,
//           then dQ = dS K split by columns between the warpgroups, added with fp32 vector
//           reductions into a tiled accumulator.
// Compiled for sm_90a only (a separate object in CMake); elsewhere the kernels are empty and
// sm90_*_applies() is false.
#include <algorithm>
#include <type_traits>

#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"
#include "layers/softmax_attention/flash_attention_device.cuh"
#include "layers/softmax_attention/flash_attention_sm90.cuh"

namespace hyb::flash {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HYBRID_SM90_BODY 1
#endif

namespace {

constexpr int kRowBytes = 128;  // one tile row: 64 bf16

// cp.async of rows [row0, row0 + kRows) of one head (64 bf16 per row, 16-byte aligned) into a
// swizzled tile; rows >= T are zeros. Each thread copies one 16-byte column chunk down the rows,
// kThreads / 8 rows apart: a multiple of 8, so the chunk's swizzled position is the same in every
// row it copies. A tile wholly inside the sequence (every one but the last) walks one source
// pointer by a fixed step: per row one 64-bit add and the copy, where the bounds-checked form paid a
// 64-bit multiply and two selects per row, about a fifth of the backward's instructions per step.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_rows_sw128(uint32_t tile, const bf16* head, int64_t row_stride, int row0, int T,
                                                int tid) {
  constexpr int kStep = kThreads / 8;
  static_assert(kThreads % 64 == 0, "rows kThreads / 8 apart must share their swizzle phase");
  const int c = tid % 8, r0 = tid / 8;
  const uint32_t dst = tile + wgmma::sw128(r0, c * 8);
  const bf16* src = head + int64_t(row0 + r0) * row_stride + c * 8;
  if (row0 + kRows <= T) {
    const int64_t step = kStep * row_stride;
#pragma unroll
    for (int k = 0; k < (kRows + kStep - 1) / kStep; ++k)
      if (kRows % kStep == 0 || r0 + k * kStep < kRows) cp_async16(dst + k * kStep * kRowBytes, src + k * step, true);
    return;
  }
#pragma unroll
  for (int k = 0; k < (kRows + kStep - 1) / kStep; ++k) {
    const int r = r0 + k * kStep;
    if (kRows % kStep == 0 || r < kRows) {
      const bool ok = row0 + r < T;
      cp_async16(dst + k * kStep * kRowBytes, ok ? src + k * kStep * row_stride : head, ok);
    }
  }
}

// Rows [row0, min(T, row0 + kRows)) of a swizzled tile out to one head, 16 bytes per thread and step.
template <int kRows, int kThreads>
__device__ __forceinline__ void store_rows_sw128(const unsigned char* tile, bf16* head, int64_t row_stride, int row0,
                                                 int T, int tid) {
#pragma unroll 1
  for (int i = tid; i < kRows * 8; i += kThreads) {
    const int r = i / 8, c = i % 8;
    if (row0 + r < T)
      *reinterpret_cast<uint4*>(head + int64_t(row0 + r) * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(tile + wgmma::sw128(r, c * 8));
  }
}

// The A operand of k-step kk from accumulator columns 16kk..16kk+15 (wgmma.cuh, accumulator layout).
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float* acc, int kk) {
  const float* c = acc + 8 * kk;
  a[0] = pack_bf16(c[0], c[1]);
  a[1] = pack_bf16(c[2], c[3]);
  a[2] = pack_bf16(c[4], c[5]);
  a[3] = pack_bf16(c[6], c[7]);
}

// d += (kSteps k16-steps of the accumulator `src`, packed into the A fragments `a`) x (the MN-major
// tile at b), issued as one wgmma group. `a` belongs to the caller: the wgmma reads it after this
// returns, and the backward stores dS^T from it.
template <int kSteps>
__device__ __forceinline__ void mma_from_acc(float (&d)[32], uint32_t (&a)[kSteps][4], const float* src, uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) acc_to_a(a[kk], src, kk);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) wgmma::mma_rs<64, 1>(d, a[kk], wgmma::desc_mn(b, kk), 1);
  wgmma::commit();
}

// The wgmma backward's fp32 dQ accumulator is tiled by 64-query blocks of 64 x 64 floats, in the
// order the accumulator registers of a warpgroup hold them: thread t's registers 4j..4j+3 (rows
// 16(t/32) + (t%32)/4 and +8, columns 8j + 2(t%4) and +1) are the 4 floats at this offset, so
// each thread adds one float4 per column chunk j. flash_dq_convert_sm90 reads it back.
__host__ __device__ constexpr int sm90_dq_offset(int j, int t) { return (j * 128 + t) * 4; }

__device__ __forceinline__ void red_add_v4(float* dst, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

// 1024-byte aligned start of the dynamic shared memory (the swizzle atom); kernels ask 1 KB extra.
__device__ __forceinline__ unsigned char* smem_base_1k(unsigned char* raw) {
  const uint32_t a = smem_u32(raw);
  return raw + (((a + 1023) & ~1023u) - a);
}

template <int kWG_, int kMinBlocks_>
struct Sm90ForwardTile {
  static constexpr int kWG = kWG_, kMinBlocks = kMinBlocks_;
  static constexpr int kBM = 64 * kWG, kBN = 128, kThreads = 128 * kWG;
  // Q, two K and two V buffers, the two buffers' mbarriers.
  static constexpr int kSmemBytes = 1024 + (kBM + 4 * kBN) * kRowBytes + 16;
};

struct Sm90ForwardArgs {
  FlashAttentionForwardParams p;
  CUtensorMap k_map, v_map;  // the kTma kernel's: 128-row boxes of one head, 128B-swizzled
};

// kTma: each step's K and V arrive by TMA (one thread issues them, an mbarrier per buffer counts
// them in); otherwise every thread copies with cp.async and the step starts with a proxy fence.
template <class Cfg, bool kTma>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_forward_sm90_kernel(const __grid_constant__ Sm90ForwardArgs args) {
#ifdef HYBRID_SM90_BODY
  const FlashAttentionForwardParams& p = args.p;
  constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kThreads = Cfg::kThreads;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_base_1k(smem_raw);
  const uint32_t sQ = smem_u32(smem), sK = sQ + kBM * kRowBytes, sV = sK + 2 * kBN * kRowBytes;
  const uint32_t full_bar = sV + 2 * kBN * kRowBytes;  // buffer `buf`'s barrier at + 8 buf

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, gr = lane / 4, tq = lane % 4;
  const QueryBlockCta cta(p, kBM);
  const int m_block = cta.m_block, h = cta.h, b = cta.b;
  const bf16 *qh = cta.qh, *kh = cta.kh, *vh = cta.vh;
  const int row0 = m_block * kBM, off = p.Tk - p.Tq;
  const ForwardVisits visits(p, row0, kBM, kBN);

  // K and V of key block n into buffer `buf`; rows >= Tk load as zeros.
  auto load_block = [&](int n, int buf) {
    if constexpr (kTma) {
      if (tid == 0) {
        const uint32_t bar = full_bar + 8 * buf;
        tma::mbar_expect_tx(bar, 2 * kBN * kRowBytes);
        tma::load_4d(sK + buf * kBN * kRowBytes, &args.k_map, bar, 0, n * kBN, cta.kvh, b);
        tma::load_4d(sV + buf * kBN * kRowBytes, &args.v_map, bar, 0, n * kBN, cta.kvh, b);
      }
    } else {
      load_rows_sw128<kBN, kThreads>(sK + buf * kBN * kRowBytes, kh, p.k_stride.t, n * kBN, p.Tk, tid);
      load_rows_sw128<kBN, kThreads>(sV + buf * kBN * kRowBytes, vh, p.v_stride.t, n * kBN, p.Tk, tid);
    }
  };
  if constexpr (kTma) {
    if (tid == 0) tma::mbar_init(full_bar, 1), tma::mbar_init(full_bar + 8, 1);
    __syncthreads();
  }
  load_rows_sw128<kBM, kThreads>(sQ, qh, p.q_stride.t, row0, p.Tq, tid);
  load_block(visits.block(0), 0);
  cp_async_commit();
  if constexpr (kTma) {  // Q came by cp.async: made visible to wgmma once, here
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
  }

  const float sl2 = (p.scale_h ? p.scale_h[h] : p.scale) * kLog2e;  // logits in log2 units
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const uint32_t sQw = sQ + wg * 64 * kRowBytes;
  const int pos0 = row0 + wg * 64 + warp * 16 + gr + off;  // key position of this thread's first row

  for (int it = 0; it < visits.n_iter; ++it) {
    const int n = visits.block(it), buf = it & 1;
    if constexpr (kTma) {
      __syncthreads();  // every warpgroup is done with the other buffers
      tma::mbar_wait(full_bar + 8 * buf, (it >> 1) & 1);
    } else {
      cp_async_wait<0>();
      wgmma::fence_proxy_async();
      __syncthreads();  // block n landed; every warpgroup is done with the other buffers
    }
    const uint32_t sKb = sK + buf * kBN * kRowBytes, sVb = sV + buf * kBN * kRowBytes;

    float s[64];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::mma_ss<128, 0, 0>(s, wgmma::desc_k(sQw, kk), wgmma::desc_k(sKb, kk), kk > 0);
    wgmma::commit();
    // The next block's copies are issued while the tensor cores work on this one.
    if (it + 1 < visits.n_iter) load_block(visits.block(it + 1), buf ^ 1);
    cp_async_commit();
    wgmma::wait<0>();
    wgmma::fence_operands(s);

    const int c_lo = n * kBN;
    const bool full = c_lo + kBN <= p.Tk && c_lo + kBN - 1 <= visits.p_lo &&
                      (p.window == 0 || visits.p_hi - c_lo < p.window || c_lo + kBN <= p.sinks);
    if (!full && p.window == 0 && c_lo + kBN <= p.Tk) {
      // Causality alone: col <= pos is a per-element constant against one per-thread limit.
      const int lim = pos0 - c_lo - 2 * tq;
#pragma unroll
      for (int i = 0; i < 64; ++i)
        if (8 * (i / 4) + i % 2 - 8 * ((i % 4) / 2) > lim) s[i] = -INFINITY;
    } else if (!full) {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int pos = pos0 + 8 * ((i % 4) / 2), col = c_lo + 8 * (i / 4) + 2 * tq + i % 2;
        if (!visible(pos, col, p.Tk, p.window, p.sinks)) s[i] = -INFINITY;
      }
    }

    // Online softmax per row half. The reference max of a row moves only when the tile's max exceeds
    // it by more than kRescaleSlack (log2 units) in some row of the warp: otherwise the rescale of
    // acc and of the running sum is skipped (a causal row's max settles after a few tiles), and P
    // stays below 2^kRescaleSlack, far inside bf16 and fp32 range. `ref` guards rows with no
    // visible key yet ((-inf) - (-inf)). Max and sum run as trees: a serial chain of 32 adds behind
    // the exponentials had been the warp's critical path.
    constexpr float kRescaleSlack = 8.f;
    float m_new[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        mx[j] = fmaxf(fmaxf(s[8 * j + 2 * half], s[8 * j + 2 * half + 1]),
                      fmaxf(s[8 * j + 4 + 2 * half], s[8 * j + 4 + 2 * half + 1]));
#pragma unroll
      for (int w = 4; w > 0; w /= 2)
#pragma unroll
        for (int j = 0; j < w; ++j) mx[j] = fmaxf(mx[j], mx[j + w]);
      mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], 1));
      mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], 2));
      m_new[half] = fmaxf(row_max[half], mx[0] * sl2);
    }
    if (__any_sync(0xffffffffu, m_new[0] > row_max[0] + kRescaleSlack || m_new[1] > row_max[1] + kRescaleSlack)) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float alpha = fast_exp2(row_max[half] - (m_new[half] == -INFINITY ? 0.f : m_new[half]));
        row_max[half] = m_new[half];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          acc[4 * j + 2 * half] *= alpha;
          acc[4 * j + 2 * half + 1] *= alpha;
        }
        row_sum[half] *= alpha;
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float ref = row_max[half] == -INFINITY ? 0.f : row_max[half];
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pe = fast_exp2(fmaf(s[4 * j + 2 * half + e], sl2, -ref));
          s[4 * j + 2 * half + e] = pe;
          sum[(2 * j + e) % 4] += pe;
        }
      row_sum[half] += (sum[0] + sum[1]) + (sum[2] + sum[3]);
    }

    uint32_t pa[8][4];
    mma_from_acc(acc, pa, s, sVb);
    wgmma::wait<0>();
    wgmma::fence_operands(acc);
  }

  // o = acc / l, lse = ln(l) + max; o goes out through this warpgroup's rows of the Q tile.
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = row_sum[half];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int r = wg * 64 + warp * 16 + gr + 8 * half, row = row0 + r;
    if (tq == 0 && row < p.Tq) p.lse[(int64_t(b) * p.Hq + h) * p.Tq + row] = (row_max[half] + __log2f(l)) * kLn2;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      *reinterpret_cast<uint32_t*>(smem + wgmma::sw128(r, 8 * j + 2 * tq)) =
          pack_bf16(acc[4 * j + 2 * half] * inv, acc[4 * j + 2 * half + 1] * inv);
  }
  __syncthreads();
  bf16* oh = static_cast<bf16*>(p.o) + b * p.o_stride.b + h * p.o_stride.h;
  store_rows_sw128<kBM, kThreads>(smem, oh, p.o_stride.t, row0, p.Tq, tid);
#endif
}

struct Sm90BackwardArgs {
  FlashAttentionBackwardParams p;
  float* dq_acc;    // (B, Hq, Tq, 64) fp32, zeroed
  const float* di;  // (B, Hq, Tq)
  // The kTma kernels' maps of q and dout (64-row boxes, 128B-swizzled) and of lse and di (64 rows).
  CUtensorMap q_map, dout_map, lse_map, di_map;
};

// kWG warpgroups x 64 keys per CTA; each step takes 64 queries. kMinBlocks CTAs per SM.
template <int kWG_, int kMinBlocks_>
struct Sm90BackwardTile {
  static constexpr int kWG = kWG_, kMinBlocks = kMinBlocks_;
  static constexpr int kBN = 64 * kWG, kBM = 64, kThreads = 128 * kWG;
  static constexpr int kDQCols = 64 / kWG;  // dQ columns each warpgroup produces
  // K, V (kBN rows each), two Q and two dO buffers (kBM rows), dS^T (kBN rows of kBM queries),
  // then two lse and two Di buffers of kBM floats and the two buffers' mbarriers.
  static constexpr int kSmemBytes = 1024 + (3 * kBN + 4 * kBM) * kRowBytes + 4 * kBM * 4 + 16;
};

// kTma: Q, dO, lse and Di of each step arrive by TMA (one thread issues them, an mbarrier per buffer
// counts them in); otherwise every thread copies with cp.async and the step starts with a proxy
// fence. K and V, loaded once, always take cp.async.
template <class Cfg, bool kDscale, bool kAtomicDQ, bool kTma>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_backward_sm90_kernel(const __grid_constant__ Sm90BackwardArgs args) {
#ifdef HYBRID_SM90_BODY
  constexpr int kBN = Cfg::kBN, kBM = Cfg::kBM, kThreads = Cfg::kThreads, kDQCols = Cfg::kDQCols;
  const FlashAttentionBackwardParams& p = args.p;
  const FlashAttentionForwardParams& f = p.fwd;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_base_1k(smem_raw);
  const uint32_t sK = smem_u32(smem), sV = sK + kBN * kRowBytes, sQ = sV + kBN * kRowBytes;
  const uint32_t sdO = sQ + 2 * kBM * kRowBytes, sdS = sdO + 2 * kBM * kRowBytes;
  float* sLse = reinterpret_cast<float*>(smem + (sdS - sK) + kBN * kRowBytes);
  float* sDi = sLse + 2 * kBM;
  const uint32_t full_bar = smem_u32(sDi + 2 * kBM);  // buffer `buf`'s barrier at + 8 buf

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, gr = lane / 4, tq = lane % 4;
  const BackwardBlock kb(f, blockIdx.x, kBN, kBM, p.tail_heads);
  const int b = kb.b, kvh = kb.kvh, G = f.Hq / f.Hkv, off = f.Tk - f.Tq;
  const int c_lo = kb.c_lo, c_hi = kb.c_hi, m_lo = kb.m_lo, n_m = kb.n_m, n_iter = G * n_m;

  const bf16* kh = static_cast<const bf16*>(f.k) + b * f.k_stride.b + kvh * f.k_stride.h;
  const bf16* vh = static_cast<const bf16*>(f.v) + b * f.v_stride.b + kvh * f.v_stride.h;
  load_rows_sw128<kBN, kThreads>(sK, kh, f.k_stride.t, c_lo, f.Tk, tid);
  load_rows_sw128<kBN, kThreads>(sV, vh, f.v_stride.t, c_lo, f.Tk, tid);

  // Q, dO, lse and Di of one step into buffer `buf`. Rows >= Tq load as zeros and contribute
  // nothing: dO = 0 and Di = 0 make dV and dS zero whatever P is.
  auto load_step = [&](int h, int row0, int buf) {
    if constexpr (kTma) {
      if (tid == 0) {
        const uint32_t bar = full_bar + 8 * buf;
        tma::mbar_expect_tx(bar, 2 * kBM * kRowBytes + 2 * kBM * 4);
        tma::load_4d(sQ + buf * kBM * kRowBytes, &args.q_map, bar, 0, row0, h, b);
        tma::load_4d(sdO + buf * kBM * kRowBytes, &args.dout_map, bar, 0, row0, h, b);
        tma::load_3d(smem_u32(sLse + buf * kBM), &args.lse_map, bar, row0, h, b);
        tma::load_3d(smem_u32(sDi + buf * kBM), &args.di_map, bar, row0, h, b);
      }
      return;
    }
    const bf16* qh = static_cast<const bf16*>(f.q) + b * f.q_stride.b + h * f.q_stride.h;
    const bf16* doh = static_cast<const bf16*>(p.dout) + b * p.dout_stride.b + h * p.dout_stride.h;
    load_rows_sw128<kBM, kThreads>(sQ + buf * kBM * kRowBytes, qh, f.q_stride.t, row0, f.Tq, tid);
    load_rows_sw128<kBM, kThreads>(sdO + buf * kBM * kRowBytes, doh, p.dout_stride.t, row0, f.Tq, tid);
    load_row_terms<kBM>(sLse + buf * kBM, sDi + buf * kBM, f, args.di, b, h, row0, tid);
  };
  if constexpr (kTma) {
    if (tid == 0) tma::mbar_init(full_bar, 1), tma::mbar_init(full_bar + 8, 1);
    __syncthreads();
  }
  if (n_iter > 0) load_step(kvh * G, m_lo * kBM, 0);
  cp_async_commit();
  if constexpr (kTma) {  // K and V came by cp.async: made visible to wgmma once, here
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
  }

  float dk[32], dv[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) dk[i] = dv[i] = 0.f;
  const int key_w = wg * 64;  // this warpgroup's keys within the block
  const uint32_t sKw = sK + key_w * kRowBytes, sVw = sV + key_w * kRowBytes;
  const int key0 = c_lo + key_w + warp * 16 + gr;  // this thread's first key (the second is +8)

  // dL/dscale_h = sum dS_ij <q_i, k_j>, in fp32 from the unrounded dS (see the mma.sync kernel).
  float dscale_acc = 0.f;
  for (int it = 0, h = kvh * G, m = m_lo; it < n_iter; ++it) {
    const int buf = it & 1, row0 = m * kBM;
    const bool last_m = m == m_lo + n_m - 1;
    const int next_h = last_m ? h + 1 : h, next_m = last_m ? m_lo : m + 1;
    if constexpr (kTma) {
      __syncthreads();  // the other buffers and dS^T are free
      tma::mbar_wait(full_bar + 8 * buf, (it >> 1) & 1);
    } else {
      cp_async_wait<0>();
      wgmma::fence_proxy_async();
      __syncthreads();  // this step's tiles landed; the other buffers and dS^T are free
    }
    const float scale = f.scale_h ? f.scale_h[h] : f.scale, sl2 = scale * kLog2e;
    const uint32_t sQb = sQ + buf * kBM * kRowBytes, sdOb = sdO + buf * kBM * kRowBytes;

    // S^T = K Q^T and dP^T = V dO^T: this warpgroup's 64 keys x 64 queries; the next step's copies
    // are issued while the tensor cores work on them.
    float st[32], dpt[32];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::mma_ss<64, 0, 0>(st, wgmma::desc_k(sKw, kk), wgmma::desc_k(sQb, kk), kk > 0);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma::mma_ss<64, 0, 0>(dpt, wgmma::desc_k(sVw, kk), wgmma::desc_k(sdOb, kk), kk > 0);
    wgmma::commit();
    if (it + 1 < n_iter) load_step(next_h, next_m * kBM, buf ^ 1);
    cp_async_commit();
    // -lse log2(e) of this thread's query columns, read and scaled while the GEMMs run: loaded where
    // the exponentials need them, the loads had sat on the critical path (ncu: short scoreboard).
    // The dscale kernel has no registers to spare for them (it spilled 200 bytes) and loads each
    // pair where it is used.
    const float* lse_b = sLse + buf * kBM;
    const float* di_b = sDi + buf * kBM;
    auto nlse_at = [&](int j) {
      const float2 l = *reinterpret_cast<const float2*>(lse_b + j * 8 + 2 * tq);
      return make_float2(-l.x * kLog2e, -l.y * kLog2e);
    };
    float2 nlse[8];
    if constexpr (!kDscale) {
#pragma unroll
      for (int j = 0; j < 8; ++j) nlse[j] = nlse_at(j);
    }
    wgmma::wait<0>();
    wgmma::fence_operands(st);
    wgmma::fence_operands(dpt);

    // P^T = exp(s - lse) (0 where not visible) and dS^T = scale · P^T ∘ (dP^T - Di), then
    // dV += P^T dO and dK += dS^T Q (dO and Q read MN-major: the query index is the reduction).
    // Issuing dV before forming dS^T would overlap the two, but keeps P^T's A fragments live
    // through it: past the registers of three CTAs per SM, and ptxas then serializes every wgmma.
    const int pr_lo = row0 + off, pr_hi = min(f.Tq, row0 + kBM) - 1 + off;
    // Keys >= Tk are masked too: their zero K gives P = exp(-lse), which need not be finite.
    const bool full = c_lo + kBN <= f.Tk && c_hi <= pr_lo &&
                      (f.window == 0 || pr_hi - c_lo < f.window || c_hi < f.sinks);
    // One instantiation per mask: none (full tiles; if-converted into every tile the mask had cost
    // a third of the kernel's instructions, ncu), causality alone inside Tk (key <= pos is a
    // per-element constant against one per-thread limit), and the general rule.
    enum { kNoMask, kCausal, kGeneral };
    auto probabilities = [&](auto mask) {
      [[maybe_unused]] const int causal_lim = row0 + off + 2 * tq - key0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 nl2 = kDscale ? nlse_at(j) : nlse[j];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float nl = e ? nl2.y : nl2.x;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int i = 4 * j + 2 * half + e;
            float pv = fast_exp2(fmaf(st[i], sl2, nl));
            if constexpr (decltype(mask)::value == kCausal) {
              if (8 * half - 8 * j - e > causal_lim) pv = 0.f;
            } else if constexpr (decltype(mask)::value == kGeneral) {
              const int pos = row0 + j * 8 + 2 * tq + e + off, key = key0 + 8 * half;
              if (!visible(pos, key, f.Tk, f.window, f.sinks)) pv = 0.f;
            }
            if constexpr (kDscale) dscale_acc = fmaf(pv * (dpt[i] - di_b[j * 8 + 2 * tq + e]), st[i], dscale_acc);
            st[i] = pv;
          }
        }
      }
    };
    if (full)
      probabilities(std::integral_constant<int, kNoMask>{});
    else if (f.window == 0 && c_lo + kBN <= f.Tk)
      probabilities(std::integral_constant<int, kCausal>{});
    else
      probabilities(std::integral_constant<int, kGeneral>{});
    // dS^T = P^T ∘ (dP^T - Di), times the scale: a scale shared by every head is applied once at the
    // end instead (to dK below, to dQ in flash_dq_convert_sm90), a per-head one here.
    auto gradient_of_logits = [&](auto per_head) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 di2 = *reinterpret_cast<const float2*>(di_b + j * 8 + 2 * tq);
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 4 * j + 2 * half + e;
            dpt[i] = st[i] * (dpt[i] - (e ? di2.y : di2.x));
            if constexpr (decltype(per_head)::value) dpt[i] *= scale;
          }
      }
    };
    if (f.scale_h)
      gradient_of_logits(std::true_type{});
    else
      gradient_of_logits(std::false_type{});
    uint32_t pa[4][4];
    mma_from_acc(dv, pa, st, sdOb);

    uint32_t da[4][4];
    mma_from_acc(dk, da, dpt, sQb);

    if constexpr (kAtomicDQ) {
      // dS^T (keys x queries) to smem, then dQ[:, kDQCols wg ..] = dS K over all kBN keys: dS^T read
      // M-major, K read N-major from its column kDQCols wg.
      // The packed pairs are dK's A fragments (da[j / 2][2 (j % 2) + half] holds row half, column
      // chunk j). This thread's rows are gr and gr + 8 of a swizzle atom, so chunk j sits at
      // position j ^ gr of both: one XOR into the row address (whose bits 4..6 are clear) per chunk.
      const uint32_t ds_row = (sdS - sK) + (key_w + warp * 16 + gr) * kRowBytes + (gr << 4) + 4 * tq;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          *reinterpret_cast<uint32_t*>(smem + ((ds_row ^ (j << 4)) + half * 8 * kRowBytes)) = da[j / 2][2 * (j % 2) + half];
      wgmma::fence_proxy_async();
      if constexpr (Cfg::kWG == 1)
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
      else
        __syncthreads();
      // In passes of at most 32 columns: a 64-column accumulator would push the kernel past the
      // registers three CTAs per SM leave it. 16-byte vector reductions into the tiled accumulator
      // (sm90_dq_offset): each warp covers 512 contiguous bytes per instruction. Rows >= Tq land
      // in the tile's padding.
      constexpr int kPass = kDQCols < 32 ? kDQCols : 32;
      float* dq_tile = args.dq_acc + ((int64_t(b) * f.Hq + h) * ((f.Tq + kBM - 1) / kBM) + m) * (kBM * 64);
#pragma unroll
      for (int c0 = kDQCols * wg; c0 < kDQCols * (wg + 1); c0 += kPass) {
        float dq[kPass / 2];
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk)
          wgmma::mma_ss<kPass, 1, 1>(dq, wgmma::desc_mn(sdS, kk), wgmma::desc_mn(sK + 2 * c0, kk), kk > 0);
        wgmma::commit();
        wgmma::wait<0>();
        wgmma::fence_operands(dq);
#pragma unroll
        for (int j = 0; j < kPass / 8; ++j)
          red_add_v4(dq_tile + sm90_dq_offset(c0 / 8 + j, tid % 128), dq[4 * j], dq[4 * j + 1], dq[4 * j + 2],
                     dq[4 * j + 3]);
      }
    } else {
      wgmma::wait<0>();
    }
    wgmma::fence_operands(dk);
    wgmma::fence_operands(dv);
    if (kDscale && (next_h != h || it + 1 == n_iter)) {
      flush_dscale(dscale_acc, p.dscale_h, h, lane);
    }
    h = next_h;
    m = next_m;
  }

  // dK, dV (summed over the group) out through the K and V tiles as coalesced rows.
  cp_async_wait<0>();
  __syncthreads();
  const float dk_scale = f.scale_h ? 1.f : f.scale;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t o = wgmma::sw128(key_w + warp * 16 + gr + 8 * half, 8 * j + 2 * tq);
      *reinterpret_cast<uint32_t*>(smem + o) =
          pack_bf16(dk[4 * j + 2 * half] * dk_scale, dk[4 * j + 2 * half + 1] * dk_scale);
      *reinterpret_cast<uint32_t*>(smem + (sV - sK) + o) = pack_bf16(dv[4 * j + 2 * half], dv[4 * j + 2 * half + 1]);
    }
  __syncthreads();
  bf16* dkh = static_cast<bf16*>(p.dk) + b * p.dk_stride.b + kvh * p.dk_stride.h;
  bf16* dvh = static_cast<bf16*>(p.dv) + b * p.dv_stride.b + kvh * p.dv_stride.h;
  store_rows_sw128<kBN, kThreads>(smem, dkh, p.dk_stride.t, c_lo, f.Tk, tid);
  store_rows_sw128<kBN, kThreads>(smem + (sV - sK), dvh, p.dv_stride.t, c_lo, f.Tk, tid);
#endif
}

// dq = bf16(scale x tiled accumulator): one thread per float4 of it (two bf16 pairs of dq). The
// main kernel leaves a scale shared by all heads out of dS; a per-head scale is already in.
__global__ void flash_dq_convert_sm90_kernel(const FlashAttentionBackwardParams p, const float* __restrict__ acc) {
  const FlashAttentionForwardParams& f = p.fwd;
  const float s = f.scale_h ? 1.f : f.scale;
  const int num_mt = (f.Tq + 63) / 64;
  const int64_t n4 = int64_t(f.B) * f.Hq * num_mt * 1024;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tile = i / 1024;
    const int within = int(i % 1024), j = within / 128, t = within % 128;
    const int mt = int(tile % num_mt), h = int((tile / num_mt) % f.Hq), b = int(tile / (int64_t(num_mt) * f.Hq));
    const int row = mt * 64 + 16 * (t / 32) + (t % 32) / 4, col = 8 * j + 2 * (t % 4);
    float4 v = reinterpret_cast<const float4*>(acc)[i];
    v.x *= s, v.y *= s, v.z *= s, v.w *= s;
    bf16* dst = static_cast<bf16*>(p.dq) + b * p.dq_stride.b + h * p.dq_stride.h + col;
    if (row < f.Tq) *reinterpret_cast<__nv_bfloat162*>(dst + int64_t(row) * p.dq_stride.t) = __floats2bfloat162_rn(v.x, v.y);
    if (row + 8 < f.Tq)
      *reinterpret_cast<__nv_bfloat162*>(dst + int64_t(row + 8) * p.dq_stride.t) = __floats2bfloat162_rn(v.z, v.w);
  }
}

// Compute capability 9.0 on the current device.
bool device_is_sm90() {
  return current_device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
         current_device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0;
}

bool rows64(const void* base, const FlashStrides& s, int d) { return d == 64 && rows_aligned(base, s, 16); }

}  // namespace

bool sm90_forward_applies(const FlashAttentionForwardParams& p) {
#if defined(HYBRID_SM90A)
  return rows64(p.q, p.q_stride, p.D) && rows64(p.k, p.k_stride, p.D) && rows64(p.v, p.v_stride, p.Dv) &&
         rows64(p.o, p.o_stride, p.Dv) && device_is_sm90();
#else
  return false;
#endif
}

bool sm90_backward_applies(const FlashAttentionBackwardParams& p) {
  return sm90_forward_applies(p.fwd) && rows64(p.dout, p.dout_stride, p.fwd.Dv) &&
         rows64(p.dk, p.dk_stride, p.fwd.D) && rows64(p.dv, p.dv_stride, p.fwd.Dv);
}

// Maps of a bf16 (B, T, H, 64) tensor with element strides s, `rows`-row boxes of one head,
// 128B-swizzled as wgmma reads them; false where the driver refuses it (the cp.async kernels run).
bool map_rows64(CUtensorMap* map, const void* base, const FlashStrides& s, int T, int H, int B, int rows) {
  const uint64_t extent[4] = {64, uint64_t(T), uint64_t(H), uint64_t(B)};
  const uint64_t stride[3] = {uint64_t(s.t) * 2, uint64_t(s.h) * 2, uint64_t(s.b) * 2};
  const uint32_t box[4] = {64, uint32_t(rows), 1, 1};
  return tma::encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, base, extent, stride, box, CU_TENSOR_MAP_SWIZZLE_128B);
}
// An f32 (B, H, T) contiguous tensor in 64-row boxes (needs T % 4 == 0: strides of 16 bytes).
bool map_row_terms(CUtensorMap* map, const float* base, int T, int H, int B) {
  const uint64_t extent[3] = {uint64_t(T), uint64_t(H), uint64_t(B)};
  const uint64_t stride[2] = {uint64_t(T) * 4, uint64_t(T) * H * 4};
  const uint32_t box[3] = {64, 1, 1};
  return tma::encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, base, extent, stride, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <class Cfg, bool kTma>
cudaError_t launch_forward_sm90_as(const Sm90ForwardArgs& args, cudaStream_t stream) {
  const FlashAttentionForwardParams& p = args.p;
  const auto kernel = flash_forward_sm90_kernel<Cfg, kTma>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int grid = (p.Tq + Cfg::kBM - 1) / Cfg::kBM * p.Hq * p.B;
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

template <class Cfg>
cudaError_t launch_forward_sm90(const FlashAttentionForwardParams& p, cudaStream_t stream) {
  Sm90ForwardArgs args{query_block_order(p), {}, {}};
  const bool tma = map_rows64(&args.k_map, p.k, p.k_stride, p.Tk, p.Hkv, p.B, Cfg::kBN) &&
                   map_rows64(&args.v_map, p.v, p.v_stride, p.Tk, p.Hkv, p.B, Cfg::kBN);
  return tma ? launch_forward_sm90_as<Cfg, true>(args, stream) : launch_forward_sm90_as<Cfg, false>(args, stream);
}

cudaError_t flash_forward_sm90(const FlashAttentionForwardParams& p, cudaStream_t stream) {
  return launch_forward_sm90<Sm90ForwardTile<2, 2>>(p, stream);
}

template <class Cfg, bool kTma>
cudaError_t launch_backward_sm90_as(const Sm90BackwardArgs& args, cudaStream_t stream) {
  const FlashAttentionBackwardParams& p = args.p;
  const bool atomic_dq = !p.deterministic, dscale = p.dscale_h && atomic_dq;
  const auto kernel = dscale      ? flash_backward_sm90_kernel<Cfg, true, true, kTma>
                      : atomic_dq ? flash_backward_sm90_kernel<Cfg, false, true, kTma>
                                  : flash_backward_sm90_kernel<Cfg, false, false, kTma>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int grid = (p.fwd.Tk + Cfg::kBN - 1) / Cfg::kBN * p.fwd.Hkv * p.fwd.B;
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

// The TMA kernels where the driver encodes all four maps (strides in multiples of 16 bytes, so
// Tq % 4 == 0 for lse and di), the cp.async ones otherwise.
template <class Cfg>
cudaError_t launch_backward_sm90(const FlashAttentionBackwardParams& p, float* dq_acc, const float* di,
                                 cudaStream_t stream) {
  const int slots = Cfg::kWG == 1 ? Cfg::kMinBlocks * current_device_attribute<cudaDevAttrMultiProcessorCount>() : 0;
  Sm90BackwardArgs args{key_block_order(p, Cfg::kBN, slots), dq_acc, di, {}, {}, {}, {}};
  const FlashAttentionForwardParams& f = p.fwd;
  const bool tma = map_rows64(&args.q_map, f.q, f.q_stride, f.Tq, f.Hq, f.B, Cfg::kBM) &&
                   map_rows64(&args.dout_map, p.dout, p.dout_stride, f.Tq, f.Hq, f.B, Cfg::kBM) &&
                   map_row_terms(&args.lse_map, f.lse, f.Tq, f.Hq, f.B) &&
                   map_row_terms(&args.di_map, di, f.Tq, f.Hq, f.B);
  return tma ? launch_backward_sm90_as<Cfg, true>(args, stream) : launch_backward_sm90_as<Cfg, false>(args, stream);
}

// Where a key sees 16k query rows or more, CTAs of two warpgroups x 64 keys (one per SM) share each
// step's Q and dO tiles and halve the dQ reductions per FLOP; with fewer steps per CTA, three
// independent one-warpgroup CTAs per SM overlap better. Measured on the H200, causal fwd+bwd, `bench
// ops` alternating the two in one call (2026-11-29, docs/perf_notes/flash_attention.md v8): at 8k one
// warpgroup (with its interleaved tail, key_block_order) 4.39 to 4.66 ms against 4.85 to 4.88 (the 8k
// case alone 4.08 to 4.20 against 4.50); at 16k 8.71 to 8.77 against 8.69 to 8.89. (In the harness of
// 2026-11-28, before that tail and the branch-free masks, two warpgroups had won from 8k.)
cudaError_t flash_backward_sm90_main(const FlashAttentionBackwardParams& p, float* dq_acc, const float* di,
                                     cudaStream_t stream) {
  const int rows_per_key = p.fwd.window > 0 ? std::min(p.fwd.window, p.fwd.Tq) : p.fwd.Tq;
  if (rows_per_key >= 16384 && !p.deterministic)
    return launch_backward_sm90<Sm90BackwardTile<2, 1>>(p, dq_acc, di, stream);
  return launch_backward_sm90<Sm90BackwardTile<1, 3>>(p, dq_acc, di, stream);
}

size_t sm90_dq_acc_floats(const FlashAttentionBackwardParams& p) {
  return size_t(p.fwd.B) * p.fwd.Hq * ((p.fwd.Tq + 63) / 64) * 64 * 64;
}

cudaError_t flash_dq_convert_sm90(const FlashAttentionBackwardParams& p, const float* dq_acc, cudaStream_t stream) {
  const int64_t n4 = int64_t(sm90_dq_acc_floats(p) / 4);
  if (n4 == 0) return cudaSuccess;
  flash_dq_convert_sm90_kernel<<<int(std::min<int64_t>((n4 + 255) / 256, 65536)), 256, 0, stream>>>(p, dq_acc);
  return cudaGetLastError();
}

}  // namespace hyb::flash
