// The dtypes the CUDA kernels compute on: f32 and bf16 (fp32 math inside). Mirrors visit_float.
//   visit_cuda_float("rmsnorm_forward", x.dtype(), [&](auto tag) { using T = decltype(tag); ... });
#pragma once
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

}  // namespace hyb
