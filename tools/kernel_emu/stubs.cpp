// The CUDA runtime calls the emulated launchers make, answered on the host: an H100's SM count and
// shared memory (opt-in per block, per SM), no streams (a launch runs to its end, so events order
// nothing), launches that cannot fail.
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/error.h"

extern "C" cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMultiProcessorCount                ? 132
       : a == cudaDevAttrMaxSharedMemoryPerBlockOptin     ? 232448
       : a == cudaDevAttrMaxSharedMemoryPerMultiprocessor ? 233472
                                                          : 0;
  return cudaSuccess;
}

namespace hyb {
void cuda_check_failed(cudaError_t, const char* call, const char*, int) { HYB_CHECK(false, "kernel_emu: ", call); }
void cuda_check_launch(const char*, dim3, dim3, size_t, const char*, int) {}
cudaStream_t cuda_stream(int, StreamRole, int) { return nullptr; }
CudaEvent::CudaEvent(bool) {}
CudaEvent::~CudaEvent() {}
void CudaEvent::record(cudaStream_t) {}
void CudaEvent::block(cudaStream_t) const {}
}  // namespace hyb
