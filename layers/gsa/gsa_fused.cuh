// Device pieces of the fused bf16 CUDA path of gsa (gsa.md 4.8) that the forward (gsa_fused_forward.cu)
// and the backward (gsa_fused_backward.cu) share: tile sizes, the chunk gates, state tiles, fragment
// stores, and the forward's state pass (F1 and the chunk scan), which the backward re-runs (B0).
// Layouts: states (B, Hkv, NC + 1, K, M) and (B, Hkv, NC + 1, M, V) bf16, slot c = the memory at the start
// of chunk c (slot NC the final one, which also leaves the scan in fp32); decay (B, Hkv, NC, M) = exp(bl)
// of every chunk. The memories are bf16 in memory because every consumer multiplies them in bf16 (gsa.md
// 4.5): the increments are rounded once each and summed in fp32 registers by the scan, so the error does
// not grow with the number of chunks, and the state traffic, a third of the op's bytes in fp32, halves.
#pragma once
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/bf16.cuh"
#include "kernels/chunk_mma.cuh"
#include "kernels/chunk_ops.h"
#include "layers/gsa/gsa_fused.h"

namespace hyb::gsa_fused {

using chunk_mma::bf16x;
using chunk_mma::exp_ftz;
using chunk_mma::frag_col;
using chunk_mma::frag_row;
using chunk_mma::kC;
using chunk_mma::pack_bf16;
using chunk_mma::visit_tiles;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
// The slot tile MT (32 or 64) is a template argument of every kernel: M slots run in the smallest tile that
// holds them (visit_slots), padded slots masked to -inf before the softmax, so nha's M = 32 does half the
// slot work and takes less shared memory than a 64-slot tile would.
constexpr int kMaxMT = 64;
template <int MT>
constexpr int ld_m = MT + 8;         // row stride of the bf16 slot tiles
template <int MT>
constexpr int ld_f = MT + 4;         // row stride of the fp32 gate and write-weight tiles
constexpr int kLdA = kC + 8;         // row stride of the 64 x 64 bf16 score tile
constexpr int kSwRows = 16 * 6;      // the fallback's per-warp key-side tiles: 16 w rows for warp w
constexpr float kRefRange = 60.f;    // gsa.md 4.1 rule 3

template <class F>
void visit_slots(int64_t M, F&& f) {
  if (M <= 32) return f(std::integral_constant<int, 32>{});
  return f(std::integral_constant<int, 64>{});
}

// nha's window tiles (window 1 .. kC) hold whole 16-row blocks of the chunk's neighbour: key rows from
// t0 - kC + window_first_key on (the chunk's queries see keys from t0 - window + 1 on), or, key-major,
// the queries up to t0 + window_rows - 1. Narrow windows take fewer rows: 96 at w = 32, 128 at w = 64.
__host__ __device__ constexpr int window_first_key(int window) { return 16 * ((kC + 1 - window) / 16); }
__host__ __device__ constexpr int window_rows(int window) { return 2 * kC - window_first_key(window); }

// Rows t0 .. t0 + rows - 1 (rows a multiple of 16) of a window tile in 16-row pieces with cp.async (as
// chunk_mma::load_rows_async): the window decides how many, and every piece is in flight before the
// kernel waits.
template <int DT>
__device__ __forceinline__ void load_window_rows_async(bf16x* s, const bf16x* head, int64_t row_stride, int t0,
                                                       int rows, int T, int D) {
  for (int r = 0; r < rows; r += 16)
    chunk_mma::load_rows_async<16, DT, kThreads>(s + r * (DT + 8), head, row_stride, t0 + r, T, D);
}

// shift: the slot stream (k, v, s, g in, dk, dv, ds, dg out) is the token stream moved down by shift rows
// (nha's token shift): position u holds token u - shift, and positions u < shift read k = v = 0, s = 0
// (nothing written), g = 0 (no decay) without a memory access, so the memory after position u is the one
// after token u - shift. q, dO, o, lse, dq stay at their positions. gsa: 0.
struct Dims {
  int B, T, Hq, Hkv, G, K, V, M, NC;
  int shift = 0;
};

// Global loads of the fp32 tiles below go out kLoadBatch per thread before the first shared-memory
// store: the compiler cannot move a load above a store it may alias, and one load at a time left the
// backward kernels waiting on memory latency for most of their time.
constexpr int kLoadBatch = 8;

// Rows t0 .. t0 + 63 of one kv head of g and s (B, T, Hkv, M) f32 (g, s: the head's row 0) into fp32
// [64][ld_f<MT>] tiles, zeros (not read) for rows outside [0, T) and past the M slots; t0 may be negative
// (the shifted stream: t0 and T less the shift). Then sB holds b, the inclusive cumsum of g over the
// chunk's n = min(64, T - t0) rows (padded rows repeat the last valid one), and, for m < MT: sLo[m],
// sHi[m] the least and largest of 0 and b over those rows (both optional). NTHREADS threads take part;
// ends with a barrier, which also tells every thread whether each slot's decay range sHi - sLo is at most
// kRefRange (gsa.md 4.1 rule 3, the returned value; true without sLo): every thread reading all MT ranges
// after the barrier took a tenth of B1's time (ncu, gsa 4k).
// The sum runs in kGateQuarters row quarters of a column at once, each quarter then adding the sums of those
// before it: one 64-row chain a column kept the other warps at the barrier for ~2000 cycles a chunk (B3,
// ncu). The quarters are the same in every kernel, so forward and backward form the same bits. scratch:
// gate_scratch_floats<MT>(sLo) floats of shared memory no one else reads meanwhile.
// copied: the tiles are in place already (copy_gates_async's copies, landed and waited for), only summed.
constexpr int kGateQuarters = 4;
template <int MT>
__host__ __device__ constexpr int gate_scratch_floats(bool range) {
  return (range ? 3 : 1) * kGateQuarters * MT;
}
template <int MT, int NTHREADS = kThreads>
__device__ __forceinline__ bool load_gates(const float* g, const float* s, int64_t row_stride, int t0, int T, int M,
                                           float* sB, float* sS, float* sLo, float* sHi, float* scratch,
                                           bool copied = false) {
  constexpr int kIters = kC * MT / NTHREADS, kLdF = ld_f<MT>;
  static_assert(kIters % kLoadBatch == 0, "whole batches");
  const int n = min(kC, T - t0);
  for (int i0 = 0; i0 < kIters && !copied; i0 += kLoadBatch) {
    float gv[kLoadBatch], sv[kLoadBatch];
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int x = (i0 + u) * NTHREADS + threadIdx.x, r = x / MT, m = x % MT;
      const bool in = t0 + r >= 0 && r < n && m < M;
      gv[u] = in ? g[int64_t(t0 + r) * row_stride + m] : 0.f;
      sv[u] = in ? s[int64_t(t0 + r) * row_stride + m] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int x = (i0 + u) * NTHREADS + threadIdx.x, r = x / MT, m = x % MT;
      sB[r * kLdF + m] = gv[u];
      sS[r * kLdF + m] = sv[u];
    }
  }
  __syncthreads();
  // Item x: slot m = x % MT, rows q kRows .. + kRows - 1 for q = x / MT. scratch: each item's sum, least
  // and largest partial sum over the chunk's rows (with sLo).
  constexpr int kRows = kC / kGateQuarters, kItems = kGateQuarters * MT;
  for (int x = threadIdx.x; x < kItems; x += NTHREADS) {
    const int m = x % MT, r0 = x / MT * kRows;
    float acc = 0.f, lo = INFINITY, hi = -INFINITY;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      acc += sB[(r0 + i) * kLdF + m];
      sB[(r0 + i) * kLdF + m] = acc;
      if (r0 + i < n) lo = fminf(lo, acc), hi = fmaxf(hi, acc);
    }
    scratch[x] = acc;
    if (sLo) scratch[kItems + x] = lo, scratch[2 * kItems + x] = hi;
  }
  __syncthreads();
  bool within = true;
  for (int x = threadIdx.x; x < kItems; x += NTHREADS) {
    const int m = x % MT, q = x / MT, r0 = q * kRows;
    float off = 0.f;
    for (int p = 0; p < q; ++p) off += scratch[p * MT + m];
    if (q > 0)
#pragma unroll
      for (int i = 0; i < kRows; ++i) sB[(r0 + i) * kLdF + m] += off;
    if (sLo && q == 0) {  // the quarters' extremes moved by the same offsets (rounding is monotonic)
      float lo = 0.f, hi = 0.f, o = 0.f;
      for (int p = 0; p < kGateQuarters; ++p) {
        lo = fminf(lo, o + scratch[kItems + p * MT + m]);
        hi = fmaxf(hi, o + scratch[2 * kItems + p * MT + m]);
        o += scratch[p * MT + m];
      }
      sLo[m] = lo, sHi[m] = hi, within = hi - lo <= kRefRange;
    }
  }
  return __syncthreads_and(within);
}

