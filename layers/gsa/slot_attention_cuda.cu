// CUDA kernels of the slot-memory attention shared by gsa and nha (slot_attention_cuda.h). The rows
// of both run chunk kernels, one block per (b, query head, tile of 64 queries) with the tile's
// operands in shared memory (docs/layers/gsa.md 5, docs/layers/nha.md 1): the slot logits from the
// chunked memory and NHA's window logits share one softmax; the window's key and value gradients
// come from a key-major kernel. Shapes too large for those tiles run the first kernels, plain fp32
// SIMT with one block per query row. The memory side (state scans, write-side gradients) is chunked
// for both. Memory X (P x M per (b, kv head)): X1 = Hk (P = D, x = k), X2 = Hv^T (P = Dv, x = v).
// Absorbed tokens u = 0 .. Tm - 1 (Tm = T - shift) are cut into chunks of C = kScanChunk; query t
// reads X after token u = t - shift (the initial memory while u < 0).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/chunk_view.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "layers/gsa/slot_attention_cuda.h"
#include "layers/gsa/slot_chunk_tiles.cuh"

namespace hyb {
namespace {

constexpr int C = kScanChunk;
constexpr int kRowThreads = 128;  // threads of a query-row block; also the window keys per online-softmax step
constexpr int kStateThreads = 256;

struct Sizes {
  int64_t B, T, Hq, Hkv, G, D, Dv, M;
  int64_t Tm, NC;  // absorbed tokens and their chunks
  int64_t window, shift, nb;
  int64_t S0, NI, NQ;  // queries that read the initial memory (all of them without slots), their tiles, all tiles
};

Sizes sizes_of(const SlotAttentionArgs& a) {
  Sizes z;
  z.B = a.q.size(0), z.T = a.q.size(1), z.Hq = a.q.size(2), z.D = a.q.size(3);
  z.Hkv = a.k.size(2), z.Dv = a.v.size(3), z.G = z.Hq / z.Hkv;
  z.M = a.s.defined() ? a.s.size(3) : 0;
  z.window = a.window, z.shift = a.shift;
  z.Tm = std::max<int64_t>(z.T - z.shift, 0);
  z.NC = (z.Tm + C - 1) / C;
  z.nb = a.bias.defined() ? a.bias.size(1) : 0;
  z.S0 = z.M > 0 ? std::min(z.shift, z.T) : z.T;
  z.NI = (z.S0 + C - 1) / C;
  z.NQ = z.NI + (z.M > 0 ? z.NC : 0);
  return z;
}

float* fptr(const Tensor& t) { return t.defined() && t.numel() > 0 ? t.data<float>() : nullptr; }
template <typename E>
const E* eptr(const Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.data<E>() : nullptr;
}

// The memory a query row reads: chunk-start state slot c and row i of chunk c (i = -1: the initial
// memory, slot 0, undecayed).
struct RowMem {
  int64_t b, j, c;
  int i;
};

__device__ RowMem row_mem(int64_t b, int64_t j, int64_t t, int64_t shift) {
  const int64_t u = t - shift;
  if (u < 0) return {b, j, 0, -1};
  return {b, j, u / C, int(u % C)};
}

__device__ __forceinline__ int64_t tok(const Sizes& z, int64_t b, int64_t t, int64_t head, int64_t heads) {
  return (b * z.T + t) * heads + head;
}

// out[m] = alpha (X_u^T y)[m] in the chunk form of gsa.md 4.2: the chunk-start state decayed by
// exp(b_i) plus the chunk's tokens jj <= i, each with exp(b_i - b_jj) (never a positive exponent for
// g <= 0). y: P floats in shared memory; dots: C floats of shared scratch.
template <typename E>
__device__ void read_slots(const Sizes& z, const float* XS, const float* bc, const E* x, const float* s, int P,
                           const RowMem& r, const float* y, float* dots, float* out, float alpha) {
  const int M = int(z.M);
  const float* Xc = XS + ((r.b * z.Hkv + r.j) * (z.NC + 1) + r.c) * P * M;
  const float* bz = r.i >= 0 ? bc + ((r.b * z.Hkv + r.j) * z.NC + r.c) * C * M : nullptr;
  const int64_t tok0 = r.c * C;
  __syncthreads();  // y may have just been written
  for (int jj = threadIdx.x; jj <= r.i; jj += blockDim.x) {
    const E* xr = x + tok(z, r.b, tok0 + jj, r.j, z.Hkv) * P;
    float acc = 0.f;
    for (int p = 0; p < P; ++p) acc += to_f32(xr[p]) * y[p];
    dots[jj] = acc;
  }
  __syncthreads();
  for (int m = threadIdx.x; m < M; m += blockDim.x) {
    float acc = 0.f;
    for (int p = 0; p < P; ++p) acc += Xc[int64_t(p) * M + m] * y[p];
    if (r.i >= 0) {
      const float bi = bz[r.i * M + m];
      acc *= expf(bi);
      for (int jj = 0; jj <= r.i; ++jj)
        acc += dots[jj] * s[tok(z, r.b, tok0 + jj, r.j, z.Hkv) * M + m] * expf(bi - bz[jj * M + m]);
    }
    out[m] = alpha * acc;
  }
  __syncthreads();
}

// out[p] = alpha (X_u w)[p] (+ out[p] when accumulate). w: M floats in shared memory; wd (M) and
// coef (C) are shared scratch.
template <typename E>
__device__ void read_features(const Sizes& z, const float* XS, const float* bc, const E* x, const float* s, int P,
                              const RowMem& r, const float* w, float* wd, float* coef, float* out, float alpha,
                              bool accumulate) {
  const int M = int(z.M);
  const float* Xc = XS + ((r.b * z.Hkv + r.j) * (z.NC + 1) + r.c) * P * M;
  const float* bz = r.i >= 0 ? bc + ((r.b * z.Hkv + r.j) * z.NC + r.c) * C * M : nullptr;
  const int64_t tok0 = r.c * C;
  __syncthreads();  // w may have just been written
  for (int m = threadIdx.x; m < M; m += blockDim.x) wd[m] = r.i >= 0 ? expf(bz[r.i * M + m]) * w[m] : w[m];
  for (int jj = threadIdx.x; jj <= r.i; jj += blockDim.x) {
    const float* sr = s + tok(z, r.b, tok0 + jj, r.j, z.Hkv) * M;
    float acc = 0.f;
    for (int m = 0; m < M; ++m) acc += sr[m] * expf(bz[r.i * M + m] - bz[jj * M + m]) * w[m];
    coef[jj] = acc;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    float acc = 0.f;
    for (int m = 0; m < M; ++m) acc += Xc[int64_t(p) * M + m] * wd[m];
    for (int jj = 0; jj <= r.i; ++jj) acc += to_f32(x[tok(z, r.b, tok0 + jj, r.j, z.Hkv) * P + p]) * coef[jj];
    out[p] = accumulate ? out[p] + alpha * acc : alpha * acc;
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Memory side: chunk-local cumsum, chunk-start states, their reverse scan, per-chunk gradients
// ---------------------------------------------------------------------------------------------

// bc[b, j, c, i, m] = g summed over the rows 0..i of chunk c (fp32; padded rows repeat the last
// valid value). Grid: one block per (b, j, c).
__global__ void cumsum_kernel(Sizes z, const float* __restrict__ g, float* __restrict__ bc) {
  const int64_t blk = blockIdx.x, c = blk % z.NC, bj = blk / z.NC, b = bj / z.Hkv, j = bj % z.Hkv;
  const int n = chunk_tokens(c, z.Tm), M = int(z.M);
  for (int m = threadIdx.x; m < M; m += blockDim.x) {
    float acc = 0.f;
#pragma unroll 16  // the loads do not depend on the running sum: keep 16 in flight
    for (int i = 0; i < C; ++i) {
      if (i < n) acc += g[tok(z, b, c * C + i, j, z.Hkv) * M + m];
      bc[(blk * C + i) * M + m] = acc;
    }
  }
}

// XS[b, j, c] = X at the start of chunk c, XS[b, j, NC] the final memory (4.2 state scan):
//   X <- X .*c exp(bl) + sum_i outer(x_i, s_i .* exp(bl - b_i)).
// X0 is (P, M) or, slot_major, (M, P). Grid: (B Hkv, tiles of P M); one thread per element.
template <typename E>
__global__ void state_kernel(Sizes z, int P, const E* __restrict__ x, const float* __restrict__ s,
                             const float* __restrict__ bc, const float* __restrict__ X0, bool slot_major,
                             float* __restrict__ XS) {
  const int M = int(z.M);
  const int64_t bj = blockIdx.x, b = bj / z.Hkv, j = bj % z.Hkv;
  const int64_t e = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (e >= int64_t(P) * M) return;
  const int p = int(e / M), m = int(e % M);
  float X = X0 ? X0[bj * P * M + (slot_major ? int64_t(m) * P + p : e)] : 0.f;
  for (int64_t c = 0; c < z.NC; ++c) {
    XS[(bj * (z.NC + 1) + c) * P * M + e] = X;
    const int n = chunk_tokens(c, z.Tm);
    const float* bz = bc + (bj * z.NC + c) * C * M;
    const float bl = bz[(n - 1) * M + m];
    float acc = X * expf(bl);
    for (int i = 0; i < n; ++i) {
      const int64_t u = tok(z, b, c * C + i, j, z.Hkv);
      acc += to_f32(x[u * P + p]) * s[u * M + m] * expf(bl - bz[i * M + m]);
    }
    X = acc;
  }
  XS[(bj * (z.NC + 1) + z.NC) * P * M + e] = X;
}

// out (B, Hkv, P, M) or, slot_major, (B, Hkv, M, P) from state slot NC.
__global__ void final_state_kernel(Sizes z, int P, const float* __restrict__ XS, bool slot_major,
                                   float* __restrict__ out) {
  const int M = int(z.M);
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= z.B * z.Hkv * P * M) return;
  const int64_t bj = e / (int64_t(P) * M), pm = e % (int64_t(P) * M);
  const int p = int(pm / M), m = int(pm % M);
  out[bj * P * M + (slot_major ? int64_t(m) * P + p : pm)] = XS[(bj * (z.NC + 1) + z.NC) * P * M + pm];
}

// Adjoints of X at every chunk end, excluding the reads inside that chunk (dXE, 4.3's dHkE/dHvE):
//   dXE[NC-1] = dX_T;   dXE[c-1] = dXE[c] .*c exp(bl_c) + sum_{rows i of c} L_i .*c exp(b_i)
// with L_i = sum_h outer(yscale y_h, w_h) at query t = cC + i + shift; then the rows t < shift,
// which read the initial memory, add theirs, and the result is dX0. Grid: (B Hkv, tiles of P M).
template <typename E>
__global__ void reverse_scan_kernel(Sizes z, int P, const E* __restrict__ y, float yscale, const float* __restrict__ w,
                                    const float* __restrict__ bc, const float* __restrict__ dXT, bool slot_major,
                                    float* __restrict__ dXE, float* __restrict__ dX0) {
  const int M = int(z.M);
  const int64_t bj = blockIdx.x, b = bj / z.Hkv, j = bj % z.Hkv;
  const int64_t e = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (e >= int64_t(P) * M) return;
  const int p = int(e / M), m = int(e % M);
  const int64_t ext = slot_major ? int64_t(m) * P + p : e;
  float dX = dXT ? dXT[bj * P * M + ext] : 0.f;
  auto reads = [&](int64_t t) {  // sum over the group of y[p] w[m] at query t
    float acc = 0.f;
    for (int64_t h = j * z.G; h < (j + 1) * z.G; ++h) {
      const int64_t row = tok(z, b, t, h, z.Hq);
      acc += to_f32(y[row * P + p]) * w[row * M + m];
    }
    return yscale * acc;
  };
  for (int64_t c = z.NC - 1; c >= 0; --c) {
    dXE[(bj * z.NC + c) * P * M + e] = dX;
    const int n = chunk_tokens(c, z.Tm);
    const float* bz = bc + (bj * z.NC + c) * C * M;
    float inc = 0.f;
    for (int i = 0; i < n; ++i) inc += reads(c * C + i + z.shift) * expf(bz[i * M + m]);
    dX = dX * expf(bz[(n - 1) * M + m]) + inc;
  }
  for (int64_t t = 0; t < std::min(z.shift, z.T); ++t) dX += reads(t);
  if (dX0) dX0[bj * P * M + ext] = dX;
}

// Gradients through the writes of chunk c (4.3, generic pass), one block per (b, j, c); row u of the
// chunk in turn, with G_u = dXE .*c exp(bl - b_u) + sum_{rows i >= u} L_i .*c exp(b_i - b_u):
//   dx_u += G_u s_u;   ds_u += G_u^T x_u;   dB_u += RB_u (summed over the group) - s_u .* (G_u^T x_u)
//   tail[m] += sum_p XE[p, m] dXE[p, m]      (XE = the state at the chunk end)
// Shared: dots and coef (C G floats each), rem (M).
template <typename E>
__global__ void grad_chunk_kernel(Sizes z, int P, const E* __restrict__ x, const E* __restrict__ y, float yscale,
                                  const float* __restrict__ w, const float* __restrict__ RB,
                                  const float* __restrict__ s, const float* __restrict__ bc,
                                  const float* __restrict__ XS, const float* __restrict__ dXE, float* __restrict__ dx,
                                  float* __restrict__ ds, float* __restrict__ dB, float* __restrict__ tail) {
  extern __shared__ float sm[];
  const int M = int(z.M), G = int(z.G);
  float* dots = sm;           // C G: yscale y_(i,h) . x_u
  float* coef = dots + C * G;  // C G: sum_m w_(i,h)[m] exp(b_i - b_u)[m] s_u[m]
  float* rem = coef + C * G;   // M: exp(bl - b_u)
  const int64_t blk = blockIdx.x, c = blk % z.NC, bj = blk / z.NC, b = bj / z.Hkv, j = bj % z.Hkv;
  const int n = chunk_tokens(c, z.Tm);
  const float* bz = bc + blk * C * M;
  const float* dXc = dXE + blk * P * M;
  const float* XE = XS + (bj * (z.NC + 1) + c + 1) * P * M;
  for (int m = threadIdx.x; m < M; m += blockDim.x) {
    float acc = 0.f;
    for (int p = 0; p < P; ++p) acc += XE[int64_t(p) * M + m] * dXc[int64_t(p) * M + m];
    tail[blk * M + m] += acc;
  }
  for (int ui = 0; ui < n; ++ui) {
    const int64_t u = tok(z, b, c * C + ui, j, z.Hkv);
    const E* xu = x + u * P;
    const float* su = s + u * M;
    const int nq = (n - ui) * G;
    for (int idx = threadIdx.x; idx < nq; idx += blockDim.x) {
      const int ti = ui + idx / G;
      const int64_t row = tok(z, b, c * C + ti + z.shift, j * G + idx % G, z.Hq);
      const E* yr = y + row * P;
      float d = 0.f;
      for (int p = 0; p < P; ++p) d += to_f32(yr[p]) * to_f32(xu[p]);
      dots[idx] = yscale * d;
      const float* wr = w + row * M;
      float cf = 0.f;
      for (int m = 0; m < M; ++m) cf += wr[m] * expf(bz[ti * M + m] - bz[ui * M + m]) * su[m];
      coef[idx] = cf;
    }
    for (int m = threadIdx.x; m < M; m += blockDim.x) rem[m] = expf(bz[(n - 1) * M + m] - bz[ui * M + m]);
    __syncthreads();
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
      float acc = 0.f;
      for (int m = 0; m < M; ++m) acc += dXc[int64_t(p) * M + m] * rem[m] * su[m];
      for (int idx = 0; idx < nq; ++idx) {
        const int64_t row = tok(z, b, c * C + ui + idx / G + z.shift, j * G + idx % G, z.Hq);
        acc += yscale * to_f32(y[row * P + p]) * coef[idx];
      }
      dx[u * P + p] += acc;
    }
    for (int m = threadIdx.x; m < M; m += blockDim.x) {
      float acc = 0.f;
      for (int p = 0; p < P; ++p) acc += dXc[int64_t(p) * M + m] * to_f32(xu[p]);
      acc *= rem[m];
      for (int idx = 0; idx < nq; ++idx) {
        const int ti = ui + idx / G;
        const int64_t row = tok(z, b, c * C + ti + z.shift, j * G + idx % G, z.Hq);
        acc += dots[idx] * w[row * M + m] * expf(bz[ti * M + m] - bz[ui * M + m]);
      }
      float rb = 0.f;
      if (RB)
        for (int h = 0; h < G; ++h) rb += RB[tok(z, b, c * C + ui + z.shift, j * G + h, z.Hq) * M + m];
      ds[u * M + m] += acc;
      dB[u * M + m] += rb - su[m] * acc;
    }
    __syncthreads();  // dots, coef and rem are rewritten for the next row
  }
}

// dg_u = sum of dB over the rows u' >= u of the chunk + tail (4.3). One block per (b, j, c).
__global__ void gate_grad_kernel(Sizes z, const float* __restrict__ dB, const float* __restrict__ tail,
                                 float* __restrict__ dg) {
  const int64_t blk = blockIdx.x, c = blk % z.NC, bj = blk / z.NC, b = bj / z.Hkv, j = bj % z.Hkv;
  const int n = chunk_tokens(c, z.Tm), M = int(z.M);
  for (int m = threadIdx.x; m < M; m += blockDim.x) {
    float acc = tail[blk * M + m];
#pragma unroll 16
    for (int i = n - 1; i >= 0; --i) {
      const int64_t u = tok(z, b, c * C + i, j, z.Hkv);
      acc += dB[u * M + m];
      dg[u * M + m] = acc;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Query rows, one block per query: the joint softmax over the slots and the window (the fallback)
// ---------------------------------------------------------------------------------------------

struct RowInputs {
  const void *q, *k, *v, *qr, *kr, *bias;
  const float *s, *X1S, *X2S, *bc;
  float scale;
};

// Whether query t sees key `key` through the window (nha.md 2.3: the window keys counting t itself).
__device__ __forceinline__ bool in_window(const Sizes& z, int64_t t, int64_t key) {
  return key <= t && t - key < z.window;
}

// Logit of window pair (t, key) from dot = <qr_t, kr_key>: scale dot + bias[h, t - key].
template <typename E>
__device__ __forceinline__ float window_score(const Sizes& z, const RowInputs& in, int64_t h, int64_t t, int64_t key,
                                              float dot) {
  const E* bias = static_cast<const E*>(in.bias);
  return in.scale * dot + (bias ? to_f32(bias[h * z.nb + (t - key)]) : 0.f);
}

// Logit of window key `key` for query row (b, t, h).
template <typename E>
__device__ float window_logit(const Sizes& z, const RowInputs& in, const float* qrv, int64_t b, int64_t t, int64_t h,
                              int64_t j, int64_t key) {
  const E* kk = static_cast<const E*>(in.kr) + tok(z, b, key, j, z.Hkv) * z.D;
  float d = 0.f;
  for (int p = 0; p < z.D; ++p) d += qrv[p] * to_f32(kk[p]);
  return window_score<E>(z, in, h, t, key, d);
}

// One block of kRowThreads per query row (b, t, h): slot logits, then the window keys kRowThreads at
// a time with an online softmax (running max, rescaled sum and output); o, lse and the slot share.
// Shared: qv, qrv (D), zs, wd (M), dots (C), acc (Dv), rt (kRowThreads).
template <typename E>
__global__ void __launch_bounds__(kRowThreads) forward_row_kernel(Sizes z, RowInputs in, E* __restrict__ o,
                                                                  float* __restrict__ lse, float* __restrict__ ratio) {
  extern __shared__ float sm[];
  float* qv = sm;
  float* qrv = qv + z.D;
  float* zs = qrv + z.D;
  float* wd = zs + z.M;
  float* dots = wd + z.M;
  float* acc = dots + C;
  float* rt = acc + z.Dv;
  const int64_t row = blockIdx.x, h = row % z.Hq, t = (row / z.Hq) % z.T, b = row / z.Hq / z.T, j = h / z.G;
  const int tid = threadIdx.x;
  const E* q = static_cast<const E*>(in.q);
  const E* qr = static_cast<const E*>(in.qr);
  const E* v = static_cast<const E*>(in.v);
  for (int p = tid; p < z.D; p += kRowThreads) {
    qv[p] = to_f32(q[row * z.D + p]);
    qrv[p] = z.window > 0 ? to_f32(qr[row * z.D + p]) : 0.f;
  }
  for (int p = tid; p < z.Dv; p += kRowThreads) acc[p] = 0.f;
  float mx = -INFINITY, l = 0.f, lslot = 0.f;
  if (z.M > 0) {
    const RowMem r = row_mem(b, j, t, z.shift);
    read_slots(z, in.X1S, in.bc, static_cast<const E*>(in.k), in.s, int(z.D), r, qv, dots, zs, in.scale);
    float lm = -INFINITY;
    for (int m = tid; m < z.M; m += kRowThreads) lm = fmaxf(lm, zs[m]);
    mx = block_reduce_max(lm);
    float ls = 0.f;
    for (int m = tid; m < z.M; m += kRowThreads) {
      const float e = expf(zs[m] - mx);
      zs[m] = e;
      ls += e;
    }
    lslot = block_reduce_sum(ls);
    l = lslot;
    read_features(z, in.X2S, in.bc, v, in.s, int(z.Dv), r, zs, wd, dots, acc, 1.f, false);
  }
  if (z.window > 0) {
    __syncthreads();  // qrv
    const int64_t j0 = std::max<int64_t>(0, t - z.window + 1);
    for (int64_t t0 = j0; t0 <= t; t0 += kRowThreads) {
      const int64_t key = t0 + tid;
      const float x = key <= t ? window_logit<E>(z, in, qrv, b, t, h, j, key) : -INFINITY;
      const float mnew = fmaxf(mx, block_reduce_max(x));  // finite: the tile holds at least one key
      const float alpha = mx == -INFINITY ? 0.f : expf(mx - mnew);
      const float e = key <= t ? expf(x - mnew) : 0.f;
      rt[tid] = e;
      l = l * alpha + block_reduce_sum(e);  // its leading barrier also publishes rt
      lslot *= alpha;
      mx = mnew;
      const int nk = int(std::min<int64_t>(kRowThreads, t - t0 + 1));
      for (int p = tid; p < z.Dv; p += kRowThreads) {
        float a = acc[p] * alpha;
        for (int kk = 0; kk < nk; ++kk) a += rt[kk] * to_f32(v[tok(z, b, t0 + kk, j, z.Hkv) * z.Dv + p]);
        acc[p] = a;
      }
      __syncthreads();  // rt is rewritten by the next tile
    }
  }
  for (int p = tid; p < z.Dv; p += kRowThreads) o[row * z.Dv + p] = from_f32<E>(acc[p] / l);
  if (tid == 0) {
    lse[row] = mx + logf(l);
    if (ratio) ratio[row] = lslot / l;
  }
}

struct RowGrads {
  const void* dout;
  const float* lse;
  float *W1, *W2, *RB;      // (B, T, Hq, M): dZ, P, Z .* dZ + P .* dP
  float *dq, *dqr;          // (B, T, Hq, D): memory part, window part (rotated side)
  float *dkr, *dv, *dbias;  // window parts: atomics in the row kernel; dkr, dv key-major with the chunk kernels
  const void* o;            // chunk kernels with a window: the forward's output, (B, T, Hq, Dv)
  float* delta;             // chunk kernels with a window: (B, T, Hq) <dO, O> of every row, written by the rows
};

// One block per query row: rebuild the probabilities from lse, delta = sum p dp over slots and window,
// then dZ (and the memory-read adjoints), dq, and the window gradients. Shared: qv, qrv, dqw (D),
// dov (Dv), zs, dp, dz, wd (M), dots (C), rt, drt (kRowThreads).
template <typename E>
__global__ void __launch_bounds__(kRowThreads) backward_row_kernel(Sizes z, RowInputs in, RowGrads gr) {
  extern __shared__ float sm[];
  float* qv = sm;
  float* qrv = qv + z.D;
  float* dqw = qrv + z.D;
  float* dov = dqw + z.D;
  float* zs = dov + z.Dv;
  float* dp = zs + z.M;
  float* dz = dp + z.M;
  float* wd = dz + z.M;
  float* dots = wd + z.M;
  float* rt = dots + C;
  float* drt = rt + kRowThreads;
  const int64_t row = blockIdx.x, h = row % z.Hq, t = (row / z.Hq) % z.T, b = row / z.Hq / z.T, j = h / z.G;
  const int tid = threadIdx.x;
  const E* q = static_cast<const E*>(in.q);
  const E* qr = static_cast<const E*>(in.qr);
  const E* k = static_cast<const E*>(in.k);
  const E* v = static_cast<const E*>(in.v);
  const E* dout = static_cast<const E*>(gr.dout);
  for (int p = tid; p < z.D; p += kRowThreads) {
    qv[p] = to_f32(q[row * z.D + p]);
    qrv[p] = z.window > 0 ? to_f32(qr[row * z.D + p]) : 0.f;
    dqw[p] = 0.f;
  }
  for (int p = tid; p < z.Dv; p += kRowThreads) dov[p] = to_f32(dout[row * z.Dv + p]);
  const float L = gr.lse[row];
  float part = 0.f;  // this thread's share of delta = sum p dp
  const RowMem r = row_mem(b, j, t, z.shift);
  if (z.M > 0) {
    read_slots(z, in.X1S, in.bc, k, in.s, int(z.D), r, qv, dots, zs, in.scale);  // Z
    read_slots(z, in.X2S, in.bc, v, in.s, int(z.Dv), r, dov, dots, dp, 1.f);     // dP = Hv dO
    for (int m = tid; m < z.M; m += kRowThreads) part += expf(zs[m] - L) * dp[m];
  }
  const int64_t j0 = std::max<int64_t>(0, t - z.window + 1);
  // The window keys of a tile: probability r and dr = <v_key, dO>, one key per thread.
  auto window_key = [&](int64_t key, float& pr, float& dr) {
    pr = expf(window_logit<E>(z, in, qrv, b, t, h, j, key) - L);
    const E* vk = v + tok(z, b, key, j, z.Hkv) * z.Dv;
    dr = 0.f;
    for (int p = 0; p < z.Dv; ++p) dr += to_f32(vk[p]) * dov[p];
  };
  if (z.window > 0) {
    __syncthreads();  // qrv, dov
    for (int64_t t0 = j0; t0 <= t; t0 += kRowThreads) {
      const int64_t key = t0 + tid;
      if (key <= t) {
        float pr, dr;
        window_key(key, pr, dr);
        part += pr * dr;
      }
    }
  }
  const float delta = block_reduce_sum(part);
  if (z.M > 0) {
    for (int m = tid; m < z.M; m += kRowThreads) {
      const float P = expf(zs[m] - L), d = P * (dp[m] - delta);
      dz[m] = d;
      gr.W1[row * z.M + m] = d;
      gr.W2[row * z.M + m] = P;
      gr.RB[row * z.M + m] = zs[m] * d + P * dp[m];
    }
    float* dqm = gr.dq + row * z.D;
    read_features(z, in.X1S, in.bc, k, in.s, int(z.D), r, dz, wd, dots, dqm, in.scale, false);
  }
  if (z.window > 0) {
    const E* kr = static_cast<const E*>(in.kr);
    for (int64_t t0 = j0; t0 <= t; t0 += kRowThreads) {
      const int64_t key = t0 + tid;
      float pr = 0.f, db = 0.f;
      if (key <= t) {
        float dr;
        window_key(key, pr, dr);
        db = pr * (dr - delta);
        if (gr.dbias) atomicAdd(gr.dbias + h * z.nb + (t - key), db);
      }
      __syncthreads();  // the previous tile's readers of rt, drt are done
      rt[tid] = pr;
      drt[tid] = db;
      __syncthreads();
      const int nk = int(std::min<int64_t>(kRowThreads, t - t0 + 1));
      for (int p = tid; p < z.D; p += kRowThreads) {
        float a = 0.f;
        for (int kk = 0; kk < nk; ++kk) a += drt[kk] * to_f32(kr[tok(z, b, t0 + kk, j, z.Hkv) * z.D + p]);
        dqw[p] += in.scale * a;
      }
      for (int e = tid; e < nk * z.D; e += kRowThreads) {
        const int kk = e / int(z.D), p = e % int(z.D);
        atomicAdd(gr.dkr + tok(z, b, t0 + kk, j, z.Hkv) * z.D + p, in.scale * drt[kk] * qrv[p]);
      }
      for (int e = tid; e < nk * z.Dv; e += kRowThreads) {
        const int kk = e / int(z.Dv), p = e % int(z.Dv);
        atomicAdd(gr.dv + tok(z, b, t0 + kk, j, z.Hkv) * z.Dv + p, rt[kk] * dov[p]);
      }
    }
    for (int p = tid; p < z.D; p += kRowThreads) gr.dqr[row * z.D + p] = dqw[p];
  }
}
// ---------------------------------------------------------------------------------------------
// Chunk kernels (gsa.md 4.2, 4.3; nha.md 5): one block per (b, query head, query tile) for the rows,
// one per (b, kv head, key tile) for the window's key side and one per (b, kv head, chunk) for the
// writes of either family. Every operand of a tile sits in shared memory in fp32; products run
// through slot_chunk_tiles.cuh.
// ---------------------------------------------------------------------------------------------

constexpr int kChunkThreads = 256;

// The bf16 kernels run their plain products on tensor cores (bf16 operands, fp32 accumulation, gsa.md
// 4.5); the f32 ones stay fp32 SIMT, so the f32 path keeps its agreement with the f64 reference. The
// products that build Z, dP and ds (kExact) use split bf16 operands on the bf16 path: the backward
// rebuilds P from Z and the forward's lse, and Z .* dZ + P .* dP - S .* ds feeds the gate gradient as a
// difference of similar terms (plain bf16 operands there tripled the dg error of the emulated bf16 path
// against the f32 kernels).
template <typename E>
constexpr Mma kFast = std::is_same_v<E, bf16> ? Mma::bf16 : Mma::simt;
template <typename E>
constexpr Mma kExact = std::is_same_v<E, bf16> ? Mma::bf16x3 : Mma::simt;

// Shared floats of a C-row tile with `cols` columns.
__host__ __device__ constexpr int64_t tile_floats(int64_t cols) { return int64_t(C) * smem_ld(int(cols)); }

// Calls f(row, col) for every element of a rows x cols tile: warps over rows, lanes over columns (no
// index division, and a warp reads a contiguous row of the source).
template <class F>
__device__ __forceinline__ void for_tile(int rows, int cols, F f) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  for (int i = warp; i < rows; i += warps)
    for (int c = lane; c < cols; c += kWarpSize) f(i, c);
}

// Copies a rows x cols tile element by element: v = load(i, c) (global memory), then store(i, c, v).
// A thread issues the loads of up to 16 elements before it uses any, so each warp keeps 16 requests in
// flight: with one block of 8 warps per SM, these copies are bound by latency, not bandwidth, when
// every load is waited for before the next. Needs blockDim.x == kChunkThreads.
template <class Load, class Store>
__device__ __forceinline__ void gather_tile(int rows, int cols, Load load, Store store) {
  constexpr int kWarps = kChunkThreads / kWarpSize, kRows = 8, kCols = 2;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int i0 = 0; i0 < rows; i0 += kRows * kWarps)
    for (int c0 = 0; c0 < cols; c0 += kCols * kWarpSize) {
      float v[kRows][kCols];
#pragma unroll
      for (int q = 0; q < kRows; ++q)
#pragma unroll
        for (int y = 0; y < kCols; ++y) {
          const int i = i0 + warp + q * kWarps, c = c0 + lane + y * kWarpSize;
          v[q][y] = i < rows && c < cols ? load(i, c) : 0.f;
        }
#pragma unroll
      for (int q = 0; q < kRows; ++q)
#pragma unroll
        for (int y = 0; y < kCols; ++y) {
          const int i = i0 + warp + q * kWarps, c = c0 + lane + y * kWarpSize;
          if (i < rows && c < cols) store(i, c, v[q][y]);
        }
    }
}

// Loads rows t0 .. t0 + n - 1 (zeros past n) of head `head` of a (B, T, heads, cols) tensor, times alpha.
template <typename E>
__device__ void load_rows(const Sizes& z, const E* src, int64_t b, int64_t t0, int n, int64_t head, int64_t heads,
                          int cols, float alpha, SMat dst) {
  gather_tile(
      C, cols,
      [&](int i, int p) { return i < n ? alpha * to_f32(src[tok(z, b, t0 + i, head, heads) * cols + p]) : 0.f; },
      [&](int i, int p, float v) { dst(i, p) = v; });
}

// The chunk-local cumsum (all C rows: padded rows repeat the last valid one) and the (P, M) state.
__device__ void load_block(const float* src, int rows, int cols, SMat dst) {
  gather_tile(
      rows, cols, [&](int i, int p) { return src[i * cols + p]; }, [&](int i, int p, float v) { dst(i, p) = v; });
}

// 4.1 rule 3, fast path: when the chunk's decay range max_m(-bl[m]) is at most kRefRange, every pairwise
// factor is split around ref[m] = bl[m] / 2 as exp(b_i - ref) exp(ref - b_j), both factors within
// e^(+-kRefRange/2) (safe in fp32), so the gated products become plain ones on pre-scaled operands and
// need no exp per pair. Otherwise the elementwise forms of slot_chunk_tiles.cuh run.
constexpr float kRefRange = 60.f;

__device__ bool mid_reference_ok(SMat bz, int M) {
  float range = 0.f;
  for (int m = 0; m < M; ++m) range = fmaxf(range, -bz(C - 1, m));
  return range <= kRefRange;  // false for NaN gates too
}

__device__ __forceinline__ float mid_ref(SMat bz, int m) { return 0.5f * bz(C - 1, m); }

// Sp = S .* exp(ref - b), the key-side operand of the fast path.
__device__ void scale_to_ref(SMat Ss, SMat bz, int M, SMat Sp) {
  for_tile(C, M, [&](int i, int m) { Sp(i, m) = Ss(i, m) * expf(mid_ref(bz, m) - bz(i, m)); });
}

// Query tiles of one (b, query head) for the chunk row kernels. First the NI tiles of the queries
// t < S0 that read the initial memory, rows [iC, min(iC + C, S0)); then one tile per memory chunk c,
// rows t = cC + shift + i (i < n_c), which read the memory after token cC + i: whatever the shift, the
// memory operands of such a tile are exactly chunk c's (gsa.md 4.2). Without slots every query is of
// the first kind (S0 = T).
struct QueryTile {
  int64_t t0;  // first query
  int n;       // queries in the tile
  int64_t c;   // memory chunk whose start state the tile reads (0 for the first kind: slot 0 is the initial memory)
  bool intra;  // second kind: the memory also holds tokens of chunk c (decays and intra-chunk terms)
};

__device__ QueryTile query_tile(const Sizes& z, int64_t idx) {
  if (idx < z.NI) return {idx * C, int(std::min<int64_t>(C, z.S0 - idx * C)), 0, false};
  const int64_t c = idx - z.NI;
  return {c * C + z.shift, chunk_tokens(c, z.Tm), c, true};
}

// The first window key of a query tile starting at t0: the tile's keys are [window_begin, t0 + n - 1].
__device__ __forceinline__ int64_t window_begin(const Sizes& z, int64_t t0) {
  return std::max<int64_t>(0, t0 - z.window + 1);
}

size_t chunk_forward_smem(const Sizes& z) {
  int64_t floats = 2 * tile_floats(z.D) + tile_floats(z.Dv) + 4 * tile_floats(z.M) + tile_floats(C) +
                   std::max(z.D, z.Dv) * smem_ld(int(z.M));
  if (z.window > 0) floats += tile_floats(z.Dv) + 4 * C;
  return size_t(floats) * sizeof(float);
}

struct RowOutputs {
  void* o;       // (B, T, Hq, Dv), q's dtype
  float* lse;    // (B, T, Hq)
  float* ratio;  // (B, T, Hq) share of the slots, or null
};

// Forward of one query tile and head: one softmax over the slot logits and the window logits.
// Slots (gsa.md 4.2): A1 = scale tril(Q Kc^T); Z = scale (Q HkS) .* Dec + Zi; P = exp(Z - m) with m, l
// the row max and sum; A2 = gated tril(P, S); O = (P .* Dec) HvS + A2 Vc. A tile of the first kind
// (query_tile) reads the initial memory alone: Dec = 1 and no Kc, Vc terms. Window (nha.md 5.2), C
// keys at a time with the online softmax of flash attention: S = scale Qr Kr^T + bias, masked to the
// band; m, l and O are rescaled by exp(m_old - m_new), O += exp(S - m_new) Vw; o = O / l at the end.
// Without a window P is normalised at once and O goes straight to global memory (GSA).
// Grid (B Hq NQ), blockDim kChunkThreads. Shared: the slot tiles (the window reuses Qs, Ks, Vs and As
// for its rotated queries, rotated keys, values and probabilities), with a window also the O
// accumulator and four row statistics; chunk_forward_smem (about 124 KiB at D = Dv = 64, M = 32).
template <typename E>
__global__ void __launch_bounds__(kChunkThreads) chunk_forward_kernel(Sizes z, RowInputs in, RowOutputs out) {
  extern __shared__ float sm[];
  constexpr Mma kTC = kFast<E>, kFp32 = kExact<E>;
  const int D = int(z.D), Dv = int(z.Dv), M = int(z.M);
  SMat Qs{sm, smem_ld(D)};
  SMat Ks{Qs.p + tile_floats(D), smem_ld(D)};
  SMat Vs{Ks.p + tile_floats(D), smem_ld(Dv)};
  SMat Ss{Vs.p + tile_floats(Dv), smem_ld(M)};
  SMat Bz{Ss.p + tile_floats(M), smem_ld(M)};
  SMat Zs{Bz.p + tile_floats(M), smem_ld(M)};
  SMat As{Zs.p + tile_floats(M), smem_ld(C)};
  SMat Sp{As.p + tile_floats(C), smem_ld(M)};
  SMat Xs{Sp.p + tile_floats(M), smem_ld(M)};                 // HkS, later HvS^T: (feature, slot)
  SMat Os{Xs.p + std::max(D, Dv) * smem_ld(M), smem_ld(Dv)};  // window: O, unnormalised
  float* rmax = Os.p + tile_floats(Dv);                       // window, C each: running max and sum,
  float* rsum = rmax + C;                                     // the slots' part of the sum, and the
  float* rslot = rsum + C;                                    // factor of the last rescale
  float* ralpha = rslot + C;
  const int64_t blk = blockIdx.x, bh = blk / z.NQ, h = bh % z.Hq, b = bh / z.Hq, j = h / z.G;
  const QueryTile qt = query_tile(z, blk % z.NQ);
  const int n = qt.n;
  const int64_t t0 = qt.t0;
  const bool window = z.window > 0;
  const float scale = in.scale;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  E* o = static_cast<E*>(out.o);
  if (M > 0) {
    const int64_t u0 = qt.c * C, bjc = (b * z.Hkv + j) * z.NC + qt.c, bjs = (b * z.Hkv + j) * (z.NC + 1) + qt.c;
    load_rows(z, static_cast<const E*>(in.q), b, t0, n, h, z.Hq, D, 1.f, Qs);
    if (qt.intra) {
      load_rows(z, static_cast<const E*>(in.k), b, u0, n, j, z.Hkv, D, 1.f, Ks);
      load_rows(z, static_cast<const E*>(in.v), b, u0, n, j, z.Hkv, Dv, 1.f, Vs);
      load_rows(z, in.s, b, u0, n, j, z.Hkv, M, 1.f, Ss);
      load_block(in.bc + bjc * C * M, C, M, Bz);
    } else {
      for_tile(C, M, [&](int i, int m) { Bz(i, m) = 0.f; });  // the initial memory is read undecayed
    }
    load_block(in.X1S + bjs * int64_t(D) * M, D, M, Xs);
    __syncthreads();
    const bool fast = mid_reference_ok(Bz, M);
    if (qt.intra) {
      if (fast) scale_to_ref(Ss, Bz, M, Sp);
      tile_mm<kTC>(
          C, C, D, [&](int r, int k) { return Qs(r, k); }, [&](int k, int x) { return Ks(x, k); },
          [&](int r, int x, float acc) { As(r, x) = x <= r ? scale * acc : 0.f; });
    }
    tile_mm<kFp32>(
        C, M, D, [&](int r, int k) { return Qs(r, k); }, [&](int k, int m) { return Xs(k, m); },
        [&](int r, int m, float acc) { Zs(r, m) = scale * acc * expf(Bz(r, m)); });
    __syncthreads();
    if (qt.intra) {
      if (fast)
        tile_mm<kFp32>(
            C, M, C, [&](int r, int x) { return As(r, x); }, [&](int x, int m) { return Sp(x, m); },
            [&](int r, int m, float acc) { Zs(r, m) += acc * expf(Bz(r, m) - mid_ref(Bz, m)); });
      else
        tile_gated_rows<false>(
            C, M, [&](int r, int x) { return As(r, x); }, [&](int x, int m) { return Ss(x, m); }, Bz,
            [&](int r, int m, float acc) { Zs(r, m) += acc; });
      __syncthreads();
    }
    for (int i = warp; i < C; i += warps) {
      if (i >= n) {
        for (int m = lane; m < M; m += kWarpSize) Zs(i, m) = 0.f;
        if (window && lane == 0) rmax[i] = -INFINITY, rsum[i] = 0.f, rslot[i] = 0.f;
        continue;
      }
      float mx = -INFINITY;
      for (int m = lane; m < M; m += kWarpSize) mx = fmaxf(mx, Zs(i, m));
      mx = warp_reduce(mx, MaxOp{});
      float l = 0.f;
      for (int m = lane; m < M; m += kWarpSize) l += expf(Zs(i, m) - mx);
      l = warp_reduce(l, SumOp{});
      const float inv = window ? 1.f : 1.f / l;  // with a window P stays unnormalised until the last key tile
      for (int m = lane; m < M; m += kWarpSize) Zs(i, m) = expf(Zs(i, m) - mx) * inv;
      if (lane == 0) {
        if (window) {
          rmax[i] = mx, rsum[i] = l, rslot[i] = l;
        } else {
          const int64_t row = tok(z, b, t0 + i, h, z.Hq);
          out.lse[row] = mx + logf(l);
          if (out.ratio) out.ratio[row] = 1.f;
        }
      }
    }
    __syncthreads();
    load_block(in.X2S + bjs * int64_t(Dv) * M, Dv, M, Xs);
    if (qt.intra) {
      if (fast) {  // A2 = tril((P .* exp(b - ref)) Sp^T); P is kept in that scaled form until O
        for_tile(C, M, [&](int i, int m) { Zs(i, m) *= expf(Bz(i, m) - mid_ref(Bz, m)); });
        __syncthreads();
        tile_mm<kTC>(
            C, C, M, [&](int r, int m) { return Zs(r, m); }, [&](int m, int x) { return Sp(x, m); },
            [&](int r, int x, float acc) { As(r, x) = x <= r ? acc : 0.f; });
      } else {
        tile_gated_slots(
            C, M, [&](int r, int m) { return Zs(r, m); }, [&](int x, int m) { return Ss(x, m); }, Bz,
            [&](int r, int x, float acc) { As(r, x) = acc; });
      }
      __syncthreads();
      for_tile(C, M, [&](int i, int m) { Zs(i, m) *= expf(fast ? mid_ref(Bz, m) : Bz(i, m)); });  // P .* Dec
    }
    __syncthreads();
    auto store = [&](int r, int p, float acc) {
      if (window)
        Os(r, p) = acc;
      else if (r < n)
        o[tok(z, b, t0 + r, h, z.Hq) * Dv + p] = from_f32<E>(acc);
    };
    if (qt.intra)
      tile_mm2<kTC>(
          C, Dv, M, [&](int r, int m) { return Zs(r, m); }, [&](int m, int p) { return Xs(p, m); }, C,
          [&](int r, int x) { return As(r, x); }, [&](int x, int p) { return Vs(x, p); }, store);
    else
      tile_mm<kTC>(
          C, Dv, M, [&](int r, int m) { return Zs(r, m); }, [&](int m, int p) { return Xs(p, m); }, store);
  } else {
    for_tile(C, Dv, [&](int i, int p) { Os(i, p) = 0.f; });
    for (int i = threadIdx.x; i < C; i += blockDim.x) rmax[i] = -INFINITY, rsum[i] = 0.f, rslot[i] = 0.f;
  }
  if (!window) return;
  __syncthreads();  // the slot side's readers of Qs, Ks, Vs and As are done
  load_rows(z, static_cast<const E*>(in.qr), b, t0, n, h, z.Hq, D, 1.f, Qs);
  const int64_t kend = t0 + n - 1;
  for (int64_t k0 = window_begin(z, t0); k0 <= kend; k0 += C) {
    const int nk = int(std::min<int64_t>(C, kend - k0 + 1));
    load_rows(z, static_cast<const E*>(in.kr), b, k0, nk, j, z.Hkv, D, 1.f, Ks);
    load_rows(z, static_cast<const E*>(in.v), b, k0, nk, j, z.Hkv, Dv, 1.f, Vs);
    __syncthreads();
    tile_mm<kTC>(
        C, C, D, [&](int r, int k) { return Qs(r, k); }, [&](int k, int x) { return Ks(x, k); },
        [&](int r, int x, float acc) {
          const int64_t t = t0 + r, key = k0 + x;
          As(r, x) = r < n && x < nk && in_window(z, t, key) ? window_score<E>(z, in, h, t, key, acc) : -INFINITY;
        });
    __syncthreads();
    for (int i = warp; i < C; i += warps) {
      float mt = -INFINITY;
      for (int x = lane; x < C; x += kWarpSize) mt = fmaxf(mt, As(i, x));
      mt = warp_reduce(mt, MaxOp{});
      const float mold = rmax[i], mnew = fmaxf(mold, mt);
      const float ref = mnew == -INFINITY ? 0.f : mnew;  // a row that has seen nothing yet: no inf - inf
      float l = 0.f;
      for (int x = lane; x < C; x += kWarpSize) {
        const float e = expf(As(i, x) - ref);
        As(i, x) = e;
        l += e;
      }
      l = warp_reduce(l, SumOp{});
      __syncwarp();  // every lane has read rmax[i] before lane 0 rewrites it (racecheck counts no shuffle)
      if (lane == 0) {
        const float alpha = expf(mold - ref);
        rsum[i] = rsum[i] * alpha + l;
        rslot[i] *= alpha;
        rmax[i] = mnew;
        ralpha[i] = alpha;
      }
    }
    __syncthreads();
    tile_mm<kTC>(
        C, Dv, C, [&](int r, int x) { return As(r, x); }, [&](int x, int p) { return Vs(x, p); },
        [&](int r, int p, float acc) { Os(r, p) = Os(r, p) * ralpha[r] + acc; });
    __syncthreads();  // the next key tile rewrites Ks, Vs and As
  }
  for_tile(n, Dv, [&](int i, int p) { o[tok(z, b, t0 + i, h, z.Hq) * Dv + p] = from_f32<E>(Os(i, p) / rsum[i]); });
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t row = tok(z, b, t0 + i, h, z.Hq);
    out.lse[row] = rmax[i] + logf(rsum[i]);
    if (out.ratio) out.ratio[row] = rslot[i] / rsum[i];
  }
}

// The slot tiles of the backward rows, which the window's dQr accumulator reuses.
int64_t backward_slot_floats(const Sizes& z) {
  return 6 * tile_floats(z.M) + std::max(z.D, z.Dv) * smem_ld(int(z.M));
}

size_t chunk_backward_rows_smem(const Sizes& z) {
  const int64_t shared = std::max(backward_slot_floats(z), z.window > 0 ? tile_floats(z.D) : 0);
  return size_t(2 * tile_floats(z.D) + 2 * tile_floats(z.Dv) + tile_floats(C) + 2 * C + shared) * sizeof(float);
}

// Backward of one query tile and head, row side (gsa.md 4.3, nha.md 5.3). With a window, delta =
// <dO, O> per row comes from the forward's output (written to gr.delta for window_grad_kernel);
// without one it is rowsum(P .* dP) over the slots. Slots: rebuild Z and P = exp(Z - lse), then
// dA2 = tril(dO Vc^T), dP = (dO HvS^T) .* Dec + dPi, dZ = P .* (dP - delta), and
// dQ = scale (dZ .* Dec) HkS^T + scale dA1 Kc with dA1 = gated tril(dZ, S); writes W1 = dZ, W2 = P,
// RB = Z .* dZ + P .* dP for the write side, and dq. Window, C keys at a time: P = exp(S - lse),
// dS = P .* (dO Vw^T - delta), dQr += scale dS Kr (and the bias gradient); writes dqr. The keys'
// and values' window gradients are window_grad_kernel's.
// Grid (B Hq NQ), blockDim kChunkThreads; shared: chunk_backward_rows_smem (about 140 KiB at D = Dv =
// 64, M = 32).
template <typename E>
__global__ void __launch_bounds__(kChunkThreads) chunk_backward_rows_kernel(Sizes z, RowInputs in, RowGrads gr) {
  extern __shared__ float sm[];
  constexpr Mma kTC = kFast<E>, kFp32 = kExact<E>;
  const int D = int(z.D), Dv = int(z.Dv), M = int(z.M);
  SMat Qs{sm, smem_ld(D)};                      // q, then the rotated q of the window
  SMat Ks{Qs.p + tile_floats(D), smem_ld(D)};   // k of chunk c, then the rotated keys of a window tile
  SMat Vs{Ks.p + tile_floats(D), smem_ld(Dv)};  // v of chunk c, then the values of a window tile
  SMat dOs{Vs.p + tile_floats(Dv), smem_ld(Dv)};
  SMat As{dOs.p + tile_floats(Dv), smem_ld(C)};  // A1, dA2, dA1 in turn; then the window's P and dS
  float* rL = As.p + tile_floats(C);             // C: lse of the rows
  float* rD = rL + C;                            // C: delta of the rows (window)
  SMat Ss{rD + C, smem_ld(M)};                   // from here backward_slot_floats(z): the slot tiles
  SMat Bz{Ss.p + tile_floats(M), smem_ld(M)};
  SMat Sp{Bz.p + tile_floats(M), smem_ld(M)};
  SMat Zs{Sp.p + tile_floats(M), smem_ld(M)};   // Z, later dZ (times exp(b - ref) on the fast path)
  SMat Ps{Zs.p + tile_floats(M), smem_ld(M)};   // P
  SMat dPs{Ps.p + tile_floats(M), smem_ld(M)};  // dP, later dZ .* Dec
  SMat Xs{dPs.p + tile_floats(M), smem_ld(M)};  // HkS, HvS^T, HkS again
  SMat dQs{Ss.p, smem_ld(D)};                   // window: dQr, unscaled, over the slot tiles once they are done
  const int64_t blk = blockIdx.x, bh = blk / z.NQ, h = bh % z.Hq, b = bh / z.Hq, j = h / z.G;
  const QueryTile qt = query_tile(z, blk % z.NQ);
  const int n = qt.n;
  const int64_t t0 = qt.t0;
  const bool window = z.window > 0;
  const float scale = in.scale;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  load_rows(z, static_cast<const E*>(gr.dout), b, t0, n, h, z.Hq, Dv, 1.f, dOs);
  for (int i = threadIdx.x; i < C; i += blockDim.x) rL[i] = i < n ? gr.lse[tok(z, b, t0 + i, h, z.Hq)] : 0.f;
  if (window) {
    __syncthreads();  // dOs
    const E* o = static_cast<const E*>(gr.o);
    for (int i = warp; i < C; i += warps) {
      const int64_t row = tok(z, b, t0 + i, h, z.Hq);
      float d = 0.f;
      for (int p = lane; p < Dv && i < n; p += kWarpSize) d += dOs(i, p) * to_f32(o[row * Dv + p]);
      d = warp_reduce(d, SumOp{});
      if (lane == 0) {
        rD[i] = d;
        if (i < n) gr.delta[row] = d;
      }
    }
  }
  if (M > 0) {
    const int64_t u0 = qt.c * C, bjc = (b * z.Hkv + j) * z.NC + qt.c, bjs = (b * z.Hkv + j) * (z.NC + 1) + qt.c;
    const float* X1 = in.X1S + bjs * int64_t(D) * M;
    load_rows(z, static_cast<const E*>(in.q), b, t0, n, h, z.Hq, D, 1.f, Qs);
    if (qt.intra) {
      load_rows(z, static_cast<const E*>(in.k), b, u0, n, j, z.Hkv, D, 1.f, Ks);
      load_rows(z, static_cast<const E*>(in.v), b, u0, n, j, z.Hkv, Dv, 1.f, Vs);
      load_rows(z, in.s, b, u0, n, j, z.Hkv, M, 1.f, Ss);
      load_block(in.bc + bjc * C * M, C, M, Bz);
    } else {
      for_tile(C, M, [&](int i, int m) { Bz(i, m) = 0.f; });  // the initial memory is read undecayed
    }
    load_block(X1, D, M, Xs);
    __syncthreads();
    const bool fast = mid_reference_ok(Bz, M);
    if (qt.intra && fast) scale_to_ref(Ss, Bz, M, Sp);
    // Key-side gated product of the rows (Zi, dPi): into dst, added.
    auto gated_rows = [&](SMat dst) {
      if (fast)
        tile_mm<kFp32>(
            C, M, C, [&](int r, int x) { return As(r, x); }, [&](int x, int m) { return Sp(x, m); },
            [&](int r, int m, float acc) { dst(r, m) += acc * expf(Bz(r, m) - mid_ref(Bz, m)); });
      else
        tile_gated_rows<false>(
            C, M, [&](int r, int x) { return As(r, x); }, [&](int x, int m) { return Ss(x, m); }, Bz,
            [&](int r, int m, float acc) { dst(r, m) += acc; });
    };
    if (qt.intra)
      tile_mm<kTC>(
          C, C, D, [&](int r, int k) { return Qs(r, k); }, [&](int k, int x) { return Ks(x, k); },
          [&](int r, int x, float acc) { As(r, x) = x <= r ? scale * acc : 0.f; });
    tile_mm<kFp32>(
        C, M, D, [&](int r, int k) { return Qs(r, k); }, [&](int k, int m) { return Xs(k, m); },
        [&](int r, int m, float acc) { Zs(r, m) = scale * acc * expf(Bz(r, m)); });
    __syncthreads();
    if (qt.intra) {
      gated_rows(Zs);
      __syncthreads();
    }
    load_block(in.X2S + bjs * int64_t(Dv) * M, Dv, M, Xs);
    for_tile(C, M, [&](int i, int m) { Ps(i, m) = i < n ? expf(Zs(i, m) - rL[i]) : 0.f; });
    if (qt.intra)
      tile_mm<kTC>(
          C, C, Dv, [&](int r, int p) { return dOs(r, p); }, [&](int p, int x) { return Vs(x, p); },
          [&](int r, int x, float acc) { As(r, x) = x <= r ? acc : 0.f; });
    __syncthreads();
    tile_mm<kFp32>(
        C, M, Dv, [&](int r, int p) { return dOs(r, p); }, [&](int p, int m) { return Xs(p, m); },
        [&](int r, int m, float acc) { dPs(r, m) = acc * expf(Bz(r, m)); });
    __syncthreads();
    if (qt.intra) {
      gated_rows(dPs);
      __syncthreads();
    }
    for (int i = warp; i < C; i += warps) {
      float d = 0.f;
      if (window) {
        d = rD[i];
      } else {
        for (int m = lane; m < M; m += kWarpSize) d += Ps(i, m) * dPs(i, m);
        d = warp_reduce(d, SumOp{});
      }
      const int64_t row = tok(z, b, t0 + i, h, z.Hq);
      for (int m = lane; m < M; m += kWarpSize) {
        const float P = Ps(i, m), dP = dPs(i, m), dZ = P * (dP - d);
        if (i < n) {
          gr.W1[row * M + m] = dZ;
          gr.W2[row * M + m] = P;
          gr.RB[row * M + m] = Zs(i, m) * dZ + P * dP;
        }
        Zs(i, m) = fast ? dZ * expf(Bz(i, m) - mid_ref(Bz, m)) : dZ;
        dPs(i, m) = dZ * expf(Bz(i, m));
      }
    }
    __syncthreads();
    load_block(X1, D, M, Xs);
    if (qt.intra) {
      if (fast)
        tile_mm<kTC>(
            C, C, M, [&](int r, int m) { return Zs(r, m); }, [&](int m, int x) { return Sp(x, m); },
            [&](int r, int x, float acc) { As(r, x) = x <= r ? acc : 0.f; });
      else
        tile_gated_slots(
            C, M, [&](int r, int m) { return Zs(r, m); }, [&](int x, int m) { return Ss(x, m); }, Bz,
            [&](int r, int x, float acc) { As(r, x) = acc; });
    }
    __syncthreads();
    auto store = [&](int r, int p, float acc) {
      if (r < n) gr.dq[tok(z, b, t0 + r, h, z.Hq) * D + p] = scale * acc;
    };
    if (qt.intra)
      tile_mm2<kTC>(
          C, D, M, [&](int r, int m) { return dPs(r, m); }, [&](int m, int p) { return Xs(p, m); }, C,
          [&](int r, int x) { return As(r, x); }, [&](int x, int p) { return Ks(x, p); }, store);
    else
      tile_mm<kTC>(
          C, D, M, [&](int r, int m) { return dPs(r, m); }, [&](int m, int p) { return Xs(p, m); }, store);
  }
  if (!window) return;
  __syncthreads();  // the slot side's readers of Qs, Ks, Vs and As are done
  load_rows(z, static_cast<const E*>(in.qr), b, t0, n, h, z.Hq, D, 1.f, Qs);
  for_tile(C, D, [&](int i, int p) { dQs(i, p) = 0.f; });
  const int64_t kend = t0 + n - 1;
  for (int64_t k0 = window_begin(z, t0); k0 <= kend; k0 += C) {
    const int nk = int(std::min<int64_t>(C, kend - k0 + 1));
    load_rows(z, static_cast<const E*>(in.kr), b, k0, nk, j, z.Hkv, D, 1.f, Ks);
    load_rows(z, static_cast<const E*>(in.v), b, k0, nk, j, z.Hkv, Dv, 1.f, Vs);
    __syncthreads();
    auto seen = [&](int r, int x) { return r < n && x < nk && in_window(z, t0 + r, k0 + x); };
    tile_mm<kTC>(
        C, C, D, [&](int r, int k) { return Qs(r, k); }, [&](int k, int x) { return Ks(x, k); },
        [&](int r, int x, float acc) {
          As(r, x) = seen(r, x) ? expf(window_score<E>(z, in, h, t0 + r, k0 + x, acc) - rL[r]) : 0.f;
        });
    // Same R x N as the product above: each thread rewrites the elements it wrote there, no barrier.
    tile_mm<kTC>(
        C, C, Dv, [&](int r, int p) { return dOs(r, p); }, [&](int p, int x) { return Vs(x, p); },
        [&](int r, int x, float acc) {
          const float ds = As(r, x) * (acc - rD[r]);
          As(r, x) = ds;
          if (gr.dbias && seen(r, x)) atomicAdd(gr.dbias + h * z.nb + (t0 + r - k0 - x), ds);
        });
    __syncthreads();
    tile_mm<kTC>(
        C, D, C, [&](int r, int x) { return As(r, x); }, [&](int x, int p) { return Ks(x, p); },
        [&](int r, int p, float acc) { dQs(r, p) += acc; });
    __syncthreads();  // the next key tile rewrites Ks, Vs and As
  }
  for_tile(n, D, [&](int i, int p) { gr.dqr[tok(z, b, t0 + i, h, z.Hq) * D + p] = scale * dQs(i, p); });
}

size_t window_grad_smem(const Sizes& z) {
  return size_t(3 * tile_floats(z.D) + 3 * tile_floats(z.Dv) + tile_floats(C) + 2 * C) * sizeof(float);
}

struct WindowGrads {
  const void* dout;    // (B, T, Hq, Dv)
  const float* lse;    // (B, T, Hq)
  const float* delta;  // (B, T, Hq) <dO, O>
  float* dkr;          // (B, T, Hkv, D) gradient of the rotated keys through the window: written
  float* dv;           // (B, T, Hkv, Dv): the window part added
};

// Window gradients of the keys and values (nha.md 5.3), key-major as in the flash-attention backward:
// one block per (b, kv head, tile of C keys from k0) loops over the G query heads and the query tiles
// of C rows from k0 that see the keys (queries up to k0 + C + window - 2), rebuilding P = exp(S - lse)
// and dS = P .* (dO Vw^T - delta): dv += P^T dO, dkr = scale dS^T Qr, summed in shared memory and
// written once (no atomics, and no order that depends on the schedule). Separate from the row kernel,
// which owns dqr: a query tile and a key tile meet in both, P and dS are recomputed rather than
// exchanged. Grid (B Hkv ceil(T / C)), blockDim kChunkThreads; shared: window_grad_smem (about 114 KiB
// at D = Dv = 64).
template <typename E>
__global__ void __launch_bounds__(kChunkThreads) window_grad_kernel(Sizes z, RowInputs in, WindowGrads gr) {
  extern __shared__ float sm[];
  constexpr Mma kTC = kFast<E>;
  const int D = int(z.D), Dv = int(z.Dv);
  SMat Ks{sm, smem_ld(D)};  // rotated keys of the tile
  SMat Vs{Ks.p + tile_floats(D), smem_ld(Dv)};
  SMat dKs{Vs.p + tile_floats(Dv), smem_ld(D)};  // sums over the query tiles, unscaled
  SMat dVs{dKs.p + tile_floats(D), smem_ld(Dv)};
  SMat Qs{dVs.p + tile_floats(Dv), smem_ld(D)};  // rotated queries of one query tile and head
  SMat dOs{Qs.p + tile_floats(D), smem_ld(Dv)};
  SMat As{dOs.p + tile_floats(Dv), smem_ld(C)};  // P, then dS: (query, key)
  float* rL = As.p + tile_floats(C);             // C: lse of the query rows
  float* rD = rL + C;                            // C: delta of the query rows
  const int64_t NK = (z.T + C - 1) / C, blk = blockIdx.x, bj = blk / NK, b = bj / z.Hkv, j = bj % z.Hkv;
  const int64_t k0 = (blk % NK) * C;
  const int nk = int(std::min<int64_t>(C, z.T - k0));
  const int64_t qend = std::min<int64_t>(z.T - 1, k0 + nk - 1 + z.window - 1);
  load_rows(z, static_cast<const E*>(in.kr), b, k0, nk, j, z.Hkv, D, 1.f, Ks);
  load_rows(z, static_cast<const E*>(in.v), b, k0, nk, j, z.Hkv, Dv, 1.f, Vs);
  for_tile(C, D, [&](int x, int p) { dKs(x, p) = 0.f; });
  for_tile(C, Dv, [&](int x, int p) { dVs(x, p) = 0.f; });
  for (int64_t h = j * z.G; h < (j + 1) * z.G; ++h)
    for (int64_t q0 = k0; q0 <= qend; q0 += C) {
      const int nq = int(std::min<int64_t>(C, qend - q0 + 1));
      __syncthreads();  // the previous step's readers of Qs, dOs, As, rL and rD are done
      load_rows(z, static_cast<const E*>(in.qr), b, q0, nq, h, z.Hq, D, 1.f, Qs);
      load_rows(z, static_cast<const E*>(gr.dout), b, q0, nq, h, z.Hq, Dv, 1.f, dOs);
      for (int i = threadIdx.x; i < C; i += blockDim.x) {
        const int64_t row = tok(z, b, q0 + std::min(i, nq - 1), h, z.Hq);
        rL[i] = i < nq ? gr.lse[row] : 0.f;
        rD[i] = i < nq ? gr.delta[row] : 0.f;
      }
      __syncthreads();
      tile_mm<kTC>(
          C, C, D, [&](int r, int k) { return Qs(r, k); }, [&](int k, int x) { return Ks(x, k); },
          [&](int r, int x, float acc) {
            const int64_t t = q0 + r, key = k0 + x;
            As(r, x) = r < nq && x < nk && in_window(z, t, key) ? expf(window_score<E>(z, in, h, t, key, acc) - rL[r])
                                                                : 0.f;
          });
      __syncthreads();
      tile_mm<kTC>(
          C, Dv, C, [&](int x, int r) { return As(r, x); }, [&](int r, int p) { return dOs(r, p); },
          [&](int x, int p, float acc) { dVs(x, p) += acc; });
      __syncthreads();  // dS overwrites P
      tile_mm<kTC>(
          C, C, Dv, [&](int r, int p) { return dOs(r, p); }, [&](int p, int x) { return Vs(x, p); },
          [&](int r, int x, float acc) { As(r, x) *= acc - rD[r]; });
      __syncthreads();
      tile_mm<kTC>(
          C, D, C, [&](int x, int r) { return As(r, x); }, [&](int r, int p) { return Qs(r, p); },
          [&](int x, int p, float acc) { dKs(x, p) += acc; });
    }
  __syncthreads();
  const float scale = in.scale;
  auto at = [&](int x, int64_t cols) { return tok(z, b, k0 + x, j, z.Hkv) * cols; };
  for_tile(nk, D, [&](int x, int p) { gr.dkr[at(x, D) + p] = scale * dKs(x, p); });
  gather_tile(
      nk, Dv, [&](int x, int p) { return gr.dv[at(x, Dv) + p]; },
      [&](int x, int p, float old) { gr.dv[at(x, Dv) + p] = old + dVs(x, p); });
}

size_t chunk_grad_smem(const Sizes& z, int P) {
  return size_t(3 * tile_floats(P) + 5 * tile_floats(z.M) + 2 * tile_floats(C) + P * smem_ld(int(z.M)) + z.M) *
         sizeof(float);
}

// Gradients through the writes of chunk c of one memory X (P x M), one block per (b, kv head, chunk)
// (4.3 in the generic form of the header): with the reads L_i = sum_h outer(yscale y_ih, w_ih) of the
// rows i of the chunk (query t = cC + i + shift), the chunk-end adjoint dXE and Rem = exp(bl - b):
//   dx = sum_h coef_h^T Y_h + (S .* Rem) dXE^T,      coef_h[i, u] = gated tril(W_h, S)[i, u]
//   ds = sum_h upper-gated(dots_h^T, W_h) + Rem .* (X dXE),   dots_h = tril(Y_h X^T)
//   dB += sum_h RB_h - S .* ds;   tail += colsum(XE .* dXE)
template <typename E>
__global__ void __launch_bounds__(kChunkThreads)
    chunk_grad_kernel(Sizes z, int P, const E* __restrict__ x, const E* __restrict__ y, float yscale,
                      const float* __restrict__ w, const float* __restrict__ RB, const float* __restrict__ s,
                      const float* __restrict__ bc, const float* __restrict__ XS, const float* __restrict__ dXE,
                      float* __restrict__ dx, float* __restrict__ ds, float* __restrict__ dB,
                      float* __restrict__ tail) {
  extern __shared__ float sm[];
  constexpr Mma kTC = kFast<E>, kFp32 = kExact<E>;
  const int M = int(z.M);
  SMat Xt{sm, smem_ld(P)};
  SMat Ys{Xt.p + tile_floats(P), smem_ld(P)};
  SMat dXs{Ys.p + tile_floats(P), smem_ld(P)};  // dx accumulator
  SMat Ss{dXs.p + tile_floats(P), smem_ld(M)};
  SMat Bz{Ss.p + tile_floats(M), smem_ld(M)};
  SMat Sp{Bz.p + tile_floats(M), smem_ld(M)};
  SMat Ws{Sp.p + tile_floats(M), smem_ld(M)};   // w of one head (times exp(b - ref) on the fast path), later S .* Rem
  SMat dSs{Ws.p + tile_floats(M), smem_ld(M)};  // ds accumulator
  SMat Ds{dSs.p + tile_floats(M), smem_ld(C)};  // dots
  SMat Cf{Ds.p + tile_floats(C), smem_ld(C)};   // coef
  SMat dE{Cf.p + tile_floats(C), smem_ld(M)};   // dXE (P, M)
  float* tl = dE.p + P * smem_ld(M);            // M: colsum(XE .* dXE), the tail of 4.3
  const int64_t blk = blockIdx.x, c = blk % z.NC, bj = blk / z.NC, b = bj / z.Hkv, j = bj % z.Hkv;
  const int n = chunk_tokens(c, z.Tm);
  const int64_t t0 = c * C;
  const float* dXc = dXE + blk * int64_t(P) * M;
  const float* XE = XS + (bj * (z.NC + 1) + c + 1) * int64_t(P) * M;
  for (int m = threadIdx.x; m < M; m += blockDim.x) tl[m] = 0.f;
  load_rows(z, x, b, t0, n, j, z.Hkv, P, 1.f, Xt);
  load_rows(z, s, b, t0, n, j, z.Hkv, M, 1.f, Ss);
  load_block(bc + blk * C * M, C, M, Bz);
  load_block(dXc, P, M, dE);
  for_tile(C, P, [&](int u, int p) { dXs(u, p) = 0.f; });
  for_tile(C, M, [&](int u, int m) { dSs(u, m) = 0.f; });
  __syncthreads();
  gather_tile(
      P, M, [&](int p, int m) { return XE[int64_t(p) * M + m]; },
      [&](int p, int m, float xe) { atomicAdd(tl + m, xe * dE(p, m)); });
  __syncthreads();
  for (int m = threadIdx.x; m < M; m += blockDim.x) tail[blk * M + m] += tl[m];
  // Fast path: coef = tril(Wp Sp^T) and ds = exp(ref - b_u) .* (dots^T Wp) with Wp = W .* exp(b - ref); dSs
  // holds the sum without the exp(ref - b_u) factor until the end.
  const bool fast = mid_reference_ok(Bz, M);
  if (fast) scale_to_ref(Ss, Bz, M, Sp);
  for (int64_t h = j * z.G; h < (j + 1) * z.G; ++h) {
    __syncthreads();                                           // the previous head's readers of Ys, Ws, Ds, Cf are done
    load_rows(z, y, b, t0 + z.shift, n, h, z.Hq, P, 1.f, Ys);  // yscale goes to the epilogues: Ys stays exact in bf16
    gather_tile(
        C, M, [&](int i, int m) { return i < n ? w[tok(z, b, t0 + z.shift + i, h, z.Hq) * M + m] : 0.f; },
        [&](int i, int m, float wv) { Ws(i, m) = fast ? wv * expf(Bz(i, m) - mid_ref(Bz, m)) : wv; });
    __syncthreads();
    tile_mm<kTC>(
        C, C, P, [&](int r, int p) { return Ys(r, p); }, [&](int p, int u) { return Xt(u, p); },
        [&](int r, int u, float acc) { Ds(r, u) = u <= r ? yscale * acc : 0.f; });
    if (fast)
      tile_mm<kTC>(
          C, C, M, [&](int r, int m) { return Ws(r, m); }, [&](int m, int u) { return Sp(u, m); },
          [&](int r, int u, float acc) { Cf(r, u) = u <= r ? acc : 0.f; });
    else
      tile_gated_slots(
          C, M, [&](int r, int m) { return Ws(r, m); }, [&](int u, int m) { return Ss(u, m); }, Bz,
          [&](int r, int u, float acc) { Cf(r, u) = acc; });
    __syncthreads();
    tile_mm<kTC>(
        C, P, C, [&](int u, int i) { return Cf(i, u); }, [&](int i, int p) { return Ys(i, p); },
        [&](int u, int p, float acc) { dXs(u, p) += yscale * acc; });
    // ds feeds the gate gradient through dB = RB - S .* ds, a difference of similar terms: its products
    // stay in fp32 (bf16 operands there tripled the dg error against the f32 path).
    if (fast)
      tile_mm<kFp32>(
          C, M, C, [&](int u, int i) { return Ds(i, u); }, [&](int i, int m) { return Ws(i, m); },
          [&](int u, int m, float acc) { dSs(u, m) += acc; });
    else
      tile_gated_rows<true>(
          C, M, [&](int u, int i) { return Ds(i, u); }, [&](int i, int m) { return Ws(i, m); }, Bz,
          [&](int u, int m, float acc) { dSs(u, m) += acc; });
  }
  __syncthreads();
  for_tile(C, M, [&](int u, int m) { Ws(u, m) = Ss(u, m) * expf(Bz(C - 1, m) - Bz(u, m)); });
  __syncthreads();
  // The chunk's totals go to dXs and dSs first; the read-modify-writes of dx, ds and dB then run
  // through gather_tile (their loads batched, not one exposed latency per element).
  tile_mm<kTC>(
      C, P, M, [&](int u, int m) { return Ws(u, m); }, [&](int m, int p) { return dE(p, m); },
      [&](int u, int p, float acc) { dXs(u, p) += acc; });
  tile_mm<kFp32>(
      C, M, P, [&](int u, int p) { return Xt(u, p); }, [&](int p, int m) { return dE(p, m); },
      [&](int u, int m, float acc) {
        const float intra = fast ? dSs(u, m) * expf(mid_ref(Bz, m) - Bz(u, m)) : dSs(u, m);
        dSs(u, m) = intra + acc * expf(Bz(C - 1, m) - Bz(u, m));
      });
  __syncthreads();
  auto at = [&](int u, int64_t cols) { return tok(z, b, t0 + u, j, z.Hkv) * cols; };
  gather_tile(
      n, P, [&](int u, int p) { return dx[at(u, P) + p]; },
      [&](int u, int p, float old) { dx[at(u, P) + p] = old + dXs(u, p); });
  gather_tile(
      n, M, [&](int u, int m) { return ds[at(u, M) + m]; },
      [&](int u, int m, float old) { ds[at(u, M) + m] = old + dSs(u, m); });
  gather_tile(
      n, M,
      [&](int u, int m) {
        float acc = dB[at(u, M) + m];
        if (RB)
          for (int64_t h = j * z.G; h < (j + 1) * z.G; ++h) acc += RB[tok(z, b, t0 + u + z.shift, h, z.Hq) * M + m];
        return acc;
      },
      [&](int u, int m, float v) { dB[at(u, M) + m] = v - Ss(u, m) * dSs(u, m); });
}

// Chunk-parallel state scan, step 1 (4.2): the increment of chunk c, Kc^T (S .* Rem) in the generic form
//   inc[p, m] = sum_i x_i[p] s_i[m] exp(bl[m] - b_i[m]),
// written to XS slot c + 1 for scan_chunks_kernel. One block per (b, kv head, chunk).
size_t state_inc_smem(const Sizes& z, int P) { return size_t(tile_floats(P) + tile_floats(z.M)) * sizeof(float); }

template <typename E>
__global__ void __launch_bounds__(kChunkThreads)
    state_inc_kernel(Sizes z, int P, const E* __restrict__ x, const float* __restrict__ s, const float* __restrict__ bc,
                     float* __restrict__ XS) {
  extern __shared__ float sm[];
  constexpr Mma kTC = kFast<E>;
  const int M = int(z.M);
  SMat Xt{sm, smem_ld(P)};
  SMat SR{Xt.p + tile_floats(P), smem_ld(M)};
  const int64_t blk = blockIdx.x, c = blk % z.NC, bj = blk / z.NC, b = bj / z.Hkv, j = bj % z.Hkv;
  const int n = chunk_tokens(c, z.Tm);
  const float* bz = bc + blk * C * M;
  load_rows(z, x, b, c * C, n, j, z.Hkv, P, 1.f, Xt);
  gather_tile(
      C, M,
      [&](int i, int m) {
        return i < n ? s[tok(z, b, c * C + i, j, z.Hkv) * M + m] * expf(bz[(C - 1) * M + m] - bz[i * M + m]) : 0.f;
      },
      [&](int i, int m, float v) { SR(i, m) = v; });
  __syncthreads();
  float* inc = XS + (bj * (z.NC + 1) + c + 1) * int64_t(P) * M;
  tile_mm<kTC>(
      P, M, C, [&](int p, int i) { return Xt(i, p); }, [&](int i, int m) { return SR(i, m); },
      [&](int p, int m, float acc) { inc[int64_t(p) * M + m] = acc; });
}

// Reverse-scan increments of chunk c (4.3): sum over the rows i of the chunk and the group of
//   inc[p, m] = yscale y_ih[p] w_ih[m] exp(b_i[m])     (query t = cC + i + shift),
// written to dXE slot c for scan_chunks_kernel. One block per (b, kv head, chunk).
size_t read_inc_smem(const Sizes& z, int P) { return state_inc_smem(z, P); }

template <typename E>
__global__ void __launch_bounds__(kChunkThreads)
    read_inc_kernel(Sizes z, int P, const E* __restrict__ y, float yscale, const float* __restrict__ w,
                    const float* __restrict__ bc, float* __restrict__ dXE) {
  extern __shared__ float sm[];
  constexpr Mma kTC = kFast<E>;
  const int M = int(z.M);
  SMat Yt{sm, smem_ld(P)};
  SMat WD{Yt.p + tile_floats(P), smem_ld(M)};
  const int64_t blk = blockIdx.x, c = blk % z.NC, bj = blk / z.NC, b = bj / z.Hkv, j = bj % z.Hkv;
  const int n = chunk_tokens(c, z.Tm);
  const float* bz = bc + blk * C * M;
  float* inc = dXE + blk * int64_t(P) * M;
  for (int64_t h = j * z.G; h < (j + 1) * z.G; ++h) {
    __syncthreads();  // the previous head's readers are done
    load_rows(z, y, b, c * C + z.shift, n, h, z.Hq, P, yscale, Yt);
    gather_tile(
        C, M,
        [&](int i, int m) {
          return i < n ? w[tok(z, b, c * C + i + z.shift, h, z.Hq) * M + m] * expf(bz[i * M + m]) : 0.f;
        },
        [&](int i, int m, float v) { WD(i, m) = v; });
    __syncthreads();
    const bool first = h == j * z.G;
    tile_mm<kTC>(
        P, M, C, [&](int p, int i) { return Yt(i, p); }, [&](int i, int m) { return WD(i, m); },
        [&](int p, int m, float acc) {
          float& o = inc[int64_t(p) * M + m];
          o = first ? acc : o + acc;
        });
  }
}

// Step 2 of both scans, one thread per (b, kv head, p, m); slots[c] holds chunk c's increment on entry.
//   forward (slots = XS + 1): X_0 = X0;   X_{c+1} = X_c .*c exp(bl_c) + inc_c;   XS[c] = X_c, XS[NC] = X_NC
//   reverse (slots = dXE):    dX = dX_T;  for c = NC-1 .. 0: dXE[c] = dX, dX = dX .*c exp(bl_c) + inc_c
// then (reverse) the rows t < shift that read the initial memory add theirs, and dX0 = dX.
// X0, dXT, dX0 are (P, M) or, slot_major, (M, P).
template <typename E>
__global__ void scan_chunks_kernel(Sizes z, int P, bool reverse, const float* __restrict__ bc,
                                   const float* __restrict__ X0, bool slot_major, float* __restrict__ slots,
                                   const E* __restrict__ y, float yscale, const float* __restrict__ w,
                                   float* __restrict__ dX0) {
  const int M = int(z.M);
  const int64_t bj = blockIdx.x, b = bj / z.Hkv, j = bj % z.Hkv;
  const int64_t e = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (e >= int64_t(P) * M) return;
  const int p = int(e / M), m = int(e % M);
  const int64_t ext = slot_major ? int64_t(m) * P + p : e, PM = int64_t(P) * M;
  float X = X0 ? X0[bj * PM + ext] : 0.f;
  if (!reverse) {
    float* XS = slots + bj * (z.NC + 1) * PM;
#pragma unroll 8  // the loads do not depend on X: several chunks' loads are in flight at once
    for (int64_t c = 0; c < z.NC; ++c) {
      const float inc = XS[(c + 1) * PM + e];
      XS[c * PM + e] = X;
      X = X * expf(bc[((bj * z.NC + c) * C + C - 1) * M + m]) + inc;
    }
    XS[z.NC * PM + e] = X;
    return;
  }
  float* dXE = slots + bj * z.NC * PM;
#pragma unroll 8
  for (int64_t c = z.NC - 1; c >= 0; --c) {
    const float inc = dXE[c * PM + e];
    dXE[c * PM + e] = X;
    X = X * expf(bc[((bj * z.NC + c) * C + C - 1) * M + m]) + inc;
  }
  for (int64_t t = 0; t < std::min(z.shift, z.T); ++t)
    for (int64_t h = j * z.G; h < (j + 1) * z.G; ++h) {
      const int64_t row = tok(z, b, t, h, z.Hq);
      X += yscale * to_f32(y[row * P + p]) * w[row * M + m];
    }
  if (dX0) dX0[bj * PM + ext] = X;
}

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------

// The chunk kernels take the rows when their tiles fit in shared memory (with the opt-in); the
// per-query kernels are left for head dims and slot counts beyond that (e.g. D = Dv = 128 with
// M = 64 and a window).
bool chunk_rows_fit(const Device& dev, size_t smem) {
  return smem <= cuda_device_props(dev.index).smem_per_block_optin;
}

template <typename K>
void allow_smem(K kernel, size_t smem) {
  HYB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
}

struct Memory {
  Tensor bc, X1S, X2S;  // (B, Hkv, NC, C, M), (B, Hkv, NC + 1, D, M), (B, Hkv, NC + 1, Dv, M)
};

unsigned state_tiles(int64_t P, int64_t M) { return unsigned((P * M + kStateThreads - 1) / kStateThreads); }

// The chunk-local cumsum and the chunk-start states of both memories (forward, and again in backward).
Memory memory_states(const SlotAttentionArgs& a, const Sizes& z) {
  Memory mem;
  if (z.M == 0) return mem;
  const Device dev = a.q.device();
  cudaStream_t st = current_stream(dev.index);
  mem.bc = Tensor::empty({z.B, z.Hkv, z.NC, C, z.M}, DType::f32, dev);
  mem.X1S = Tensor::empty({z.B, z.Hkv, z.NC + 1, z.D, z.M}, DType::f32, dev);
  mem.X2S = Tensor::empty({z.B, z.Hkv, z.NC + 1, z.Dv, z.M}, DType::f32, dev);
  const int mt = int(std::min<int64_t>(128, (z.M + 31) / 32 * 32));
  if (z.NC > 0) {
    cumsum_kernel<<<unsigned(z.B * z.Hkv * z.NC), mt, 0, st>>>(z, fptr(a.g), fptr(mem.bc));
    HYB_CUDA_LAUNCH_CHECK("slot_attention cumsum_kernel", z.B * z.Hkv * z.NC, mt, 0);
  }
  const size_t smem1 = state_inc_smem(z, int(z.D)), smem2 = state_inc_smem(z, int(z.Dv));
  const bool chunked = std::max(smem1, smem2) <= cuda_device_props(dev.index).smem_per_block_optin;
  visit_cuda_float("slot_attention_forward", a.q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const dim3 g1(unsigned(z.B * z.Hkv), state_tiles(z.D, z.M)), g2(unsigned(z.B * z.Hkv), state_tiles(z.Dv, z.M));
    if (chunked) {
      const unsigned blocks = unsigned(z.B * z.Hkv * z.NC);
      allow_smem(state_inc_kernel<E>, std::max(smem1, smem2));
      if (blocks > 0) {
        state_inc_kernel<E><<<blocks, kChunkThreads, smem1, st>>>(z, int(z.D), eptr<E>(a.k), fptr(a.s), fptr(mem.bc),
                                                                 fptr(mem.X1S));
        HYB_CUDA_LAUNCH_CHECK("slot_attention state_inc_kernel (Hk)", blocks, kChunkThreads, smem1);
        state_inc_kernel<E><<<blocks, kChunkThreads, smem2, st>>>(z, int(z.Dv), eptr<E>(a.v), fptr(a.s), fptr(mem.bc),
                                                                 fptr(mem.X2S));
        HYB_CUDA_LAUNCH_CHECK("slot_attention state_inc_kernel (Hv)", blocks, kChunkThreads, smem2);
      }
      scan_chunks_kernel<E><<<g1, kStateThreads, 0, st>>>(z, int(z.D), false, fptr(mem.bc), fptr(a.HK0), false,
                                                          fptr(mem.X1S), nullptr, 0.f, nullptr, nullptr);
      HYB_CUDA_LAUNCH_CHECK("slot_attention scan_chunks_kernel (Hk)", g1, kStateThreads, 0);
      scan_chunks_kernel<E><<<g2, kStateThreads, 0, st>>>(z, int(z.Dv), false, fptr(mem.bc), fptr(a.HV0), true,
                                                          fptr(mem.X2S), nullptr, 0.f, nullptr, nullptr);
      HYB_CUDA_LAUNCH_CHECK("slot_attention scan_chunks_kernel (Hv)", g2, kStateThreads, 0);
      return;
    }
    state_kernel<E><<<g1, kStateThreads, 0, st>>>(z, int(z.D), eptr<E>(a.k), fptr(a.s), fptr(mem.bc), fptr(a.HK0),
                                                   false, fptr(mem.X1S));
    HYB_CUDA_LAUNCH_CHECK("slot_attention state_kernel (Hk)", g1, kStateThreads, 0);
    state_kernel<E><<<g2, kStateThreads, 0, st>>>(z, int(z.Dv), eptr<E>(a.v), fptr(a.s), fptr(mem.bc), fptr(a.HV0),
                                                   true, fptr(mem.X2S));
    HYB_CUDA_LAUNCH_CHECK("slot_attention state_kernel (Hv)", g2, kStateThreads, 0);
  });
  return mem;
}

RowInputs row_inputs(const SlotAttentionArgs& a, const Memory& mem) {
  auto raw = [](const Tensor& t) -> const void* { return t.defined() && t.numel() > 0 ? t.raw_data() : nullptr; };
  return {raw(a.q), raw(a.k), raw(a.v), raw(a.qr), raw(a.kr), raw(a.bias), fptr(a.s), fptr(mem.X1S), fptr(mem.X2S),
          fptr(mem.bc), float(a.scale)};
}

void check_args(const SlotAttentionArgs& a, const Sizes& z) {
  for (const Tensor* t : {&a.q, &a.k, &a.v, &a.s, &a.g, &a.HK0, &a.HV0, &a.qr, &a.kr, &a.bias})
    HYB_CHECK(!t->defined() || (t->is_contiguous() && t->is_cuda()), "slot_attention (cuda): every tensor must be "
              "contiguous on a cuda device, got ", t->str());
  for (const Tensor* t : {&a.s, &a.g, &a.HK0, &a.HV0})
    HYB_CHECK(!t->defined() || t->dtype() == DType::f32, "slot_attention (cuda): s, g and the memories must be f32, "
              "got ", t->str());
  HYB_CHECK(z.window == 0 || (a.qr.defined() && a.kr.defined()), "slot_attention (cuda): a window needs qr and kr");
  HYB_CHECK(z.G * C * 2 * 4 + z.M * 4 <= 48 * 1024, "slot_attention (cuda): ", z.G,
            " query heads per kv head exceed the shared memory of the gradient kernel");
}

}  // namespace

