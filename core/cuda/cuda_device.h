// The CUDA devices this process sees: their count (0 without a driver or GPU, never an exception),
// the properties kernels size themselves by, read once per device, and a guard that makes a device
// current for a scope. core/device.h declares cuda_device_count(); this file defines it for CUDA builds.
//   CudaDeviceGuard guard(t.device().index);
//   int blocks = 4 * cuda_device_props(t.device().index).sm_count;
#pragma once
#include <cstddef>
#include <string>

#include "core/device.h"

namespace hyb {

struct CudaDeviceProps {
  std::string name;              // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;      // compute capability
  int sm_count = 0;              // multiprocessors
  size_t l2_bytes = 0;
  size_t smem_per_block = 0;     // without opting in
  size_t smem_per_block_optin = 0;  // after cudaFuncSetAttribute(MaxDynamicSharedMemorySize)
  size_t smem_per_sm = 0;
  size_t total_memory = 0;
  int max_threads_per_sm = 0;
};

// Cached after the first call; throws if `device` is not visible.
const CudaDeviceProps& cuda_device_props(int device);

// Throws "<what>: cuda:N requested but only K CUDA devices are visible" when N is out of range.
void check_cuda_device(int device, const char* what);

// Makes `device` current and restores the previous one at scope exit.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace hyb
