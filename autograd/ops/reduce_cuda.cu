// CUDA sum/mean (reduce.h). The input's dims split into the kept group (M outputs, in the output's
// row-major order) and the reduced group (R summands each), each group merged where its dims are
// contiguous, any strides. Two mappings, chosen by which group holds the smaller stride:
//   rows    (reduced dims innermost, e.g. a sum over the last dim): a warp per output when R < 4096, else a
//           block of 256 threads; 16-byte packs when the reduced run is contiguous and aligned.
//   columns (kept dims innermost, e.g. sum_to_shape of a (B, T, C) gradient to (C,)): a thread per output
//           (per 16-byte pack of outputs when the columns are contiguous and aligned), neighbouring
//           threads on neighbouring columns so loads coalesce.
// When M alone cannot fill the GPU, R is cut into a fixed number of chunks (from the shape, never the
// device) whose fp32 partials column_sum_kernel (kernels/reduce.cuh) adds in an order fixed by the
// number of chunks, 32 threads to a column so the partials stream at bandwidth. Every sum has one fixed
// order whatever the GPU's size: no atomics, the same bits on every run.
#include <algorithm>

#include "autograd/ops/elementwise_cuda.cuh"
#include "autograd/ops/reduce_cuda.h"
#include "kernels/reduce.cuh"

