// CUDA error reporting: messages that name the failing call or kernel, its launch shape, file:line.
// Paths are printed relative to the source tree (HYBRID_SOURCE_ROOT) so messages stay one short line.
#include "core/cuda/cuda_check.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace hyb {
namespace {

const char* source_path(const char* file) {
#ifdef HYBRID_SOURCE_ROOT
  const size_t n = std::strlen(HYBRID_SOURCE_ROOT);
  if (std::strncmp(file, HYBRID_SOURCE_ROOT, n) == 0) return file + n;
#endif
  return file;
}

}  // namespace

std::string cuda_error_string(cudaError_t err) {
  return str_cat(cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
}

void cuda_check_failed(cudaError_t err, const char* call, const char* file, int line) {
  cudaGetLastError();
  throw Error(str_cat("CUDA error: ", call, " failed at ", source_path(file), ":", line, ": ", cuda_error_string(err)));
}

bool cuda_sync_launches() {
  static const bool on = [] {
    const char* v = std::getenv("HYBRID_CUDA_SYNC");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

std::string dim3_str(dim3 d) {
  if (d.z != 1) return str_cat(d.x, "x", d.y, "x", d.z);
  if (d.y != 1) return str_cat(d.x, "x", d.y);
  return str_cat(d.x);
}

void cuda_check_launch(const char* kernel, dim3 grid, dim3 block, size_t smem, const char* file, int line) {
  auto fail = [&](const char* what, cudaError_t err) {
    throw Error(str_cat(kernel, ": ", what, ": ", cuda_error_string(err), " (grid ", dim3_str(grid), ", block ",
                        dim3_str(block), ", smem ", format_bytes(smem), ") at ", source_path(file), ":", line));
  };
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("launch failed", err);
  if (!cuda_sync_launches()) return;
  err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("failed while running (HYBRID_CUDA_SYNC=1)", err);
  }
}

}  // namespace hyb
