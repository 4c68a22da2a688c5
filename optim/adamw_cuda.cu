// CUDA AdamW: one launch updates every parameter. The host packs a table of (pointers, size, lr,
// weight decay) per tensor; blocks walk a flat index over all tensors' chunks. fp32 throughout.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_dispatch.cuh"
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
};

constexpr int kChunk = 4096;  // elements per block-iteration of one tensor

__global__ void adamw_multi_kernel(const AdamWTensor* __restrict__ tensors, const int64_t* __restrict__ chunk_start,
                                   int n_tensors, int64_t total_chunks, float b1, float b2, float inv_bias1,
                                   float inv_sqrt_bias2, float eps) {
  for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
    int lo = 0, hi = n_tensors - 1;  // the tensor whose chunk range holds c
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (chunk_start[mid] <= c) lo = mid; else hi = mid - 1;
    }
    const AdamWTensor t = tensors[lo];
    const int64_t base = (c - chunk_start[lo]) * kChunk;
    for (int64_t i = base + threadIdx.x; i < min(base + int64_t(kChunk), t.n); i += blockDim.x) {
      const float g = t.g[i];
      const float m = b1 * t.m[i] + (1.f - b1) * g;
      const float v = b2 * t.v[i] + (1.f - b2) * g * g;
      t.m[i] = m;
      t.v[i] = v;
      const float p = t.p[i];
      t.p[i] = p - t.lr * t.wd * p - t.lr * (m * inv_bias1) / (sqrtf(v) * inv_sqrt_bias2 + eps);
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
    table.push_back({t.param.data<float>(), t.grad.data<float>(), t.m.data<float>(), t.v.data<float>(), t.param.numel(),
                     float(t.lr), float(t.weight_decay)});
    starts.push_back(chunks);
    chunks += (t.param.numel() + kChunk - 1) / kChunk;
    t.param.bump_version();
  }
  // The table travels as a small host->device copy on the compute stream, ordered before the kernel.
  Tensor host = Tensor::empty({int64_t((table.size() * sizeof(AdamWTensor) + starts.size() * 8 + 1) / 2)}, DType::u16);
  std::memcpy(host.raw_data(), table.data(), table.size() * sizeof(AdamWTensor));
  std::memcpy(static_cast<char*>(host.raw_data()) + table.size() * sizeof(AdamWTensor), starts.data(), starts.size() * 8);
  Tensor dev_table = host.to(d);
  const auto* tp = static_cast<const AdamWTensor*>(dev_table.raw_data());
  const auto* sp = reinterpret_cast<const int64_t*>(static_cast<const char*>(dev_table.raw_data()) + table.size() * sizeof(AdamWTensor));
  const int grid = grid_blocks(chunks, 1, dev);
  adamw_multi_kernel<<<grid, 256, 0, current_stream(dev)>>>(tp, sp, int(table.size()), chunks, float(s.beta1),
                                                            float(s.beta2), float(1.0 / s.bias1),
                                                            float(1.0 / std::sqrt(s.bias2)), float(s.eps));
  HYB_CUDA_LAUNCH_CHECK("adamw_multi_kernel", grid, 256, 0);
}

}  // namespace hyb
