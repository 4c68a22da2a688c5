// CUDA RMSNorm (rmsnorm_op.h has the math). Three layouts by row width, all with loads and stores of
// V elements at a time (16-byte packs when the row width and pointers allow, kernels/vector_io.cuh)
// and statistics in fp32:
//  - packed rows of at most 64 packs: a warp per row, the lane's packs in registers (one read);
//  - packed rows of 65 to 512 packs (d_model 768 to 4096 in bf16): row-group blocks, one pack of
//    each stream per thread and several rows per block row in flight (rmsnorm_forward_rows_kernel);
//  - wider or unpacked rows: a warp per row striding it, re-reading it for the second pass.
// The weight gradient is reduced deterministically: each warp or block sums dy * xhat of its rows
// per column in a fixed order (registers, or a warp's own shared fp32 row for the widest rows), the
// block adds its warps' or slots' sums in order into one partial row, and column_sum_kernel
// (kernels/reduce.cuh) adds the partials in a fixed order. No float atomics: for a given shape and
// device the results are the same bits on every run.
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/reduce.cuh"
#include "kernels/step_queue.cuh"
#include "kernels/vector_io.cuh"
#include "layers/softmax_attention/flash_attention_device.cuh"  // cp.async
#include "layers/norm/rmsnorm_op.h"

namespace hyb {
namespace {

constexpr int kRowsPerBlock = 8;     // forward: warps per block, one row each
// Row-group kernels: rows of up to kMaxRowThreads packs, at most 64 registers a thread, blocks of
// about kRowGroupThreads threads (several slots when a row is narrower): four blocks an SM at
// d_model 1024, whose barriers fall at different times, so one block's loads are in flight while
// another reduces. Rows a slot keeps in flight: forward (x only) in registers; backward (x and dy)
// in shared memory, two groups ahead (rmsnorm_backward_rows_kernel; two blocks an SM at d_model 1024).
constexpr int kMaxRowThreads = 512;
constexpr int kRowGroupThreads = 256;
constexpr int kFwdRowsPerSlot = 4;
// Backward: rows a slot takes per step, and the steps in shared memory (the one computed and two in
// flight). Measured at 32768 x 1024 bf16 on the H100, % of copy (rows x stages): 3 x 3 80-81% (four
// runs; 80 KiB a block, two blocks an SM), 2 x 3 76-79%, 1 x 6 78%, 2 x 4 76%, 2 x 2 76%, 3 x 4 78%,
// 3 x 2 75%, 4 x 3 56% (spills).
constexpr int kBwdRowsPerSlot = 3;
constexpr int kBwdStages = 3;

template <typename T, int V>
__global__ void rmsnorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                       float* __restrict__ rstd, int64_t rows, int C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const T* xr = x + row * C;
  T* yr = y + row * C;
  float ss = 0;
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    float xv[V];
    load_f32(xr + c, xv);
#pragma unroll
    for (int j = 0; j < V; ++j) ss += xv[j] * xv[j];
  }
  ss = warp_reduce_sum(ss);
  const float rs = rsqrtf(ss / float(C) + eps);
  if (lane == 0 && rstd) rstd[row] = rs;
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    float xv[V], wv[V], yv[V];
    load_f32(xr + c, xv);
    load_f32(w + c, wv);
#pragma unroll
    for (int j = 0; j < V; ++j) yv[j] = wv[j] * (xv[j] * rs);
    store_f32(yr + c, yv);
  }
}

// The same forward for rows of at most 32 * V * kIters elements: the lane's packs of x stay in
// registers between the two passes.
template <typename T, int V, int kIters>
__global__ void rmsnorm_forward_cached_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                              float* __restrict__ rstd, int64_t rows, int C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const T* xr = x + row * C;
  T* yr = y + row * C;
  float xv[kIters][V];
  float ss = 0;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (k * kWarpSize + lane) * V;
    if (c < C) {
      load_f32(xr + c, xv[k]);
#pragma unroll
      for (int j = 0; j < V; ++j) ss += xv[k][j] * xv[k][j];
    }
  }
  ss = warp_reduce_sum(ss);
  const float rs = rsqrtf(ss / float(C) + eps);
  if (lane == 0 && rstd) rstd[row] = rs;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (k * kWarpSize + lane) * V;
    if (c < C) {
      float wv[V], yv[V];
      load_f32(w + c, wv);
#pragma unroll
      for (int j = 0; j < V; ++j) yv[j] = wv[j] * (xv[k][j] * rs);
      store_f32(yr + c, yv);
    }
  }
}

