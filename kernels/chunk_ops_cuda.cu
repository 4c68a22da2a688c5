// CUDA kernels of the chunk toolkit (chunk_ops.h), written for correctness first: plain fp32 SIMT.
// The GEMM computes a 64 x 64 output tile per block of 256 threads (16 x 16, each thread 4 x 4
// outputs strided by 16 so shared-memory reads are conflict-free), staging the reduction through
// shared memory in slices of 32. Operand views may be transposed or strided, so loads are not
// always coalesced. Every other kernel is elementwise or one block per (b, h, chunk).
#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/chunk_ops.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"

namespace hyb {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 64;   // output tile of the GEMM
constexpr int kSlice = 32;  // reduction slice staged in shared memory
static_assert(kTile == 4 * 16 && kThreads == 16 * 16, "the GEMM maps 16 x 16 threads to 4 x 4 outputs each");

// ---------------------------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------------------------

// out = zs z + alpha x @ y per batch. Grid: one block per (batch, 64 x 64 output tile), flattened.
// Each element of out is read (through z, when z aliases out) and written by one thread only.
__global__ void chunk_gemm_kernel(ChunkView out, ChunkView x, ChunkView y, ChunkView z, bool has_z,
                                  const float* __restrict__ zlog, float alpha, int64_t T, int64_t H, int64_t NC,
                                  int64_t c0, int64_t nc, int tiles_m, int tiles_n) {
  __shared__ float s_x[kTile][kSlice + 1];  // x[m0 + r, k0 + k]
  __shared__ float s_y[kSlice][kTile + 1];  // y[k0 + k, n0 + n]
  const int tiles = tiles_m * tiles_n;
  const int tile = int(blockIdx.x % tiles);
  const ChunkBatch q = chunk_batch(int64_t(blockIdx.x / tiles), H, c0, nc);
  const int m0 = (tile / tiles_n) * kTile, n0 = (tile % tiles_n) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int M = x.rows, N = y.cols, Kr = x.cols;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < Kr; k0 += kSlice) {
    for (int i = threadIdx.x; i < kTile * kSlice; i += kThreads) {
      const int r = i / kSlice, k = i % kSlice;
      s_x[r][k] = chunk_at(x, q, m0 + r, k0 + k, T);
    }
    for (int i = threadIdx.x; i < kSlice * kTile; i += kThreads) {
      const int k = i / kTile, n = i % kTile;
      s_y[k][n] = chunk_at(y, q, k0 + k, n0 + n, T);
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kSlice; ++kk) {
      float a[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = s_x[ty + 16 * i][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = s_y[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
    }
    __syncthreads();
  }
  const float zs = zlog ? expf(zlog[(q.b * H + q.h) * NC + q.c]) : 1.f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m >= M || n >= N) continue;
      float v = alpha * acc[i][j];
      if (has_z) v += zs * chunk_at(z, q, m, n, T);
      *chunk_ptr(out, q, m, n) = v;
    }
}

// ---------------------------------------------------------------------------------------------
// Per-chunk vectors and matrices
// ---------------------------------------------------------------------------------------------

// One thread per (b, h, c): the chunk-local cumsum in token order, then the derived vectors.
__global__ void chunk_gates_kernel(const float* __restrict__ g, const float* __restrict__ beta, float* __restrict__ G,
                                   float* __restrict__ gam, float* __restrict__ kd, float* __restrict__ beta_c,
                                   float* __restrict__ bg, float* __restrict__ Glast, int64_t B, int64_t T,
                                   int64_t H, int64_t NC) {
  const int64_t z = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (z >= B * H * NC) return;
  const int64_t c = z % NC, h = (z / NC) % H, b = z / NC / H;
  const int n = chunk_tokens(c, T);
  float* Gz = G + z * kScanChunk;
  float acc = 0.f;
  for (int i = 0; i < kScanChunk; ++i) {
    if (i < n) acc += g[(b * T + c * kScanChunk + i) * H + h];
    Gz[i] = acc;
  }
  Glast[z] = acc;
  for (int i = 0; i < kScanChunk; ++i) {
    const float e = expf(Gz[i]);
    gam[z * kScanChunk + i] = e;
    kd[z * kScanChunk + i] = expf(fminf(acc - Gz[i], 0.f));
    if (beta) {
      const float bt = i < n ? beta[(b * T + c * kScanChunk + i) * H + h] : 0.f;
      beta_c[z * kScanChunk + i] = bt;
      bg[z * kScanChunk + i] = bt * e;
    }
  }
}

// Grid: one block per (b, h, c); kThreads threads over the 64 x 64 entries. a may equal src.
__global__ void chunk_mask_kernel(float* a, const float* src, const float* __restrict__ G,
                                  const float* __restrict__ rowscale, bool strict, int64_t T, int64_t NC) {
  const int64_t z = blockIdx.x;
  const int n = chunk_tokens(z % NC, T);
  float* az = a + z * kScanChunk * kScanChunk;
  const float* sz = src + z * kScanChunk * kScanChunk;
  const float* Gz = G ? G + z * kScanChunk : nullptr;
  const float* rz = rowscale ? rowscale + z * kScanChunk : nullptr;
  for (int e = threadIdx.x; e < kScanChunk * kScanChunk; e += blockDim.x) {
    const int r = e / kScanChunk, i = e % kScanChunk;
    if (i > r || (strict && i == r) || r >= n || i >= n) {
      az[e] = 0.f;
      continue;
    }
    float f = Gz ? expf(fminf(Gz[r] - Gz[i], 0.f)) : 1.f;
    if (rz) f *= rz[r];
    az[e] = sz[e] * f;
  }
}

// Grid: one block per (b, h, c), kScanChunk threads; thread j owns column j. Row r of the inverse
// needs rows < r only: inv[r, j] = -sum_{i=j}^{r-1} m[r, i] inv[i, j] for j < r. smem 33 KiB.
__global__ void chunk_unit_lower_inverse_kernel(float* __restrict__ out, const float* __restrict__ m) {
  __shared__ float s_m[kScanChunk][kScanChunk + 1];
  __shared__ float s_inv[kScanChunk][kScanChunk + 1];
  const int64_t z = blockIdx.x;
  const float* mz = m + z * kScanChunk * kScanChunk;
  const int j = threadIdx.x;
  for (int r = 0; r < kScanChunk; ++r) {
    s_m[r][j] = mz[r * kScanChunk + j];
    s_inv[r][j] = r == j ? 1.f : 0.f;
  }
  __syncthreads();
  for (int r = 1; r < kScanChunk; ++r) {
    if (j < r) {
      float acc = 0.f;
      for (int i = j; i < r; ++i) acc += s_m[r][i] * s_inv[i][j];
      s_inv[r][j] = -acc;
    }
    __syncthreads();
  }
  float* oz = out + z * kScanChunk * kScanChunk;
  for (int r = 0; r < kScanChunk; ++r) oz[r * kScanChunk + j] = s_inv[r][j];
}

__global__ void chunk_axpy_kernel(ChunkView dst, ChunkView src, const float* __restrict__ slog, int64_t T, int64_t H,
                                  int64_t NC, int64_t c0, int64_t nc, int64_t total) {
  const int64_t per = int64_t(dst.rows) * dst.cols;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const ChunkBatch q = chunk_batch(e / per, H, c0, nc);
    const int r = int((e % per) / dst.cols), col = int(e % dst.cols);
    const float s = slog ? expf(slog[(q.b * H + q.h) * NC + q.c]) : 1.f;
    *chunk_ptr(dst, q, r, col) += s * chunk_at(src, q, r, col, T);
  }
}

