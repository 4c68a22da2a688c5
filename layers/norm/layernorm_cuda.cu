// CUDA LayerNorm (layernorm_op.h has the math), statistics in fp32, a warp per row, loads and stores
// of V elements at a time (16-byte packs when the row width and pointers allow, kernels/vector_io.cuh):
//  - rows of at most 2 * 32 * V elements: the lane's packs of x (and of dy) stay in registers, so
//    each is read once;
//  - wider or unpacked rows: the warp strides the row and re-reads it for each pass.
// The variance is the mean of (x - mean)^2 in a second pass, never E[x^2] - mean^2, which cancels when
// |mean| >> std. dw and db are reduced deterministically, with no float atomics: a block sums its rows
// per column in a fixed order into one partial row (the register kernel fused with dx; for wide rows
// a separate column-tiled kernel, since a warp's shared row of C floats would cap the width), and
// column_sum_kernel (kernels/reduce.cuh) adds the partials in a fixed order.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "kernels/vector_io.cuh"
#include "layers/norm/layernorm_op.h"

namespace hyb {
namespace {

constexpr int kRowsPerBlock = 8;    // warps per block, one row each
constexpr int kMaxCachedIters = 2;  // packs a lane keeps in registers per stream (x, dy)
// layernorm_backward_params_kernel: 32 columns by kParamRows rows of threads.
constexpr int kParamRows = 8;

template <typename T>
struct LayerNormForwardParams {
  const T* x;    // (rows, C)
  const T* w;    // (C,)
  const T* b;    // (C,)
  T* y;          // (rows, C)
  float* mean;   // (rows,), or null under no-grad
  float* rstd;   // (rows,), or null under no-grad
  int64_t rows;
  int C;
  float eps;
};

template <typename T>
struct LayerNormBackwardParams {
  const T* x;            // (rows, C)
  const T* w;            // (C,)
  const T* dy;           // (rows, C)
  const float* mean;     // (rows,)
  const float* rstd;     // (rows,)
  T* dx;                 // (rows, C), or null when not wanted
  float* dw_partial;     // (partials, C): sums of dy * xhat over a block's rows, or null
  float* db_partial;     // (partials, C): sums of dy over a block's rows, or null
  int64_t rows;
  int C;
};

// ---------------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------------

// Rows of at most 32 * V * kIters elements, a warp each: lane columns (k * 32 + lane) * V for
// k < kIters, where below C, held in registers across the three passes (mean, variance, output).
template <typename T, int V, int kIters>
__global__ void layernorm_forward_cached_kernel(LayerNormForwardParams<T> p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= p.rows) return;
  const int C = p.C;
  const T* xr = p.x + row * C;
  float xv[kIters][V];
  float s = 0;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (k * kWarpSize + lane) * V;
    if (c < C) {
      load_f32(xr + c, xv[k]);
#pragma unroll
      for (int j = 0; j < V; ++j) s += xv[k][j];
    }
  }
  const float mu = warp_reduce_sum(s) / float(C);
  float ss = 0;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (k * kWarpSize + lane) * V;
    if (c < C)
#pragma unroll
      for (int j = 0; j < V; ++j) ss += (xv[k][j] - mu) * (xv[k][j] - mu);
  }
  const float rs = rsqrtf(warp_reduce_sum(ss) / float(C) + p.eps);
  if (lane == 0 && p.mean) p.mean[row] = mu;
  if (lane == 0 && p.rstd) p.rstd[row] = rs;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (k * kWarpSize + lane) * V;
    if (c < C) {
      float wv[V], bv[V], yv[V];
      load_f32(p.w + c, wv);
      load_f32(p.b + c, bv);
#pragma unroll
      for (int j = 0; j < V; ++j) yv[j] = wv[j] * ((xv[k][j] - mu) * rs) + bv[j];
      store_f32(p.y + row * C + c, yv);
    }
  }
}

// Any row width, a warp per row striding it; the row is read three times (the later passes mostly
// from L1/L2).
template <typename T, int V>
__global__ void layernorm_forward_kernel(LayerNormForwardParams<T> p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= p.rows) return;
  const int C = p.C;
  const T* xr = p.x + row * C;
  float s = 0;
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    float xv[V];
    load_f32(xr + c, xv);
#pragma unroll
    for (int j = 0; j < V; ++j) s += xv[j];
  }
  const float mu = warp_reduce_sum(s) / float(C);
  float ss = 0;
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    float xv[V];
    load_f32(xr + c, xv);
#pragma unroll
    for (int j = 0; j < V; ++j) ss += (xv[j] - mu) * (xv[j] - mu);
  }
  const float rs = rsqrtf(warp_reduce_sum(ss) / float(C) + p.eps);
  if (lane == 0 && p.mean) p.mean[row] = mu;
  if (lane == 0 && p.rstd) p.rstd[row] = rs;
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    float xv[V], wv[V], bv[V], yv[V];
    load_f32(xr + c, xv);
    load_f32(p.w + c, wv);
    load_f32(p.b + c, bv);
