// Device discovery and the properties cache. The count is read once: a process does not gain GPUs,
// and a failing cudaGetDeviceCount (no driver, no device) must leave no error behind for later checks.
#include "core/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/current_device.h"
#include "core/error.h"

namespace hyb {

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

void make_current(Device d) {
  if (d.is_cpu()) return;
  check_cuda_device(d.index, "make_current");
  HYB_CUDA_CHECK(cudaSetDevice(d.index));
}

void check_cuda_device(int device, const char* what) {
  const int n = cuda_device_count();
  HYB_CHECK(device >= 0 && device < n, what, ": cuda:", device, " requested but ",
            n == 0 ? "no CUDA device is visible (no GPU or no driver)"
                   : str_cat("only ", n, " CUDA device", n == 1 ? " is" : "s are", " visible"));
}

const CudaDeviceProps& cuda_device_props(int device) {
  check_cuda_device(device, "cuda_device_props");
  static std::vector<CudaDeviceProps> all;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<CudaDeviceProps> props(static_cast<size_t>(cuda_device_count()));
    for (int d = 0; d < int(props.size()); ++d) {
      cudaDeviceProp p{};
      HYB_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
      CudaDeviceProps& out = props[size_t(d)];
      out.name = p.name;
      out.major = p.major;
      out.minor = p.minor;
      out.sm_count = p.multiProcessorCount;
      out.l2_bytes = size_t(p.l2CacheSize);
      out.smem_per_block = p.sharedMemPerBlock;
      out.smem_per_block_optin = p.sharedMemPerBlockOptin;
      out.smem_per_sm = p.sharedMemPerMultiprocessor;
      out.total_memory = p.totalGlobalMem;
      out.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    }
    all = std::move(props);
  });
  return all[size_t(device)];
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  check_cuda_device(device, "CudaDeviceGuard");
  HYB_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ == device) return;
  HYB_CUDA_CHECK(cudaSetDevice(device));
}

CudaDeviceGuard::~CudaDeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

}  // namespace hyb