SlotAttentionOut slot_attention_forward_cuda(const SlotAttentionArgs& a, bool want_ratio) {
  const Sizes z = sizes_of(a);
  check_args(a, z);
  const Device dev = a.q.device();
  cudaStream_t st = current_stream(dev.index);
  const Memory mem = memory_states(a, z);
  SlotAttentionOut out;
  out.o = Tensor::empty({z.B, z.T, z.Hq, z.Dv}, a.q.dtype(), dev);
  out.lse = Tensor::empty({z.B, z.T, z.Hq}, DType::f32, dev);
  if (want_ratio) out.long_ratio = Tensor::empty({z.B, z.T, z.Hq}, DType::f32, dev);
  const int64_t rows = z.B * z.T * z.Hq;
  const size_t chunk_smem = chunk_forward_smem(z);
  if (rows > 0 && chunk_rows_fit(dev, chunk_smem))
    visit_cuda_float("slot_attention_forward", a.q.dtype(), [&](auto tag) {
      using E = decltype(tag);
      const unsigned blocks = unsigned(z.B * z.Hq * z.NQ);
      allow_smem(chunk_forward_kernel<E>, chunk_smem);
      chunk_forward_kernel<E><<<blocks, kChunkThreads, chunk_smem, st>>>(
          z, row_inputs(a, mem), RowOutputs{out.o.raw_data(), fptr(out.lse), fptr(out.long_ratio)});
      HYB_CUDA_LAUNCH_CHECK("slot_attention chunk_forward_kernel", blocks, kChunkThreads, chunk_smem);
    });
  else if (rows > 0)
    visit_cuda_float("slot_attention_forward", a.q.dtype(), [&](auto tag) {
      using E = decltype(tag);
      const size_t smem = size_t(2 * z.D + 2 * z.M + C + z.Dv + kRowThreads) * sizeof(float);
      forward_row_kernel<E><<<unsigned(rows), kRowThreads, smem, st>>>(z, row_inputs(a, mem), out.o.data<E>(),
                                                                      fptr(out.lse), fptr(out.long_ratio));
      HYB_CUDA_LAUNCH_CHECK("slot_attention forward_row_kernel", rows, kRowThreads, smem);
    });
  if (z.M > 0) {
    out.HK = Tensor::empty({z.B, z.Hkv, z.D, z.M}, DType::f32, dev);
    out.HV = Tensor::empty({z.B, z.Hkv, z.M, z.Dv}, DType::f32, dev);
    const int64_t n1 = z.B * z.Hkv * z.D * z.M, n2 = z.B * z.Hkv * z.Dv * z.M;
    final_state_kernel<<<unsigned((n1 + 255) / 256), 256, 0, st>>>(z, int(z.D), fptr(mem.X1S), false, fptr(out.HK));
    HYB_CUDA_LAUNCH_CHECK("slot_attention final_state_kernel (Hk)", (n1 + 255) / 256, 256, 0);
    final_state_kernel<<<unsigned((n2 + 255) / 256), 256, 0, st>>>(z, int(z.Dv), fptr(mem.X2S), true, fptr(out.HV));
    HYB_CUDA_LAUNCH_CHECK("slot_attention final_state_kernel (Hv)", (n2 + 255) / 256, 256, 0);
  }
  return out;
}