#pragma unroll
    for (int j = 0; j < V; ++j) yv[j] = wv[j] * ((xv[j] - mu) * rs) + bv[j];
    store_f32(p.y + row * C + c, yv);
  }
}

// ---------------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------------

// dx, dw and db for rows of at most 32 * V * kIters elements: warps take rows grid-stride, a lane
// holds its packs of xhat and dy in registers (one read of x and dy) and its columns' dw and db sums
// across all its rows; the block then adds its warps' sums in warp order through s_sum into partial
// row blockIdx.x. Lane columns as in the forward. Shared memory: 2 C floats when dw or db is wanted.
template <typename T, int V, int kIters>
__global__ void layernorm_backward_cached_kernel(LayerNormBackwardParams<T> p) {
  extern __shared__ float s_sum[];  // (2, C): dw sums, then db sums
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const int C = p.C;
  float dw[kIters][V], db[kIters][V];
#pragma unroll
  for (int k = 0; k < kIters; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) dw[k][j] = db[k][j] = 0.f;
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < p.rows; row += int64_t(gridDim.x) * warps) {
    const float mu = p.mean[row], rs = p.rstd[row];
    // Zero past C, so those columns add nothing to any sum.
    float xh[kIters][V], gv[kIters][V];
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int c = (k * kWarpSize + lane) * V;
      if (c < C) {
        load_f32(p.x + row * C + c, xh[k]);
        load_f32(p.dy + row * C + c, gv[k]);
#pragma unroll
        for (int j = 0; j < V; ++j) xh[k][j] = (xh[k][j] - mu) * rs;
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) xh[k][j] = gv[k][j] = 0.f;
      }
    }
    if (p.dx) {
      float mg = 0, mgx = 0;  // mean(g) and mean(g * xhat), g = dy * w
#pragma unroll
      for (int k = 0; k < kIters; ++k) {
        const int c = (k * kWarpSize + lane) * V;
        if (c < C) {
          float wv[V];
          load_f32(p.w + c, wv);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            mg += gv[k][j] * wv[j];
            mgx += gv[k][j] * wv[j] * xh[k][j];
          }
        }
      }
      mg = warp_reduce_sum(mg) / float(C);
      mgx = warp_reduce_sum(mgx) / float(C);
#pragma unroll
      for (int k = 0; k < kIters; ++k) {
        const int c = (k * kWarpSize + lane) * V;
        if (c < C) {
          float wv[V], out[V];
          load_f32(p.w + c, wv);
#pragma unroll
          for (int j = 0; j < V; ++j) out[j] = rs * (gv[k][j] * wv[j] - mg - xh[k][j] * mgx);
          store_f32(p.dx + row * C + c, out);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kIters; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j) {
        dw[k][j] += gv[k][j] * xh[k][j];
        db[k][j] += gv[k][j];
      }
  }
  if (!p.dw_partial && !p.db_partial) return;
  for (int k = 0; k < warps; ++k) {
    if (warp == k)
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int c = (i * kWarpSize + lane) * V;
        if (c < C)
#pragma unroll
          for (int j = 0; j < V; ++j) {
            s_sum[c + j] = k == 0 ? dw[i][j] : s_sum[c + j] + dw[i][j];
            s_sum[C + c + j] = k == 0 ? db[i][j] : s_sum[C + c + j] + db[i][j];
          }
      }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    if (p.dw_partial) p.dw_partial[int64_t(blockIdx.x) * C + c] = s_sum[c];
    if (p.db_partial) p.db_partial[int64_t(blockIdx.x) * C + c] = s_sum[C + c];
  }
}

// dx alone for any row width: a warp per row (kRowsPerBlock rows a block) striding it, one pass for
// mean(g) and mean(g * xhat), a second for dx.
template <typename T, int V>
__global__ void layernorm_backward_kernel(LayerNormBackwardParams<T> p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= p.rows) return;
  const int C = p.C;
  const T* xr = p.x + row * C;
  const T* gr = p.dy + row * C;
  const float mu = p.mean[row], rs = p.rstd[row];
  float mg = 0, mgx = 0;
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    float xv[V], gv[V], wv[V];
    load_f32(xr + c, xv);
    load_f32(gr + c, gv);
    load_f32(p.w + c, wv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mg += gv[j] * wv[j];
      mgx += gv[j] * wv[j] * (xv[j] - mu) * rs;
    }
  }
  mg = warp_reduce_sum(mg) / float(C);
  mgx = warp_reduce_sum(mgx) / float(C);
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    float xv[V], gv[V], wv[V], out[V];
    load_f32(xr + c, xv);
    load_f32(gr + c, gv);
    load_f32(p.w + c, wv);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = rs * (gv[j] * wv[j] - mg - (xv[j] - mu) * rs * mgx);
    store_f32(p.dx + row * C + c, out);
  }
}

