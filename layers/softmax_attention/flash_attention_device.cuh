// Device building blocks shared by the flash-attention forward and backward kernels: tensor-core
// MMA and ldmatrix wrappers, cp.async tile copies into padded shared-memory tiles, and the
// visibility rule of attention.md 1. Tiles are row-major with kHeadDim + 8 bf16 per row: the extra
// 16 bytes put the 8 rows one ldmatrix reads in 8 different bank groups, for any head dim.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/env_switch.h"
#include "layers/softmax_attention/flash_attention.cuh"

namespace hyb::flash {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The tile width a head dim runs at: max(D, Dv) rounded up to 32, 64, 96, 128, 192 or 256 (the
// padded path of attention.md 4.4); 0 when it is over 256.
__host__ __device__ constexpr int padded_head_dim(int d) {
  return d <= 32 ? 32 : d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : d <= 256 ? 256 : 0;
}

// Query at position p sees key j (attention.md 1) of Tk keys. Bitwise, not short-circuit: the
// masked tiles test every element, and && / || had compiled to two branches and a reconvergence
// per element (~16 SASS instructions each; a masked wgmma forward tile cost ~1100 more than a full one).
__device__ __forceinline__ bool visible(int p, int j, int Tk, int window, int sinks) {
  return (j < Tk) & (j <= p) & ((window == 0) | (p - j < window) | (j < sinks));
}

// The query block, head and batch of a query-parallel CTA (1-D grid of ceil(Tq / kBM) x Hq x B)
// and its q/k/v heads (pointers at (b, 0, head, 0)). Within each group of p.head_group heads the
// longest query blocks of every head go first (causal work grows with the block index): head after
// head, each head's longest block can fall into the last wave (H200, wgmma forward: 2% to 5% faster
// at 1k and 16k grouped, the same elsewhere).
struct QueryBlockCta {
  int m_block, h, b, kvh;
  const bf16 *qh, *kh, *vh;
  __device__ QueryBlockCta(const FlashAttentionForwardParams& p, int kBM) {
    const int nq = (p.Tq + kBM - 1) / kBM, heads = p.B * p.Hq, idx = int(blockIdx.x);
    const int g = idx / (p.head_group * nq), in_g = min(p.head_group, heads - g * p.head_group);
    const int r = idx - g * p.head_group * nq, bh = g * p.head_group + r % in_g;
    m_block = nq - 1 - r / in_g, h = bh % p.Hq, b = bh / p.Hq;
    kvh = h / (p.Hq / p.Hkv);
    qh = static_cast<const bf16*>(p.q) + b * p.q_stride.b + h * p.q_stride.h;
    kh = static_cast<const bf16*>(p.k) + b * p.k_stride.b + kvh * p.k_stride.h;
    vh = static_cast<const bf16*>(p.v) + b * p.v_stride.b + kvh * p.v_stride.h;
  }
};

// Adds a warp's partial dL/dscale_h (one value per lane) to dscale_h[h] and clears it.
__device__ __forceinline__ void flush_dscale(float& part, float* dscale_h, int h, int lane) {
#pragma unroll
  for (int sh = 16; sh > 0; sh /= 2) part += __shfl_xor_sync(0xffffffffu, part, sh);
  if (lane == 0) atomicAdd(dscale_h + h, part);
  part = 0.f;
}

// The key blocks (kBN wide) a forward CTA visits for query rows [row0, row0 + rows), in order
// (attention.md 4.3): the window blocks [n_wlo, n_hi] descending, then the sink blocks [0, n_sink)
// that the window does not already cover, descending. p_lo and p_hi are the rows' key positions.
struct ForwardVisits {
  int p_lo, p_hi, n_hi, n_wlo = 0, n_sink = 0, n_win, n_iter;
  __device__ ForwardVisits(const FlashAttentionForwardParams& p, int row0, int rows, int kBN) {
    const int off = p.Tk - p.Tq;
    p_lo = row0 + off;
    p_hi = min(p.Tq, row0 + rows) - 1 + off;
    n_hi = p_hi / kBN;
    if (p.window > 0) {
      n_wlo = max(0, p_lo - p.window + 1) / kBN;
      n_sink = min((p.sinks + kBN - 1) / kBN, n_wlo);
    }
    n_win = n_hi - n_wlo + 1;
    n_iter = n_win + n_sink;
  }
  __device__ int block(int it) const { return it < n_win ? n_hi - it : n_sink - 1 - (it - n_win); }
};

// The key block [c_lo, c_hi] a K/V-parallel backward CTA owns and the query blocks (kBM rows,
// [m_lo, m_lo + n_m)) that see some key of it. Launch order: the sink key blocks of every head
// first (each sees all later queries), then head by head with key blocks ascending, so the longest
// causal blocks start first and the CTAs in flight share one head's Q and dO through L2; the last
// tail_heads heads (resolved by key_block_order) interleave block by block, so no long block of a
// late head starts in the last wave. (Every head interleaved in groups, as the forward launches,
// measured up to 6% slower at 4k.)
struct BackwardBlock {
  int b, kvh, c_lo, c_hi, m_lo, n_m;
  __device__ BackwardBlock(const FlashAttentionForwardParams& f, int idx, int kBN, int kBM, int tail_heads) {
    const int n_blocks = (f.Tk + kBN - 1) / kBN;
    const int n_sinkb = f.window > 0 ? min(n_blocks, (f.sinks + kBN - 1) / kBN) : 0;
    const int heads = f.B * f.Hkv;
    int bg, n_block;
    if (idx < heads * n_sinkb) {
      bg = idx / n_sinkb, n_block = idx % n_sinkb;
    } else {
      idx -= heads * n_sinkb;
      const int nb = n_blocks - n_sinkb, lead = (heads - tail_heads) * nb;
      if (idx < lead)
        bg = idx / nb, n_block = n_sinkb + idx % nb;
      else
        bg = heads - tail_heads + (idx - lead) % tail_heads, n_block = n_sinkb + (idx - lead) / tail_heads;
    }
    kvh = bg % f.Hkv, b = bg / f.Hkv;
    const int off = f.Tk - f.Tq;
    c_lo = n_block * kBN, c_hi = min(f.Tk, c_lo + kBN) - 1;
    // Query rows that see some key of this block (attention.md 4.3, with p = i + off).
    const int i_lo = max(0, c_lo - off);
    const int i_hi = (f.window == 0 || c_lo < f.sinks) ? f.Tq - 1 : min(f.Tq - 1, c_hi + f.window - 1 - off);
    m_lo = i_lo / kBM, n_m = i_hi >= i_lo ? i_hi / kBM - m_lo + 1 : 0;
  }
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16- and 4-byte asynchronous copies; an invalid source writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The lse and Di of query rows [row0, row0 + kRows) of head (b, h) into shared memory, one row per
// thread of threads 0 .. kRows - 1 (cp.async); rows >= Tq read as zeros.
template <int kRows>
__device__ __forceinline__ void load_row_terms(float* s_lse, float* s_di, const FlashAttentionForwardParams& f,
                                               const float* di, int b, int h, int row0, int tid) {
  if (tid < kRows) {
    const int row = row0 + tid;
    const bool ok = row < f.Tq;
    const int64_t idx = (int64_t(b) * f.Hq + h) * f.Tq + (ok ? row : 0);
    cp_async4(smem_u32(s_lse + tid), f.lse + idx, ok);
    cp_async4(smem_u32(s_di + tid), di + idx, ok);
  }
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a b for one m16n8k16 tile: a row-major 16x16, b column-major 16x8, c fp32 16x8.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair, the first in the low half (the lower column of an MMA fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The A fragment of the k-step built from accumulator n-tiles 2kk and 2kk+1 (rows x 16 columns):
// an fp32 C tile becomes the bf16 A operand of the next product without leaving registers.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// fp32 pair reduction into global memory (sm_90 vector red), 8-byte aligned.
__device__ __forceinline__ void red_add_v2(float* dst, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
}

// Copies rows [row0, row0 + kRows) of one head of a (B, T, H, D) tensor into a padded smem tile.
// `head` points at (b, 0, h, 0). Rows >= T and columns >= D are zero: zero q rows and zero k/v
// columns leave every dot product unchanged. kVec16 needs D % 8 == 0 and 16-byte aligned rows.
// Each thread walks one column chunk down the rows with a running pointer and is not unrolled:
// unrolled, the compiler keeps every row's address live across the whole main loop.
template <int kRows, int kHeadDim, int kThreads, bool kVec16>
__device__ __forceinline__ void load_tile(bf16* smem, const bf16* head, int64_t row_stride, int row0, int T, int D,
                                          int tid) {
  constexpr int kChunks = kHeadDim / 8, kStride = kHeadDim + 8;
  static_assert((kRows * kChunks) % kThreads == 0, "tile chunks must split evenly over the threads");
  const int c = tid % kChunks;
  if constexpr (kThreads % kChunks == 0) {
    constexpr int kRowStep = kThreads / kChunks;
    int r = tid / kChunks;
    const bf16* src = head + int64_t(row0 + r) * row_stride + c * 8;
    uint32_t dst = smem_u32(smem + r * kStride + c * 8);
    const int64_t src_step = kRowStep * row_stride;
#pragma unroll 1
    for (; r < kRows; r += kRowStep, src += src_step, dst += kRowStep * kStride * 2) {
      const bool row_ok = row0 + r < T;
      if constexpr (kVec16) {
        const bool ok = row_ok && c * 8 < D;
        cp_async16(dst, ok ? src : head, ok);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = row_ok && c * 8 + 2 * e < D;
          cp_async4(dst + 4 * e, ok ? src + 2 * e : head, ok);
        }
      }
    }
  } else {
#pragma unroll 1
    for (int i = tid; i < kRows * kChunks; i += kThreads) {
      const int r = i / kChunks, cc = i % kChunks, row = row0 + r;
      const bool row_ok = row < T;
      const bf16* src = head + (row_ok ? int64_t(row) * row_stride : 0) + cc * 8;
      const uint32_t dst = smem_u32(smem + r * kStride + cc * 8);
      if constexpr (kVec16) {
        const bool ok = row_ok && cc * 8 < D;
        cp_async16(dst, ok ? src : head, ok);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = row_ok && cc * 8 + 2 * e < D;
          cp_async4(dst + 4 * e, ok ? src + 2 * e : head, ok);
        }
      }
    }
  }
}

// Writes columns [0, ncols) of rows [row0, min(T, row0 + kRows)) of a smem tile (kCols wide, rows
// kSmemStride apart) to one head of a (B, T, H, D) tensor; `head` points at (b, 0, h, 0).
template <int kRows, int kCols, int kSmemStride, int kThreads, bool kVec16>
__device__ __forceinline__ void store_tile(const bf16* smem, bf16* head, int64_t row_stride, int row0, int T, int ncols,
                                           int tid) {
  constexpr int kChunks = kCols / 8, kTotal = kRows * kChunks;
  static_assert(kTotal % kThreads == 0, "tile chunks must split evenly over the threads");
#pragma unroll
  for (int it = 0; it < kTotal / kThreads; ++it) {
    const int i = it * kThreads + tid, r = i / kChunks, c = i % kChunks, row = row0 + r;
    if (row >= T || c * 8 >= ncols) continue;
    const bf16* s = smem + r * kSmemStride + c * 8;
    bf16* g = head + int64_t(row) * row_stride + c * 8;
    if constexpr (kVec16) {
      *reinterpret_cast<uint4*>(g) = *reinterpret_cast<const uint4*>(s);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (c * 8 + 2 * e < ncols) reinterpret_cast<uint32_t*>(g)[e] = reinterpret_cast<const uint32_t*>(s)[e];
    }
  }
}

// Host side: a device attribute of the current device, asked once per device; -1 where it cannot
// be read. (These kernels stay free of the core library, whose cuda_device_props holds the same,
// so that tools/flash_attention_dev.cu builds on its own.)
template <cudaDeviceAttr kAttr>
int current_device_attribute() {
  static std::atomic<long long> cache[64] = {};  // 0: not asked yet, else the value + 1, or -1
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return -1;
  long long c = cache[dev].load(std::memory_order_relaxed);
  if (c == 0) {
    int v = 0;
    c = cudaDeviceGetAttribute(&v, kAttr, dev) == cudaSuccess ? v + 1LL : -1;
    cache[dev].store(c, std::memory_order_relaxed);
  }
  return c > 0 ? int(c - 1) : -1;
}

// Host side: heads per launch group (FlashAttentionForwardParams::head_group) where `requested` is
// 0: as many as fit half the L2 cache at `bytes_per_head` each (the tensors the group's CTAs read
// again and again), at least 1, at most `heads`.
inline int launch_head_group(int requested, int heads, double bytes_per_head) {
  if (requested > 0) return std::min(requested, std::max(heads, 1));
  const int l2_bytes = current_device_attribute<cudaDevAttrL2CacheSize>();
  const double fit = l2_bytes > 0 ? 0.5 * l2_bytes / std::max(bytes_per_head, 1.0) : 1.0;
  return int(std::clamp<double>(fit, 1.0, std::max(heads, 1)));
}

// Host side: p with head_group resolved for the query-parallel kernels (forward, deterministic
// dQ), whose CTAs re-read their head's K and V.
inline FlashAttentionForwardParams query_block_order(const FlashAttentionForwardParams& p) {
  FlashAttentionForwardParams r = p;
  const double kv_bytes = 2.0 * p.Tk * (p.D + p.Dv) / std::max(p.Hq / std::max(p.Hkv, 1), 1);
  r.head_group = launch_head_group(p.head_group, p.B * p.Hq, kv_bytes);
  return r;
}

// Host side: p with tail_heads resolved for a K/V-parallel backward of kBN-key CTAs. auto_slots > 0
// (the CTAs that run at once) lets 0 mean as many kv heads as fill four waves: in a model of the
// schedule (every slot equally fast, CTAs dispatched in launch order) that brings the causal cases at
// B T = 32768 within 1% of an even share of the work, where head after head ends 3% to 6% over it; no
// more heads than whose Q and dO fill half the L2 (the tail's CTAs in flight read them all). On the
// H200 that held for the one-warpgroup wgmma kernel (2k 1.288 -> 1.268 ms, 4k 2.31 -> 2.25 fwd+bwd)
// but the two-warpgroup one at 8k ran 2% to 5% slower (4.67 -> 4.75 ms), so auto_slots = 0 keeps head
// after head there (and in the mma.sync kernels, not measured). A window keeps head after head: its
// blocks' lengths hardly differ. HYBRID_FLASH_TAIL=0 makes 0 mean head after head (A/B timing).
inline FlashAttentionBackwardParams key_block_order(const FlashAttentionBackwardParams& p, int kBN, int auto_slots) {
  static const bool tail_off = env_is_zero("HYBRID_FLASH_TAIL");
  FlashAttentionBackwardParams r = p;
  const FlashAttentionForwardParams& f = p.fwd;
  const int heads = f.B * f.Hkv, n_blocks = (f.Tk + kBN - 1) / kBN;
  if (p.tail_heads > 0) {
    r.tail_heads = std::min(p.tail_heads, heads);
  } else if (p.tail_heads < 0 || tail_off || auto_slots <= 0 || f.window > 0 || n_blocks == 0) {
    r.tail_heads = 0;
  } else {
    const double qdo_bytes = 2.0 * f.Tq * (f.D + f.Dv) * (f.Hq / std::max(f.Hkv, 1));
    r.tail_heads = std::min((4 * auto_slots + n_blocks - 1) / n_blocks, launch_head_group(0, heads, qdo_bytes));
  }
  return r;
}

// Host side: true when a tensor's base and B/T/H strides allow `bytes`-wide accesses to its rows.
inline bool rows_aligned(const void* base, const FlashStrides& s, int bytes) {
  const int64_t elems = bytes / 2;
  return reinterpret_cast<uintptr_t>(base) % bytes == 0 && s.b % elems == 0 && s.t % elems == 0 && s.h % elems == 0;
}

}  // namespace hyb::flash