// dx per row (warp per row, rows grid-stride); dw into the warp's shared row s_dw[warp * C ...], then
// summed over the block's warps in warp order into dw_partial[blockIdx.x].
template <typename T, int V>
__global__ void rmsnorm_backward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,
                                        const float* __restrict__ rstd, T* __restrict__ dx,
                                        float* __restrict__ dw_partial, int64_t rows, int C) {
  extern __shared__ float s_dw[];  // (warps, C)
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  float* my_dw = s_dw + int64_t(warp) * C;
  if (dw_partial)
    for (int c = lane * V; c < C; c += kWarpSize * V)
#pragma unroll
      for (int j = 0; j < V; ++j) my_dw[c + j] = 0.f;
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < rows; row += int64_t(gridDim.x) * warps) {
    const T* xr = x + row * C;
    const T* gr = dy + row * C;
    const float rs = rstd[row];
    if (dx) {
      float m = 0;
      for (int c = lane * V; c < C; c += kWarpSize * V) {
        float xv[V], gv[V], wv[V];
        load_f32(xr + c, xv);
        load_f32(gr + c, gv);
        load_f32(w + c, wv);
#pragma unroll
        for (int j = 0; j < V; ++j) m += gv[j] * wv[j] * xv[j] * rs;
      }
      m = warp_reduce_sum(m) / float(C);
      T* dxr = dx + row * C;
      for (int c = lane * V; c < C; c += kWarpSize * V) {
        float xv[V], gv[V], wv[V], out[V];
        load_f32(xr + c, xv);
        load_f32(gr + c, gv);
        load_f32(w + c, wv);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          out[j] = rs * (gv[j] * wv[j] - xv[j] * rs * m);
          if (dw_partial) my_dw[c + j] += gv[j] * xv[j] * rs;
        }
        store_f32(dxr + c, out);
      }
    } else if (dw_partial) {
      for (int c = lane * V; c < C; c += kWarpSize * V) {
        float xv[V], gv[V];
        load_f32(xr + c, xv);
        load_f32(gr + c, gv);
#pragma unroll
        for (int j = 0; j < V; ++j) my_dw[c + j] += gv[j] * xv[j] * rs;
      }
    }
  }
  if (!dw_partial) return;
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0;
    for (int k = 0; k < warps; ++k) s += s_dw[int64_t(k) * C + c];
    dw_partial[int64_t(blockIdx.x) * C + c] = s;
  }
}

