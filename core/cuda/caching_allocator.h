// The CUDA caching allocator: device memory for Storage without cudaMalloc/cudaFree in the steady
// state (both synchronise the device). Requests round up to 512 B; those up to 1 MiB are cut from
// 2 MiB segments, larger ones from segments rounded up to 2 MiB; free neighbours merge back. A freed
// block is reused at once by later requests because all work on a device runs in order on its compute
// stream; a block also used on another stream is held back until cuda_record_stream's events complete.
//   Tensor x = Tensor::empty({4096, 4096}, DType::bf16, Device::cuda(0));  // served from the cache
//   CudaAllocatorStats s = cuda_allocator_stats(0);   // s.device_mallocs stays flat across steps
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"

namespace hyb {

struct CudaAllocatorStats {
  uint64_t allocated_bytes = 0;       // held by live allocations (rounded block sizes)
  uint64_t reserved_bytes = 0;        // obtained with cudaMalloc and not yet released
  uint64_t peak_allocated_bytes = 0;  // since start or cuda_reset_peak_stats
  uint64_t peak_reserved_bytes = 0;
  uint64_t device_mallocs = 0;        // cudaMalloc calls that succeeded
  uint64_t device_frees = 0;          // cudaFree calls
  uint64_t allocations = 0;           // allocate() calls served
  uint64_t oom_retries = 0;           // times a failed cudaMalloc released the cache and tried again
};

// One allocator per device, made on first use; throws if the device is not visible.
Allocator* cuda_caching_allocator(int device);

CudaAllocatorStats cuda_allocator_stats(int device);
void cuda_reset_peak_stats(int device);

// Returns every cached segment with no live block to the driver (waits for the device first).
void cuda_empty_cache(int device);

// Marks the live allocation starting at `ptr` as used by `stream` (not the compute stream): when it is
// freed, its memory is reused only after the work queued on `stream` by then has finished.
void cuda_record_stream(int device, void* ptr, cudaStream_t stream);

}  // namespace hyb
