#include "core/allocator.h"

#include <cstdlib>

#include "core/error.h"
#if HYBRID_CUDA
#include "core/cuda/caching_allocator.h"
#endif

namespace hyb {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    HYB_CHECK(p, "out of host memory: asked for ", bytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator a;
  return &a;
}

Allocator* allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
#if HYBRID_CUDA
  return cuda_caching_allocator(d.index);
#else
  throw Error(str_cat("device ", d.str(), " requested but this build has no CUDA backend (configure with -DHYBRID_CUDA=ON)"));
#endif
}

Storage::Storage(size_t n, Device dev) : bytes(n), device(dev), allocator(allocator_for(dev)) {
  data = allocator->allocate(n);
}

Storage::Storage(void* d, size_t n, Device dev, std::shared_ptr<void> keep)
    : data(d), bytes(n), device(dev), keep_alive(std::move(keep)) {}

Storage::~Storage() {
  if (allocator) allocator->deallocate(data, bytes);
}

}  // namespace hyb
