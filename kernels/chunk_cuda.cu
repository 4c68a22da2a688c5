// The chunk toolkit of chunk_cuda.h. Plain fp32 SIMT code, written for correctness first: the GEMM
// is a 64 x 64 output tile per block of 256 threads (16 x 16, each thread 4 x 4 outputs strided by
// 16 so shared-memory reads are conflict-free), the reduction staged through shared memory in
// slices of 32. Operand views may be transposed or strided, so loads are not always coalesced.
#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/chunk_cuda.h"
#include "kernels/cuda_dispatch.cuh"

namespace hyb {

ChunkView ChunkView::t() const {
  ChunkView v = *this;
  std::swap(v.rows, v.cols);
  std::swap(v.sr, v.scol);
  v.tok = tok == 1 ? 2 : (tok == 2 ? 1 : 0);
  return v;
}

ChunkView ChunkView::scaled(const float* s, int64_t sb_, int64_t sh_, int64_t sc_, int64_t st_) const {
  HYB_ASSERT(tok != 0, "a per-token scale needs a token axis");
  ChunkView v = *this;
  v.scale = s, v.ssb = sb_, v.ssh = sh_, v.ssc = sc_, v.sst = st_;
  return v;
}

ChunkView token_view(const Tensor& x, int64_t hdiv) {
  HYB_ASSERT(x.dim() == 4 && x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16),
             "token_view needs a contiguous (B, T, heads, width) f32 or bf16 tensor, got ", x.str());
  const int64_t T = x.size(1), heads = x.size(2), width = x.size(3);
  ChunkView v;
  v.p = x.raw_data();
  v.bf16 = x.dtype() == DType::bf16;
  v.sb = T * heads * width, v.sh = width, v.sc = kScanChunk * heads * width, v.sr = heads * width, v.scol = 1;
  v.rows = kScanChunk, v.cols = int(width);
  v.hdiv = int(hdiv);
  v.tok = 1;
  return v;
}

ChunkBuffer::ChunkBuffer(int64_t B, int64_t H, int64_t slots_, int rows_, int cols_, Device d)
    : t(Tensor::empty({B, H, slots_, rows_, cols_}, DType::f32, d)), slots(slots_), rows(rows_), cols(cols_) {}

ChunkView ChunkBuffer::view(int64_t slot_offset, int tok) const {
  ChunkView v;
  v.p = data() + slot_offset * rows * cols;
  v.sb = t.size(1) * slots * rows * cols, v.sh = slots * rows * cols, v.sc = int64_t(rows) * cols, v.sr = cols,
  v.scol = 1;
  v.rows = rows, v.cols = cols;
  v.tok = tok;
  return v;
}

ChunkView scale_by(const ChunkView& v, const ChunkVec& s) { return v.scaled(s.p(), s.sb(), s.sh(), kScanChunk, 1); }

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 64;   // output tile of the GEMM
constexpr int kSlice = 32;  // reduction slice staged in shared memory

struct Batch {  // (b, h, c) of a flat batch index z in [0, B H nc)
  int64_t b, h, c;
};
__device__ __forceinline__ Batch batch_of(int64_t z, int64_t H, int64_t c0, int64_t nc) {
  return {z / nc / H, (z / nc) % H, c0 + z % nc};
}

__device__ __forceinline__ int64_t view_offset(const ChunkView& v, const Batch& q, int r, int col) {
  return q.b * v.sb + (q.h / v.hdiv) * v.sh + q.c * v.sc + int64_t(r) * v.sr + int64_t(col) * v.scol;
}

// Element (r, col) of batch q, 0 outside the matrix or on a padded token, times the token scale.
__device__ __forceinline__ float view_at(const ChunkView& v, const Batch& q, int r, int col, int64_t T) {
  if (r >= v.rows || col >= v.cols) return 0.f;
  const int tok = v.tok == 1 ? r : (v.tok == 2 ? col : -1);
  if (tok >= 0 && q.c * kScanChunk + tok >= T) return 0.f;
  const int64_t off = view_offset(v, q, r, col);
  float x = v.bf16 ? bf16_to_float(static_cast<const uint16_t*>(v.p)[off]) : static_cast<const float*>(v.p)[off];
  if (v.scale && tok >= 0) x *= v.scale[q.b * v.ssb + q.h * v.ssh + q.c * v.ssc + tok * v.sst];
  return x;
}