// dw and db partials for any row width. Block (32, kParamRows) takes 32 columns (blockIdx.x); its
// thread (tx, ty) sums rows ty + kParamRows (blockIdx.y + gridDim.y k), k = 0, 1, ..., of column
// 32 blockIdx.x + tx (a warp reads 32 consecutive elements of a row); the kParamRows sums are then
// added in ty order into partial row blockIdx.y.
template <typename T>
__global__ void layernorm_backward_params_kernel(LayerNormBackwardParams<T> p) {
  __shared__ float s_dw[kParamRows][kWarpSize + 1], s_db[kParamRows][kWarpSize + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * kWarpSize + tx;
  float dw = 0, db = 0;
  if (c < p.C)
    for (int64_t row = int64_t(blockIdx.y) * kParamRows + ty; row < p.rows; row += int64_t(gridDim.y) * kParamRows) {
      const float g = to_f32(p.dy[row * p.C + c]);
      dw += g * (to_f32(p.x[row * p.C + c]) - p.mean[row]) * p.rstd[row];
      db += g;
    }
  s_dw[ty][tx] = dw;
  s_db[ty][tx] = db;
  __syncthreads();
  if (ty != 0 || c >= p.C) return;
  for (int k = 1; k < kParamRows; ++k) {
    dw += s_dw[k][tx];
    db += s_db[k][tx];
  }
  if (p.dw_partial) p.dw_partial[int64_t(blockIdx.y) * p.C + c] = dw;
  if (p.db_partial) p.db_partial[int64_t(blockIdx.y) * p.C + c] = db;
}

}  // namespace

Tensor layernorm_forward_cuda(const Tensor& x0, const Tensor& w0, const Tensor& b0, double eps, Tensor* mean_out,
                              Tensor* rstd_out) {
  Tensor x = x0.contiguous(), w = w0.contiguous(), b = b0.contiguous();
  HYB_CHECK(w.dtype() == x.dtype() && b.dtype() == x.dtype(), "layernorm_forward_cuda: x is ", dtype_name(x.dtype()),
            " but weight is ", dtype_name(w.dtype()), " and bias ", dtype_name(b.dtype()));
  const int C = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(C, 1);
  const int dev = x.device().index;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean, rstd;
  if (mean_out) mean = Tensor::empty({rows}, DType::f32, x.device());
  if (rstd_out) rstd = Tensor::empty({rows}, DType::f32, x.device());
  if (rows > 0 && C > 0) {
    visit_cuda_float("layernorm_forward_cuda", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const LayerNormForwardParams<T> p{x.data<T>(),
                                        w.data<T>(),
                                        b.data<T>(),
                                        y.data<T>(),
                                        mean_out ? mean.data<float>() : nullptr,
                                        rstd_out ? rstd.data<float>() : nullptr,
                                        rows,
                                        C,
                                        float(eps)};
      const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
      auto launch = [&](auto kernel, const char* name) {
        kernel<<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(p);
        HYB_CUDA_LAUNCH_CHECK(name, blocks, kRowsPerBlock * kWarpSize, 0);
      };
      constexpr int P = kPack16<T>;
      const int V = pack_width<T>(C, {p.x, p.w, p.b, p.y});
      if (V == P && C <= kWarpSize * P)
        launch(layernorm_forward_cached_kernel<T, P, 1>, "layernorm_forward_cached_kernel");
      else if (V == P && C <= kMaxCachedIters * kWarpSize * P)
        launch(layernorm_forward_cached_kernel<T, P, kMaxCachedIters>, "layernorm_forward_cached_kernel");
      else if (V == P)
        launch(layernorm_forward_kernel<T, P>, "layernorm_forward_kernel");
      else if (C <= kWarpSize)
        launch(layernorm_forward_cached_kernel<T, 1, 1>, "layernorm_forward_cached_kernel");
      else if (C <= kMaxCachedIters * kWarpSize)
        launch(layernorm_forward_cached_kernel<T, 1, kMaxCachedIters>, "layernorm_forward_cached_kernel");
      else
        launch(layernorm_forward_kernel<T, 1>, "layernorm_forward_kernel");
    });
  }
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
  return y;
}