namespace hyb {
namespace {

constexpr int kReduceThreads = 256;
constexpr int64_t kBlockRowMin = 4096;      // R from which a row gets a whole block instead of a warp
constexpr int64_t kTargetBlocks = 1024;     // blocks worth splitting R for (about 8 per SM on an H100)
constexpr int64_t kMinRowChunk = 8192;      // summands per block when a row is split
constexpr int64_t kTargetThreads = 1 << 18;  // threads worth splitting R for, in the column mapping
constexpr int64_t kMinColumnChunk = 32;     // summands per thread when a column is split
constexpr int64_t kMaxSplits = 65535;       // gridDim.y

template <typename Index>
struct ReducePlan {
  StridedOffsets<1, Index> kept;     // M outputs -> offset in x of their first summand
  StridedOffsets<1, Index> reduced;  // summand r -> offset from there
  Index M, R;
  Index chunk;  // summands per split; splits = gridDim.y
};

template <typename T>
__device__ __forceinline__ void write_sum(T* y, float* partial, int64_t o, int64_t M, float acc, float scale) {
  if (partial) {
    partial[int64_t(blockIdx.y) * M + o] = acc;
  } else {
    y[o] = from_f32<T>(acc * scale);
  }
}

// ---------------------------------------------------------------------------------------------------
// Rows: kRowThreads threads (a warp or the whole block) per output, over summands
// [chunk * blockIdx.y, chunk * (blockIdx.y + 1)). Grid (ceil(M / (256 / kRowThreads)), splits).
// kVec > 1: the reduced group is one contiguous dim, R, chunk and the kept strides multiples of kVec.
// ---------------------------------------------------------------------------------------------------
template <typename T, int kVec, int kRowThreads, typename Index>
__global__ void __launch_bounds__(kReduceThreads)
    sum_rows_kernel(const T* __restrict__ x, ReducePlan<Index> p, T* __restrict__ y, float* __restrict__ partial,
                    float scale) {
  constexpr int kRowsPerBlock = kReduceThreads / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  const Index o = Index(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads;
  if constexpr (kRowsPerBlock > 1) {
    if (o >= p.M) return;  // whole warps leave; the reduction below is per warp
  }
  int64_t base[1];
  p.kept.at(o, base);
  const Index r0 = Index(blockIdx.y) * p.chunk;
  const Index r1 = min(p.R, r0 + p.chunk);
  float acc = 0.f;
  if constexpr (kVec > 1) {
    using P = Pack<T, kVec>;
    for (Index r = r0 + Index(lane) * kVec; r < r1; r += kRowThreads * kVec) {
      const P v = load_pack<P>(x + base[0] + int64_t(r));
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc += to_f32(v.v[j]);
    }
  } else {
    for (Index r = r0 + Index(lane); r < r1; r += kRowThreads) {
      int64_t off[1];
      p.reduced.at(r, off);
      acc += to_f32(x[base[0] + off[0]]);
    }
  }
  if constexpr (kRowThreads == kWarpSize) {
    acc = warp_reduce_sum(acc);
  } else {
    acc = block_reduce_sum(acc);
  }
  if (lane == 0) write_sum(y, partial, int64_t(o), int64_t(p.M), acc, scale);
}

// ---------------------------------------------------------------------------------------------------
// Columns: one thread per kVec neighbouring outputs, summing its chunk in order. Grid
// (ceil(M / (256 kVec)), splits). kVec > 1: the innermost kept dim is contiguous and a multiple of
// kVec long, every other stride a multiple of kVec, so each summand step is one aligned pack.
// ---------------------------------------------------------------------------------------------------
template <typename T, int kVec, typename Index>
__global__ void __launch_bounds__(kReduceThreads)
    sum_columns_kernel(const T* __restrict__ x, ReducePlan<Index> p, T* __restrict__ y, float* __restrict__ partial,
                       float scale) {
  using P = Pack<T, kVec>;
  const Index o = (Index(blockIdx.x) * kReduceThreads + threadIdx.x) * kVec;
  if (o >= p.M) return;
  int64_t base[1];
  p.kept.at(o, base);
  const Index r0 = Index(blockIdx.y) * p.chunk;
  const Index r1 = min(p.R, r0 + p.chunk);
  float acc[kVec] = {};
#pragma unroll 4
  for (Index r = r0; r < r1; ++r) {
    int64_t off[1];
    p.reduced.at(r, off);
    const P v = load_pack<P>(x + base[0] + off[0]);
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[j] += to_f32(v.v[j]);
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) write_sum(y, partial, int64_t(o) + j, int64_t(p.M), acc[j], scale);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How many chunks R is cut into: enough for `want` chunks in all, each at least `min_chunk` long;
// chunk lengths are multiples of 8 so packs never straddle two chunks.
int64_t chunk_length(int64_t R, int64_t M, int64_t want, int64_t min_chunk) {
  const int64_t splits = std::clamp<int64_t>(std::min(ceil_div(want, M), ceil_div(R, min_chunk)), 1, kMaxSplits);
  return std::max<int64_t>(8, ceil_div(ceil_div(R, splits), 8) * 8);
}

template <typename T, typename Index>
void launch_sum(const Tensor& x, const std::vector<int64_t>& dims, const Tensor& y, double scale) {
  const int dev = x.device().index;
  cudaStream_t stream = current_stream(dev);
  Shape kept_shape, kept_strides, red_shape, red_strides;
  int64_t kept_min = INT64_MAX, red_min = INT64_MAX;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) continue;
    const bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    (reduced ? red_shape : kept_shape).push_back(x.size(d));
    (reduced ? red_strides : kept_strides).push_back(x.stride(d));
    int64_t& m = reduced ? red_min : kept_min;
    m = std::min(m, x.stride(d));
  }
  ReducePlan<Index> p;
  p.kept = merge_dims<1, Index>("sum", kept_shape, {kept_strides});
  p.reduced = merge_dims<1, Index>("sum", red_shape, {red_strides});
  const int64_t M = shape_numel(kept_shape), R = shape_numel(red_shape);
  p.M = Index(M);
  p.R = Index(R);
  const bool rows = !red_shape.empty() && red_min < kept_min;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  const float s = float(scale);

  constexpr int kVec = kPack16<T>;
  // Packs along the reduced run (rows) or along the kept innermost dim (columns); see the kernels.
  bool vec = is_aligned(xp, 16);
  if (rows) {
    vec = vec && p.reduced.ndim == 1 && p.reduced.stride[0][0] == 1 && R % kVec == 0;
    for (int64_t st : kept_strides) vec = vec && st % kVec == 0;
  } else {
    vec = vec && p.kept.ndim > 0 && p.kept.stride[0][0] == 1 && p.kept.size[0].d % kVec == 0;
    for (int d = 1; d < p.kept.ndim; ++d) vec = vec && p.kept.stride[d][0] % kVec == 0;
    for (int64_t st : red_strides) vec = vec && st % kVec == 0;
  }
  const bool block_rows = rows && R >= kBlockRowMin;
  int64_t chunk = R;
  dim3 grid;
  if (rows) {
    if (block_rows) chunk = std::min(R, chunk_length(R, M, kTargetBlocks, kMinRowChunk));
    grid = dim3(unsigned(ceil_div(M, block_rows ? 1 : kReduceThreads / kWarpSize)), unsigned(ceil_div(R, chunk)));
  } else {
    const int64_t threads = M / (vec ? kVec : 1);
    chunk = std::min(R, chunk_length(R, threads, kTargetThreads, kMinColumnChunk));
    grid = dim3(unsigned(ceil_div(threads, kReduceThreads)), unsigned(ceil_div(R, chunk)));
  }
  p.chunk = Index(chunk);
  const int splits = int(grid.y);
  Tensor partial = splits > 1 ? Tensor::empty({splits, M}, DType::f32, x.device()) : Tensor();
  float* pp = splits > 1 ? partial.data<float>() : nullptr;

  auto launch = [&](auto kernel, const char* name) {
    kernel<<<grid, kReduceThreads, 0, stream>>>(xp, p, yp, pp, s);
    HYB_CUDA_LAUNCH_CHECK(name, grid, kReduceThreads, 0);
  };
  if (!rows) {
    if (vec) {
      launch(sum_columns_kernel<T, kVec, Index>, "sum_columns_kernel");
    } else {
      launch(sum_columns_kernel<T, 1, Index>, "sum_columns_kernel");
    }
  } else if (vec && block_rows) {
    launch(sum_rows_kernel<T, kVec, kReduceThreads, Index>, "sum_rows_kernel");
  } else if (vec) {
    launch(sum_rows_kernel<T, kVec, kWarpSize, Index>, "sum_rows_kernel");
  } else if (block_rows) {
    launch(sum_rows_kernel<T, 1, kReduceThreads, Index>, "sum_rows_kernel");
  } else {
    launch(sum_rows_kernel<T, 1, kWarpSize, Index>, "sum_rows_kernel");
  }
  if (splits > 1) {
    // The splits' partials in a fixed order, many threads per column (kernels/reduce.cuh).
    column_sum_kernel<T><<<column_sum_blocks(M), column_sum_threads(splits), 0, stream>>>(pp, yp, splits, M, s);
    HYB_CUDA_LAUNCH_CHECK("column_sum_kernel (sum splits)", column_sum_blocks(M), column_sum_threads(splits), 0);
  }
}

}  // namespace

Tensor sum_forward_cuda(const Tensor& x, const std::vector<int64_t>& dims, double scale) {
  Shape out_shape = x.shape();
  for (int64_t d : dims) out_shape[size_t(d)] = 1;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (x.numel() == 0) {
    y.zero_();
    return y;
  }
  CudaDeviceGuard guard(x.device().index);
  visit_cuda_float("sum", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t M = y.numel(), R = x.numel() / M;
    HYB_CHECK(M < (int64_t(1) << 31), "sum: ", M, " outputs of ", shape_str(x.shape()),
              " exceed the CUDA kernels' 2^31");
    if (R < (int64_t(1) << 31)) {
      launch_sum<T, uint32_t>(x, dims, y, scale);
    } else {
      launch_sum<T, uint64_t>(x, dims, y, scale);
    }
  });
  return y;
}

}  // namespace hyb