__device__ __forceinline__ float* view_ptr(const ChunkView& v, const Batch& q, int r, int col) {
  return const_cast<float*>(static_cast<const float*>(v.p)) + view_offset(v, q, r, col);
}

// out = zs z + alpha x @ y. Grid: one block per (batch, 64 x 64 output tile), flattened in x.
__global__ void chunk_gemm_kernel(ChunkView out, ChunkView x, ChunkView y, ChunkView z, bool has_z,
                                  const float* __restrict__ zlog, float alpha, int64_t T, int64_t H, int64_t NC,
                                  int64_t c0, int64_t nc, int tiles_m, int tiles_n) {
  __shared__ float s_x[kTile][kSlice + 1];  // x[m0 + r, k0 + k]
  __shared__ float s_y[kSlice][kTile + 1];  // y[k0 + k, n0 + n]
  const int tiles = tiles_m * tiles_n;
  const int tile = int(blockIdx.x % tiles);
  const Batch q = batch_of(int64_t(blockIdx.x / tiles), H, c0, nc);
  const int m0 = (tile / tiles_n) * kTile, n0 = (tile % tiles_n) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int M = x.rows, N = y.cols, Kr = x.cols;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < Kr; k0 += kSlice) {
    for (int i = threadIdx.x; i < kTile * kSlice; i += kThreads) {
      const int r = i / kSlice, k = i % kSlice;
      s_x[r][k] = view_at(x, q, m0 + r, k0 + k, T);
    }
    for (int i = threadIdx.x; i < kSlice * kTile; i += kThreads) {
      const int k = i / kTile, n = i % kTile;
      s_y[k][n] = view_at(y, q, k0 + k, n0 + n, T);
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
      if (has_z) v += zs * view_at(z, q, m, n, T);
      *view_ptr(out, q, m, n) = v;
    }
}