// One thread per (b, h, e) of the K V state entries, sequential over chunks in fp32.
__global__ void chunk_state_scan_kernel(float* __restrict__ states, const float* __restrict__ Glast, int64_t BH,
                                        int64_t NC, int64_t KV, bool reverse) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < BH * KV; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / KV, e = i % KV;
    float* s = states + bh * (NC + 1) * KV + e;
    const float* gl = Glast + bh * NC;
    if (reverse) {
      float acc = s[NC * KV];
      for (int64_t c = NC - 1; c >= 0; --c) {
        acc = s[c * KV] + expf(gl[c]) * acc;
        s[c * KV] = acc;
      }
    } else {
      float acc = s[0];
      for (int64_t c = 0; c < NC; ++c) {
        acc = s[(c + 1) * KV] + expf(gl[c]) * acc;
        s[(c + 1) * KV] = acc;
      }
    }
  }
}

// chunk_delta_scan: grid (B H, ceil(V / 64)), kThreads = 16 x 16 threads; one block owns 64 columns
// of one (b, h) state and walks the chunks in order, the state tile staying in shared memory.
// smem (dynamic): s_S [Kp][65] (K rounded up to 64, rows >= K stay 0), s_T [64][65], s_stage [64][33].
// Phase A: T_c tile = T_c + sign_a A_c @ S (reduction over K in slices of 32 staged from A).
// Phase B: S = exp(Glast_c) S + sign_b Bm_c @ T_c (+ slot c when reverse), by row tiles of 64; each S
// element is read and written by one thread, and phase B reads only s_T and the staged Bm.
__global__ void chunk_delta_scan_kernel(float* __restrict__ states, float* __restrict__ Tb, ChunkView A, float sign_a,
                                        ChunkView Bm, float sign_b, const float* __restrict__ Glast, bool reverse,
                                        int64_t T, int64_t H, int64_t NC, int K, int Kp, int V) {
  extern __shared__ float s_mem[];
  float* s_S = s_mem;                        // [Kp][kTile + 1]
  float* s_T = s_S + Kp * (kTile + 1);       // [kTile][kTile + 1]
  float* s_st = s_T + kTile * (kTile + 1);   // [kTile][kSlice + 1]
  constexpr int ldS = kTile + 1, ldT = kTile + 1, ldst = kSlice + 1;
  const int64_t bh = blockIdx.x, b = bh / H, h = bh % H;
  const int v0 = int(blockIdx.y) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t KV = int64_t(K) * V;
  float* st = states + bh * (NC + 1) * KV;  // slot s at st + s KV
  float* tb = Tb + bh * NC * kScanChunk * V;  // chunk c at tb + c kScanChunk V
  {
    const float* init = st + (reverse ? NC : 0) * KV;
    for (int e = threadIdx.x; e < Kp * kTile; e += kThreads) {
      const int m = e / kTile, n = e % kTile;
      s_S[m * ldS + n] = (m < K && v0 + n < V) ? init[int64_t(m) * V + v0 + n] : 0.f;
    }
  }
  __syncthreads();
  for (int64_t step = 0; step < NC; ++step) {
    const int64_t c = reverse ? NC - 1 - step : step;
    const ChunkBatch q{b, h, c};
    // Phase A.
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += kSlice) {
      for (int i = threadIdx.x; i < kTile * kSlice; i += kThreads) {
        const int r = i / kSlice, k = i % kSlice;
        s_st[r * ldst + k] = chunk_at(A, q, r, k0 + k, T);
      }
      __syncthreads();
      for (int kk = 0; kk < kSlice; ++kk) {
        float a[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = s_st[(ty + 16 * i) * ldst + kk];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = s_S[(k0 + kk) * ldS + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
      }
      __syncthreads();
    }
    float* tc = tb + c * kScanChunk * V;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int m = ty + 16 * i, n = tx + 16 * j;
        float val = 0.f;
        if (v0 + n < V) {
          val = tc[int64_t(m) * V + v0 + n] + sign_a * acc[i][j];
          tc[int64_t(m) * V + v0 + n] = val;
        }
        s_T[m * ldT + n] = val;
      }
    __syncthreads();
    // Phase B.
    const float decay = expf(Glast[bh * NC + c]);
    float* out = st + (reverse ? c : c + 1) * KV;
    for (int m0 = 0; m0 < K; m0 += kTile) {
      float acc2[4][4] = {};
      for (int k0 = 0; k0 < kScanChunk; k0 += kSlice) {
        for (int i = threadIdx.x; i < kTile * kSlice; i += kThreads) {
          const int r = i / kSlice, k = i % kSlice;
          s_st[r * ldst + k] = chunk_at(Bm, q, m0 + r, k0 + k, T);
        }
        __syncthreads();
        for (int kk = 0; kk < kSlice; ++kk) {
          float a[4], bv[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = s_st[(ty + 16 * i) * ldst + kk];
#pragma unroll
          for (int j = 0; j < 4; ++j) bv[j] = s_T[(k0 + kk) * ldT + tx + 16 * j];
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc2[i][j] += a[i] * bv[j];
        }
        __syncthreads();
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int m = m0 + ty + 16 * i, n = tx + 16 * j;
          if (m >= K || v0 + n >= V) continue;
          float val = decay * s_S[m * ldS + n] + sign_b * acc2[i][j];
          if (reverse) val += out[int64_t(m) * V + v0 + n];
          s_S[m * ldS + n] = val;
          out[int64_t(m) * V + v0 + n] = val;
        }
    }
    __syncthreads();
  }
}

// Grid: one block per (b, h, c), kThreads threads; warp w takes rows w, w + 8, ...; lanes stride the
// columns and reduce by shuffles, so each row's sum has a fixed order.
__global__ void chunk_rowdot_kernel(float* __restrict__ vec, ChunkView x, ChunkView y, float alpha, int64_t T,
                                    int64_t H, int64_t NC) {
  const int64_t z = blockIdx.x;
  const ChunkBatch q = chunk_batch(z, H, 0, NC);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int r = warp; r < kScanChunk; r += kThreads / kWarpSize) {
    float acc = 0.f;
    for (int col = lane; col < x.cols; col += kWarpSize) acc += chunk_at(x, q, r, col, T) * chunk_at(y, q, r, col, T);
    acc = warp_reduce_sum(acc);
    if (lane == 0) vec[z * kScanChunk + r] += alpha * acc;
  }
}

