#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_device.h"
#include "kernels/cuda_dispatch.cuh"

namespace hyb {

int grid_blocks(int64_t n, int threads, int device) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = int64_t(cuda_device_props(device).sm_count) * 8;
  return int(std::max<int64_t>(1, std::min(want, cap)));
}

// Cached per (kernel, block, shared memory, device): the occupancy query is host work on every launch.
int resident_blocks(const void* kernel, int threads, size_t smem, int device) {
  using Key = std::tuple<const void*, int, size_t, int>;
  static std::mutex mu;
  static std::map<Key, int> cache;
  const Key key{kernel, threads, smem, device};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  int per_sm = 0;
  HYB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int blocks = std::max(per_sm, 1) * cuda_device_props(device).sm_count;
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = blocks;
  return blocks;
}

}  // namespace hyb