// Whether the gate rows (M floats) split into the 16-byte pieces of copy_gates_async.
__host__ __device__ inline bool gates_async(int M) { return M % 4 == 0; }

// load_gates' loads as 16-byte cp.async copies, in the caller's group (zeros where load_gates writes them):
// every row is in flight at once, where load_gates' register batches wait for memory one after another
// (two to four times a chunk at 128 threads). Then load_gates(..., copied = true) once the group has landed.
template <int MT, int NTHREADS = kThreads>
__device__ __forceinline__ void copy_gates_async(const float* g, const float* s, int64_t row_stride, int t0, int T,
                                                 int M, float* sB, float* sS) {
  constexpr int kVec = MT / 4, kIters = kC * kVec / NTHREADS, kLdF = ld_f<MT>;
  static_assert(kC * kVec % NTHREADS == 0, "the tile splits evenly over the threads");
  const int n = min(kC, T - t0);
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int x = it * NTHREADS + threadIdx.x, r = x / kVec, c4 = (x % kVec) * 4;
    const bool ok = t0 + r >= 0 && r < n && c4 < M;
    const int64_t off = ok ? int64_t(t0 + r) * row_stride + c4 : 0;
    flash::cp_async16(flash::smem_u32(sB + r * kLdF + c4), g + off, ok);
    flash::cp_async16(flash::smem_u32(sS + r * kLdF + c4), s + off, ok);
  }
}

