// CUDA AdamW: one launch updates every parameter. The host packs a table of (pointers, size, lr,
// weight decay) per tensor; the tensors are cut into chunks of kChunk elements and each block takes
// a contiguous range of chunks, so it finds its first tensor by one binary search and then steps
// through the table. A thread loads its kPacks float4 of all four streams before computing, so
// enough bytes are in flight; tensors whose pointers are not all 16-byte aligned, and the last
// n % 4 elements of each tensor, take scalar loads. fp32 throughout.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
#include "kernels/vector_io.cuh"
#include "optim/adamw.h"

namespace hyb {
namespace {

struct AdamWTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  float lr, wd;
  int packed;  // all four pointers 16-byte aligned
};

constexpr int kThreads = 256;
constexpr int kPacks = 4;                       // float4 per thread per chunk
constexpr int kChunk = kThreads * kPacks * 4;   // 4096 elements per block-iteration of one tensor

struct AdamWScalars {
  float b1, b2, inv_bias1, inv_sqrt_bias2, eps;
};

__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, float lr, float wd,
                                              const AdamWScalars& k) {
  m = k.b1 * m + (1.f - k.b1) * g;
  v = k.b2 * v + (1.f - k.b2) * g * g;
  p = p - lr * wd * p - lr * (m * k.inv_bias1) / (sqrtf(v) * k.inv_sqrt_bias2 + k.eps);
}

__global__ void adamw_multi_kernel(const AdamWTensor* __restrict__ tensors, const int64_t* __restrict__ chunk_start,
                                   int n_tensors, int64_t total_chunks, AdamWScalars k) {
  const int64_t per_block = (total_chunks + gridDim.x - 1) / gridDim.x;
  const int64_t c0 = int64_t(blockIdx.x) * per_block, c1 = min(c0 + per_block, total_chunks);
  if (c0 >= c1) return;
  int ti = 0, hi = n_tensors - 1;  // the tensor whose chunk range holds c0
  while (ti < hi) {
    const int mid = (ti + hi + 1) / 2;
    if (chunk_start[mid] <= c0) ti = mid; else hi = mid - 1;
  }
  int64_t next = ti + 1 < n_tensors ? chunk_start[ti + 1] : total_chunks;
  for (int64_t c = c0; c < c1; ++c) {
    while (c >= next) {  // tensors of zero chunks share a start: step over them
      ++ti;
      next = ti + 1 < n_tensors ? chunk_start[ti + 1] : total_chunks;
    }
    const AdamWTensor t = tensors[ti];
    const int64_t base = (c - chunk_start[ti]) * kChunk;
    const int64_t end = min(base + int64_t(kChunk), t.n);
    if (t.packed && end - base == kChunk) {
      float4 g[kPacks], m[kPacks], v[kPacks], p[kPacks];
#pragma unroll
      for (int j = 0; j < kPacks; ++j) {
        const int64_t i = base + (int64_t(j) * kThreads + threadIdx.x) * 4;
        g[j] = *reinterpret_cast<const float4*>(t.g + i);
        m[j] = *reinterpret_cast<const float4*>(t.m + i);
        v[j] = *reinterpret_cast<const float4*>(t.v + i);
        p[j] = *reinterpret_cast<const float4*>(t.p + i);
      }
#pragma unroll
      for (int j = 0; j < kPacks; ++j) {
        adamw_element(p[j].x, g[j].x, m[j].x, v[j].x, t.lr, t.wd, k);
        adamw_element(p[j].y, g[j].y, m[j].y, v[j].y, t.lr, t.wd, k);
        adamw_element(p[j].z, g[j].z, m[j].z, v[j].z, t.lr, t.wd, k);
        adamw_element(p[j].w, g[j].w, m[j].w, v[j].w, t.lr, t.wd, k);
        const int64_t i = base + (int64_t(j) * kThreads + threadIdx.x) * 4;
        *reinterpret_cast<float4*>(t.m + i) = m[j];
        *reinterpret_cast<float4*>(t.v + i) = v[j];
        *reinterpret_cast<float4*>(t.p + i) = p[j];
      }
    } else {
      for (int64_t i = base + threadIdx.x; i < end; i += blockDim.x) {
        float p = t.p[i], m = t.m[i], v = t.v[i];
        adamw_element(p, t.g[i], m, v, t.lr, t.wd, k);
        t.m[i] = m;
        t.v[i] = v;
        t.p[i] = p;
      }
    }
  }
}

}  // namespace

void adamw_update_multi_cuda(const std::vector<AdamWTarget>& targets, const AdamWStep& s) {
  if (targets.empty()) return;
  const Device d = targets[0].param.device();
  const int dev = d.index;
  std::vector<AdamWTensor> table;
  std::vector<int64_t> starts;
  int64_t chunks = 0;
  for (const AdamWTarget& t : targets) {
    HYB_CHECK(t.param.device() == d, "adamw: parameters on several devices (", d.str(), " and ", t.param.device().str(), ")");
    float *p = t.param.data<float>(), *m = t.m.data<float>(), *v = t.v.data<float>();
    const float* g = t.grad.data<float>();
    const bool packed = is_aligned(p, 16) && is_aligned(g, 16) && is_aligned(m, 16) && is_aligned(v, 16);
    table.push_back({p, g, m, v, t.param.numel(), float(t.lr), float(t.weight_decay), packed ? 1 : 0});
    starts.push_back(chunks);
    chunks += (t.param.numel() + kChunk - 1) / kChunk;
    t.param.bump_version();
  }
  if (chunks == 0) return;
  // The table travels as a small host->device copy on the compute stream, ordered before the kernel.
  Tensor host = Tensor::empty({int64_t((table.size() * sizeof(AdamWTensor) + starts.size() * 8 + 1) / 2)}, DType::u16);
  std::memcpy(host.raw_data(), table.data(), table.size() * sizeof(AdamWTensor));
  std::memcpy(static_cast<char*>(host.raw_data()) + table.size() * sizeof(AdamWTensor), starts.data(), starts.size() * 8);
  Tensor dev_table = host.to(d);
  const auto* tp = static_cast<const AdamWTensor*>(dev_table.raw_data());
  const auto* sp = reinterpret_cast<const int64_t*>(static_cast<const char*>(dev_table.raw_data()) + table.size() * sizeof(AdamWTensor));
  // Every block takes an equal range of chunks: one wave of resident blocks, no partial second wave.
  const int grid = grid_blocks_for(adamw_multi_kernel, chunks * kThreads, kThreads, 0, dev);
  const AdamWScalars k{float(s.beta1), float(s.beta2), float(1.0 / s.bias1), float(1.0 / std::sqrt(s.bias2)),
                       float(s.eps)};
  adamw_multi_kernel<<<grid, kThreads, 0, current_stream(dev)>>>(tp, sp, int(table.size()), chunks, k);
  HYB_CUDA_LAUNCH_CHECK("adamw_multi_kernel", grid, kThreads, 0);
}

}  // namespace hyb