// The same backward for rows of at most 32 * V * kIters elements: a lane holds its kIters packs of x
// and dy in registers (one read of each) and its columns' dw sums in registers across all its rows;
// the block then adds its warps' sums in warp order through one shared row (8 barriers per block, at
// the end). Lane columns: (k * 32 + lane) * V for k < kIters, where below C.
template <typename T, int V, int kIters>
__global__ void rmsnorm_backward_cached_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ dy, const float* __restrict__ rstd,
                                               T* __restrict__ dx, float* __restrict__ dw_partial, int64_t rows, int C) {
  extern __shared__ float s_dw[];  // (C,)
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  float dw[kIters][V];
#pragma unroll
  for (int k = 0; k < kIters; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) dw[k][j] = 0.f;
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < rows; row += int64_t(gridDim.x) * warps) {
    const T* xr = x + row * C;
    const T* gr = dy + row * C;
    const float rs = rstd[row];
    float xv[kIters][V], gv[kIters][V];
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int c = (k * kWarpSize + lane) * V;
      if (c < C) {
        load_f32(xr + c, xv[k]);
        load_f32(gr + c, gv[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) xv[k][j] = gv[k][j] = 0.f;
      }
    }
    if (dx) {
      float m = 0;
#pragma unroll
      for (int k = 0; k < kIters; ++k) {
        const int c = (k * kWarpSize + lane) * V;
        if (c < C) {
          float wv[V];
          load_f32(w + c, wv);
#pragma unroll
          for (int j = 0; j < V; ++j) m += gv[k][j] * wv[j] * xv[k][j] * rs;
        }
      }
      m = warp_reduce_sum(m) / float(C);
      T* dxr = dx + row * C;
#pragma unroll
      for (int k = 0; k < kIters; ++k) {
        const int c = (k * kWarpSize + lane) * V;
        if (c < C) {
          float wv[V], out[V];
          load_f32(w + c, wv);
#pragma unroll
          for (int j = 0; j < V; ++j) out[j] = rs * (gv[k][j] * wv[j] - xv[k][j] * rs * m);
          store_f32(dxr + c, out);
        }
      }
    }
    if (dw_partial)
#pragma unroll
      for (int k = 0; k < kIters; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) dw[k][j] += gv[k][j] * xv[k][j] * rs;
  }
  if (!dw_partial) return;
  for (int k = 0; k < warps; ++k) {
    if (warp == k)
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int c = (i * kWarpSize + lane) * V;
        if (c < C)
#pragma unroll
          for (int j = 0; j < V; ++j) s_dw[c + j] = k == 0 ? dw[i][j] : s_dw[c + j] + dw[i][j];
      }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) dw_partial[int64_t(blockIdx.x) * C + c] = s_dw[c];
}

// Rows of 65 to kMaxRowThreads packs (d_model 768 and up in bf16): a block row (threadIdx.y) of
// ceil(C / V) threads (rounded to warps) per table row, one pack of each stream per thread, and
// blockDim.y such slots (about kRowGroupThreads threads a block). A slot takes kRows consecutive rows
// per step, issuing all their loads before any math, so a thread keeps kRows packs of x (and of dy)
// in flight, and the row statistics of those rows cost one barrier (block_row_sum). Rows are held as
// raw packs (bf16: 4 registers a pack) and converted where used. The block walks groups of
// blockDim.y * kRows rows grid-stride, the same trip count for every slot (the barrier needs all of
// them); rows past the end load nothing and store nothing. w sits in registers for the whole run.
template <typename T, int V, int kRows>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    rmsnorm_forward_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                float* __restrict__ rstd, int64_t rows, int C, float eps) {
  using P = Pack<T, V>;
  __shared__ float s_sum[2][kMaxBlockWarps * kRows];
  const int c = threadIdx.x * V;
  const bool active = c < C;
  float wv[V];
#pragma unroll
  for (int j = 0; j < V; ++j) wv[j] = 0.f;
  if (active) load_f32(w + c, wv);
  const int64_t group = int64_t(blockDim.y) * kRows;
  int step = 0;
#pragma unroll 1
  for (int64_t first = int64_t(blockIdx.x) * group; first < rows; first += int64_t(gridDim.x) * group, ++step) {
    const int64_t row0 = first + int64_t(threadIdx.y) * kRows;
    P xp[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      xp[r] = P{};
      if (active && row0 + r < rows) xp[r] = load_pack<P>(x + (row0 + r) * C + c);
    }
    float ss[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float xv[V];
      unpack_f32(xp[r], xv);
      ss[r] = 0.f;
#pragma unroll
      for (int j = 0; j < V; ++j) ss[r] += xv[j] * xv[j];
    }
    block_row_sum(ss, s_sum[step % 2]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r >= rows) continue;
      const float rs = rsqrtf(ss[r] / float(C) + eps);
      if (threadIdx.x == 0 && rstd) rstd[row0 + r] = rs;
      if (!active) continue;
      float xv[V], yv[V];
      unpack_f32(xp[r], xv);
#pragma unroll
      for (int j = 0; j < V; ++j) yv[j] = wv[j] * (xv[j] * rs);
      store_f32(y + (row0 + r) * C + c, yv);
    }
  }
}

