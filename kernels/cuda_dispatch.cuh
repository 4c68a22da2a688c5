// The dtypes the CUDA kernels compute on: f32 and bf16 (fp32 math inside). Mirrors visit_float.
//   visit_cuda_float("rmsnorm_forward", x.dtype(), [&](auto tag) { using T = decltype(tag); ... });
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/convert.cuh"

namespace hyb {

template <typename F>
decltype(auto) visit_cuda_float(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(bf16{});
    default: break;
  }
  throw Error(str_cat(op, ": the CUDA path computes on f32 or bf16 tensors, got ", dtype_name(t)));
}

template <typename T>
__device__ __forceinline__ float to_f32(T v) { return device_convert<float>(v); }
template <typename T>
__device__ __forceinline__ T from_f32(float v) { return device_convert<T>(v); }

// Blocks for a grid-stride loop over n items: enough to fill the device a few times over.
int grid_blocks(int64_t n, int threads, int device);

// How many blocks of `kernel` the device holds at once (its occupancy at `threads` and `smem`, times
// the SMs). A grid-stride loop whose blocks all do the same work should launch no more: the blocks
// past it would run in a second, partly empty wave.
int resident_blocks(const void* kernel, int threads, size_t smem, int device);

// Blocks for a grid-stride loop of `kernel` over n items: one wave at most.
//   const int grid = grid_blocks_for(my_kernel<T, V>, n / V, 256, 0, dev);
template <typename Kernel>
int grid_blocks_for(Kernel kernel, int64_t n, int threads, size_t smem, int device) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem, device);
  return int(want < 1 ? 1 : (want < cap ? want : cap));
}

// A row-group block: block row y (a slot) spans one row of C elements in V-element packs,
// ceil(C / V) threads rounded to whole warps, and the block holds as many slots as fit in `threads`
// (at least one). Used by the RMSNorm kernels that keep several rows a slot in flight.
inline dim3 row_group_block(int64_t C, int V, int threads) {
  const int tx = int((C / V + 31) / 32 * 32);
  return dim3(unsigned(tx), unsigned(tx < threads ? threads / tx : 1));
}

}  // namespace hyb