// A bf16 R x Cc matrix (row-major) in registers, NTHREADS threads holding eight adjacent elements an item:
// fetch issues every load at once, early (before the gates are summed, say), and store writes the bf16
// [RT][CT] tile of row stride ld, times colscale[c] or rowscale[r] when given; zeros outside R x Cc.
// Items are 16-byte loads where rows split into them (Cc % 8 == 0, src 16-byte aligned), else element by
// element: pairs of 4 bytes took four times the loads and their address arithmetic, a tenth of B1's
// instructions (ncu, gsa 4k).
template <int RT, int CT, int NTHREADS = kThreads>
struct StateRegs {
  static constexpr int kIters = RT * CT / 8 / NTHREADS;
  static_assert(RT * CT / 8 % NTHREADS == 0, "the tile splits evenly over the threads");
  uint4 v[kIters];  // the item, packed as in memory
  __device__ __forceinline__ void fetch(const bf16x* src, int R, int Cc) {
    const bool vec = Cc % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
#pragma unroll
    for (int u = 0; u < kIters; ++u) {
      const int x = u * NTHREADS + threadIdx.x, r = x / (CT / 8), c = (x % (CT / 8)) * 8;
      const bf16x* p = src + int64_t(r) * Cc + c;
      if (vec && r < R && c < Cc) {
        v[u] = *reinterpret_cast<const uint4*>(p);
      } else {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          w[i] = (r < R && c + 2 * i < Cc ? uint32_t(__bfloat16_as_ushort(p[2 * i])) : 0u) |
                 (r < R && c + 2 * i + 1 < Cc ? uint32_t(__bfloat16_as_ushort(p[2 * i + 1])) << 16 : 0u);
        v[u] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }
  __device__ __forceinline__ void store(bf16x* s, int ld, const float* rowscale, const float* colscale) const {
#pragma unroll
    for (int u = 0; u < kIters; ++u) {
      const int x = u * NTHREADS + threadIdx.x, r = x / (CT / 8), c = (x % (CT / 8)) * 8;
      uint32_t w[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      if (rowscale || colscale) {
        const float f = rowscale ? rowscale[r] : 1.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float f0 = colscale ? colscale[c + 2 * i] : 1.f, f1 = colscale ? colscale[c + 2 * i + 1] : 1.f;
          w[i] = pack_bf16(bf16x2_lo(w[i]) * f0 * f, bf16x2_hi(w[i]) * f1 * f);
        }
      }
      *reinterpret_cast<uint4*>(s + r * ld + c) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
};

// StateRegs' fetch and store at once, kLoadBatch items a thread at a time.
template <int RT, int CT, int NTHREADS = kThreads>
__device__ __forceinline__ void load_state(bf16x* s, int ld, const bf16x* src, int R, int Cc, const float* rowscale,
                                           const float* colscale) {
  constexpr int kRows = 8 * kLoadBatch * NTHREADS / CT < RT ? 8 * kLoadBatch * NTHREADS / CT : RT;
  for (int r0 = 0; r0 < RT; r0 += kRows) {
    StateRegs<kRows, CT, NTHREADS> x;
    x.fetch(src + int64_t(r0) * Cc, R - r0, Cc);
    x.store(s + r0 * ld, ld, rowscale ? rowscale + r0 : nullptr, colscale);
  }
}

// Two adjacent fp32 values to the elements col, col + 1 of a bf16 row of n elements in global memory,
// those at or past n skipped; col is even, and an even n keeps the pair 4-byte aligned.
__device__ __forceinline__ void store_pair(bf16x* row, int col, int n, float x0, float x1) {
  if (n % 2 == 0) {
    if (col < n) *reinterpret_cast<uint32_t*>(row + col) = pack_bf16(x0, x1);
  } else {
    if (col < n) row[col] = __float2bfloat16_rn(x0);
    if (col + 1 < n) row[col + 1] = __float2bfloat16_rn(x1);
  }
}

// The warp's score columns n0 .. n0 + 8 NT of rows m0 .. m0 + 15 as bf16 pairs: f acc for col <= row, else 0.
// Packed in registers, a fragment can wait out a barrier before it goes over a tile others still read.
template <int NT>
struct TrilFrag {
  uint32_t w[NT][2];
  __device__ __forceinline__ void pack(const float (&acc)[1][NT][4], float f, int m0, int n0, int lane) {
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      const int r0 = m0 + frag_row(lane, 0), col = n0 + ni * 8 + frag_col(lane, 0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h;
        w[ni][h] = pack_bf16(col <= r ? f * acc[0][ni][2 * h] : 0.f, col + 1 <= r ? f * acc[0][ni][2 * h + 1] : 0.f);
      }
    }
  }
  __device__ __forceinline__ void store(bf16x* s, int ld, int m0, int n0, int lane) const {
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(s + (m0 + frag_row(lane, 0) + 8 * h) * ld + n0 + ni * 8 + frag_col(lane, 0)) =
            w[ni][h];
  }
};

template <int NT>
__device__ __forceinline__ void store_tril(bf16x* s, int ld, const float (&acc)[1][NT][4], float f, int m0, int n0,
                                           int lane) {
  TrilFrag<NT> t;
  t.pack(acc, f, m0, n0, lane);
  t.store(s, ld, m0, n0, lane);
}

// The warp's slot fragment (slots n0 .. n0 + 8 NT) times f(row, slot) to its rows of a bf16 tile.
template <int NT, class F>
__device__ __forceinline__ void store_slots(bf16x* s, int ld, const float (&acc)[1][NT][4], int m0, int n0, int lane,
                                            F f) {
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + frag_row(lane, 2 * h), col = n0 + ni * 8 + frag_col(lane, 0);
      *reinterpret_cast<uint32_t*>(s + r * ld + col) =
          pack_bf16(acc[0][ni][2 * h] * f(r, col), acc[0][ni][2 * h + 1] * f(r, col + 1));
    }
}

template <int MT, int NT>
__device__ __forceinline__ void scale_rows(float (&acc)[1][NT][4], int m0, int lane, const float* sB, const float* ref,
                                           float f) {
  constexpr int kLdF = ld_f<MT>;
#pragma unroll
  for (int ni = 0; ni < NT; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + frag_row(lane, e), m = ni * 8 + frag_col(lane, e);
      acc[0][ni][e] *= f * exp_ftz(sB[r * kLdF + m] - (ref ? ref[m] : 0.f));
    }
}

struct States {
  Tensor Hk, Hv;  // (B, Hkv, NC + 1, K, M), (B, Hkv, NC + 1, M, V) bf16
  Tensor decay;   // (B, Hkv, NC, M) f32
};
// F1 and the chunk scan: every chunk-start memory, and the final ones in fp32 into Hk_last, Hv_last (B,
// Hkv, K, M), (B, Hkv, M, V) when they are defined. k, v: rows16 bf16; s, g, Hk0, Hv0: contiguous f32 (the
// initial memories may be undefined: zeros).
States forward_states(const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& g, const Tensor& Hk0,
                      const Tensor& Hv0, const Dims& d, cudaStream_t stream, const Tensor& Hk_last = Tensor(),
                      const Tensor& Hv_last = Tensor());

// The inputs of the output kernel F2. With a window (nha, window >= 1): the slot side (k, v, s, g) is read
// as the stream shifted by Dims::shift, and the window keys of query t are t - window < j <= t, read from
// qr, kr (RoPE'd or not) and vw (the unshifted v), their logits scale <qr_t, kr_j> + bias[h, t - j] in the
// slots' softmax; window <= kC.
struct ForwardArgs {
  const bf16x *q, *k, *v;
  const float *s, *g;
  const bf16x *Hk, *Hv;  // states (B Hkv, NC + 1, K, M), (B Hkv, NC + 1, M, V): slot c = the chunk start
  bf16x* o;
  float* lse;
  float scale;
  const bf16x *qr = nullptr, *kr = nullptr, *vw = nullptr, *bias = nullptr;  // bias (Hq, nb) or null
  int window = 0, nb = 0;
};
// F2 over every (chunk, query head); a.window > 0 takes the windowed instantiation.
void forward_output(const ForwardArgs& a, const Dims& d, cudaStream_t stream);
// Shared memory of F1 and of F2 without or with the window (at its widest, kC) at these head dims and slot
// count.
size_t forward_smem_bytes(int64_t K, int64_t V, int64_t M, bool window);

// The chunk scan over bf16 states (B Hkv, NC + 1, rows, cols) with slot-wise factors decay, in fp32
// registers: forward, slot 0 = init, slot c + 1 += decay_c slot c; reverse, slot NC = init, slot c +=
// decay_c slot c + 1. slot_rows: the memory is Hv (M x V, decay along the rows), else Hk (K x M, along the
// columns). init (B Hkv, rows, cols) f32 or undefined (zeros); last, when defined, gets the final sum in
// f32 (the final memory, or the initial memory's gradient).
void state_scan(const Tensor& states, const Tensor& decay, const Dims& d, bool slot_rows, bool reverse,
                const Tensor& init, const Tensor& last, cudaStream_t stream);

// Shared memory of the backward kernel (gsa_fused_backward.cu) at these head dims and slot count.
size_t backward_smem_bytes(int64_t K, int64_t V, int64_t M);

}  // namespace hyb::gsa_fused