// Grid: one block per (b, h, c), kThreads threads; block-wide sum of a .* b into the last valid row.
__global__ void chunk_inner_last_kernel(float* __restrict__ vec, ChunkView a, ChunkView b, int64_t T, int64_t H,
                                        int64_t NC) {
  const int64_t z = blockIdx.x;
  const ChunkBatch q = chunk_batch(z, H, 0, NC);
  const int64_t per = int64_t(a.rows) * a.cols;
  float acc = 0.f;
  for (int64_t e = threadIdx.x; e < per; e += blockDim.x) {
    const int r = int(e / a.cols), col = int(e % a.cols);
    acc += chunk_at(a, q, r, col, T) * chunk_at(b, q, r, col, T);
  }
  acc = block_reduce_sum(acc);
  if (threadIdx.x == 0) vec[z * kScanChunk + chunk_tokens(q.c, T) - 1] += acc;
}

// One thread per (b, h, c), rows from last to first.
__global__ void chunk_vec_to_tokens_kernel(float* __restrict__ out, const float* __restrict__ vec, bool reverse_cumsum,
                                           int64_t B, int64_t T, int64_t H, int64_t NC) {
  const int64_t z = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (z >= B * H * NC) return;
  const int64_t c = z % NC, h = (z / NC) % H, b = z / NC / H;
  float run = 0.f;
  for (int r = chunk_tokens(c, T) - 1; r >= 0; --r) {
    const float v = vec[z * kScanChunk + r];
    run = reverse_cumsum ? run + v : v;
    out[(b * T + c * kScanChunk + r) * H + h] = run;
  }
}