// The backward in the same layout, its loads kStages - 1 row groups ahead: each thread copies its
// packs of x and dy for the groups ahead into shared memory (cp.async) before computing this one, so
// the block's loads stay in flight across the statistics' barrier and the math (a thread holding the
// next group in registers instead spilled). A thread reads back only the packs it copied, so the
// copy's own completion (cp.async.wait_group) orders them and no barrier is needed; the rstd of the
// groups ahead wait in registers. The rows' mean(g * xhat) by one
// block_row_sum; the thread's columns' dw in registers over all its slot's rows. At the end the
// block adds its slots' dw in slot order (through s_dw, blockDim.y rows of C floats, when there are
// several) into its partial row. Shared memory: rows_backward_smem.
template <typename T, int V, int kRows, int kStages>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    rmsnorm_backward_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,
                                 const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ dw_partial,
                                 int64_t rows, int C) {
  using P = Pack<T, V>;
  static_assert(sizeof(P) == 16, "the copies are 16-byte cp.async");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_sum[2][kMaxBlockWarps * kRows];
  const int slots = int(blockDim.y);
  T* s_rows = reinterpret_cast<T*>(smem);  // [stage][slot][row][x, dy][C]
  float* s_dw = reinterpret_cast<float*>(smem + size_t(kStages) * slots * kRows * 2 * C * sizeof(T));
  const int c = threadIdx.x * V;
  const bool active = c < C;
  auto staged = [&](int stage, int r, int which) {
    return s_rows + ((int64_t(stage * slots + int(threadIdx.y)) * kRows + r) * 2 + which) * C + c;
  };
  const int64_t group = int64_t(slots) * kRows, stride = int64_t(gridDim.x) * group;
  float rs_ahead[kStages - 1][kRows];  // rstd of the groups in flight, oldest first
  // Rows past the end are zero-filled (and their rstd 0): they add nothing to any sum.
  auto issue = [&](int64_t first, int stage) {
    const int64_t row0 = first + int64_t(threadIdx.y) * kRows;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool ok = row0 + r < rows;
      rs_ahead[kStages - 2][r] = ok ? rstd[row0 + r] : 0.f;
      if (active) {
        flash::cp_async16(flash::smem_u32(staged(stage, r, 0)), ok ? x + (row0 + r) * C + c : x, ok);
        flash::cp_async16(flash::smem_u32(staged(stage, r, 1)), ok ? dy + (row0 + r) * C + c : dy, ok);
      }
    }
    flash::cp_async_commit();
  };
  P wp{};
  if (active) wp = load_pack<P>(w + c);
  float dw[V];
#pragma unroll
  for (int j = 0; j < V; ++j) dw[j] = 0.f;
  auto f = [](T e) { return device_convert<float>(e); };
  int step = 0;
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    shift_steps(rs_ahead);
    issue(int64_t(blockIdx.x) * group + k * stride, k);
  }
#pragma unroll 1
  for (int64_t first = int64_t(blockIdx.x) * group; first < rows; first += stride, ++step) {
    const int stage = step % kStages;
    const int64_t row0 = first + int64_t(threadIdx.y) * kRows;
    float rs[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) rs[r] = rs_ahead[0][r];
    shift_steps(rs_ahead);
    issue(first + (kStages - 1) * stride, (step + kStages - 1) % kStages);
    flash::cp_async_wait<kStages - 1>();
    // mean(g * xhat) of the rows when dx is wanted (a uniform branch: the barrier is safe).
    float m[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) m[r] = 0.f;
    if (dx) {
      if (active)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const P xp = load_pack<P>(staged(stage, r, 0)), gp = load_pack<P>(staged(stage, r, 1));
#pragma unroll
          for (int j = 0; j < V; ++j) m[r] += f(gp.v[j]) * f(wp.v[j]) * f(xp.v[j]) * rs[r];
        }
      block_row_sum(m, s_sum[step % 2]);
    }
    if (!active) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const P xp = load_pack<P>(staged(stage, r, 0)), gp = load_pack<P>(staged(stage, r, 1));
      if (dx && row0 + r < rows) {
        const float mr = m[r] / float(C);
        P out;
#pragma unroll
        for (int j = 0; j < V; ++j)
          out.v[j] = device_convert<T>(rs[r] * (f(gp.v[j]) * f(wp.v[j]) - f(xp.v[j]) * rs[r] * mr));
        store_pack(dx + (row0 + r) * C + c, out);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) dw[j] += f(gp.v[j]) * f(xp.v[j]) * rs[r];
    }
  }
  flash::cp_async_wait<0>();  // the last, empty groups
  if (!dw_partial) return;
  float* out = dw_partial + int64_t(blockIdx.x) * C + c;
  if (slots == 1) {
    if (active) store_f32(out, dw);
    return;
  }
  if (active)
