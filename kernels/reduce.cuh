// Warp and block reductions by shuffles. block_reduce_* needs blockDim.x a multiple of 32 (at most
// 1024), every thread of the block calling it, and returns the result to every thread; it begins with a
// barrier so one kernel can call it several times in a row.
//   float total = block_reduce_sum(partial);
//   float row_max = warp_reduce_max(v);
//   block_row_sum(sums, s_buf);  // K sums per block row (threadIdx.y), e.g. K rows of a row-group kernel
//   column_sum_kernel<T><<<column_sum_blocks(n), column_sum_threads(rows), 0, stream>>>(partial, out, rows, n, 1.f);
#pragma once
#include <cstdint>
#include <limits>

#include "kernels/convert.cuh"

namespace hyb {

constexpr int kWarpSize = 32;

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// `identity` fills the lanes past the last warp: 0 for a sum, the lowest value for a max.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity) {
  __shared__ T s_warp[kWarpSize];  // one partial per warp
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call may still be reading s_warp
  if (lane == 0) s_warp[warp] = v;
  __syncthreads();
  T r = lane < warps ? s_warp[lane] : identity;
  return warp_reduce(r, op);
}

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T v) { return warp_reduce(v, SumOp{}); }
template <typename T>
__device__ __forceinline__ T warp_reduce_max(T v) { return warp_reduce(v, MaxOp{}); }
template <typename T>
__device__ __forceinline__ T block_reduce_sum(T v) { return block_reduce(v, SumOp{}, T(0)); }
template <typename T>
__device__ __forceinline__ T block_reduce_max(T v) { return block_reduce(v, MaxOp{}, std::numeric_limits<T>::lowest()); }

// The K sums of v[0..K) over the threads of each block row (threadIdx.y; blockDim.x a multiple of 32),
// returned to every thread of that row, added warp by warp in warp order: one barrier for K
// statistics of K rows at once. `buf` holds blockDim.x * blockDim.y / 32 * K floats of shared memory;
// a caller that calls again before another barrier alternates between two such buffers, so a slow
// thread still reading the last sums is never overwritten.
//   __shared__ float s_sum[2][kMaxBlockWarps * 4]; float ss[4]; ...; block_row_sum(ss, s_sum[step % 2]);
constexpr int kMaxBlockWarps = 1024 / kWarpSize;

template <int K>
__device__ __forceinline__ void block_row_sum(float (&v)[K], float* buf) {
  const int lane = threadIdx.x % kWarpSize, warps = blockDim.x / kWarpSize;
  float* row = buf + threadIdx.y * warps * K;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_reduce_sum(v[k]);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) row[threadIdx.x / kWarpSize * K + k] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float s = 0;
    for (int w = 0; w < warps; ++w) s += row[w * K + k];
    v[k] = s;
  }
}

// out[c] = scale * sum over r of partial[r][c] for a (rows, n) fp32 matrix of per-block partials (the
// deterministic second stage of a parameter-gradient reduction), in an order fixed by rows alone: a
// block takes 32 columns and S = min(rows, 32) slices, its warp k sums rows k, k + S, ... and the S
// slice sums are added in slice order. Up to 1024 threads per 32 columns keep enough loads in flight
// to read the partials at bandwidth, where one thread per column would be a dependent chain of
// `rows` loads.
constexpr int kColumnSumMaxSlices = 32;

inline int column_sum_blocks(int64_t n) { return int((n + kWarpSize - 1) / kWarpSize); }
inline int column_sum_threads(int rows) {
  return kWarpSize * (rows < 1 ? 1 : (rows < kColumnSumMaxSlices ? rows : kColumnSumMaxSlices));
}

template <typename T>
__global__ void column_sum_kernel(const float* __restrict__ partial, T* __restrict__ out, int rows, int64_t n,
                                  float scale) {
  __shared__ float s_slice[kColumnSumMaxSlices][kWarpSize + 1];
  const int lane = threadIdx.x % kWarpSize, slice = threadIdx.x / kWarpSize;
  const int slices = blockDim.x / kWarpSize;
  const int64_t c = int64_t(blockIdx.x) * kWarpSize + lane;
  float s = 0;
  if (c < n)
    for (int r = slice; r < rows; r += slices) s += partial[int64_t(r) * n + c];
  s_slice[slice][lane] = s;
  __syncthreads();
  if (slice == 0 && c < n) {
    float t = 0;
    for (int k = 0; k < slices; ++k) t += s_slice[k][lane];
    out[c] = device_convert<T>(t * scale);
  }
}

}  // namespace hyb