// One thread per (b, h, c): the chunk-local cumsum in token order, then the derived vectors.
__global__ void chunk_gates_kernel(const float* __restrict__ g, const float* __restrict__ beta, float* __restrict__ G,
                                   float* __restrict__ gam, float* __restrict__ kd, float* __restrict__ beta_c,
                                   float* __restrict__ bg, float* __restrict__ Glast, int64_t B, int64_t T,
                                   int64_t H, int64_t NC) {
  const int64_t z = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (z >= B * H * NC) return;
  const int64_t c = z % NC, h = (z / NC) % H, b = z / NC / H;
  const int n = int(std::min<int64_t>(kScanChunk, T - c * kScanChunk));
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

// Grid: one block per (b, h, c); block kThreads over the 64 x 64 entries.
__global__ void chunk_mask_kernel(float* a, const float* src, const float* __restrict__ G,
                                  const float* __restrict__ rowscale, bool strict, int64_t T, int64_t NC) {
  const int64_t z = blockIdx.x;
  const int64_t c = z % NC;
  const int n = int(std::min<int64_t>(kScanChunk, T - c * kScanChunk));
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

// Grid: one block per (b, h, c), kScanChunk threads, thread j owns column j. Row r of the inverse
// depends on rows < r only: Ainv[r, j] = -sum_{i=j}^{r-1} m[r, i] Ainv[i, j] for j < r.
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
    const Batch q = batch_of(e / per, H, c0, nc);
    const int r = int((e % per) / dst.cols), col = int(e % dst.cols);
    const float s = slog ? expf(slog[(q.b * H + q.h) * NC + q.c]) : 1.f;
    *view_ptr(dst, q, r, col) += s * view_at(src, q, r, col, T);
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

// buf (B, H, slots, KV) slot `slot` <-> t (B, H, KV).
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

int64_t batches(const ChunkDims& d) { return d.B * d.H * (d.nc ? d.nc : d.NC); }

}  // namespace

void chunk_gemm(const ChunkView& out, const ChunkView& x, const ChunkView& y, const ChunkView* z, const float* zlog,
                float alpha, const ChunkDims& d) {
  HYB_ASSERT(x.cols == y.rows && out.rows >= x.rows && out.cols >= y.cols && !out.bf16 && (!z || !z->bf16),
             "chunk_gemm: shapes (", x.rows, " x ", x.cols, ") @ (", y.rows, " x ", y.cols, ") into (", out.rows,
             " x ", out.cols, ")");
  const int64_t nb = batches(d);
  if (nb == 0 || x.rows == 0 || y.cols == 0) return;
  const int tiles_m = (x.rows + kTile - 1) / kTile, tiles_n = (y.cols + kTile - 1) / kTile;
  const int64_t grid = nb * tiles_m * tiles_n;
  HYB_ASSERT(grid < (int64_t(1) << 31), "chunk_gemm: grid of ", grid, " blocks");
  chunk_gemm_kernel<<<unsigned(grid), kThreads, 0, current_stream(d.device)>>>(
      out, x, y, z ? *z : ChunkView{}, z != nullptr, zlog, alpha, d.T, d.H, d.NC, d.c0, d.nc ? d.nc : d.NC, tiles_m,
      tiles_n);
  HYB_CUDA_LAUNCH_CHECK("chunk_gemm_kernel", grid, kThreads, 0);
}

ChunkGates chunk_gates_cuda(const Tensor& g, const Tensor& beta, const ChunkDims& d) {
  HYB_ASSERT(g.dtype() == DType::f32 && g.is_contiguous() && (!beta.defined() || (beta.dtype() == DType::f32 && beta.is_contiguous())),
             "chunk_gates_cuda: g and beta must be contiguous f32");
  const Device dev = g.device();
  const Shape vec{d.B, d.H, d.NC, kScanChunk};
  ChunkGates r;
  r.G.t = Tensor::empty(vec, DType::f32, dev);
  r.gam.t = Tensor::empty(vec, DType::f32, dev);
  r.kd.t = Tensor::empty(vec, DType::f32, dev);
  if (beta.defined()) {
    r.beta.t = Tensor::empty(vec, DType::f32, dev);
    r.bg.t = Tensor::empty(vec, DType::f32, dev);
  }
  r.Glast = Tensor::empty({d.B, d.H, d.NC}, DType::f32, dev);
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return r;
  const int blocks = int((n + 127) / 128);
  chunk_gates_kernel<<<blocks, 128, 0, current_stream(dev.index)>>>(
      g.data<float>(), beta.defined() ? beta.data<float>() : nullptr, r.G.t.data<float>(), r.gam.t.data<float>(),
      r.kd.t.data<float>(), beta.defined() ? r.beta.t.data<float>() : nullptr,
      beta.defined() ? r.bg.t.data<float>() : nullptr, r.Glast.data<float>(), d.B, d.T, d.H, d.NC);
  HYB_CUDA_LAUNCH_CHECK("chunk_gates_kernel", blocks, 128, 0);
  return r;
}

void chunk_mask(const ChunkBuffer& a, const ChunkGates* decay, const ChunkVec* rowscale, bool strict,
                const ChunkDims& d, const ChunkBuffer* src) {
  HYB_ASSERT(a.rows == kScanChunk && a.cols == kScanChunk && a.slots == d.NC &&
                 (!src || (src->rows == a.rows && src->cols == a.cols && src->slots == a.slots)),
             "chunk_mask: needs chunk x chunk matrices");
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  chunk_mask_kernel<<<unsigned(n), kThreads, 0, current_stream(a.t.device().index)>>>(
      a.data(), src ? src->data() : a.data(), decay ? decay->G.p() : nullptr, rowscale ? rowscale->p() : nullptr, strict, d.T, d.NC);
  HYB_CUDA_LAUNCH_CHECK("chunk_mask_kernel", n, kThreads, 0);
}

void chunk_unit_lower_inverse(const ChunkBuffer& out, const ChunkBuffer& m, const ChunkDims& d) {
  HYB_ASSERT(m.rows == kScanChunk && m.cols == kScanChunk && out.rows == kScanChunk && out.cols == kScanChunk &&
                 m.slots == d.NC && out.slots == d.NC,
             "chunk_unit_lower_inverse: needs chunk x chunk matrices");
  const int64_t n = d.B * d.H * d.NC;
  if (n == 0) return;
  chunk_unit_lower_inverse_kernel<<<unsigned(n), kScanChunk, 0, current_stream(m.t.device().index)>>>(out.data(),
                                                                                                    m.data());
  HYB_CUDA_LAUNCH_CHECK("chunk_unit_lower_inverse_kernel", n, kScanChunk, 0);
}

void chunk_axpy_cuda(const ChunkView& dst, const ChunkView& src, const float* slog, const ChunkDims& d) {
  HYB_ASSERT(dst.rows == src.rows && dst.cols == src.cols && !dst.bf16, "chunk_axpy_cuda: shapes differ");
  const int64_t total = batches(d) * dst.rows * dst.cols;
  if (total == 0) return;
  const int dev = d.device;
  const int blocks = grid_blocks(total, kThreads, dev);
  chunk_axpy_kernel<<<blocks, kThreads, 0, current_stream(dev)>>>(dst, src, slog, d.T, d.H, d.NC, d.c0,
                                                                 d.nc ? d.nc : d.NC, total);
  HYB_CUDA_LAUNCH_CHECK("chunk_axpy_kernel", blocks, kThreads, 0);
}

void chunk_to_tokens(Tensor& out, const ChunkBuffer& buf, int64_t hpg, const ChunkVec* rowscale, float alpha,
                     const ChunkDims& d) {
  HYB_ASSERT(out.dim() == 4 && out.is_contiguous() && out.size(0) == d.B && out.size(1) == d.T &&
                 out.size(2) * hpg == d.H && out.size(3) == buf.cols && buf.rows == kScanChunk && buf.slots == d.NC &&
                 (hpg == 1 || !rowscale),
             "chunk_to_tokens: out ", out.str(), " does not match the chunk buffer");
  const int64_t total = out.numel();
  if (total == 0) return;
  const int dev = out.device().index;
  const int blocks = grid_blocks(total, kThreads, dev);
  visit_cuda_float("chunk_to_tokens", out.dtype(), [&](auto tag) {
    using E = decltype(tag);
    chunk_to_tokens_kernel<E><<<blocks, kThreads, 0, current_stream(dev)>>>(
        out.data<E>(), buf.data(), rowscale ? rowscale->p() : nullptr, alpha, d.B, d.T, out.size(2), hpg, d.NC,
        out.size(3));
    HYB_CUDA_LAUNCH_CHECK("chunk_to_tokens_kernel", blocks, kThreads, 0);
  });
}

void chunk_slot_load(const ChunkBuffer& buf, int64_t slot, const Tensor& src) {
  const int64_t BH = buf.t.size(0) * buf.t.size(1), KV = int64_t(buf.rows) * buf.cols;
  HYB_ASSERT(!src.defined() || (src.dtype() == DType::f32 && src.is_contiguous() && src.numel() == BH * KV),
             "chunk_slot_load: src ", src.str());
  if (BH * KV == 0) return;
  const int dev = buf.t.device().index;
  const int blocks = grid_blocks(BH * KV, kThreads, dev);
  chunk_slot_copy_kernel<<<blocks, kThreads, 0, current_stream(dev)>>>(
      buf.data(), src.defined() ? const_cast<float*>(src.data<float>()) : nullptr, BH, buf.slots, slot, KV, true);
  HYB_CUDA_LAUNCH_CHECK("chunk_slot_copy_kernel", blocks, kThreads, 0);
}

void chunk_slot_store(Tensor& dst, const ChunkBuffer& buf, int64_t slot) {
  const int64_t BH = buf.t.size(0) * buf.t.size(1), KV = int64_t(buf.rows) * buf.cols;
  HYB_ASSERT(dst.dtype() == DType::f32 && dst.is_contiguous() && dst.numel() == BH * KV, "chunk_slot_store: dst ",
             dst.str());
  if (BH * KV == 0) return;
  const int dev = buf.t.device().index;
  const int blocks = grid_blocks(BH * KV, kThreads, dev);
  chunk_slot_copy_kernel<<<blocks, kThreads, 0, current_stream(dev)>>>(buf.data(), dst.data<float>(), BH, buf.slots,
                                                                      slot, KV, false);
  HYB_CUDA_LAUNCH_CHECK("chunk_slot_copy_kernel", blocks, kThreads, 0);
}

}  // namespace hyb