#pragma unroll
    for (int j = 0; j < V; ++j) s_dw[int64_t(threadIdx.y) * C + c + j] = dw[j];
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  for (int k = 1; k < slots; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) dw[j] += s_dw[int64_t(k) * C + c + j];
  store_f32(out, dw);
}

// Dynamic shared memory of rmsnorm_backward_rows_kernel: `stages` groups of the block's rows of x and dy,
// and the slots' dw rows when there are several.
template <typename T>
size_t rows_backward_smem(dim3 block, int rows_per_slot, int stages, int C, bool dw) {
  return size_t(stages) * block.y * rows_per_slot * 2 * C * sizeof(T) + (dw && block.y > 1 ? size_t(block.y) * C * 4 : 0);
}

}  // namespace

Tensor rmsnorm_forward_cuda(const Tensor& x0, const Tensor& w0, double eps, Tensor* rstd_out) {
  Tensor x = x0.contiguous(), w = w0.contiguous();
  HYB_CHECK(w.dtype() == x.dtype(), "rmsnorm_forward_cuda: x is ", dtype_name(x.dtype()), " but weight is ",
            dtype_name(w.dtype()));
  const int C = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(C, 1);
  const int dev = x.device().index;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, DType::f32, x.device());
  const int blocks = int((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (rows == 0) {
    if (rstd_out) *rstd_out = rstd;
    return y;
  }
  visit_cuda_float("rmsnorm_forward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto kernel) {
      kernel<<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(x.data<T>(), w.data<T>(), y.data<T>(),
                                                                          rstd.data<float>(), rows, C, float(eps));
      HYB_CUDA_LAUNCH_CHECK("rmsnorm_forward_kernel", blocks, kRowsPerBlock * kWarpSize, 0);
    };
    constexpr int P = kPack16<T>;
    const bool packed = pack_width<T>(C, {x.data<T>(), w.data<T>(), y.data<T>()}) > 1;
    if (packed && C <= kWarpSize * P)
      launch(rmsnorm_forward_cached_kernel<T, P, 1>);
    else if (packed && C <= 2 * kWarpSize * P)
      launch(rmsnorm_forward_cached_kernel<T, P, 2>);
    else if (packed && C <= kMaxRowThreads * P) {
      auto kernel = rmsnorm_forward_rows_kernel<T, P, kFwdRowsPerSlot>;
      const dim3 block = row_group_block(C, P, kRowGroupThreads);
      const int threads = int(block.x * block.y);
      const int64_t groups = (rows + block.y * kFwdRowsPerSlot - 1) / (block.y * kFwdRowsPerSlot);
      const int grid = grid_blocks_for(kernel, groups * threads, threads, 0, dev);
      kernel<<<grid, block, 0, current_stream(dev)>>>(x.data<T>(), w.data<T>(), y.data<T>(), rstd.data<float>(), rows,
                                                      C, float(eps));
      HYB_CUDA_LAUNCH_CHECK("rmsnorm_forward_rows_kernel", grid, block, 0);
    } else if (packed)
      launch(rmsnorm_forward_kernel<T, P>);
    else
      launch(rmsnorm_forward_kernel<T, 1>);
  });
  if (rstd_out) *rstd_out = rstd;
  return y;
}