// out (B, T, Ho, width); buf (B, Ho hpg, NC, kScanChunk, width).
template <typename E>
__global__ void chunk_to_tokens_kernel(E* __restrict__ out, const float* __restrict__ buf,
                                       const float* __restrict__ rowscale, float alpha, int64_t B, int64_t T,
                                       int64_t Ho, int64_t hpg, int64_t NC, int64_t width) {
  const int64_t total = B * T * Ho * width;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = e % width, ho = (e / width) % Ho, t = (e / width / Ho) % T, b = e / width / Ho / T;
    const int64_t c = t / kScanChunk, r = t % kScanChunk;
    float s = 0.f;
    for (int64_t h = ho * hpg; h < (ho + 1) * hpg; ++h) {
      const int64_t z = (b * Ho * hpg + h) * NC + c;
      float v = buf[(z * kScanChunk + r) * width + x];
      if (rowscale) v *= rowscale[z * kScanChunk + r];
      s += v;
    }
    out[e] = from_f32<E>(alpha * s);
  }
}

// buf (B, H, slots, KV) slot `slot` <-> t (B, H, KV); t null with to_buf: zeros.
__global__ void chunk_slot_copy_kernel(float* __restrict__ buf, float* __restrict__ t, int64_t BH, int64_t slots,
                                       int64_t slot, int64_t KV, bool to_buf) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < BH * KV; e += int64_t(gridDim.x) * blockDim.x) {
    float* pb = buf + ((e / KV) * slots + slot) * KV + e % KV;
    if (to_buf)
      *pb = t ? t[e] : 0.f;
    else
      t[e] = *pb;
  }
}

