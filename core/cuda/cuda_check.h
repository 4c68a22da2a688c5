// CUDA error checks. Every runtime call goes through HYB_CUDA_CHECK and every launch is followed by
// HYB_CUDA_LAUNCH_CHECK, so a failure names the call or the kernel with its launch shape, and file:line.
// HYBRID_CUDA_SYNC=1 in the environment makes each launch check synchronise the device, so an
// asynchronous fault (an illegal address, say) is reported at the kernel that caused it, not later.
//   HYB_CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream));
//   scale_kernel<<<grid, block, 0, stream>>>(p, n, s);
//   HYB_CUDA_LAUNCH_CHECK("scale_kernel", grid, block, 0);
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace hyb {

// "out of memory (cudaErrorMemoryAllocation)"
std::string cuda_error_string(cudaError_t err);

// Throws hyb::Error naming the call, file:line and the CUDA error; clears the (non-sticky) error first
// so the next launch check does not report it a second time.
[[noreturn]] void cuda_check_failed(cudaError_t err, const char* call, const char* file, int line);

// Reads and clears the last launch error; under HYBRID_CUDA_SYNC=1 also waits for the device.
void cuda_check_launch(const char* kernel, dim3 grid, dim3 block, size_t smem, const char* file, int line);

// True when HYBRID_CUDA_SYNC=1 (read once, at the first launch check).
bool cuda_sync_launches();

// "16x8x2": trailing unit dimensions dropped, as launch shapes are usually written.
std::string dim3_str(dim3 d);

}  // namespace hyb

#define HYB_CUDA_CHECK(call)                                                              \
  do {                                                                                    \
    cudaError_t hyb_cuda_err_ = (call);                                                   \
    if (hyb_cuda_err_ != cudaSuccess) ::hyb::cuda_check_failed(hyb_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define HYB_CUDA_LAUNCH_CHECK(kernel, grid, block, smem) \
  ::hyb::cuda_check_launch(kernel, dim3(grid), dim3(block), size_t(smem), __FILE__, __LINE__)
