#include <algorithm>

#include "core/cuda/cuda_device.h"
#include "kernels/cuda_dispatch.cuh"

namespace hyb {

int grid_blocks(int64_t n, int threads, int device) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = int64_t(cuda_device_props(device).sm_count) * 8;
  return int(std::max<int64_t>(1, std::min(want, cap)));
}

}  // namespace hyb