RmsNormGrads rmsnorm_backward_cuda(const RmsNormSaved& s, const Tensor& dy0, GradMask needed) {
  Tensor x = s.x.contiguous(), dy = dy0.contiguous(), w = s.w.contiguous();
  const int C = int(x.size(-1));
  const int64_t rows = x.numel() / std::max(C, 1);
  const int dev = x.device().index;
  RmsNormGrads g;
  if (needed[0]) g.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (needed[1]) g.dw = Tensor::empty({C}, w.dtype(), x.device());
  if (rows == 0 || C == 0) {
    if (needed[1]) g.dw.zero_();
    return g;
  }
  constexpr size_t kSmemCap = 48 * 1024;
  const size_t row_bytes = size_t(C) * sizeof(float);
  HYB_CHECK(!needed[1] || row_bytes <= kSmemCap, "rmsnorm_backward_cuda: rows of ", C,
            " exceed the 12288-wide shared-memory row");
  visit_cuda_float("rmsnorm_backward_cuda", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dx = needed[0] ? g.dx.data<T>() : nullptr;
    // `rows_per_block` rows in flight per block: its warps (a row each), or its slots' row groups.
    auto launch = [&](auto kernel, dim3 block, int rows_per_block, size_t smem) {
      // Enough blocks to fill every SM at the occupancy the kernel allows, and no more: each block
      // adds one partial row for the reduction to read.
      const int threads = int(block.x * block.y);
      const int blocks =
          grid_blocks_for(kernel, (rows + rows_per_block - 1) / rows_per_block * threads, threads, smem, dev);
      Tensor partial;
      if (needed[1]) partial = Tensor::empty({blocks, C}, DType::f32, x.device());
      kernel<<<blocks, block, smem, current_stream(dev)>>>(x.data<T>(), w.data<T>(), dy.data<T>(),
                                                             s.rstd.data<float>(), dx,
                                                             needed[1] ? partial.data<float>() : nullptr, rows, C);
      HYB_CUDA_LAUNCH_CHECK("rmsnorm_backward_kernel", blocks, block, smem);
      if (needed[1]) {
        column_sum_kernel<T><<<column_sum_blocks(C), column_sum_threads(blocks), 0, current_stream(dev)>>>(
            partial.data<float>(), g.dw.data<T>(), blocks, C, 1.f);
        HYB_CUDA_LAUNCH_CHECK("column_sum_kernel (rmsnorm dw)", column_sum_blocks(C), column_sum_threads(blocks), 0);
      }
    };
    constexpr int P = kPack16<T>;
    const bool packed = pack_width<T>(C, {x.data<T>(), w.data<T>(), dy.data<T>(), dx}) > 1;
    const size_t cached_smem = needed[1] ? row_bytes : 0;
    const dim3 warps8(8 * kWarpSize);
    // The row-group kernel's stages need up to 144 KiB (d_model 4096 in bf16); a GPU with less shared
    // memory a block takes the warp kernel instead. Sized only for the widths it may take: a row of
    // fewer than P elements has no row-group block.
    dim3 group_block;
    size_t group_smem = 0;
    auto group_fits = [&] {
      group_block = row_group_block(C, P, kRowGroupThreads);
      group_smem = rows_backward_smem<T>(group_block, kBwdRowsPerSlot, kBwdStages, C, needed[1]);
      return group_smem <= cuda_device_props(dev).smem_per_block_optin;
    };
    if (packed && C <= kWarpSize * P) {
      launch(rmsnorm_backward_cached_kernel<T, P, 1>, warps8, 8, cached_smem);
    } else if (packed && C <= 2 * kWarpSize * P) {
      launch(rmsnorm_backward_cached_kernel<T, P, 2>, warps8, 8, cached_smem);
    } else if (packed && C <= kMaxRowThreads * P && group_fits()) {
      auto kernel = rmsnorm_backward_rows_kernel<T, P, kBwdRowsPerSlot, kBwdStages>;
      HYB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(group_smem)));
      launch(kernel, group_block, int(group_block.y) * kBwdRowsPerSlot, group_smem);
    } else {
      // One shared fp32 row per warp: as many warps (up to 8) as 48 KiB of shared memory holds.
      const int warps = needed[1] ? int(std::clamp<size_t>(kSmemCap / row_bytes, 1, 8)) : 8;
      const size_t smem = needed[1] ? size_t(warps) * row_bytes : 0;
      if (packed)
        launch(rmsnorm_backward_kernel<T, P>, dim3(warps * kWarpSize), warps, smem);
      else
        launch(rmsnorm_backward_kernel<T, 1>, dim3(warps * kWarpSize), warps, smem);
    }
  });
  return g;
}

}  // namespace hyb