cudaStream_t stream_of(const ChunkDims& d) { return current_stream(d.device.index); }

}  // namespace

namespace chunk_cuda {

void gemm(const ChunkView& out, const ChunkView& x, const ChunkView& y, const ChunkView* z, const float* zlog,
          float alpha, const ChunkDims& d) {
  const int64_t nb = d.batches();
  if (nb == 0 || x.rows == 0 || y.cols == 0) return;
  const int tiles_m = (x.rows + kTile - 1) / kTile, tiles_n = (y.cols + kTile - 1) / kTile;
  const int64_t grid = nb * tiles_m * tiles_n;
  HYB_ASSERT(grid < (int64_t(1) << 31), "chunk_gemm: grid of ", grid, " blocks");
  chunk_gemm_kernel<<<unsigned(grid), kThreads, 0, stream_of(d)>>>(out, x, y, z ? *z : ChunkView{}, z != nullptr,
                                                                    zlog, alpha, d.T, d.H, d.NC, d.c0, d.chunks(),
                                                                    tiles_m, tiles_n);
  HYB_CUDA_LAUNCH_CHECK("chunk_gemm_kernel", grid, kThreads, 0);
}

void gates(const ChunkGates& r, const Tensor& g, const Tensor& beta, const ChunkDims& d) {
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  const int blocks = int((n + 127) / 128);
  chunk_gates_kernel<<<blocks, 128, 0, stream_of(d)>>>(
      g.data<float>(), beta.defined() ? beta.data<float>() : nullptr, r.G.p(), r.gam.p(), r.kd.p(),
      beta.defined() ? r.beta.p() : nullptr, beta.defined() ? r.bg.p() : nullptr, r.Glast.data<float>(), d.B, d.T,
      d.H, d.NC);
  HYB_CUDA_LAUNCH_CHECK("chunk_gates_kernel", blocks, 128, 0);
}

void mask(float* a, const float* src, const float* G, const float* rowscale, bool strict, const ChunkDims& d) {
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  chunk_mask_kernel<<<unsigned(n), kThreads, 0, stream_of(d)>>>(a, src, G, rowscale, strict, d.T, d.NC);
  HYB_CUDA_LAUNCH_CHECK("chunk_mask_kernel", n, kThreads, 0);
}

void unit_lower_inverse(float* out, const float* m, const ChunkDims& d) {
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  chunk_unit_lower_inverse_kernel<<<unsigned(n), kScanChunk, 0, stream_of(d)>>>(out, m);
  HYB_CUDA_LAUNCH_CHECK("chunk_unit_lower_inverse_kernel", n, kScanChunk, 0);
}

void axpy(const ChunkView& dst, const ChunkView& src, const float* slog, const ChunkDims& d) {
  const int64_t total = d.batches() * dst.rows * dst.cols;
  if (total == 0) return;
  const int blocks = grid_blocks(total, kThreads, d.device.index);
  chunk_axpy_kernel<<<blocks, kThreads, 0, stream_of(d)>>>(dst, src, slog, d.T, d.H, d.NC, d.c0, d.chunks(), total);
  HYB_CUDA_LAUNCH_CHECK("chunk_axpy_kernel", blocks, kThreads, 0);
}

void state_scan(float* states, const float* Glast, int64_t KV, bool reverse, const ChunkDims& d) {
  const int64_t n = d.B * d.H * KV;
  if (n == 0 || d.NC == 0) return;
  const int blocks = grid_blocks(n, kThreads, d.device.index);
  chunk_state_scan_kernel<<<blocks, kThreads, 0, stream_of(d)>>>(states, Glast, d.B * d.H, d.NC, KV, reverse);
  HYB_CUDA_LAUNCH_CHECK("chunk_state_scan_kernel", blocks, kThreads, 0);
}

void delta_scan(float* states, float* T, int64_t K, int64_t V, const ChunkView& A, float sign_a, const ChunkView& Bm,
                float sign_b, const float* Glast, bool reverse, const ChunkDims& d) {
  HYB_CHECK(K <= 256, "chunk_delta_scan: K = ", K, " exceeds the 256 rows of the shared-memory state tile");
  if (d.B * d.H == 0 || V == 0 || d.NC == 0) return;
  const int Kp = int((K + kTile - 1) / kTile) * kTile;
  const size_t smem = (size_t(Kp) * (kTile + 1) + size_t(kTile) * (kTile + 1) + size_t(kTile) * (kSlice + 1)) * sizeof(float);
  HYB_CUDA_CHECK(cudaFuncSetAttribute(chunk_delta_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned(d.B * d.H), unsigned((V + kTile - 1) / kTile));
  chunk_delta_scan_kernel<<<grid, kThreads, smem, stream_of(d)>>>(states, T, A, sign_a, Bm, sign_b, Glast, reverse,
                                                                  d.T, d.H, d.NC, int(K), Kp, int(V));
  HYB_CUDA_LAUNCH_CHECK("chunk_delta_scan_kernel", grid, kThreads, smem);
}

void rowdot(float* vec, const ChunkView& x, const ChunkView& y, float alpha, const ChunkDims& d) {
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  chunk_rowdot_kernel<<<unsigned(n), kThreads, 0, stream_of(d)>>>(vec, x, y, alpha, d.T, d.H, d.NC);
  HYB_CUDA_LAUNCH_CHECK("chunk_rowdot_kernel", n, kThreads, 0);
}

void inner_last(float* vec, const ChunkView& a, const ChunkView& b, const ChunkDims& d) {
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  chunk_inner_last_kernel<<<unsigned(n), kThreads, 0, stream_of(d)>>>(vec, a, b, d.T, d.H, d.NC);
  HYB_CUDA_LAUNCH_CHECK("chunk_inner_last_kernel", n, kThreads, 0);
}

void vec_to_tokens(float* out, const float* vec, bool reverse_cumsum, const ChunkDims& d) {
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  const int blocks = int((n + 127) / 128);
  chunk_vec_to_tokens_kernel<<<blocks, 128, 0, stream_of(d)>>>(out, vec, reverse_cumsum, d.B, d.T, d.H, d.NC);
  HYB_CUDA_LAUNCH_CHECK("chunk_vec_to_tokens_kernel", blocks, 128, 0);
}

void to_tokens(Tensor& out, const float* buf, int64_t width, int64_t hpg, const float* rowscale, float alpha,
               const ChunkDims& d) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const int blocks = grid_blocks(total, kThreads, d.device.index);
  visit_cuda_float("chunk_to_tokens", out.dtype(), [&](auto tag) {
    using E = decltype(tag);
    chunk_to_tokens_kernel<E><<<blocks, kThreads, 0, stream_of(d)>>>(out.data<E>(), buf, rowscale, alpha, d.B, d.T,
                                                                     out.size(2), hpg, d.NC, width);
    HYB_CUDA_LAUNCH_CHECK("chunk_to_tokens_kernel", blocks, kThreads, 0);
  });
}

void slot_copy(float* buf, float* t, int64_t BH, int64_t slots, int64_t slot, int64_t KV, bool to_buf, int device) {
  if (BH * KV == 0) return;
  const int blocks = grid_blocks(BH * KV, kThreads, device);
  chunk_slot_copy_kernel<<<blocks, kThreads, 0, current_stream(device)>>>(buf, t, BH, slots, slot, KV, to_buf);
  HYB_CUDA_LAUNCH_CHECK("chunk_slot_copy_kernel", blocks, kThreads, 0);
}

}  // namespace chunk_cuda

}  // namespace hyb