SlotAttentionGrads slot_attention_backward_cuda(const SlotAttentionArgs& a, const Tensor& lse, const Tensor& o,
                                                const Tensor& dout0, const Tensor& dHK0_, const Tensor& dHV0_) {
  const Sizes z = sizes_of(a);
  check_args(a, z);
  const Device dev = a.q.device();
  cudaStream_t st = current_stream(dev.index);
  HYB_CHECK(lse.defined() && lse.dtype() == DType::f32 && lse.shape() == Shape({z.B, z.T, z.Hq}) && lse.is_cuda(),
            "slot_attention_backward (cuda): lse must be f32 (B, T, Hq) on the device, got ", lse.str());
  HYB_CHECK(z.window == 0 || (o.defined() && o.shape() == Shape({z.B, z.T, z.Hq, z.Dv}) && o.dtype() == a.q.dtype() &&
                              o.is_cuda()),
            "slot_attention_backward (cuda): with a window the forward's output o must be (B, T, Hq, Dv) = (", z.B,
            ", ", z.T, ", ", z.Hq, ", ", z.Dv, ") in ", dtype_name(a.q.dtype()), " on the device, got ", o.str());
  const Tensor dout = dout0.contiguous(), lsec = lse.contiguous(), oc = z.window > 0 ? o.contiguous() : Tensor();
  const Tensor dHKT = dHK0_.defined() ? dHK0_.to(DType::f32).contiguous() : Tensor();
  const Tensor dHVT = dHV0_.defined() ? dHV0_.to(DType::f32).contiguous() : Tensor();
  const Memory mem = memory_states(a, z);
  auto zeros = [&](const Shape& s) { return Tensor::zeros(s, DType::f32, dev); };
  SlotAttentionGrads gr;
  gr.dq = zeros(a.q.shape());
  gr.dk = zeros(a.k.shape());
  gr.dv = zeros(a.v.shape());
  if (z.window > 0) {
    gr.dqr = Tensor::empty(a.q.shape(), DType::f32, dev);
    gr.dkr = zeros(a.k.shape());
  }
  if (a.bias.defined()) gr.dbias = zeros(a.bias.shape());
  Tensor W1, W2, RB, dB, tail, dX1E, dX2E;
  if (z.M > 0) {
    const Shape rowm{z.B, z.T, z.Hq, z.M};
    W1 = Tensor::empty(rowm, DType::f32, dev);
    W2 = Tensor::empty(rowm, DType::f32, dev);
    RB = Tensor::empty(rowm, DType::f32, dev);
    gr.ds = zeros(a.s.shape());
    gr.dg = zeros(a.g.shape());
    dB = zeros(a.s.shape());
    tail = zeros({z.B, z.Hkv, z.NC, z.M});
    dX1E = Tensor::empty({z.B, z.Hkv, z.NC, z.D, z.M}, DType::f32, dev);
    dX2E = Tensor::empty({z.B, z.Hkv, z.NC, z.Dv, z.M}, DType::f32, dev);
    if (a.HK0.defined()) {
      gr.dHK0 = Tensor::empty(a.HK0.shape(), DType::f32, dev);
      gr.dHV0 = Tensor::empty(a.HV0.shape(), DType::f32, dev);
    }
  }
  const int64_t rows = z.B * z.T * z.Hq;
  visit_cuda_float("slot_attention_backward", a.q.dtype(), [&](auto tag) {
    using E = decltype(tag);
    const size_t rows_smem = chunk_backward_rows_smem(z), window_smem = z.window > 0 ? window_grad_smem(z) : 0;
    if (rows > 0 && chunk_rows_fit(dev, std::max(rows_smem, window_smem))) {
      const Tensor delta = z.window > 0 ? Tensor::empty({z.B, z.T, z.Hq}, DType::f32, dev) : Tensor();
      RowGrads rg{dout.raw_data(), fptr(lsec), fptr(W1), fptr(W2), fptr(RB), fptr(gr.dq), fptr(gr.dqr), fptr(gr.dkr),
                  fptr(gr.dv), fptr(gr.dbias), z.window > 0 ? oc.raw_data() : nullptr, fptr(delta)};
      const unsigned blocks = unsigned(z.B * z.Hq * z.NQ);
      allow_smem(chunk_backward_rows_kernel<E>, rows_smem);
      chunk_backward_rows_kernel<E><<<blocks, kChunkThreads, rows_smem, st>>>(z, row_inputs(a, mem), rg);
      HYB_CUDA_LAUNCH_CHECK("slot_attention chunk_backward_rows_kernel", blocks, kChunkThreads, rows_smem);
      if (z.window > 0) {
        const unsigned kblocks = unsigned(z.B * z.Hkv * ((z.T + C - 1) / C));
        allow_smem(window_grad_kernel<E>, window_smem);
        window_grad_kernel<E><<<kblocks, kChunkThreads, window_smem, st>>>(
            z, row_inputs(a, mem), WindowGrads{dout.raw_data(), fptr(lsec), fptr(delta), fptr(gr.dkr), fptr(gr.dv)});
        HYB_CUDA_LAUNCH_CHECK("slot_attention window_grad_kernel", kblocks, kChunkThreads, window_smem);
      }
    } else if (rows > 0) {
      RowGrads rg{dout.raw_data(), fptr(lsec), fptr(W1), fptr(W2), fptr(RB), fptr(gr.dq), fptr(gr.dqr), fptr(gr.dkr),
                  fptr(gr.dv), fptr(gr.dbias), nullptr, nullptr};
      const size_t smem = size_t(3 * z.D + z.Dv + 4 * z.M + C + 2 * kRowThreads) * sizeof(float);
      backward_row_kernel<E><<<unsigned(rows), kRowThreads, smem, st>>>(z, row_inputs(a, mem), rg);
      HYB_CUDA_LAUNCH_CHECK("slot_attention backward_row_kernel", rows, kRowThreads, smem);
    }
    if (z.M == 0) return;
    const float scale = float(a.scale);
    const dim3 g1(unsigned(z.B * z.Hkv), state_tiles(z.D, z.M)), g2(unsigned(z.B * z.Hkv), state_tiles(z.Dv, z.M));
    const size_t rsmem1 = read_inc_smem(z, int(z.D)), rsmem2 = read_inc_smem(z, int(z.Dv));
    if (std::max(rsmem1, rsmem2) <= cuda_device_props(dev.index).smem_per_block_optin) {
      const unsigned blocks = unsigned(z.B * z.Hkv * z.NC);
      allow_smem(read_inc_kernel<E>, std::max(rsmem1, rsmem2));
      if (blocks > 0) {
        read_inc_kernel<E><<<blocks, kChunkThreads, rsmem1, st>>>(z, int(z.D), eptr<E>(a.q), scale, fptr(W1),
                                                                  fptr(mem.bc), fptr(dX1E));
        HYB_CUDA_LAUNCH_CHECK("slot_attention read_inc_kernel (Hk)", blocks, kChunkThreads, rsmem1);
        read_inc_kernel<E><<<blocks, kChunkThreads, rsmem2, st>>>(z, int(z.Dv), eptr<E>(dout), 1.f, fptr(W2),
                                                                  fptr(mem.bc), fptr(dX2E));
        HYB_CUDA_LAUNCH_CHECK("slot_attention read_inc_kernel (Hv)", blocks, kChunkThreads, rsmem2);
      }
      scan_chunks_kernel<E><<<g1, kStateThreads, 0, st>>>(z, int(z.D), true, fptr(mem.bc), fptr(dHKT), false,
                                                          fptr(dX1E), eptr<E>(a.q), scale, fptr(W1), fptr(gr.dHK0));
      HYB_CUDA_LAUNCH_CHECK("slot_attention scan_chunks_kernel (dHk)", g1, kStateThreads, 0);
      scan_chunks_kernel<E><<<g2, kStateThreads, 0, st>>>(z, int(z.Dv), true, fptr(mem.bc), fptr(dHVT), true,
                                                          fptr(dX2E), eptr<E>(dout), 1.f, fptr(W2), fptr(gr.dHV0));
      HYB_CUDA_LAUNCH_CHECK("slot_attention scan_chunks_kernel (dHv)", g2, kStateThreads, 0);
    } else {
      reverse_scan_kernel<E><<<g1, kStateThreads, 0, st>>>(z, int(z.D), eptr<E>(a.q), scale, fptr(W1), fptr(mem.bc),
                                                            fptr(dHKT), false, fptr(dX1E), fptr(gr.dHK0));
      HYB_CUDA_LAUNCH_CHECK("slot_attention reverse_scan_kernel (Hk)", g1, kStateThreads, 0);
      reverse_scan_kernel<E><<<g2, kStateThreads, 0, st>>>(z, int(z.Dv), eptr<E>(dout), 1.f, fptr(W2), fptr(mem.bc),
                                                            fptr(dHVT), true, fptr(dX2E), fptr(gr.dHV0));
      HYB_CUDA_LAUNCH_CHECK("slot_attention reverse_scan_kernel (Hv)", g2, kStateThreads, 0);
    }
    if (z.NC == 0) return;
    const unsigned blocks = unsigned(z.B * z.Hkv * z.NC);
    const size_t smem1 = chunk_grad_smem(z, int(z.D)), smem2 = chunk_grad_smem(z, int(z.Dv));
    const size_t optin = cuda_device_props(dev.index).smem_per_block_optin;
    if (smem1 <= optin && smem2 <= optin) {
      allow_smem(chunk_grad_kernel<E>, std::max(smem1, smem2));
      chunk_grad_kernel<E><<<blocks, kChunkThreads, smem1, st>>>(z, int(z.D), eptr<E>(a.k), eptr<E>(a.q), scale,
                                                                 fptr(W1), fptr(RB), fptr(a.s), fptr(mem.bc),
                                                                 fptr(mem.X1S), fptr(dX1E), fptr(gr.dk), fptr(gr.ds),
                                                                 fptr(dB), fptr(tail));
      HYB_CUDA_LAUNCH_CHECK("slot_attention chunk_grad_kernel (Hk)", blocks, kChunkThreads, smem1);
      chunk_grad_kernel<E><<<blocks, kChunkThreads, smem2, st>>>(z, int(z.Dv), eptr<E>(a.v), eptr<E>(dout), 1.f,
                                                                 fptr(W2), nullptr, fptr(a.s), fptr(mem.bc),
                                                                 fptr(mem.X2S), fptr(dX2E), fptr(gr.dv), fptr(gr.ds),
                                                                 fptr(dB), fptr(tail));
      HYB_CUDA_LAUNCH_CHECK("slot_attention chunk_grad_kernel (Hv)", blocks, kChunkThreads, smem2);
    } else {
    const size_t smem = size_t(2 * C * z.G + z.M) * sizeof(float);
    grad_chunk_kernel<E><<<blocks, kStateThreads, smem, st>>>(z, int(z.D), eptr<E>(a.k), eptr<E>(a.q), scale, fptr(W1),
                                                              fptr(RB), fptr(a.s), fptr(mem.bc), fptr(mem.X1S),
                                                              fptr(dX1E), fptr(gr.dk), fptr(gr.ds), fptr(dB),
                                                              fptr(tail));
    HYB_CUDA_LAUNCH_CHECK("slot_attention grad_chunk_kernel (Hk)", blocks, kStateThreads, smem);
    grad_chunk_kernel<E><<<blocks, kStateThreads, smem, st>>>(z, int(z.Dv), eptr<E>(a.v), eptr<E>(dout), 1.f,
                                                              fptr(W2), nullptr, fptr(a.s), fptr(mem.bc),
                                                              fptr(mem.X2S), fptr(dX2E), fptr(gr.dv), fptr(gr.ds),
                                                              fptr(dB), fptr(tail));
    HYB_CUDA_LAUNCH_CHECK("slot_attention grad_chunk_kernel (Hv)", blocks, kStateThreads, smem);
    }
    const int mt = int(std::min<int64_t>(128, (z.M + 31) / 32 * 32));
    gate_grad_kernel<<<blocks, mt, 0, st>>>(z, fptr(dB), fptr(tail), fptr(gr.dg));
    HYB_CUDA_LAUNCH_CHECK("slot_attention gate_grad_kernel", blocks, mt, 0);
  });
  return gr;
}

}  // namespace hyb
