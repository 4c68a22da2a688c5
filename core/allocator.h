// Memory owners. A Storage is one allocation from one Allocator; tensors share it by reference count.
// CPU memory is 64-byte aligned so vector loads never straddle a cache line at a row start.
// The CUDA caching allocator (core/cuda/) implements the same interface.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace hyb {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
};

Allocator* cpu_allocator();
Allocator* allocator_for(Device d);

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  Allocator* allocator = nullptr;   // null: memory not owned (a view of a mapped file, say)
  std::shared_ptr<void> keep_alive; // owner of non-owned memory, released with the storage
  // Bumped by every in-place write, so autograd can tell that a saved tensor was overwritten.
  std::atomic<uint64_t> version{0};

  Storage(size_t bytes, Device device);
  Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> keep_alive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

}  // namespace hyb