LayerNormGrads layernorm_backward_cuda(const LayerNormSaved& s, const Tensor& dy0, GradMask needed) {
  Tensor x = s.x.contiguous(), dy = dy0.contiguous(), w = s.w.contiguous();
  HYB_CHECK(dy.dtype() == x.dtype(), "layernorm_backward_cuda: x is ", dtype_name(x.dtype()), " but dy is ",
            dtype_name(dy.dtype()));
  const int C = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(C, 1);
  const int dev = x.device().index;
  LayerNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (needed[1]) g.dw = Tensor::empty({C}, w.dtype(), x.device());
  if (needed[2]) g.db = Tensor::empty({C}, w.dtype(), x.device());
  if (rows == 0 || C == 0) {
    if (needed[1]) g.dw.zero_();
    if (needed[2]) g.db.zero_();
    return g;
  }
  visit_cuda_float("layernorm_backward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormBackwardParams<T> p{x.data<T>(),
                                 w.data<T>(),
                                 dy.data<T>(),
                                 s.mean.data<float>(),
                                 s.rstd.data<float>(),
                                 needed[0] ? g.dx.data<T>() : nullptr,
                                 nullptr,
                                 nullptr,
                                 rows,
                                 C};
    // Partials of `partials` rows, then their fixed-order column sums into dw and db.
    Tensor dw_partial, db_partial;
    auto alloc_partials = [&](int partials) {
      if (needed[1]) dw_partial = Tensor::empty({partials, C}, DType::f32, x.device());
      if (needed[2]) db_partial = Tensor::empty({partials, C}, DType::f32, x.device());
      p.dw_partial = needed[1] ? dw_partial.data<float>() : nullptr;
      p.db_partial = needed[2] ? db_partial.data<float>() : nullptr;
    };
    auto column_sum = [&](const Tensor& partial, Tensor& out, int partials) {
      column_sum_kernel<T><<<column_sum_blocks(C), column_sum_threads(partials), 0, current_stream(dev)>>>(
          partial.data<float>(), out.data<T>(), partials, C, 1.f);
      HYB_CUDA_LAUNCH_CHECK("column_sum_kernel (layernorm dw, db)", column_sum_blocks(C), column_sum_threads(partials), 0);
    };
    auto reduce_partials = [&](int partials) {
      if (needed[1]) column_sum(dw_partial, g.dw, partials);
      if (needed[2]) column_sum(db_partial, g.db, partials);
    };
    constexpr int P = kPack16<T>;
    const int V = pack_width<T>(C, {p.x, p.w, p.dy, p.dx});
    const int threads = kRowsPerBlock * kWarpSize;
    // Enough blocks to fill every SM at the kernel's occupancy, and no more: each adds one partial row.
    auto launch_cached = [&](auto kernel) {
      const size_t smem = needed[1] || needed[2] ? 2 * size_t(C) * sizeof(float) : 0;
      const int blocks = grid_blocks_for(kernel, (rows + kRowsPerBlock - 1) / kRowsPerBlock * threads, threads, smem, dev);
      alloc_partials(blocks);
      kernel<<<blocks, threads, smem, current_stream(dev)>>>(p);
      HYB_CUDA_LAUNCH_CHECK("layernorm_backward_cached_kernel", blocks, threads, smem);
      reduce_partials(blocks);
    };
    auto launch_wide = [&](auto dx_kernel) {
      if (needed[0]) {
        const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
        dx_kernel<<<blocks, threads, 0, current_stream(dev)>>>(p);
        HYB_CUDA_LAUNCH_CHECK("layernorm_backward_kernel", blocks, threads, 0);
      }
      if (!needed[1] && !needed[2]) return;
      auto kernel = layernorm_backward_params_kernel<T>;
      const int tiles = column_sum_blocks(C);
      const int64_t row_groups = (rows + kParamRows - 1) / kParamRows;
      const int param_threads = kWarpSize * kParamRows;
      const int fill = grid_blocks_for(kernel, int64_t(tiles) * row_groups * param_threads, param_threads, 0, dev);
      const int partials = int(std::clamp<int64_t>(fill / tiles, 1, row_groups));
      alloc_partials(partials);
      const dim3 grid(tiles, partials), block(kWarpSize, kParamRows);
      kernel<<<grid, block, 0, current_stream(dev)>>>(p);
      HYB_CUDA_LAUNCH_CHECK("layernorm_backward_params_kernel", grid, block, 0);
      reduce_partials(partials);
    };
    if (V == P && C <= kWarpSize * P)
      launch_cached(layernorm_backward_cached_kernel<T, P, 1>);
    else if (V == P && C <= kMaxCachedIters * kWarpSize * P)
      launch_cached(layernorm_backward_cached_kernel<T, P, kMaxCachedIters>);
    else if (V == P)
      launch_wide(layernorm_backward_kernel<T, P>);
    else if (C <= kWarpSize)
      launch_cached(layernorm_backward_cached_kernel<T, 1, 1>);
    else if (C <= kMaxCachedIters * kWarpSize)
      launch_cached(layernorm_backward_cached_kernel<T, 1, kMaxCachedIters>);
    else
      launch_wide(layernorm_backward_kernel<T, 1>);
  });
  return g;
}

}  // namespace hyb
