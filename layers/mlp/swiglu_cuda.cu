// CUDA SwiGLU gate (swiglu_op.h has the math): elementwise, grid-stride, fp32 math. A thread moves
// V elements per step (16-byte packs when every pointer is 16-byte aligned; the last n % V
// elements one at a time), so the kernels read and write at copy speed instead of issuing one
// 2-byte access per element.
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/vector_io.cuh"
#include "layers/mlp/swiglu_op.h"

namespace hyb {
namespace {

__device__ __forceinline__ float swiglu_z(float a, float b) { return a / (1.f + __expf(-a)) * b; }

// da = dz b sigma(a) (1 + a (1 - sigma(a))), db = dz silu(a).
__device__ __forceinline__ void swiglu_grads(float a, float b, float g, float& da, float& db) {
  const float sg = 1.f / (1.f + __expf(-a));
  da = g * b * sg * (1.f + a * (1.f - sg));
  db = g * a * sg;
}

template <typename T, int V>
__global__ void swiglu_forward_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ z, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, packs = n / V;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    float av[V], bv[V], zv[V];
    load_f32(a + p * V, av);
    load_f32(b + p * V, bv);
#pragma unroll
    for (int e = 0; e < V; ++e) zv[e] = swiglu_z(av[e], bv[e]);
    store_f32(z + p * V, zv);
  }
  for (int64_t i = packs * V + first; i < n; i += stride) z[i] = from_f32<T>(swiglu_z(to_f32(a[i]), to_f32(b[i])));
}

template <typename T, int V>
__global__ void swiglu_backward_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ dz,
                                       T* __restrict__ da, T* __restrict__ db, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, packs = n / V;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    float av[V], bv[V], g[V], dav[V], dbv[V];
    load_f32(a + p * V, av);
    load_f32(b + p * V, bv);
    load_f32(dz + p * V, g);
#pragma unroll
    for (int e = 0; e < V; ++e) swiglu_grads(av[e], bv[e], g[e], dav[e], dbv[e]);
    if (da) store_f32(da + p * V, dav);
    if (db) store_f32(db + p * V, dbv);
  }
  for (int64_t i = packs * V + first; i < n; i += stride) {
    float dav, dbv;
    swiglu_grads(to_f32(a[i]), to_f32(b[i]), to_f32(dz[i]), dav, dbv);
    if (da) da[i] = from_f32<T>(dav);
    if (db) db[i] = from_f32<T>(dbv);
  }
}

constexpr int kThreads = 256;

// The pack width all pointers allow (the element count's remainder is the kernels' scalar tail).
template <typename T>
int swiglu_pack(std::initializer_list<const void*> ptrs) {
  return pack_width<T>(kPack16<T>, ptrs);
}

}  // namespace

Tensor swiglu_forward_cuda(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0.contiguous(), b = b0.contiguous();
  Tensor z = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return z;
  const int dev = a.device().index;
  visit_cuda_float("swiglu_forward_cuda", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto kernel, int V) {
      const int grid = grid_blocks_for(kernel, n / V + 1, kThreads, 0, dev);
      kernel<<<grid, kThreads, 0, current_stream(dev)>>>(a.data<T>(), b.data<T>(), z.data<T>(), n);
      HYB_CUDA_LAUNCH_CHECK("swiglu_forward_kernel", grid, kThreads, 0);
    };
    if (swiglu_pack<T>({a.data<T>(), b.data<T>(), z.data<T>()}) > 1)
      launch(swiglu_forward_kernel<T, kPack16<T>>, kPack16<T>);
    else
      launch(swiglu_forward_kernel<T, 1>, 1);
  });
  return z;
}

std::pair<Tensor, Tensor> swiglu_backward_cuda(const SwigluSaved& s, const Tensor& dz0, GradMask needed) {
  Tensor a = s.a.contiguous(), b = s.b.contiguous(), dz = dz0.contiguous();
  Tensor da = needed[0] ? Tensor::empty(a.shape(), a.dtype(), a.device()) : Tensor();
  Tensor db = needed[1] ? Tensor::empty(a.shape(), a.dtype(), a.device()) : Tensor();
  const int64_t n = a.numel();
  if (n == 0) return {da, db};
  const int dev = a.device().index;
  visit_cuda_float("swiglu_backward_cuda", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dap = needed[0] ? da.data<T>() : nullptr;
    T* dbp = needed[1] ? db.data<T>() : nullptr;
    auto launch = [&](auto kernel, int V) {
      const int grid = grid_blocks_for(kernel, n / V + 1, kThreads, 0, dev);
      kernel<<<grid, kThreads, 0, current_stream(dev)>>>(a.data<T>(), b.data<T>(), dz.data<T>(), dap, dbp, n);
      HYB_CUDA_LAUNCH_CHECK("swiglu_backward_kernel", grid, kThreads, 0);
    };
    if (swiglu_pack<T>({a.data<T>(), b.data<T>(), dz.data<T>(), dap, dbp}) > 1)
      launch(swiglu_backward_kernel<T, kPack16<T>>, kPack16<T>);
    else
      launch(swiglu_backward_kernel<T, 1>, 1);
  });
  return {da, db};
}

}  // namespace hyb
