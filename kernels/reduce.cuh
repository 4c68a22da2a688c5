// Warp and block reductions by shuffles. block_reduce_* needs blockDim.x a multiple of 32 (at most
// 1024), every thread of the block calling it, and returns the result to every thread; it begins with a
// barrier so one kernel can call it several times in a row.
//   float total = block_reduce_sum(partial);
//   float row_max = warp_reduce_max(v);
#pragma once
#include <limits>

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

}  // namespace hyb
